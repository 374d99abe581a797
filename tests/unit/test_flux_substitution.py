"""Flux's post-build substitution, rendered by the helper with Flux's own code.

kustomize-controller substitutes `spec.postBuild` variables with github.com/fluxcd/pkg/kustomize
(its fork of drone/envsubst); the helper (tools/kustomize/flux.go) calls the same function. Each
form Flux documents (https://fluxcd.io/flux/components/kustomize/kustomizations/#post-build-
variable-substitution, and drone/envsubst's list) is rendered here and compared with the value
written out by hand: bash's, except where Flux's fork differs (each said below).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.sources import render
from gate.sources.buildserver import BuildServer
from tests.unit.test_build_server import needs_helper

HELPER = shutil.which(render.HELPER)


VARS = {"ENV": "prod", "APP": "webserver", "IMG": "ghcr.io/a/b-prod", "EMPTY": ""}

#: (the expression, what Flux (and bash) render it to with VARS)
FORMS = [
    ("${APP}", "webserver"),
    ("$APP", "$APP"),  # Flux: braces only
    ("${MISSING:=dflt}", "dflt"),
    ("${MISSING:-dflt}", "dflt"),
    ("${MISSING=dflt}", "dflt"),
    ("${EMPTY:=dflt}", "dflt"),
    ("${EMPTY:-dflt}", "dflt"),
    ("${EMPTY=dflt}", "dflt"),  # Flux: `=` is `:=` (bash gives "")
    ("${APP:=dflt}", "webserver"),
    ("${CLAIM:-${APP}}", "webserver"),
    ("${CLAIM:-${APP}-${NONE:=x}}", "webserver-x"),
    ("${ENV/prod/stg}", "stg"),
    ("${IMG//b/c}", "ghcr.io/a/c-prod"),
    ("${IMG/#ghcr.io/quay.io}", "quay.io/a/b-prod"),
    ("${IMG/%prod/dev}", "ghcr.io/a/b-dev"),
    ("${APP:0:4}", "webs"),
    ("${APP:3}", "server"),
    ("n${#APP}", "n9"),
    ("${APP^}", "Webserver"),
    ("${APP^^}", "WEBSERVER"),
    ("${IMG,,}", "ghcr.io/a/b-prod"),
    ("${IMG#*/}", "a/b-prod"),
    ("${IMG##*/}", "b-prod"),
    ("${IMG%-*}", "ghcr.io/a/b"),
    ("${IMG%%/*}", "ghcr.io"),
    ("$${APP}", "${APP}"),
]


def build(tmp_path: Path, text: str, flux: dict[str, Any] | None) -> tuple[int, str, str]:
    app = tmp_path / "app"
    app.mkdir(exist_ok=True)
    (app / "kustomization.yaml").write_text("resources: [cm.yaml]\n", encoding="utf-8")
    (app / "cm.yaml").write_text(text, encoding="utf-8")
    assert HELPER is not None
    server = BuildServer(HELPER, 60)
    try:
        done = server.build([tmp_path], app, flux)
    finally:
        server.close()
    assert done is not None
    return done.returncode, done.stdout, done.stderr


def post(variables: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"namespace": "flux-system", "postBuild": {"substitute": variables}, **more}


@needs_helper
def test_each_form_renders_as_flux_does(tmp_path: Path) -> None:
    data = {f"k{i}": expr for i, (expr, _) in enumerate(FORMS)}
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    text += yaml.safe_dump({"data": data}, default_style='"')
    code, out, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 0, err
    got = yaml.safe_load(out)["data"]
    assert {expr: got[f"k{i}"] for i, (expr, _) in enumerate(FORMS)} == dict(FORMS)


@needs_helper
def test_every_string_is_substituted_keys_and_lists_too(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
        'data: {"${ENV}": "${APP}"}\nextra: {k: ["${APP}"], n: 3}\n'
    )
    code, out, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 0, err
    body = yaml.safe_load(out)
    assert body["data"] == {"prod": "webserver"} and body["extra"] == {"k": ["webserver"], "n": 3}


@needs_helper
def test_a_form_flux_does_not_parse_fails_the_build(tmp_path: Path) -> None:
    """`${VAR-default}` (no colon) is not Flux's: kustomize-controller fails the build."""
    text = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${MISSING-dflt}"}\n'
    code, _, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 1 and "missing closing brace" in err, err


@needs_helper
def test_a_name_built_with_a_form_gets_flux_s_identity(tmp_path: Path) -> None:
    text = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${ENV/prod/stg}-${APP:0:4}"}\n'
    code, out, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 0, err
    assert yaml.safe_load(out)["metadata"]["name"] == "stg-webs"


@needs_helper
def test_strict_mode_fails_on_a_variable_with_no_value(tmp_path: Path) -> None:
    text = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${UNKNOWN}-x"}\n'
    code, _, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 1 and "variable not set (strict mode)" in err and "UNKNOWN" in err
    code, out, err = build(tmp_path, text, post(VARS, strict=False))
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == "-x", err


@needs_helper
def test_unreadable_values_keep_the_text_of_what_needs_them(tmp_path: Path) -> None:
    text = (
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${UNKNOWN}-${APP}"}\n---\n'
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${APP}"}\n'
    )
    code, out, err = build(tmp_path, text, post(VARS, strict=True, unresolved=True))
    assert code == 0, err
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out)]
    assert names == ["${UNKNOWN}-${APP}", "webserver"]


@needs_helper
@pytest.mark.parametrize("where", ["annotations", "labels"])
def test_an_object_that_opts_out_is_not_substituted(tmp_path: Path, where: str) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${APP}\n"
        f"  {where}: {{kustomize.toolkit.fluxcd.io/substitute: disabled}}\n"
    )
    code, out, err = build(tmp_path, text, post(VARS, strict=True))
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == "${APP}", err


@needs_helper
def test_inline_values_lose_their_newlines_and_no_variables_means_no_substitution(
    tmp_path: Path,
) -> None:
    text = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "${A:=x}"}\ndata: {v: "${B}"}\n'
    code, out, err = build(tmp_path, text, post({"B": "a\nb"}, strict=True))
    assert code == 0 and yaml.safe_load(out)["data"]["v"] == "ab", err
    code, out, err = build(tmp_path, text, post({}, strict=True))
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == "${A:=x}", err
    always = post({}, strict=True)
    always["postBuild"]["substituteStrategy"] = "Always"
    code, out, err = build(tmp_path, text.replace("${B}", "y"), always)
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == "x", err
