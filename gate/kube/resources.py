"""The one table of the API resources prune-gate reads or guards, with their plurals.

`gate check --live` lists them and the PARENTS (`gate.kube.snapshot`), the webhook watches them
(`webhook.cache`) and registers for them (`webhook.register`), and the chart's rules name the same
(a test renders the chart and compares). A kind outside the table is never given a guessed plural:
`Ingress` -> `ingresss` would match nothing, and the kind would go unguarded without a word.
Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

from gate.engine.deployers.argocd import APPLICATION
from gate.engine.deployers.flux import KUSTOMIZATION
from gate.model.refs import api_path


@dataclass(frozen=True, slots=True)
class Resource:
    """A listable API resource: where it is served and what its items are."""

    group: str
    version: str
    kind: str
    plural: str
    #: Optional APIs (VolumeSnapshots) may not be installed: a 404 skips them.
    optional: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The cluster-wide list path (all namespaces)."""
        return api_path(self.api_version, self.plural)


#: What the live rules, the prune scopes and the webhook read, listed in this order.
RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "Namespace", "namespaces"),
    Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"),
    Resource("", "v1", "PersistentVolume", "persistentvolumes"),
    Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Resource("", "v1", "Pod", "pods"),
    Resource("apps", "v1", "StatefulSet", "statefulsets"),
    Resource("apps", "v1", "Deployment", "deployments"),
    Resource("apps", "v1", "DaemonSet", "daemonsets"),
    Resource("apps", "v1", "ReplicaSet", "replicasets"),
    Resource("batch", "v1", "Job", "jobs"),
    Resource("batch", "v1", "CronJob", "cronjobs"),
    Resource("snapshot.storage.k8s.io", "v1", "VolumeSnapshot", "volumesnapshots", optional=True),
)

#: Parents whose status lists what they applied (a Flux Kustomization's `status.inventory`, an
#: Argo CD Application's `status.resources`): `gate check --live` lists them when they are served
#: (a 404 skips them) to find what a removed parent deletes. The webhook neither watches nor
#: registers them: it judges the children's own DELETEs.
#: One per `gate.engine.deployers.LISTING` parent (a test holds them equal).
PARENTS: tuple[Resource, ...] = (
    Resource(KUSTOMIZATION.group, "v1", KUSTOMIZATION.kind, "kustomizations", optional=True),
    Resource(APPLICATION.group, "v1alpha1", APPLICATION.kind, "applications", optional=True),
)

_BY_KIND = {(r.group, r.kind): r for r in RESOURCES}


def resource_for(group: str, kind: str) -> Resource | None:
    """The table's entry for a kind, or None: the caller says what to do, never guesses."""
    return _BY_KIND.get((group, kind))
