"""One Kubernetes client for every door: raw JSON over the kubernetes package's `ApiClient`.

The client's generated model classes are slow on thousands of pods and know no custom resources;
prune-gate needs paths and JSON. The `ApiClient` still does what it is good at: credentials from a
kubeconfig or the in-cluster service account, TLS, the connection pool. `gate check --live`, the
fence, the webhook's watch cache, its Events and its registration all go through `open_request` /
`request_json` here, and fail the same way: one error per status (`NotFoundError`,
`ForbiddenError`, `ConflictError`, `GoneError`, ... all `ApiStatusError`, a `ClusterError`), with
the caller's `what` and, for a 403, the caller's own permission hint. Transport failures
(refused, TLS, timeout) are a `ClusterError` naming the server and what to check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from gate.model.errors import ClusterError

JSON = "application/json"
#: Content types of the two patches the client sends.
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
#: Metadata-only lists and watches: enough to count custom resources of any kind.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class ApiStatusError(ClusterError):
    """The API server answered with an error status; `status` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class UnauthorizedError(ApiStatusError):
    """401: the credentials were refused."""


class ForbiddenError(ApiStatusError):
    """403: RBAC does not allow it."""


class NotFoundError(ApiStatusError):
    """404: no such object, or the API (a CRD's group, snapshots) is not served."""


class ConflictError(ApiStatusError):
    """409: someone changed it at the same time (a resourceVersion precondition failed)."""


class GoneError(ApiStatusError):
    """410: a watch's resourceVersion or a list's continue token is too old."""


_BY_STATUS: dict[int, type[ApiStatusError]] = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
}


def api_message(raw: bytes) -> str:
    """The API's own message from a Status body, else the start of the body."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", "replace")
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    return raw[:200].decode("utf-8", "replace")


def status_error(what: str, host: str, status: int, raw: bytes, hint: str = "") -> ApiStatusError:
    """The error for a non-2xx answer: its class by status, a message saying what and the fix.
    `hint` is the caller's: which permissions it needs (said on a 403)."""
    message = api_message(raw) if raw else ""
    said = f" ({message})" if message else ""
    cls = _BY_STATUS.get(status, ApiStatusError)
    if status == 401:
        text = (
            f"{what}: the API server at {host} rejected the credentials (401 Unauthorized)"
            f"{said}; the kubeconfig's token or client certificate is wrong or expired"
        )
    elif status == 403:
        text = f"{what}: forbidden (403){said}" + (f"; {hint}" if hint else "")
    elif status == 404:
        text = f"{what}: the API server at {host} does not serve it (404){said}"
    elif status == 409:
        text = f"{what}: someone changed it at the same time (409 Conflict){said}; retry"
    elif status == 410:
        text = (
            f"{what}: too old for the API server (410 Gone: a watch's resourceVersion or a "
            f"list's continue token expired){said}; run it again"
        )
    else:
        text = f"{what}: the API server at {host} answered {status}{said}"
    return cls(status, text)


