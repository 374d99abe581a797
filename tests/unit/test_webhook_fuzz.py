"""Fuzzing /validate: whatever the body, the answer is a 200 review or a 400 with a reason.

Derandomized (as Black's fuzz script is), so a failure here is the same failure on every run.
Mutations start from a valid review, so most inputs get deep into parsing and deciding rather
than stopping at "not JSON".
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_webhook_app import claim, make_app, pod, review
from tests.unit.wsgiclient import client_of

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
PATHS = [
    (),
    ("request",),
    ("request", "uid"),
    ("request", "kind"),
    ("request", "operation"),
    ("request", "userInfo"),
    ("request", "userInfo", "groups"),
    ("request", "oldObject"),
    ("request", "oldObject", "metadata"),
    ("request", "oldObject", "metadata", "annotations"),
    ("request", "dryRun"),
    ("request", "oldObject", "spec"),
    ("request", "oldObject", "spec", "claimRef"),
    ("request", "oldObject", "spec", "persistentVolumeClaimRetentionPolicy"),
    ("request", "oldObject", "spec", "names"),
    ("request", "oldObject", "spec", "group"),
    ("request", "oldObject", "spec", "volumeName"),
    ("request", "oldObject", "metadata", "ownerReferences"),
    ("request", "oldObject", "metadata", "finalizers"),
    ("request", "oldObject", "spec", "claimRef", "name"),
    ("request", "oldObject", "spec", "claimRef", "namespace"),
    ("request", "oldObject", "spec", "names", "kind"),
    ("request", "oldObject", "spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted"),
    ("request", "oldObject", "metadata", "name"),
    ("apiVersion",),
]

#: Objects of every guarded kind, as (group, object): the mutations start from each.
OBJECTS: list[tuple[str, dict[str, Any]]] = [
    ("", claim()),
    (
        "",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv"},
            "spec": {"claimRef": {"namespace": "app", "name": "data"}},
        },
    ),
    ("", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
    (
        "apps",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "app"},
            "spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}},
        },
    ),
    (
        "apiextensions.k8s.io",
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "backups.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Backup"}},
        },
    ),
]
APP, _ = make_app(claim(), pod("web-0", "data"))


def _mutate(doc: dict[str, Any], path: tuple[str, ...], value: Any, drop: bool) -> Any:
    if not path:
        return value
    node: Any = doc
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return doc
        node = node[key]
    if isinstance(node, dict):
        if drop:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return doc


@settings(derandomize=True, max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(OBJECTS), st.sampled_from(PATHS), JSON, st.booleans())
def test_no_body_is_a_500(
    target: tuple[str, dict[str, Any]], path: tuple[str, ...], value: Any, drop: bool
) -> None:
    group, obj = target
    body = review(json.loads(json.dumps(obj)))
    body["request"]["kind"]["group"] = group
    body = _mutate(body, path, value, drop)
    with client_of(APP) as client:
        resp = client.post("/validate", data=json.dumps(body), content_type="application/json")
    assert resp.status_code in (200, 400), (path, value, resp.status_code, resp.data[:200])
    text = resp.get_data(as_text=True)
    assert "Traceback" not in text
    if resp.status_code == 400:
        assert text.strip(), "a 400 carries its reason"
    else:
        out = resp.get_json()
        assert out["kind"] == "AdmissionReview"
        assert isinstance(out["response"]["allowed"], bool)


@settings(derandomize=True, max_examples=150)
@given(st.binary(max_size=64))
def test_random_bytes_are_400(data: bytes) -> None:
    with client_of(APP) as client:
        resp = client.post("/validate", data=data, content_type="application/json")
    assert resp.status_code == 400
