"""Helm (and Flux's helm-controller, which runs it): its keep mark, its release marks, its
HelmRelease.

- Keep: `helm.sh/resource-policy: keep`, for an upgrade that drops the object and for an
  uninstall alike. Helm reads it from the release's stored manifest when it uninstalls, not from
  the live object: a mark only `kubectl` put on the live object (managedFields say who did)
  keeps nothing (`live_only_keep`).
- Owner: the annotations `meta.helm.sh/release-name` and `-namespace` Helm puts on what a release
  installs.
- Parent: Flux's HelmRelease: deleting it uninstalls its release (helm-controller's finalizer
  `finalizers.fluxcd.io`), which deletes what the release made.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from gate.engine.deployers.base import Deployer, Event, Found, Meta, Owner, Parent
from gate.engine.deployers.flux import FINALIZER

#: helm-controller's group (Flux).
GROUP = "helm.toolkit.fluxcd.io"
RESOURCE_POLICY = "helm.sh/resource-policy"
KEEP = "keep"
RELEASE_NAME = "meta.helm.sh/release-name"
RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
#: The managedFields path of the keep annotation (`fieldsV1`): who wrote it.
KEEP_FIELD = f"f:{RESOURCE_POLICY}"

#: Its release's objects are found by their release annotations (`Helm.owner`), not in a list
#: of the HelmRelease's: it `lists` nothing.
HELM_RELEASE = Parent(GROUP, "HelmRelease", finalizers=frozenset({FINALIZER}), impersonates=True)


def release_of(annotations: Meta) -> tuple[str, str] | None:
    """(namespace, name) of the release both annotations name; None unless both are strings and
    the name is set. (A function of its own: the live view calls it on every object.)"""
    name, ns = annotations.get(RELEASE_NAME), annotations.get(RELEASE_NAMESPACE)
    return (ns, name) if isinstance(name, str) and isinstance(ns, str) and name else None


def live_only_keep(managers: Iterable[str]) -> bool:
    """True when only kubectl wrote the live object's keep mark (managedFields managers): Helm
    reads the stored release when it uninstalls, so that mark keeps nothing. False when no
    writer is known (fail towards the mark Helm may have written)."""
    by = [m for m in managers if m]
    return bool(by) and all(m == "kubectl" or m.startswith("kubectl-") for m in by)


class Helm(Deployer):
    name = "helm"
    title = "Helm"
    keep_keys = (RESOURCE_POLICY,)
    owner_keys = (RELEASE_NAME, RELEASE_NAMESPACE)
    parents = (HELM_RELEASE,)

    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        """`resource-policy: keep` (exactly), both events."""
        value = annotations.get(RESOURCE_POLICY)
        return Found(self.name, RESOURCE_POLICY, value) if value == KEEP else None

    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        """The release both annotations name; None unless both are strings and the name is set."""
        release = release_of(annotations)
        return Owner(self.name, *release) if release is not None else None

    def owns(self, annotations: Meta, labels: Meta, namespace: str, name: str) -> bool:
        release = annotations.get(RELEASE_NAME), annotations.get(RELEASE_NAMESPACE)
        return release == (name, namespace)


HELM = Helm()
