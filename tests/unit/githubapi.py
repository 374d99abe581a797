"""A loopback stand-in for the part of GitHub's REST API the Action's comment step calls (the
issue comments of a pull request), for tests/unit/test_action_comment.py and the act test
(tests/e2e/test_action_comment.py), which points the runner's GITHUB_API_URL at it.

It answers as api.github.com does for what it implements (paths, methods, status codes, the Link
header of a paginated list, `message` in a JSON error, the 65,536-character body limit, 401
without the expected token) and records every request, so a test asserts what was sent. Anything
else is a 404 `Not Found`, recorded too, never a guess. Pages are capped at `page_size` whatever
`per_page` asks (GitHub caps at 100), so a short list paginates in a test.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: GitHub's limit on a comment's body, in characters.
BODY_LIMIT = 65_536
_LIST = re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)/comments$")
_ONE = re.compile(r"^/repos/([^/]+/[^/]+)/issues/comments/(\d+)$")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class GitHubStandIn:
    """The comments of each (repository, pull request), and what was asked of them."""

    token: str = "no-token-here"
    page_size: int = 100
    #: (method, status, message): answer every such request so (a 403 for a read-only token).
    refuse: tuple[str, int, str] | None = None
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    #: Where the Link header's pages point (default: `url`).
    links_to: str = ""
    _next_id: int = 1000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, number: int, body: str, login: str = "someone") -> dict[str, Any]:
        """A comment already on the pull request (a person's, or an earlier run's)."""
        self._next_id += 1
        made = {
            "id": self._next_id,
            "body": body,
            "user": {"login": login, "type": "User" if login != "github-actions[bot]" else "Bot"},
            "html_url": f"https://github.example/{repo}/pull/{number}#issuecomment-{self._next_id}",
        }
        self.comments.setdefault((repo, number), []).append(made)
        return made

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method in ("POST", "PATCH")]

    def answer(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[
        int, dict[str, str], Any
    ]:  # fmt: skip
        """Status, headers and JSON body for one request (recorded first)."""
        with self._lock:
            return self._answer(method, target, headers, raw)

    def _answer(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[
        int, dict[str, str], Any
    ]:  # fmt: skip
        parts = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(parts.query))
        body: Any = json.loads(raw) if raw else None
        self.requests.append(Request(method, parts.path, query, headers, body))
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, {"message": "Bad credentials"}
        if self.refuse and self.refuse[0] == method:
            return self.refuse[1], {}, {"message": self.refuse[2]}
        listing, one = _LIST.match(parts.path), _ONE.match(parts.path)
        if listing and method == "GET":
            return self._list(listing.group(1), int(listing.group(2)), parts.path, query)
        if listing and method == "POST":
            if (bad := self._too_long(body)) is not None:
                return bad
            made = self.add(
                listing.group(1), int(listing.group(2)), body["body"], "github-actions[bot]"
            )
            return 201, {}, made
        if one and method == "PATCH":
            if (bad := self._too_long(body)) is not None:
                return bad
            for found in (c for cs in self.comments.values() for c in cs):
                if found["id"] == int(one.group(2)):
                    found["body"] = body["body"]
                    return 200, {}, found
        return 404, {}, {"message": "Not Found"}

    def _list(self, repo: str, number: int, path: str, query: dict[str, str]) -> tuple[
        int, dict[str, str], Any
    ]:  # fmt: skip
        size = min(int(query.get("per_page", "30")), self.page_size)
        page = int(query.get("page", "1"))
        everything = self.comments.get((repo, number), [])
        shown = everything[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(everything):
            nxt = urllib.parse.urlencode({**query, "page": str(page + 1)})
            base = self.links_to or self.url
            headers["Link"] = f'<{base}{path}?{nxt}>; rel="next", <{base}{path}>; rel="first"'
        return 200, headers, shown

    @staticmethod
    def _too_long(body: Any) -> tuple[int, dict[str, str], Any] | None:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return 422, {}, {"message": "Invalid request: body is missing"}
        if len(body["body"]) > BODY_LIMIT:
            return (
                422,
                {},
                {"message": "Validation Failed: Body is too long (maximum is 65536 characters)"},
            )
        return None


@contextlib.contextmanager
def serve(api: GitHubStandIn) -> Iterator[GitHubStandIn]:
    """`api` on an ephemeral loopback port (`api.url` set) until the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, body = api.answer(self.command, self.path, headers, raw)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._any()

        def do_POST(self) -> None:
            self._any()

        def do_PATCH(self) -> None:
            self._any()

        def do_DELETE(self) -> None:
            self._any()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # every request is in api.requests

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
