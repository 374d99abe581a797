"""Read the live state for `gate check --live`: one paginated list per kind, raw JSON, no models.

Why lists and raw JSON: a gate in a merge queue runs on every candidate, so it must be cheap on a
cluster with thousands of pods. One `GET .../pods?limit=N&continue=...` chain per kind costs a few
requests, never one per object; each page is parsed with `json.loads` and reduced at once to the
small projections `LiveState` keeps, so memory stays bounded by the page size. The client's model
classes are skipped: building a `V1Pod` per pod costs more than the whole rest of the check.

Why loud errors: a gate that cannot see the cluster must not pass. An unreachable server, a TLS
failure, 401/403 or a non-JSON answer is a `ClusterError` naming the list that failed and the fix;
the CLI turns it into exit code 2. Only an optional API that is not installed (VolumeSnapshots: 404)
is skipped, and the snapshot records that it was.

The network sits behind the small `Lister` protocol, so the pagination and projection logic is
tested without a cluster (tests/unit/test_snapshot.py) and against one (tests/e2e/test_live.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from gate.errors import ClusterError
from gate.livestate import CustomKind, LiveState, ref_of, served_custom_kind
from gate.manifests import Inventory
from gate.plan import Change
from gate.policy import Policy
from gate.refs import ObjectRef
from gate.resources import RESOURCES, Resource
from gate.scope import PruneScope, prune_changes, prune_set

_CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")


class NotServedError(ClusterError):
    """The API server answered 404 for a list: the API (a CRD's group, snapshots) is not there."""


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
    """Yield the items of a list page by page, following `metadata.continue`."""
    token = ""
    what = f"list {resource.plural}" + (f".{resource.group}" if resource.group else "")
    while True:
        query = [("limit", str(page_size))]
        if token:
            query.append(("continue", token))
        body = lister.get_json(path or resource.path, query, what)
        items = body.get("items")
        if not isinstance(items, list):
            raise ClusterError(
                f"{what}: the API server answered a {body.get('kind')!r} without items"
            )
        yield items
        token = str((body.get("metadata") or {}).get("continue") or "")
        if not token:
            return


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
    snap = take_snapshot(lister, policy.guarded_kinds, policy.live_page_size)
    changes: list[Change] = []
    seen: set[ObjectRef] = set()
    for scope in scopes:
        refs = prune_set(scope, snap.state.objects.values(), head, snap.controlled)
        fresh = [r for r in refs if r not in seen]
        seen.update(fresh)
        changes.extend(prune_changes(scope, fresh, base))
    crds = {m.ref.name for m in base.of_kind(*_CRD) if m.ref not in head}
    crds.update(c.ref.name for c in changes if (c.ref.group, c.ref.kind) == _CRD)
    count_custom_resources(lister, snap, sorted(crds), policy.live_page_size)
    return LiveRead(snap, changes)


# --- the real API -------------------------------------------------------------------------------


def load_configuration(kubeconfig: str | None, context: str | None) -> Any:
    """A client `Configuration` from --kubeconfig/--kube-context, else the usual resolution:
    $KUBECONFIG, ~/.kube/config, then the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    # $KUBECONFIG is read now, not when the client was imported (it caches it then); a list of
    # files separated by os.pathsep is merged by the client, as kubectl does.
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    in_cluster = (
        kubeconfig is None
        and not Path(where.split(os.pathsep)[0]).expanduser().exists()
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    try:
        if in_cluster:
            load_incluster: Any = config.load_incluster_config  # untyped in the client
            load_incluster(client_configuration=cfg)
        else:
            load: Any = config.load_kube_config  # untyped in the client
            load(config_file=where, context=context, client_configuration=cfg)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise ClusterError(
            f"cannot load the kubeconfig ({where}"
            + (f", context {context}" if context else "")
            + f"): {exc}; pass --kubeconfig FILE (and --kube-context NAME), or set KUBECONFIG"
        ) from exc
    return cfg


class ApiLister:
    """A `Lister` over the kubernetes client's configured HTTP pool (auth, TLS, proxy), raw JSON.

    Use as a context manager: the ApiClient's connection pool is closed on exit.
    """

    def __init__(self, configuration: Any, timeout: float) -> None:
        from kubernetes import client
        from urllib3.util.retry import Retry

        # Retry only connection setup (a reset, a refused connect while an LB flips); never a
        # status: 401/403/404 are answers, not hiccups.
        configuration.retries = Retry(total=2, connect=2, read=0, status=0, backoff_factor=0.2)
        self.host: str = configuration.host
        self.timeout = timeout
        self._api: Any = client.ApiClient(configuration=configuration)

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None, context: str | None, timeout: float
    ) -> ApiLister:
        return cls(load_configuration(kubeconfig, context), timeout)

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> ApiLister:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def get_json(self, path: str, query: list[tuple[str, str]], what: str) -> dict[str, Any]:
        return self.request_json("GET", path, what, query=query)

    def request_json(
        self,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One request with a JSON answer; every failure is a ClusterError naming `what`."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        method, url, headers, payload, _ = self._api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._api.call_api(
                method, url, header_params=headers, body=payload, _request_timeout=self.timeout
            )
            raw: bytes = response.read()
        except ApiException as exc:  # the client wraps TLS failures as status 0
            raise ClusterError(self._tls_message(what, exc.reason)) from exc
        except urllib3.exceptions.SSLError as exc:
            raise ClusterError(self._tls_message(what, str(exc))) from exc
        except urllib3.exceptions.MaxRetryError as exc:
            reason = exc.reason
            if isinstance(reason, urllib3.exceptions.SSLError):
                raise ClusterError(self._tls_message(what, str(reason))) from exc
            refused = isinstance(reason, urllib3.exceptions.NewConnectionError)
            if isinstance(reason, urllib3.exceptions.TimeoutError) and not refused:
                raise ClusterError(self._timeout_message(what)) from exc
            raise ClusterError(
                f"{what}: cannot reach the API server at {self.host}: {_short(reason)}; check "
                "that the cluster is up and the kubeconfig's server address is right "
                "(--kubeconfig, --kube-context)"
            ) from exc
        except urllib3.exceptions.TimeoutError as exc:
            raise ClusterError(self._timeout_message(what)) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(
                f"{what}: the connection to {self.host} failed mid-answer: {_short(exc)}; retry"
            ) from exc
        status = int(response.status)
        if status >= 400:
            raise _status_error(what, self.host, status, raw)
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ClusterError(
                f"{what}: {self.host} answered {status} with something that is not JSON "
                f"({raw[:80]!r}); is the kubeconfig's server really a kube-apiserver?"
            ) from exc
        if not isinstance(body, dict):
            raise ClusterError(f"{what}: {self.host} answered JSON that is not an object")
        return body

    def _tls_message(self, what: str, reason: object) -> str:
        return (
            f"{what}: TLS with the API server at {self.host} failed: {_short(reason)}; the "
            "kubeconfig's certificate-authority does not match the server, or the server name "
            "is wrong"
        )

    def _timeout_message(self, what: str) -> str:
        return (
            f"{what}: the API server at {self.host} did not answer within {self.timeout:g}s; "
            "raise live.timeout in the policy file, or lower live.pageSize"
        )


def _short(reason: object) -> str:
    text = str(reason)
    # urllib3 wraps: "<urllib3.connection.HTTPSConnection object at 0x..>: Failed to establish a
    # new connection: [Errno 111] Connection refused" -> keep what a person can act on.
    if ">: " in text:
        text = text.split(">: ", 1)[1]
    return text.strip().rstrip(")'\"")


def _status_error(what: str, host: str, status: int, raw: bytes) -> ClusterError:
    try:
        message = str(json.loads(raw).get("message", ""))
    except (ValueError, AttributeError):
        message = raw[:200].decode("utf-8", "replace")
    said = f" ({message})" if message else ""
    if status == 401:
        return ClusterError(
            f"{what}: the API server at {host} rejected the credentials (401 Unauthorized){said}; "
            "the kubeconfig's token or client certificate is wrong or expired"
        )
    if status == 403 and "Lease" in what:
        return ClusterError(
            f"{what}: forbidden (403){said}; holding the speculation fence needs get, create and "
            "update on leases.coordination.k8s.io in the fence's namespace"
        )
    if status == 409:
        return ClusterError(f"{what}: someone changed it at the same time (409 Conflict); retry")
    if status == 403:
        return ClusterError(
            f"{what}: forbidden (403){said}; gate check --live needs get and list on pods, "
            "persistentvolumeclaims, persistentvolumes, namespaces, statefulsets, deployments, "
            "daemonsets, replicasets, jobs, cronjobs, customresourcedefinitions and "
            "volumesnapshots (a read-only ClusterRole)"
        )
    if status == 404:
        return NotServedError(f"{what}: the API server at {host} does not serve it (404){said}")
    if status == 410:
        return ClusterError(
            f"{what}: the list changed too much while it was read (410 Gone: continue token "
            "expired){said}; run the check again, or raise live.pageSize"
        )
    return ClusterError(f"{what}: the API server at {host} answered {status}{said}")
