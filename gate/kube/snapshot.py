"""Read the live state for `gate check --live`: one paginated list per kind, raw JSON, no models.

Why lists and raw JSON: a gate in a merge queue runs on every candidate, so it must be cheap on a
cluster with thousands of pods. One `GET .../pods?limit=N&continue=...` chain per kind costs a few
requests, never one per object; each page is parsed with `json.loads` and reduced at once to the
small projections `LiveState` keeps, so memory stays bounded by the page size. The client's model
classes are skipped: building a `V1Pod` per pod costs more than the whole rest of the check.

Why loud errors: a gate that cannot see the cluster must not pass. An unreachable server, a TLS
failure, 401/403 or a non-JSON answer is a `ClusterError` naming the list that failed and the fix;
the CLI turns it into exit code 2. Only an optional API that is not installed (VolumeSnapshots, Flux
Kustomizations, Argo CD Applications: 404) is skipped, and the snapshot records that it was.

The network sits behind the small `Lister` protocol, so the pagination and projection logic is
tested without a cluster (tests/unit/test_snapshot.py) and against one (tests/e2e/test_live.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gate.engine.livestate import CustomKind, LiveState, ref_of, served_custom_kind
from gate.engine.plan import Change
from gate.engine.policy import Policy
from gate.engine.scope import PruneScope, prune_changes, prune_set, scope_parent
from gate.kube.client import KubeClient, NotFoundError, list_pages
from gate.kube.resources import PARENTS, RESOURCES, Resource
from gate.model.errors import ClusterError
from gate.model.objects import Inventory
from gate.model.refs import ObjectRef, api_path

_CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")


#: The API server answered 404 for a list: the API (a CRD's group, snapshots) is not there.
NotServedError = NotFoundError


class Lister(Protocol):
    """One GET of a list path, answered as parsed JSON; every failure is a `ClusterError`."""

    def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
        """GET `path?query`; `what` names the list in error messages ("list pods")."""


@dataclass(frozen=True, slots=True)
class ListStat:
    """How one list went: for the operator's summary and the benchmark."""

    kind: str
    items: int
    pages: int
    seconds: float


@dataclass
class Snapshot:
    """The live state and what else the check needs from the same lists."""

    state: LiveState
    #: Objects with a controller ownerReference: made by a controller, never pruned by a deployer.
    controlled: set[ObjectRef] = field(default_factory=set)
    #: Live CRDs by CRD name (`plural.group`), to count their custom resources.
    custom_kinds: dict[str, CustomKind] = field(default_factory=dict)
    stats: list[ListStat] = field(default_factory=list)
    #: Optional APIs that are not installed, with the reason ("VolumeSnapshot: not served").
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was read, how fast."""
        seconds = sum(s.seconds for s in self.stats)
        counts = ", ".join(f"{s.items} {s.kind}" for s in self.stats if s.items)
        skipped = f"; skipped {'; '.join(self.skipped)}" if self.skipped else ""
        pages = sum(s.pages for s in self.stats)
        return f"read {counts or 'nothing'} in {pages} list request(s), {seconds:.2f}s{skipped}"


def list_items(
    lister: Lister, resource: Resource, page_size: int, path: str | None = None
) -> Iterator[list[Any]]:
    """Yield the items of a list page by page (`list_pages`)."""
    what = f"list {resource.plural}" + (f".{resource.group}" if resource.group else "")
    for body in list_pages(lambda q: lister.get_json(path or resource.path, q, what), page_size):
        items = body.get("items")
        if not isinstance(items, list):
            raise ClusterError(
                f"{what}: the API server answered a {body.get('kind')!r} without items"
            )
        yield items


def list_objects(
    lister: Lister, resource: Resource, page_size: int, namespace: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every object of a resource, in `namespace` (None: all), page by page (`list_items`);
    an item that is not a mapping is skipped."""
    path = api_path(resource.api_version, resource.plural, namespace) if namespace else None
    for page in list_items(lister, resource, page_size, path):
        yield from (i for i in page if isinstance(i, dict))


#: (kind, controller kind) whose pod template is a copy of the owner's, which is listed as well:
#: reporting both would name every consumer twice. A ReplicaSet of an Argo CD Rollout stays.
_TEMPLATE_COPIES = frozenset({("ReplicaSet", "Deployment"), ("Job", "CronJob")})


def _controller_kind(item: dict[str, Any]) -> str | None:
    """The kind of the object's controller owner, or None when nothing controls it."""
    owners = (item.get("metadata") or {}).get("ownerReferences") or ()
    for o in owners:
        if isinstance(o, dict) and o.get("controller"):
            return str(o.get("kind", ""))
    return None


def take_snapshot(
    lister: Lister,
    guarded_kinds: Iterable[tuple[str, str]],
    page_size: int,
    resources: Iterable[Resource] = RESOURCES,
    clock: Any = time.perf_counter,
) -> Snapshot:
    """List every resource into a fresh `LiveState`; optional APIs that answer 404 are skipped."""
    snap = Snapshot(LiveState(guarded_kinds))
    for res in resources:
        started = clock()
        count = pages = 0
        try:
            for items in list_items(lister, res, page_size):
                pages += 1
                count += len(items)
                for item in items:
                    if not isinstance(item, dict):
                        continue
                    if res.kind == "Pod":
                        snap.state.upsert(item, res.api_version, res.kind)
                        continue
                    owner = _controller_kind(item)
                    if owner is not None:
                        snap.controlled.add(ref_of(item, res.api_version, res.kind))
                        if (res.kind, owner) in _TEMPLATE_COPIES:
                            continue  # its template is its owner's, which is listed too
                    snap.state.upsert(item, res.api_version, res.kind)
                    if res.kind == "CustomResourceDefinition":
                        custom = served_custom_kind(item)
                        if custom is not None:
                            name = str((item.get("metadata") or {}).get("name", ""))
                            snap.custom_kinds[name] = custom
        except NotServedError:
            if not res.optional:
                raise
            snap.skipped.append(f"{res.kind} ({res.group}): API not installed")
            continue
        snap.stats.append(ListStat(res.kind, count, pages, clock() - started))
    return snap


def count_custom_resources(
    lister: Lister, snap: Snapshot, crd_names: Iterable[str], page_size: int
) -> None:
    """Record how many custom resources each of these live CRDs has, in `snap.state`.

    Asks for one item and reads `metadata.remainingItemCount`; when the server leaves it out
    (it may, for some storage backends), counts page by page instead.
    """
    for name in crd_names:
        custom = snap.custom_kinds.get(name)
        if custom is None:
            continue  # not live: nothing to count, the static rule uses base
        res = Resource(custom.group, custom.version, custom.kind, custom.plural)
        what = f"list {custom.plural}.{custom.group} (to count the custom resources of {name})"
        try:
            body = lister.get_json(res.path, [("limit", "1")], what)
        except NotServedError:
            snap.state.set_custom_resource_count(custom.group, custom.kind, 0)
            continue
        items = body.get("items") or []
        meta = body.get("metadata") or {}
        remaining = meta.get("remainingItemCount")
        if isinstance(remaining, int):
            total = len(items) + remaining
        elif meta.get("continue"):
            total = sum(len(page) for page in list_items(lister, res, page_size))
        else:
            total = len(items)
        snap.state.set_custom_resource_count(custom.group, custom.kind, total)


@dataclass
class LiveRead:
    """What `gate check --live` adds to a check: the live view and the prune set's changes."""

    snapshot: Snapshot
    prune_changes: list[Change]


def read_live(
    lister: Lister,
    policy: Policy,
    base: Inventory,
    head: Inventory,
    scopes: Sequence[PruneScope] = (),
) -> LiveRead:
    """Snapshot the cluster, compute each scope's prune set, count the custom resources of every
    CustomResourceDefinition the deploy would delete (removed from base, or pruned)."""
    snap = take_snapshot(
        lister, policy.guarded_kinds, policy.live_page_size, resources=(*RESOURCES, *PARENTS)
    )
    changes: list[Change] = []
    seen: set[ObjectRef] = set()
    for scope in scopes:
        parent = scope_parent(scope)
        # The Kustomization's own inventory (the Application's status.resources) when it has
        # one (none yet: it never reconciled, the controller is older than inventories, or the
        # Application is not there), else the ownership marks.
        inventory = (snap.state.applied_by(parent) or None) if parent is not None else None
        refs = prune_set(
            scope, snap.state.objects.values(), head, snap.controlled, inventory=inventory
        )
        fresh = [r for r in refs if r not in seen]
        seen.update(fresh)
        changes.extend(prune_changes(scope, fresh, base, from_inventory=inventory is not None))
    crds = {m.ref.name for m in base.of_kind(*_CRD) if m.ref not in head}
    crds.update(c.ref.name for c in changes if (c.ref.group, c.ref.kind) == _CRD)
    count_custom_resources(lister, snap, sorted(crds), policy.live_page_size)
    return LiveRead(snap, changes)


# --- the real API -------------------------------------------------------------------------------


#: What `gate check --live` and `gate retire` need, said on a 403.
LIVE_HINT = (
    "gate check --live needs get and list on pods, persistentvolumeclaims, persistentvolumes, "
    "namespaces, statefulsets, deployments, daemonsets, replicasets, jobs, cronjobs, "
    "customresourcedefinitions and volumesnapshots, and where they are installed on "
    "kustomizations.kustomize.toolkit.fluxcd.io and applications.argoproj.io (a read-only "
    "ClusterRole: the chart's liveReader)"
)


class ApiLister(KubeClient):
    """The `Lister` of `gate check --live` and `gate retire` (`gate.kube.client.KubeClient`): a 403
    says which read-only role it needs."""

    default_hint = LIVE_HINT
