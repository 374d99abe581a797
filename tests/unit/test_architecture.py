"""The layers hold: the model, the engine and the reports do no I/O, and no contract has a way
around them.

`lint-imports` (in `make lint`) holds which layer may import which; this holds what the import
graph cannot see: a pure module that calls `open`, reads `os.environ` or asks the clock. Each
check is also run on a sample that breaks it, so a checker that finds nothing is caught too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The pure layers, and the reports (pure functions: the CLI decides where their text goes).
PURE = sorted(
    [
        *REPO.glob("gate/model/**/*.py"),
        *REPO.glob("gate/engine/**/*.py"),
        *REPO.glob("gate/report/**/*.py"),
    ]
)

#: Standard-library modules whose only use is I/O: files, processes, network, the clock, threads.
IO_MODULES = frozenset(
    {
        "os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "subprocess", "socket",
        "ssl", "select", "selectors", "signal", "threading", "multiprocessing", "asyncio",
        "concurrent", "time", "logging", "urllib", "http", "ftplib", "smtplib", "sqlite3",
        "random", "secrets", "uuid", "importlib", "builtins", "fileinput", "mmap",
    }
)  # fmt: skip
#: Built-in calls that do I/O or run code.
IO_CALLS = frozenset({"open", "print", "input", "exec", "eval", "compile", "breakpoint"})
#: Attribute reads that ask the world: the clock and the environment.
IO_ATTRIBUTES = frozenset({"now", "utcnow", "today", "environ", "getenv", "time"})


def impurities(source: str, name: str = "<sample>") -> list[str]:
    """Every I/O a module's source does, as `name:line: what`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [
                f"{name}:{node.lineno}: imports {a.name}"
                for a in node.names
                if a.name.split(".")[0] in IO_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in IO_MODULES:
                found.append(f"{name}:{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in IO_CALLS:
                found.append(f"{name}:{node.lineno}: calls {node.func.id}()")
        elif isinstance(node, ast.Attribute) and node.attr in IO_ATTRIBUTES:
            found.append(f"{name}:{node.lineno}: reads .{node.attr}")
    return found


def test_there_are_pure_modules_to_check() -> None:
    names = {p.parent.name if p.stem == "__init__" else p.stem for p in PURE}
    assert {
        "refs",
        "objects",
        "findings",
        "rules",
        "cascades",
        "plan",
        "verdict",
        "policy",
    } <= names


@pytest.mark.parametrize("path", PURE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_pure_layers_do_no_io(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))) == []


@pytest.mark.parametrize(
    ("sample", "what"),
    [
        ("import subprocess\n", "imports subprocess"),
        ("from os import environ\n", "imports from os"),
        ("from pathlib import Path\n", "imports from pathlib"),
        ("x = open('f').read()\n", "calls open()"),
        ("import datetime as dt\nx = dt.datetime.now(dt.UTC)\n", "reads .now"),
        ("import datetime as dt\nx = dt.date.today()\n", "reads .today"),
        ("def f(os):\n    return os.environ['HOME']\n", "reads .environ"),
    ],
)
def test_the_purity_check_finds_each_kind_of_io(sample: str, what: str) -> None:
    assert any(what in line for line in impurities(sample)), impurities(sample)


def test_the_purity_check_passes_pure_code() -> None:
    sample = "import datetime as dt\n\ndef f(today: dt.date) -> bool:\n    return today.year > 1\n"
    assert impurities(sample) == []


def test_no_contract_ignores_an_import() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    assert {c["type"] for c in contracts} >= {"layers", "forbidden"}
    assert [c["name"] for c in contracts if c.get("ignore_imports")] == []


def test_the_rules_and_the_webhook_decision_load_no_parser_or_client() -> None:
    """The engine loads without PyYAML, jsonschema or the Kubernetes client: what a pure import
    means at run time (the webhook decides a review without any of them)."""
    code = (
        "import sys, gate.engine.check, gate.engine.rules, webhook.decide\n"
        "print(sorted(m for m in ('yaml', 'jsonschema', 'kubernetes', 'urllib3', 'git', 'click')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"
