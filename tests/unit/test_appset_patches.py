"""An ApplicationSet's `templatePatch` and a list generator's `elementsYaml`, as the
ApplicationSet controller reads them (argo-cd v3.2.11 `applicationset/controllers/template`
`renderTemplatePatch` and `applyTemplatePatch`, `applicationset/generators/list.go`), with the
real helper where Go renders or patches."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gate.model.errors import InputError
from gate.sources import appsets
from gate.sources.appsets import Context
from tests.unit.test_appsets import URL as REPO_URL
from tests.unit.test_appsets import ctx
from tests.unit.test_argocd_root import URL, check, claim_finding, repo_with
from tests.unit.test_build_server import HELPER, needs_helper

FINALIZER = appsets.RESOURCES_FINALIZER


def go_render(jobs: Sequence[tuple[Any, dict[str, Any]]], options: Sequence[str]) -> list[Any]:
    """The helper's answer to jobs, as `gate.sources.argocd` asks for it."""
    assert HELPER is not None
    request = {"options": list(options), "jobs": [{"template": t, "params": p} for t, p in jobs]}
    done = subprocess.run(
        [HELPER, "--appset-template"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise InputError(done.stderr.strip())
    results = json.loads(done.stdout)["results"]
    assert isinstance(results, list)
    return results


def with_helper() -> Context:
    c = ctx()
    return Context(c.files, c.ours, c.clusters, c.who, go_render)


def generate(spec: dict[str, Any], c: Context | None = None) -> list[dict[str, Any]]:
    return appsets.generate({"spec": spec}, c or with_helper())


TEMPLATE = {
    "metadata": {"name": "{{ .name }}"},
    "spec": {
        "project": "default",
        "source": {"repoURL": REPO_URL, "path": "workloads/{{ .name }}"},
        "destination": {"namespace": "shop"},
        "syncPolicy": {"automated": {"prune": True, "selfHeal": True}},
    },
}
PRUNE_PATCH = """\
spec:
  project: not-this-one
  {{- if not .prune }}
  syncPolicy:
    automated:
      prune: false
  {{- end }}
metadata:
  finalizers: [example.com/wait]
"""


@needs_helper
def test_a_template_patch_switches_prune_off_for_one_element() -> None:
    elements = [{"name": "a", "prune": True}, {"name": "b", "prune": False}]
    spec = {
        "goTemplate": True,
        "generators": [{"list": {"elements": elements}}],
        "template": TEMPLATE,
        "templatePatch": PRUNE_PATCH,
    }
    a, b = generate(spec)
    assert a["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # merged key by key: the rest of `automated` stays (Argo CD's typed round trip omits the
    # false, which means the same)
    automated = b["spec"]["syncPolicy"]["automated"]
    assert automated.get("prune") is not True and automated["selfHeal"] is True
    # the project is the template's, whatever the patch says
    assert a["spec"]["project"] == b["spec"]["project"] == "default"
    # the finalizers merge (ObjectMeta's patchStrategy): the resources finalizer, added
    # before the patch, stays
    assert sorted(b["metadata"]["finalizers"]) == sorted([FINALIZER, "example.com/wait"])
    assert b["metadata"]["name"] == "b" and "creationTimestamp" not in b["metadata"]


@needs_helper
def test_a_template_patch_can_drop_the_resources_finalizer() -> None:
    patch = f"metadata:\n  $deleteFromPrimitiveList/finalizers: [{FINALIZER}]\n"
    spec = {
        "goTemplate": True,
        "generators": [{"list": {"elements": [{"name": "a"}]}}],
        "template": TEMPLATE,
        "templatePatch": patch,
    }
    (app,) = generate(spec)
    assert not app["metadata"].get("finalizers")
    (kept,) = generate({**spec, "templatePatch": "spec: {revisionHistoryLimit: 3}"})
    assert kept["metadata"]["finalizers"] == [FINALIZER]
    assert kept["spec"]["revisionHistoryLimit"] == 3


@needs_helper
@pytest.mark.parametrize(
    ("patch", "said"),
    [
        # the rendering fails (missingkey=error): Go's message, as Argo CD logs it
        ("spec: {project: '{{ .nope }}'}", 'error replacing values in templatePatch: .*"nope"'),
        ("spec: [", "templatePatch is not YAML"),
        ("[1, 2]", "invalid templatePatch .*not an object"),
        # a strategic-merge directive under spec: a JSON merge would write it in as a field
        ("spec: {syncPolicy: {$patch: replace}}", r"directive spec\.syncPolicy\.\$patch"),
    ],
)
def test_a_template_patch_that_fails_generates_nothing(patch: str, said: str) -> None:
    spec = {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [{"list": {"elements": [{"name": "a"}]}}],
        "template": TEMPLATE,
        "templatePatch": patch,
    }
    with pytest.raises(InputError, match=said):
        generate(spec)


@needs_helper
def test_a_template_patch_with_fasttemplate_is_applied_too() -> None:
    # Argo CD's documentation says templatePatch needs goTemplate; its code renders the patch
    # with fasttemplate and applies it all the same
    template = {"metadata": {"name": "{{name}}"}, "spec": {"project": "p", "source": {}}}
    spec = {
        "generators": [{"list": {"elements": [{"name": "a", "path": "x/{{y}}"}]}}],
        "template": template,
        "templatePatch": "spec: {source: {path: '{{path}}', repoURL: '{{name}}'}}",
    }
    (app,) = generate(spec)
    assert app["metadata"]["name"] == "a"
    assert app["spec"]["source"] == {"repoURL": "a", "path": "x/{{y}}"}
    with pytest.raises(InputError, match="a templatePatch, which needs prune-gate-kustomize"):
        generate(spec, ctx())


@needs_helper
def test_slugify_as_argo_cd() -> None:
    template = {
        "metadata": {"name": "{{ slugify .n }}"},
        "spec": {"project": "{{ slugify 14 false .n }}|{{ slugify 14 .n }}"},
    }
    spec = {
        "goTemplate": True,
        "generators": [{"list": {"elements": [{"n": "Hello_World Foo.Bar  baz"}]}}],
        "template": template,
    }
    (app,) = generate(spec)
    assert app["metadata"]["name"] == "hello-world-foo-bar-baz"
    assert app["spec"]["project"] == "hello-world-fo|hello-world"


ELEMENTS_YAML = "- name: y1\n  port: 80\n  x: {y: z}\n- name: y2\n"


def test_elements_yaml_follows_the_elements_unflattened() -> None:
    template = {"metadata": {"name": "{{name}}:{{port}}:{{x.y}}"}}
    gen = {"list": {"elements": [{"name": "e1", "x": {"y": "z"}}], "elementsYaml": ELEMENTS_YAML}}
    apps = appsets.generate({"spec": {"generators": [gen], "template": template}}, ctx())
    # fasttemplate replaces only string parameters: elementsYaml's are neither flattened nor
    # turned into strings, unlike `elements`
    got = [a["metadata"]["name"] for a in apps]
    assert got == ["e1:{{port}}:z", "y1:{{port}}:{{x.y}}", "y2:{{port}}:{{x.y}}"]
    alone = {"list": {"elementsYaml": ELEMENTS_YAML}}
    apps = appsets.generate({"spec": {"generators": [alone], "template": template}}, ctx())
    assert [a["metadata"]["name"] for a in apps] == ["y1:{{port}}:{{x.y}}", "y2:{{port}}:{{x.y}}"]


@pytest.mark.parametrize("text", ["name: a", "- [a]", "- a: [", "- a\n- {b: c}"])
def test_elements_yaml_that_is_not_a_list_of_objects_fails(text: str) -> None:
    gen = {"list": {"elementsYaml": text}}
    with pytest.raises(InputError, match="elementsYaml is not"):
        appsets.generate({"spec": {"generators": [gen], "template": {}}}, ctx())


def test_elements_yaml_in_a_matrix_is_templated_from_the_first() -> None:
    first = {"list": {"elements": [{"env": "dev", "replicas": "1"}, {"env": "prod"}]}}
    second = {"list": {"elementsYaml": "- app: web-{{env}}\n- app: db-{{env}}\n"}}
    matrix = {"matrix": {"generators": [first, second]}}
    template = {"metadata": {"name": "{{app}}"}}
    apps = appsets.generate({"spec": {"generators": [matrix], "template": template}}, ctx())
    got = [a["metadata"]["name"] for a in apps]
    assert got == ["web-dev", "db-dev", "web-prod", "db-prod"]


@needs_helper
def test_elements_yaml_in_a_go_template_matrix() -> None:
    # the idiom: the first generator's list, as JSON (which is YAML), is the second's elements
    first = {"list": {"elements": [{"env": "dev", "apps": [{"app": "web"}, {"app": "db"}]}]}}
    second = {"list": {"elementsYaml": "{{ .apps | toJson }}"}}
    matrix = {"matrix": {"generators": [first, second]}}
    template = {"metadata": {"name": "{{ .app }}-{{ .env }}"}, "spec": {"project": "p"}}
    apps = generate({"goTemplate": True, "generators": [matrix], "template": template})
    assert [a["metadata"]["name"] for a in apps] == ["web-dev", "db-dev"]


PATCHED_APPSET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: workloads, namespace: argocd}
spec:
  goTemplate: true
  goTemplateOptions: [missingkey=error]
  generators:
  - list:
      elementsYaml: |
        - {name: db, prune: @PRUNE@}
  template:
    metadata: {name: '{{ .name }}'}
    spec:
      project: default
      source: {repoURL: @URL@, targetRevision: HEAD, path: 'workloads/{{ .name }}'}
      destination: {server: https://kubernetes.default.svc, namespace: shop}
      syncPolicy: {automated: {prune: true}}
  templatePatch: |
    spec:
      syncPolicy:
        syncOptions: ['Prune={{ .@KEY@ }}']
""".replace("@URL@", URL)


def patched_appset(prune: str, key: str = "prune") -> str:
    return PATCHED_APPSET.replace("@PRUNE@", prune).replace("@KEY@", key)


@needs_helper
@pytest.mark.parametrize(
    ("prune", "rc", "said"),
    [("true", 1, "and prunes automatically"), ("false", 0, "it has Prune=false")],
)
def test_a_template_patch_decides_whether_a_claim_is_pruned(
    tmp_path: Path, prune: str, rc: int, said: str
) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": patched_appset(prune)}
    repo = repo_with(tmp_path, {"workloads/db/claim.yaml": None, "workloads/db/x.md": ""}, base)
    code, data, stderr = check(repo)
    assert code == rc, (data, stderr)
    # the template prunes; the patch, rendered with the element's `prune`, decides
    assert said in json.dumps(claim_finding(data)), claim_finding(data)


@needs_helper
def test_a_template_patch_that_fails_to_render_stops_the_check(tmp_path: Path) -> None:
    base = {"apps/db.yaml": None, "apps/workloads.yaml": patched_appset("true", key="nope")}
    repo = repo_with(tmp_path, {"workloads/db/claim.yaml": None}, base)
    code, _, stderr = check(repo)
    assert code == 2 and "error replacing values in templatePatch" in stderr, stderr
    assert 'map has no entry for key "nope"' in stderr, stderr
