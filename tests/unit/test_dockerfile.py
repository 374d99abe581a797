"""The Dockerfile against what it must agree with, without building it.

tests/e2e/test_image.py serves the webhook from what scripts/image-rootfs makes, with the last
stage's environment, entrypoint and command: that tells about the image only while the last
stage is its base image plus the recipe's output, and nothing else. Here: that shape, and the
Dockerfile against the chart that runs the image (command, arguments, user, ports, TMPDIR), the
recipe (what the build context admits, where it installs) and pyproject.toml (console script,
Python version, version label).
"""

from __future__ import annotations

import re
import runpy
import shlex
import tomllib
from typing import Any

import pytest
import yaml

from gate import __version__
from tests import dockerfile as df
from webhook.serve import MALLOC_ENV

CHART = df.REPO / "charts" / "prune-gate"
DEPLOYMENT = (CHART / "templates" / "deployment.yaml").read_text(encoding="utf-8")
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
PROJECT: dict[str, Any] = tomllib.loads((df.REPO / "pyproject.toml").read_text())["project"]
RECIPE: dict[str, Any] = runpy.run_path(str(df.RECIPE))  # its constants; main() does not run
PREFIX = "/" + str(RECIPE["PREFIX"])


@pytest.fixture(scope="module")
def image() -> df.Dockerfile:
    return df.load()


def build_and_final(image: df.Dockerfile) -> tuple[df.Stage, df.Stage]:
    assert len(image.stages) >= 2, "the Dockerfile is not multi-stage"
    final = image.stages[-1]
    copies = final.all("COPY")
    assert len(copies) == 1, f"the last stage copies more than the recipe's output: {copies}"
    source = re.fullmatch(r"--from=(\S+)\s+(\S+)\s+/", copies[0].args)
    assert source, f"the last stage's COPY is not `COPY --from=STAGE DIR/ /`: {copies[0].args}"
    named = {s.name: s for s in image.stages[:-1] if s.name}
    assert source[1] in named, f"COPY --from={source[1]}: no such stage"
    return named[source[1]], final


def chart_args() -> list[str]:
    """The container's args in the deployment template, as written (templates unexpanded)."""
    block = DEPLOYMENT.split("args:", 1)[1].split("env:", 1)[0]
    return re.findall(r"^\s*- (.+?)\s*$", block, flags=re.MULTILINE)


def chart_value(template: str) -> Any:
    """The values.yaml default behind `{{ .Values.a.b }}`."""
    match = re.fullmatch(r"\{\{\s*\.Values\.([\w.]+)\s*\}\}", template)
    assert match, f"not a plain value reference: {template}"
    value: Any = VALUES
    for key in match[1].split("."):
        value = value[key]
    return value


def cmd_option(cmd: list[str], name: str) -> str:
    found = [a.split("=", 1)[1] for a in cmd if a.startswith(f"{name}=")]
    assert len(found) == 1, f"CMD has {len(found)} {name}=: {cmd}"
    return found[0]


def test_the_last_stage_is_its_base_image_and_the_recipes_output_only(
    image: df.Dockerfile,
) -> None:
    build, final = build_and_final(image)
    assert not final.all("RUN"), "the last stage runs something: it would differ from what e2e runs"
    assert not final.all("ADD"), "the last stage adds files the recipe did not make"
    # The console script's #! names the build stage's Python: the same image runs it.
    assert final.base == build.base, (final.base, build.base)

    runs = [shlex.split(r.args) for r in build.all("RUN") if str(df.RECIPE.name) in r.args]
    assert len(runs) == 1, f"the build stage does not run scripts/image-rootfs once: {runs}"
    words = runs[0]
    at = words.index("scripts/image-rootfs")
    assert re.fullmatch(r"python3?(\.\d+)?", words[at - 1]), f"run by {words[at - 1]}, not Python"
    copy = final.all("COPY")[0].args.split()
    assert copy[1].rstrip("/") == words[at + 1].rstrip("/"), (copy, words)


def test_the_build_context_is_what_the_recipe_builds_from(image: df.Dockerfile) -> None:
    lines = [
        line.strip()
        for line in df.DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", ".dockerignore does not start by leaving everything out"
    admitted = {line[1:] for line in lines if line.startswith("!")}
    wanted = {*RECIPE["SOURCES"], "scripts/image-rootfs"}
    assert admitted == wanted, f"admitted {sorted(admitted)}, the recipe needs {sorted(wanted)}"
    build, _ = build_and_final(image)
    assert [c.args for c in build.all("COPY")] == [". ."], "copy the admitted context as it is"
    assert build.last("WORKDIR") is not None


def test_the_entrypoint_is_the_console_script_the_chart_runs(image: df.Dockerfile) -> None:
    _, final = build_and_final(image)
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    command = df.exec_form(entrypoint)
    assert command[0] in PROJECT["scripts"], f"{command[0]} is not a console script of pyproject"
    chart_command = re.search(r"^\s*command:\s*\[(.*)\]\s*$", DEPLOYMENT, flags=re.MULTILINE)
    assert chart_command, "the deployment sets no command"
    assert [w.strip() for w in chart_command[1].split(",")] == command

    env = df.environment(final, {"PATH": df.DEFAULT_PATH})
    assert env["PATH"].split(":")[0] == f"{PREFIX}/bin", env["PATH"]
    assert env["PYTHONPATH"] == f"{PREFIX}/lib", env["PYTHONPATH"]


def test_the_default_command_is_the_charts_arguments(image: df.Dockerfile) -> None:
    _, final = build_and_final(image)
    cmd_ins = final.last("CMD")
    assert cmd_ins is not None
    cmd = df.exec_form(cmd_ins)
    args = chart_args()
    assert cmd[:2] == ["webhook", "serve"] == args[:2]
    for word in cmd[2:]:
        if word in args:
            continue
        option = word.split("=", 1)[0]
        templated = [a.split("=", 1)[1] for a in args if a.startswith(f"{option}=")]
        assert templated, f"CMD's {word} is not among the chart's arguments"
        assert f"{option}={chart_value(templated[0])}" == word, (word, templated[0])


def test_ports_user_and_tmpdir_agree_with_the_chart(image: df.Dockerfile) -> None:
    _, final = build_and_final(image)
    cmd_ins = final.last("CMD")
    assert cmd_ins is not None
    cmd = df.exec_form(cmd_ins)
    listen = int(cmd_option(cmd, "--listen").rsplit(":", 1)[1])
    health = int(cmd_option(cmd, "--health-port"))
    exposed = {int(p.split("/")[0]) for e in final.all("EXPOSE") for p in e.args.split()}
    assert exposed == {listen, health}
    ports = {int(p) for p in re.findall(r"containerPort:\s*(\d+)", DEPLOYMENT)}
    assert listen in ports, f"the chart's container ports {ports} lack {listen}"
    assert VALUES["healthPort"] == health

    user = final.last("USER")
    assert user is not None
    # runAsNonRoot can be checked by the kubelet only against a numeric user.
    assert re.fullmatch(r"\d+:\d+", user.args), f"USER {user.args}: not numeric uid:gid"
    uid, gid = (int(x) for x in user.args.split(":"))
    assert uid != 0 and gid != 0
    pod = VALUES["podSecurityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid)
    assert VALUES["securityContext"]["readOnlyRootFilesystem"] is True

    # The one writable place on the read-only root is the chart's emptyDir, at TMPDIR.
    env = df.environment(final, {"PATH": df.DEFAULT_PATH})
    chart_tmp = re.search(r"- name: TMPDIR\s+value: (\S+)", DEPLOYMENT)
    assert chart_tmp and env.get("TMPDIR") == chart_tmp[1]
    mounts = re.findall(r"- name: (\S+)\s+mountPath: (\S+)", DEPLOYMENT)
    assert (volume := {p: n for n, p in mounts}.get(env["TMPDIR"])), mounts
    assert re.search(rf"- name: {volume}\s+emptyDir:", DEPLOYMENT), f"{volume}: not an emptyDir"


def test_the_image_and_the_chart_set_the_malloc_environment(image: df.Dockerfile) -> None:
    """glibc's fixed mmap threshold (`webhook.serve.MALLOC_ENV`, what the RSS test of
    tests/unit/test_httpserver.py serves with) is set where the webhook runs: in the image, and
    in the chart's Deployment for an image built elsewhere."""
    _, final = build_and_final(image)
    env = df.environment(final, {"PATH": df.DEFAULT_PATH})
    for name, value in MALLOC_ENV.items():
        assert env.get(name) == value, f"the Dockerfile's ENV {name}: {env.get(name)}"
        chart = re.search(rf"- name: {name}\s+value: \"?(\w+)\"?", DEPLOYMENT)
        assert chart and chart[1] == value, f"the Deployment's env {name}: {chart}"


def test_python_and_version_agree_with_pyproject(image: df.Dockerfile) -> None:
    _, final = build_and_final(image)
    tag = re.fullmatch(r"python:(\d+)\.(\d+)[.\w-]*(@sha256:[0-9a-f]{64})?", final.base)
    assert tag, f"base {final.base}: not an official python image pinned by tag"
    floor = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert floor
    assert (int(tag[1]), int(tag[2])) >= (int(floor[1]), int(floor[2]))

    labels = dict(p for label in final.all("LABEL") for p in df.pairs(label.args))
    args = {k.strip(): v.strip() for a in final.all("ARG") for k, _, v in [a.args.partition("=")]}
    version = df.expand(labels["org.opencontainers.image.version"], args)
    assert version == __version__  # pyproject reads it (dynamic version)
    assert labels["org.opencontainers.image.licenses"] == PROJECT["license"]


def test_the_parser_reads_continuations_comments_and_env_like_docker() -> None:
    parsed = df.parse(
        "ARG BASE=python:3.11-slim\n"
        "FROM ${BASE} AS b\n"
        "FROM $BASE\n"
        "# a comment\n"
        "ENV A=/x \\\n"
        "    # dropped, as Docker drops it\n"
        '    B="$A:y" \\\n'
        "    PATH=/p:$PATH\n"
        "ENV C $A/z\n"
        'CMD ["a", \\\n'
        '     "b"]\n'
    )
    assert [(s.base, s.name) for s in parsed.stages] == [
        ("python:3.11-slim", "b"),
        ("python:3.11-slim", None),
    ]
    env = df.environment(parsed.stages[1], {"PATH": "/bin"})
    # B sees A's value from before its ENV: none.
    assert env == {"A": "/x", "B": ":y", "PATH": "/p:/bin", "C": "/x/z"}
    cmd = parsed.stages[1].last("CMD")
    assert cmd is not None and df.exec_form(cmd) == ["a", "b"]
    with pytest.raises(ValueError, match="exec form"):
        df.exec_form(df.Instruction("CMD", "gate webhook serve", 1))


def test_the_recipe_is_executable_as_its_usage_says() -> None:
    assert df.RECIPE.stat().st_mode & 0o111, "scripts/image-rootfs is not executable"
