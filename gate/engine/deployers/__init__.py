"""The deployers prune-gate knows (Flux, Argo CD, Helm, kapp, kubectl apply --prune), each
behind one interface (`base.Deployer`), and the registry the rules ask (`registry`).

Adding a deployer: a module with one `Deployer` subclass (its keep and force marks, owner marks,
parents and finalizers, with the source of each fact in its docstring), one entry in
`registry.DEPLOYERS`, and its tests (tests/unit/test_deployers.py). Pure.
"""

from gate.engine.deployers.argocd import ARGOCD, sync_options
from gate.engine.deployers.base import Deployer, Event, Found, Owner, Parent
from gate.engine.deployers.flux import FLUX
from gate.engine.deployers.helm import HELM
from gate.engine.deployers.kapp import KAPP
from gate.engine.deployers.kubectl import KUBECTL
from gate.engine.deployers.registry import (
    DEPLOYERS,
    IMPERSONATING,
    LISTING,
    PARENTS,
    finalizer_owner,
    force_mark,
    keep_mark,
    keys,
    live_keep_mark,
    owners,
    parent_of,
)

__all__ = [
    "ARGOCD",
    "DEPLOYERS",
    "FLUX",
    "HELM",
    "IMPERSONATING",
    "KAPP",
    "KUBECTL",
    "LISTING",
    "PARENTS",
    "Deployer",
    "Event",
    "Found",
    "Owner",
    "Parent",
    "finalizer_owner",
    "force_mark",
    "keep_mark",
    "keys",
    "live_keep_mark",
    "owners",
    "parent_of",
    "sync_options",
]
