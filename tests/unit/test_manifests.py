"""Loading: file and line of every object, clear errors, identity normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.model.errors import DuplicateObjectError, InputError
from gate.model.objects import build_inventory, learn_scopes
from gate.model.refs import ObjectRef, Scopes
from gate.sources.manifests import parse_stream, read_path


def test_lines_of_each_document() -> None:
    text = "# c\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n\n---\n" + (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
    )
    objs = parse_stream(text, "x.yaml")
    assert [(o.body["metadata"]["name"], o.source.line) for o in objs] == [("a", 2), ("b", 8)]


def test_malformed_yaml_names_file_and_line() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: [}\n"
    with pytest.raises(InputError) as err:
        parse_stream(text, "bad.yaml")
    assert str(err.value).startswith("bad.yaml:5: invalid YAML")


def test_not_an_object_is_an_error_with_location() -> None:
    with pytest.raises(InputError, match=r"^f.yaml:5: expected a Kubernetes object"):
        parse_stream("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n- a\n", "f.yaml")
    with pytest.raises(InputError, match=r"^f.yaml:1: ConfigMap has no metadata.name"):
        parse_stream("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "f.yaml")


def test_list_is_flattened_and_generate_name_skipped() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
        "- {apiVersion: v1, kind: Pod, metadata: {generateName: job-}}\n"
    )
    assert [o.body["metadata"]["name"] for o in parse_stream(text, "l.yaml")] == ["a"]


def test_json_files_and_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.json").write_text(
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}}'
    )
    (tmp_path / "b.yml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.yaml").write_text("broken: [")
    objs = read_path(tmp_path)
    assert sorted(o.body["metadata"]["name"] for o in objs) == ["j", "s"]
    assert any(o.source.path.endswith("sub/a.json") for o in objs)


def test_missing_path() -> None:
    with pytest.raises(InputError, match="no such file"):
        read_path("/nonexistent/manifests")


def test_identity_ignores_version_and_defaults_namespace() -> None:
    a = parse_stream(
        "apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
        "a",
    )
    b = parse_stream(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
        "metadata: {name: h, namespace: default}\n",
        "b",
    )
    scopes = Scopes()
    ia, ib = build_inventory(a, scopes), build_inventory(b, scopes)
    assert (
        set(ia.objects)
        == set(ib.objects)
        == {ObjectRef("autoscaling", "HorizontalPodAutoscaler", "default", "h")}
    )
    assert {m.ref.namespace for m in build_inventory(a, scopes, "team")} == {"team"}


def test_cluster_scoped_builtin_and_crd_scopes() -> None:
    crd = parse_stream(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: widgets.example.com}\n"
        "spec: {group: example.com, scope: Cluster, names: {kind: Widget}}\n"
        "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: x}\n"
        "---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv, namespace: x}\n",
        "c.yaml",
    )
    scopes = Scopes()
    learn_scopes(scopes, crd)
    refs = set(build_inventory(crd, scopes).objects)
    assert ObjectRef("example.com", "Widget", "", "w") in refs
    assert ObjectRef("", "PersistentVolume", "", "pv") in refs


def test_copies_that_differ_in_a_field_a_rule_reads_name_both_locations() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default, labels: {x: y}}\n"
    )
    with pytest.raises(DuplicateObjectError) as err:
        build_inventory(parse_stream(text, "d.yaml"), Scopes())
    assert "d.yaml:5" in str(err.value) and "d.yaml:1" in str(err.value)
    assert "differ in metadata.labels" in str(err.value)


def test_copies_that_agree_are_one_object_with_every_place() -> None:
    """Two Flux roots that both render a Namespace: Flux applies both, nothing is deleted."""
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
    raws = [*parse_stream(ns, "apps/ns.yaml"), *parse_stream(ns, "infra/ns.yaml")]
    inventory = build_inventory(raws, Scopes())
    ref = ObjectRef("", "Namespace", "", "shop")
    assert len(inventory) == 1 and ref in inventory
    assert [str(s) for s in inventory.duplicates[ref]] == ["apps/ns.yaml:1", "infra/ns.yaml:1"]
    # Not for a claim whose spec differs: which copy the cluster gets depends on apply order.
    claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: d, namespace: a}\n"
    a = parse_stream(claim + "spec: {storageClassName: fast}\n", "a.yaml")
    b = parse_stream(claim + "spec: {storageClassName: slow}\n", "b.yaml")
    with pytest.raises(DuplicateObjectError, match=r"differ in spec \(first at a\.yaml:1\)"):
        build_inventory([*a, *b], Scopes())


def test_directories_skip_yaml_that_is_not_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text("replicaCount: 2\nimage: {tag: v1}\n")
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\n")
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    assert [o.body["kind"] for o in read_path(tmp_path)] == ["Secret"]
    (tmp_path / "broken.yaml").write_text("kind: Secret\nmetadata: {name: t}\n")
    with pytest.raises(InputError, match=r"broken\.yaml:1: object has no apiVersion"):
        read_path(tmp_path)
    with pytest.raises(InputError, match=r"values\.yaml:1: object has no apiVersion"):
        read_path(tmp_path / "values.yaml")  # a file named explicitly must be a manifest


def test_directories_skip_helm_charts(tmp_path: Path) -> None:
    chart = tmp_path / "charts" / "web"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text("metadata: {name: {{ .Release.Name }}}\n")
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    assert [o.body["kind"] for o in read_path(tmp_path)] == ["Secret"]


def test_odd_shapes_are_input_errors_with_the_field() -> None:
    text = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\n"
        "metadata:\n  name: data\n  annotations:\n    prune-gate.io/retire: true\n"
    )
    with pytest.raises(InputError) as err:
        parse_stream(text, "c.yaml")
    assert str(err.value) == (
        "c.yaml:1: PersistentVolumeClaim data: metadata.annotations.prune-gate.io/retire must be "
        'a string (quote it: "true"), not bool'
    )
    with pytest.raises(InputError, match=r"^d\.yaml:1: Deployment web: spec must be an object"):
        parse_stream(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: x\n", "d.yaml"
        )


def test_timestamps_stay_strings_as_kubernetes_reads_them() -> None:
    """`until: 2027-02-30` is a string to the API server; PyYAML built a date, or crashed."""
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: app}\n"
        "data: {until: 2027-02-30, since: 2026-12-03, at: 2026-12-03T07:00:00Z}\n"
    )
    (obj,) = parse_stream(text, "dates.yaml")
    assert obj.body["data"] == {
        "until": "2027-02-30",
        "since": "2026-12-03",
        "at": "2026-12-03T07:00:00Z",
    }


def test_a_plain_equals_sign_is_a_string_as_kubernetes_reads_it() -> None:
    """YAML 1.1's `=` "value" type had no constructor in PyYAML: a real chart's values
    (kube-prometheus-stack's `operator: =`) made every render of its root exit 2."""
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: app}\n"
        "data:\n  op: =\n  list: [=, a]\n"
    )
    (obj,) = parse_stream(text, "eq.yaml")
    assert obj.body["data"] == {"op": "=", "list": ["=", "a"]}
