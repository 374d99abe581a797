"""One Kubernetes client (gate/kube/client.py): one error per status, the caller's words in each."""

from __future__ import annotations

import json

import pytest

from gate.kube.client import (
    ApiStatusError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    UnauthorizedError,
    status_error,
)
from gate.kube.lease import LEASE_HINT
from gate.kube.snapshot import LIVE_HINT, ApiLister, NotServedError
from gate.model.errors import ClusterError

RAW = json.dumps({"kind": "Status", "message": "leases is forbidden"}).encode()


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, UnauthorizedError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (409, ConflictError),
        (410, GoneError),
        (500, ApiStatusError),
    ],
)
def test_each_status_has_its_error_and_all_are_cluster_errors(
    status: int, cls: type[ApiStatusError]
) -> None:
    err = status_error("update lease prune-gate/fence", "https://k:6443", status, RAW)
    assert type(err) is cls and isinstance(err, ClusterError)
    assert err.status == status
    assert str(err).startswith("update lease prune-gate/fence: ")
    assert "leases is forbidden" in str(err)  # the API's own message is kept


def test_a_403_says_what_the_caller_needs() -> None:
    fence = status_error("update lease prune-gate/fence", "h", 403, RAW, LEASE_HINT)
    assert str(fence).endswith(LEASE_HINT)
    assert "get, create and update on leases" in str(fence)
    assert str(status_error("list pods", "h", 403, RAW)).endswith("(leases is forbidden)")


def test_the_live_door_says_its_read_only_role_and_404_is_not_served() -> None:
    assert ApiLister.default_hint == LIVE_HINT
    assert NotServedError is NotFoundError
    assert "continue token expired" in str(status_error("list pods", "h", 410, b""))
