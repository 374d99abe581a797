"""ApplicationSet generators, expanded as the ApplicationSet controller expands them
(argo-cd `applicationset/generators` and `utils`): each case's expected parameters and names
are those argo-cd's own generator tests give for the same input."""

from __future__ import annotations

from typing import Any

import pytest

from gate.model.errors import InputError
from gate.sources import appsets
from gate.sources.appsets import Cluster, Context, Files

URL = "https://git.example.com/org/gitops"
FILES = {
    "apps/db/config.json": '{"cluster": {"name": "prod", "address": "https://1.2.3.4"}}',
    "apps/web/config.json": '[{"cluster": {"name": "a"}}, {"cluster": {"name": "b"}}]',
    "apps/web/README.md": "",
    "apps/.hidden/x.yaml": "",
    "infra/cert-manager/kustomization.yaml": "",
}


def ctx(files: dict[str, str] = FILES, clusters: tuple[Cluster, ...] = ()) -> Context:
    return Context(
        Files(sorted(files), files.__getitem__),
        lambda url: url.rstrip("/").removesuffix(".git") == URL,
        [Cluster(*appsets.IN_CLUSTER, {}, {}), *clusters],
        "ApplicationSet argocd/test",
    )


def names(spec: dict[str, Any], c: Context | None = None) -> list[str]:
    template = {"metadata": {"name": "{{name}}"}, "spec": {"project": "default"}}
    apps = appsets.generate({"spec": {"template": template, **spec}}, c or ctx())
    return [a["metadata"]["name"] for a in apps]


def test_fasttemplate_leaves_an_unknown_tag_and_templates_keys() -> None:
    out = appsets.render({"a": "{{ x }}-{{y}}", "{{x}}": ["{{x}}"]}, {"x": "1"})
    assert out == {"a": "1-{{y}}", "1": ["1"]}


def test_a_list_generator_and_the_resources_finalizer() -> None:
    spec = {"generators": [{"list": {"elements": [{"name": "a"}, {"name": "b", "x": {"y": 1}}]}}]}
    template = {"metadata": {"name": "{{name}}-{{x.y}}"}, "spec": {}}
    apps = appsets.generate({"spec": {"template": template, **spec}}, ctx())
    assert [a["metadata"]["name"] for a in apps] == ["a-{{x.y}}", "b-1"]
    assert all(a["metadata"]["finalizers"] == [appsets.RESOURCES_FINALIZER] for a in apps)
    preserved = {**spec, "syncPolicy": {"preserveResourcesOnDeletion": True}}
    apps = appsets.generate({"spec": {"template": template, **preserved}}, ctx())
    assert all("finalizers" not in a["metadata"] for a in apps)
    own = {"metadata": {**template["metadata"], "finalizers": ["x/y"]}, "spec": {}}
    apps = appsets.generate({"spec": {"template": own, **spec}}, ctx())
    assert all(a["metadata"]["finalizers"] == ["x/y"] for a in apps)


def test_git_directories_match_as_go_path_match_does() -> None:
    def dirs(*items: dict[str, Any]) -> list[str]:
        gen = {"git": {"repoURL": URL, "directories": list(items)}}
        template = {"metadata": {"name": "{{path.basename}}:{{path[0]}}"}}
        return [
            a["metadata"]["name"]
            for a in appsets.generate({"spec": {"generators": [gen], "template": template}}, ctx())
        ]

    # `*` stops at `/`; hidden directories are not listed; an exclusion wins
    assert dirs({"path": "apps/*"}) == ["db:apps", "web:apps"]
    assert dirs({"path": "*"}) == ["apps:apps", "infra:infra"]
    assert dirs({"path": "apps/*"}, {"path": "apps/web", "exclude": True}) == ["db:apps"]
    assert dirs({"path": "*/[c-d]*"}) == ["db:apps", "cert-manager:infra"]
    assert dirs({"path": "*/[^c-d]*"}) == ["web:apps"]


