"""kubectl apply --prune with an ApplySet (KEP-3659): its owner label, its parent; no keep or
force mark.

- Owner: the label `applyset.kubernetes.io/part-of: <applyset id>` kubectl puts on each member;
  `apply --prune --applyset` deletes the members the new apply does not declare.
- Parent: the ApplySet parent object (a Secret or ConfigMap by default, labelled
  `applyset.kubernetes.io/id`); deleting it deletes nothing, so it is no `Parent` here.
- No keep mark: kubectl has no annotation that stops a prune (only leaving the object out of the
  applyset does), and no force mark (`--force` is a flag of the command, not of the object).
Pure.
"""

from __future__ import annotations

from gate.engine.deployers.base import Deployer, Event, Found, Meta, Owner

PART_OF = "applyset.kubernetes.io/part-of"
#: The label on the ApplySet's parent object, whose value members' `part-of` repeat.
ID = "applyset.kubernetes.io/id"


class Kubectl(Deployer):
    name = "kubectl"
    title = "kubectl apply --prune (ApplySet)"
    owner_keys = (PART_OF,)

    def keeps(self, annotations: Meta, labels: Meta, event: Event) -> Found | None:
        return None

    def owner(self, annotations: Meta, labels: Meta) -> Owner | None:
        applyset = labels.get(PART_OF)
        return Owner(self.name, "", applyset) if applyset else None


KUBECTL = Kubectl()
