"""kapp (and kapp-controller, which runs it): its keep mark, its app label, its App.

- Keep: `kapp.k14s.io/delete-strategy: orphan` leaves the object when kapp would delete it, at a
  deploy that drops it and at `kapp delete` alike (carvel-dev/kapp docs, "Controlling apply via
  resource annotations").
- Owner: the label `kapp.k14s.io/app` kapp puts on what it applies; its value is the app's id
  (the label value its app record keeps), not its name.
- Parent: kapp-controller's App, whose finalizer `finalizers.kapp-ctrl.k14s.io/delete` runs
  `kapp delete` on what it deployed (unless `spec.noopDelete`); it deploys as
  `spec.serviceAccountName`.
Pure.
"""

from __future__ import annotations

from gate.engine.deployers.base import Deployer, Event, Found, Meta, Owner, Parent

#: kapp-controller's group.
GROUP = "kappctrl.k14s.io"
DELETE_STRATEGY = "kapp.k14s.io/delete-strategy"
ORPHAN = "orphan"
APP_LABEL = "kapp.k14s.io/app"
FINALIZER = "finalizers.kapp-ctrl.k14s.io/delete"

APP = Parent(GROUP, "App", finalizers=frozenset({FINALIZER}), impersonates=True)


class Kapp(Deployer):
    name = "kapp"
    title = "kapp"
    keep_keys = (DELETE_STRATEGY,)
    owner_keys = (APP_LABEL,)
    parents = (APP,)
    finalizers = {
        FINALIZER: "kapp-controller: removed once `kapp delete` has deleted what the App "
        "deployed (or at once with spec.noopDelete)",
    }

    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """`delete-strategy: orphan` (exactly), both events."""
        value = annotations.get(DELETE_STRATEGY)
        return Found(self.name, DELETE_STRATEGY, value) if value == ORPHAN else None

    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        app = labels.get(APP_LABEL)
        return Owner(self.name, "", app) if app else None


KAPP = Kapp()