def _kubeconfig_source(kubeconfig: str | None) -> tuple[str, bool]:
    """Where the kubeconfig is, as kubectl resolves it (--kubeconfig, $KUBECONFIG, a list of
    files, ~/.kube/config), and whether to use the in-cluster service account instead (none of
    those exists, and this runs in a pod). $KUBECONFIG is read now, not when the client was
    imported (it caches it then)."""
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    in_cluster = (
        kubeconfig is None
        and not Path(where.split(os.pathsep)[0]).expanduser().exists()
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    return where, in_cluster


def load_configuration(kubeconfig: str | None, context: str | None) -> Any:
    """A client `Configuration` as kubectl resolves one: --kubeconfig/--kube-context, else
    $KUBECONFIG (a list of files, merged), ~/.kube/config, then the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    where, in_cluster = _kubeconfig_source(kubeconfig)
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


def new_api_client(configuration: Any) -> Any:
    """A bare `ApiClient` on `configuration`, with its own connection pool: the webhook's watch
    cache and Event sender call `request_json`/`open_request` on it (the CLI uses `KubeClient`)."""
    from kubernetes import client

    return client.ApiClient(configuration=configuration)


def _host(api: Any) -> str:
    return str(getattr(getattr(api, "configuration", None), "host", "") or "the API server")


def open_request(
    api: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    accept: str = JSON,
    timeout: float | tuple[float, float] = 30.0,
    what: str = "",
    hint: str = "",
    content_type: str = JSON,
) -> Any:
    """Send a request and return the open response (a streaming `RESTResponse`).

    A non-2xx answer raises the `ApiStatusError` of its status, with the API's own message.
    """
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    method, url, headers, data, _post = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=data, _request_timeout=timeout)
    status = int(resp.status)
    if status >= 300:
        raw = resp.read()
        resp.response.release_conn()
        raise status_error(what or f"{method} {path}", _host(api), status, raw, hint)
    return resp


def list_pages(
    fetch: Callable[[list[tuple[str, Any]]], dict[str, Any]],
    page_size: int,
    query: Sequence[tuple[str, Any]] = (),
) -> Iterator[dict[str, Any]]:
    """Every page of a list as the API server answers it, `fetch(query)` by `fetch(query)`
    (`limit`, then `continue` until it is empty): never one huge answer. The one pager of the
    snapshot, the watch cache and `KubeClient.list_all`; each fetches in its own way."""
    cont = ""
    while True:
        page = fetch([*query, ("limit", str(page_size)), *([("continue", cont)] if cont else [])])
        yield page
        cont = str((page.get("metadata") or {}).get("continue") or "")
        if not cont:
            return


def request_json(
    api: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    accept: str = JSON,
    timeout: float | tuple[float, float] = 30.0,
    what: str = "",
    hint: str = "",
    content_type: str = JSON,
) -> dict[str, Any]:
    """Send a request and decode its JSON answer (an object)."""
    resp = open_request(api, method, path, query, body, accept, timeout, what, hint, content_type)
    label = what or f"{method} {path}"
    try:
        data = json.loads(resp.read())
    except ValueError as exc:
        raise ClusterError(
            f"{label}: {_host(api)} answered with something that is not JSON ({exc}); is the "
            "kubeconfig's server really a kube-apiserver?"
        ) from None
    finally:
        resp.response.release_conn()
    if not isinstance(data, dict):
        raise ClusterError(f"{label}: {_host(api)} answered JSON that is not an object")
    return data


class KubeClient:
    """An `ApiClient` for the CLI's doors (`gate check --live`, `gate fence`, `gate retire`):
    one timeout per request, connection retries only, and every failure a `ClusterError` that
    names `what` and says what to check. Use as a context manager: the pool is closed on exit."""

    #: What a 403 says this door needs (its permissions), unless a call says otherwise.
    default_hint = ""

    def __init__(self, configuration: Any, timeout: float, hint: str | None = None) -> None:
        from kubernetes import client
        from urllib3.util.retry import Retry

        # Retry only connection setup (a reset, a refused connect while an LB flips); never a
        # status: 401/403/404 are answers, not hiccups.
        configuration.retries = Retry(total=2, connect=2, read=0, status=0, backoff_factor=0.2)
        self.host: str = configuration.host
        self.timeout = timeout
        self.hint = self.default_hint if hint is None else hint
        self._api: Any = client.ApiClient(configuration=configuration)

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None, context: str | None, timeout: float, hint: str | None = None
    ) -> Self:
        return cls(load_configuration(kubeconfig, context), timeout, hint)

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> Self:
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
        body: Any = None,
        hint: str | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One request with a JSON answer; every failure is a ClusterError naming `what`."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            return request_json(
                self._api,
                method,
                path,
                query or [],
                body,
                timeout=self.timeout,
                what=what,
                hint=self.hint if hint is None else hint,
                content_type=content_type,
            )
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

    # --- the verbs -----------------------------------------------------------------------------

    def get(self, path: str, what: str) -> dict[str, Any] | None:
        """The object at `path`, or None when there is none (404)."""
        try:
            return self.request_json("GET", path, what)
        except NotFoundError:
            return None

    def list_all(
        self, path: str, what: str, page_size: int = 500, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list, page by page (`list_pages`)."""
        for page in list_pages(
            lambda q: self.request_json("GET", path, what, query=q), page_size, query
        ):
            yield from (i for i in page.get("items") or [] if isinstance(i, dict))

    def create(
        self, path: str, body: dict[str, Any], what: str, dry_run: bool = False
    ) -> dict[str, Any]:
        return self.request_json("POST", path, what, query=_dry(dry_run), body=body)

    def update(
        self, path: str, body: dict[str, Any], what: str, dry_run: bool = False
    ) -> dict[str, Any]:
        """PUT the whole object; its `metadata.resourceVersion` is the precondition (a
        `ConflictError` when someone wrote it since it was read)."""
        return self.request_json("PUT", path, what, query=_dry(dry_run), body=body)

    def patch(
        self,
        path: str,
        patch: Any,
        what: str,
        *,
        json_patch: bool = False,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch (a dict), or a JSON patch (a list of operations, whose `test`
        operations are preconditions); `field_manager` names the writer in managedFields."""
        content_type = JSON_PATCH if json_patch else MERGE_PATCH
        query = _dry(dry_run) + ([("fieldManager", field_manager)] if field_manager else [])
        return self.request_json(
            "PATCH", path, what, query=query, body=patch, content_type=content_type
        )

    def delete(
        self,
        path: str,
        what: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
        propagation: str | None = None,
        grace_period: int | None = None,
    ) -> dict[str, Any]:
        """DELETE with preconditions: the object must still be the one read (`uid`) and unchanged
        since (`resource_version`), else a `ConflictError` and nothing is deleted. A
        `grace_period` of 0 is a force delete (a pod's kubelet is not waited for)."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            options["preconditions"] = pre
        if dry_run:
            options["dryRun"] = ["All"]
        if propagation:
            options["propagationPolicy"] = propagation
        return self.request_json("DELETE", path, what, body=options)

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


def _dry(dry_run: bool) -> list[tuple[str, str]]:
    return [("dryRun", "All")] if dry_run else []


def _short(reason: object) -> str:
    text = str(reason)
    # urllib3 wraps: "<urllib3.connection.HTTPSConnection object at 0x..>: Failed to establish a
    # new connection: [Errno 111] Connection refused" -> keep what a person can act on.
    if ">: " in text:
        text = text.split(">: ", 1)[1]
    return text.strip().rstrip(")'\"")


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace kubectl would use without -n: the context's, in a pod its own, else
    `default`."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    where, in_cluster = _kubeconfig_source(kubeconfig)
    if in_cluster:
        try:
            return Path(_SA_NAMESPACE).read_text(encoding="utf-8").strip() or "default"
        except OSError:
            return "default"
    try:
        list_contexts: Any = config.list_kube_config_contexts  # untyped in the client
        contexts, current = list_contexts(config_file=where)  # a list of files is merged
    except (ConfigException, OSError, ValueError, TypeError):
        return "default"  # load_configuration reports what is wrong with the file
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
