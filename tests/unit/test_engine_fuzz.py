"""Fuzzing the engine with manifests of odd shapes: a decision or an InputError, never a crash.

Real repositories hold hand-written YAML: an annotation map that is a list, a spec that is a
string. Each such input must become `error: file:line: ...` (exit 2) or a decision, never a
traceback. Derandomized, so a failure is the same on every run.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.engine.check import check_objects
from gate.engine.context import Context
from gate.engine.policy import Policy
from gate.model.errors import InputError
from gate.sources.manifests import parse_stream

CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "app", "annotations": {"a": "b"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}
DEPLOY = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "app"},
    "spec": {
        "template": {
            "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
        }
    },
}
STS = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {"name": "db", "namespace": "app"},
    "spec": {
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
        "volumeClaimTemplates": [{"metadata": {"name": "pg"}}],
        "template": {"spec": {"volumes": []}},
    },
}
PV = {
    "apiVersion": "v1",
    "kind": "PersistentVolume",
    "metadata": {"name": "pv"},
    "spec": {"claimRef": {"namespace": "app", "name": "data"}, "nfs": {"server": "a"}},
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "backups.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Backup"}},
}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
#: A custom resource: opaque past its metadata, whatever shape its spec has.
RGD = {
    "apiVersion": "kro.run/v1alpha1",
    "kind": "ResourceGraphDefinition",
    "metadata": {"name": "webapp"},
    "spec": {"resources": [{"id": "a", "template": {"kind": "Deployment"}}]},
}
OBJECTS = [CLAIM, DEPLOY, STS, PV, CRD, NS, RGD]
PATHS = [
    ("metadata",),
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("metadata", "namespace"),
    ("spec",),
    ("spec", "resources"),
    ("spec", "resources", "requests"),
    ("spec", "resources", "requests", "storage"),
    ("spec", "template"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "volumes"),
    ("spec", "volumeClaimTemplates"),
    ("spec", "persistentVolumeClaimRetentionPolicy"),
    ("spec", "claimRef"),
    ("spec", "names"),
    ("spec", "group"),
    ("spec", "scope"),
    ("kind",),
    ("apiVersion",),
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _mutated(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node: Any = out
    for key in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return out
        node = node[key]
    node[path[-1]] = value
    return out


@settings(derandomize=True, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(OBJECTS) - 1),
    st.sampled_from(PATHS),
    JSON,
    st.sampled_from(["base", "head", "both"]),
    st.booleans(),
)
def test_odd_shapes_are_decided_or_input_errors(
    index: int, path: tuple[str, ...], value: Any, side: str, force: bool
) -> None:
    odd = _mutated(OBJECTS[index], path, value)
    base = [odd if i == index and side in ("base", "both") else o for i, o in enumerate(OBJECTS)]
    head = [odd if i == index and side in ("head", "both") else o for i, o in enumerate(OBJECTS)]
    head = [o for i, o in enumerate(head) if i != 0]  # the claim leaves: the rules get to work
    try:
        base_raws = parse_stream(yaml.safe_dump_all(base), "base.yaml")
        head_raws = parse_stream(yaml.safe_dump_all(head), "head.yaml")
    except InputError as exc:
        assert str(exc).startswith(("base.yaml:", "head.yaml:")), str(exc)
        return
    before = copy.deepcopy([r.body for r in base_raws + head_raws])
    try:
        result = check_objects(
            base_raws,
            head_raws,
            context=Context.SPECULATIVE,
            policy=Policy(),
            today=dt.date(2026, 12, 2),
            force=force,
        )
    except InputError as exc:
        assert str(exc).startswith(("base.yaml:", "head.yaml:")), str(exc)
    else:
        for f in result.decision.findings:  # every fix is steps too, and commands are commands
            assert f.actions, f
            assert all(c.startswith("kubectl ") for c in f.commands()), f.commands()
    # Parsed bodies are shared (the parse cache hands one file's objects to both sides): the
    # engine must read them and never write them.
    assert [r.body for r in base_raws + head_raws] == before
