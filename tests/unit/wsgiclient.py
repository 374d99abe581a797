"""A test client for the webhook's WSGI app: werkzeug's, which builds the environ a server would
and reads the answer, used as a context manager the way the tests hold a client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from wsgiref.types import WSGIApplication

from werkzeug.test import Client


@contextmanager
def client_of(app: WSGIApplication) -> Iterator[Client]:
    """A client calling `app` in process."""
    yield Client(app)
