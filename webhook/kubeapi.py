"""Raw JSON requests to the API server through a `kubernetes.client.ApiClient`.

The client's generated model classes are slow on thousands of pods and do not know custom
resources; the webhook only needs paths and JSON. The ApiClient still does what it is good at:
credentials from a kubeconfig or the in-cluster service account, TLS, the connection pool.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gate.errors import ClusterError

JSON = "application/json"
#: Metadata-only lists and watches: enough to count custom resources of any kind.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class ApiStatusError(ClusterError):
    """The API server answered with an error status; `status` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def open_request(
    api: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    accept: str = JSON,
    timeout: float | tuple[float, float] = 30.0,
) -> Any:
    """Send a request and return the open response (a streaming `RESTResponse`).

    Raises `ApiStatusError` for a non-2xx answer, with the API's own message.
    """
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = JSON
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
        text = resp.read()
        resp.response.release_conn()
        raise ApiStatusError(status, f"{method} {path}: HTTP {status}: {_message(text)}")
    return resp


def request_json(
    api: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    accept: str = JSON,
    timeout: float | tuple[float, float] = 30.0,
) -> dict[str, Any]:
    """Send a request and decode its JSON answer."""
    resp = open_request(api, method, path, query, body, accept, timeout)
    try:
        data = json.loads(resp.read())
    except ValueError as exc:
        raise ClusterError(f"{method} {path}: the answer is not JSON: {exc}") from None
    finally:
        resp.response.release_conn()
    if not isinstance(data, dict):
        raise ClusterError(f"{method} {path}: expected a JSON object")
    return data


def _message(text: bytes) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:200].decode("utf-8", "replace")
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    return text[:200].decode("utf-8", "replace")
