"""Lists that are complete and watches that are streamed: the two reads a cache is built from.

Watches are fast; lists are complete. `ListedItems` reads every page of a list as it is iterated
(so no more than one page of decoded objects need be held at once: a 10,000-pod list decoded whole
is a few hundred MB that the process keeps) and then knows the list's resourceVersion, from which
`open_watch` streams the changes. A watch asks the server to end it
after `seconds` (with bookmarks) and reads with a timeout a little longer, so a silent stream (a
paused proxy, a half-open connection) raises instead of leaving a cache that looks fine. A 410
from either is `GoneError`: the resourceVersion is too old, list again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gate.kube.client import JSON, GoneError, list_pages, open_request, request_json
from gate.model.errors import ClusterError

#: Items per page of a list (`limit`): bounded answers, whatever the cluster's size.
PAGE_SIZE = 500
#: The read timeout on a watch is this much longer than the server's `timeoutSeconds`.
READ_MARGIN_SECONDS = 5


class WatchError(ClusterError):
    """The server ended a watch with an ERROR event other than 410."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        meta = self.object.get("metadata")
        return str((meta or {}).get("resourceVersion") or "") if isinstance(meta, dict) else ""


class ListedItems:
    """Every item of a list, read page by page (`limit`, `continue`) as it is iterated once;
    `resource_version` is the list's, known once the iteration has ended."""

    def __init__(
        self,
        api: Any,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        accept: str = JSON,
        page_size: int = PAGE_SIZE,
        timeout: tuple[float, float] = (10, 30),
    ) -> None:
        self._api, self._path, self._query = api, path, query
        self._accept, self._page_size, self._timeout = accept, page_size, timeout
        self._version: str | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        def fetch(q: list[tuple[str, Any]]) -> dict[str, Any]:
            return request_json(
                self._api, "GET", self._path, q, accept=self._accept, timeout=self._timeout
            )

        version = ""
        for page in list_pages(fetch, self._page_size, self._query):
            version = str((page.get("metadata") or {}).get("resourceVersion") or "")
            yield from (i for i in page.get("items") or [] if isinstance(i, dict))
        self._version = version

    @property
    def resource_version(self) -> str:
        if self._version is None:
            raise RuntimeError("the list was not read to its end")
        return self._version


class WatchStream:
    """One open watch: iterate for its events; `abort()` (from another thread) ends a blocked
    read, `close()` gives the connection back. Use as a context manager."""

    def __init__(self, response: Any) -> None:
        self._resp = response

    def __iter__(self) -> Iterator[WatchEvent]:
        for line in _lines(self._resp.response):
            event = json.loads(line)
            kind, obj = str(event.get("type")), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise GoneError(410, "watch expired (410 Gone)")
                raise WatchError(f"watch error: {obj.get('message', obj)}")
            yield WatchEvent(kind, obj)

    def abort(self) -> None:
        """Shut the socket down: a read blocked in another thread returns at once."""
        self._resp.response.shutdown()

    def close(self) -> None:
        self._resp.response.release_conn()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_watch(
    api: Any,
    path: str,
    resource_version: str,
    seconds: int,
    query: Sequence[tuple[str, Any]] = (),
    accept: str = JSON,
) -> WatchStream:
    """Watch `path` from `resource_version`; the server ends the watch after `seconds`."""
    q = [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", seconds),
        *query,
    ]
    timeout = (10, seconds + READ_MARGIN_SECONDS)
    return WatchStream(open_request(api, "GET", path, q, accept=accept, timeout=timeout))


def _lines(resp: Any) -> Iterator[bytes]:
    """Split a streaming watch response into its JSON lines."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf
