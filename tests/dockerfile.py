"""Reading the Dockerfile, for the tests that check it (tests/unit/test_dockerfile.py) and that run
what it describes without a container engine (tests/e2e/test_image.py).

Only what this project's Dockerfile uses: comments, line continuations, global ARGs, stages, and
the arguments of ENV, LABEL, ENTRYPOINT and CMD. `$VAR` and `${VAR}` are expanded as Docker does
in FROM (global ARGs) and ENV (the variables set before the instruction).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
RECIPE = REPO / "scripts" / "image-rootfs"
#: PATH in a container when nothing sets it (Docker and containerd both).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str
    line: int  # of its first line, 1-based


@dataclass
class Stage:
    base: str  # with the global ARGs expanded
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    args: dict[str, str]  # global ARGs (before the first FROM) with their defaults
    stages: list[Stage]


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`$VAR` and `${VAR}` replaced by their values; an unset one by nothing, as Docker does."""
    return _VAR.sub(lambda m: variables.get(m[1] or m[2], ""), text)


def instructions(text: str) -> list[Instruction]:
    """The instructions, continuations joined; comment lines (directives too) dropped, also
    within a continued instruction, as Docker drops them."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1].strip() if continued else stripped)
        if not continued:
            joined = " ".join(pending)
            keyword, _, args = joined.partition(" ")
            found.append(Instruction(keyword.upper(), args.strip(), start))
            pending = []
    if pending:
        raise ValueError(f"Dockerfile: line {start}: a continuation that never ends")
    return found


def parse(text: str) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            words = ins.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            if len(words) not in (1, 3) or (len(words) == 3 and name is None):
                raise ValueError(f"Dockerfile: line {ins.line}: FROM {ins.args!r}")
            stages.append(Stage(expand(words[0], args), name))
        elif not stages:
            if ins.keyword != "ARG":
                raise ValueError(f"Dockerfile: line {ins.line}: {ins.keyword} before FROM")
            key, _, default = ins.args.partition("=")
            args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(ins)
    return Dockerfile(args, stages)


def load(path: Path = DOCKERFILE) -> Dockerfile:
    return parse(path.read_text(encoding="utf-8"))


def pairs(args: str) -> list[tuple[str, str]]:
    """`KEY=VALUE ...` of ENV and LABEL (quotes and backslashes as a shell reads them), or the
    legacy `KEY VALUE` form."""
    words = shlex.split(args, posix=True)
    if words and "=" not in words[0]:
        key, _, value = args.partition(" ")
        return [(key, value.strip())]
    out = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"{word!r} in {args!r}: not KEY=VALUE")
        out.append((key, value))
    return out


def environment(stage: Stage, base: Mapping[str, str]) -> dict[str, str]:
    """`base` (the base image's environment) with the stage's ENVs applied in order; each ENV
    expands against the variables set before it."""
    env = dict(base)
    for ins in stage.all("ENV"):
        before = dict(env)
        for key, value in pairs(ins.args):
            env[key] = expand(value, before)
    return env


def exec_form(ins: Instruction) -> list[str]:
    """The JSON array of an ENTRYPOINT, CMD or RUN in exec form; ValueError for the shell form."""
    try:
        value = json.loads(ins.args)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"Dockerfile: line {ins.line}: {ins.keyword} is not in exec form")
    return value