def test_git_files_flatten_and_read_lists() -> None:
    gen = {"git": {"repoURL": URL + ".git", "files": [{"path": "apps/**/config.json"}]}}
    template = {"metadata": {"name": "{{cluster.name}}-{{path.basename}}-{{path.filename}}"}}
    apps = appsets.generate({"spec": {"generators": [gen], "template": template}}, ctx())
    got = [a["metadata"]["name"] for a in apps]
    assert got == ["prod-db-config.json", "a-web-config.json", "b-web-config.json"]
    excluded = {
        "git": {
            "repoURL": URL,
            "files": [{"path": "apps/*/config.json"}, {"path": "apps/web/*", "exclude": True}],
        }
    }
    apps = appsets.generate({"spec": {"generators": [excluded], "template": template}}, ctx())
    assert [a["metadata"]["name"] for a in apps] == ["prod-db-config.json"]


def test_matrix_lets_the_second_use_the_first() -> None:
    matrix = {
        "matrix": {
            "generators": [
                {"list": {"elements": [{"env": "apps"}, {"env": "infra"}]}},
                {"git": {"repoURL": URL, "directories": [{"path": "{{env}}/*"}]}},
            ]
        }
    }
    template = {"metadata": {"name": "{{env}}-{{path.basename}}"}}
    apps = appsets.generate({"spec": {"generators": [matrix], "template": template}}, ctx())
    got = [a["metadata"]["name"] for a in apps]
    assert got == ["apps-db", "apps-web", "infra-cert-manager"]


def test_merge_updates_the_first_by_the_merge_keys() -> None:
    merge = {
        "merge": {
            "mergeKeys": ["name"],
            "generators": [
                {"list": {"elements": [{"name": "a", "v": "1"}, {"name": "b", "v": "1"}]}},
                {"list": {"elements": [{"name": "b", "v": "2"}, {"name": "c", "v": "3"}]}},
            ],
        }
    }
    template = {"metadata": {"name": "{{name}}{{v}}"}}
    apps = appsets.generate({"spec": {"generators": [merge], "template": template}}, ctx())
    assert [a["metadata"]["name"] for a in apps] == ["a1", "b2"]


def test_clusters_from_secrets_and_the_option() -> None:
    secret = {
        "kind": "Secret",
        "metadata": {
            "name": "cluster-prod",
            "labels": {appsets.CLUSTER_SECRET_LABEL: "cluster", "env": "prod"},
        },
        "stringData": {"name": "prod", "server": "https://prod.example.com"},
    }
    given = appsets.parse_cluster("staging=https://staging.example.com,env=staging")
    known = appsets.clusters_in([secret], [given])
    assert known[1].params(go=True)["metadata"]["labels"]["env"] == "prod"
    c = ctx(clusters=tuple(known[1:]))
    assert names({"generators": [{"clusters": {}}]}, c) == ["in-cluster", "prod", "staging"]
    selected = {"clusters": {"selector": {"matchLabels": {"env": "prod"}}}}
    assert names({"generators": [selected]}, c) == ["prod"]
    expr = {"matchExpressions": [{"key": "env", "operator": "In", "values": ["staging"]}]}
    assert names({"generators": [{"clusters": {"selector": expr}}]}, c) == ["staging"]
    with pytest.raises(InputError, match="NAME=SERVER"):
        appsets.parse_cluster("nameless")


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"goTemplate": True, "generators": []}, "needs prune-gate-kustomize"),
        ({"templatePatch": "x", "generators": []}, "a templatePatch, which needs"),
        ({"generators": [{"pullRequest": {}}]}, "a pullRequest generator"),
        ({"generators": [{"git": {"repoURL": "https://x/other", "directories": []}}]}, "other"),
        ({"generators": [{"matrix": {"generators": [{"list": {}}]}}]}, "exactly two"),
    ],
)
def test_what_cannot_be_known_stops_the_check(spec: dict[str, Any], said: str) -> None:
    with pytest.raises(InputError, match=said):
        appsets.generate({"spec": {"template": {}, **spec}}, ctx())


def test_sanitize_as_argo_cd_does() -> None:
    assert appsets.sanitize("My_App.Name--") == "my-app.name"
    assert appsets.sanitize("-a__b c.") == "a--b-c"
    assert len(appsets.sanitize("a" * 300)) == 253
