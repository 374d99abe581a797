"""The docs show `make example`'s whole transcript as it really is: the `$ ` line, the report and
the `gate exited N` line, compared with what the Makefile's `example` recipe runs and prints
(docs that cannot drift). `assert_shows_make_example` takes the page: the README today, the
pages under docs/ as well."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The Makefile's `example` recipe: the line it echoes first, and its last words.
_ECHO = re.compile(r"^\t@echo '\$\$ (?P<command>gate check [^']*)'$", re.MULTILINE)
_EXITED = re.compile(r'echo "(?P<line>gate exited \$\$code [^"]*)"')


def example_recipe() -> tuple[str, str]:
    """The command `make example` runs (as its `$ ` line shows it) and its `gate exited` line,
    with `{code}` for the exit code, read from the Makefile."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\nexample:") :]
    recipe = recipe[: recipe.index("\n\n")]
    echo, exited = _ECHO.search(recipe), _EXITED.search(recipe)
    assert echo is not None and exited is not None, recipe
    return echo["command"], exited["line"].replace("$$code", "{code}")


def real_transcript() -> str:
    """What `make example` prints after its build step: the `$ ` line, gate's output (stdout and
    stderr, as a terminal shows them), a blank line and the `gate exited` line."""
    command, exited = example_recipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "gate", *shlex.split(command)[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode != 2, done.stderr  # the recipe fails on 2 (could not decide)
    return f"$ {command}\n{done.stdout}{done.stderr}\n{exited.format(code=done.returncode)}"


def shown_transcript(page: Path) -> str:
    """The page's fenced block that starts with `make example`'s `$ ` line, without the fences."""
    command, _ = example_recipe()
    text = page.read_text(encoding="utf-8")
    start = text.find(f"```text\n$ {command}\n")
    assert start != -1, f"{page}: no ```text block starting with `$ {command}`"
    body = text[start + len("```text\n") :]
    return body[: body.index("\n```\n")]


def assert_shows_make_example(page: Path) -> None:
    """`page` shows `make example`'s transcript exactly, line for line."""
    shown, real = shown_transcript(page).split("\n"), real_transcript().split("\n")
    assert shown == real, (
        f"{page} shows a `make example` transcript that is not the real one: replace its block "
        "with what `make example` prints now"
    )


def pages_with_the_example() -> list[Path]:
    """README.md and every page under docs/ that shows `make example`'s transcript."""
    command, _ = example_recipe()
    block = f"```text\n$ {command}\n"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if block in p.read_text(encoding="utf-8")]


def test_the_readme_shows_the_example() -> None:
    assert ROOT / "README.md" in pages_with_the_example()


@pytest.mark.parametrize("page", pages_with_the_example(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_page_shows_the_real_example_output(page: Path) -> None:
    assert_shows_make_example(page)


def test_the_comparison_catches_a_drifted_line(tmp_path: Path) -> None:
    """A page whose transcript differs in one line (here the exit line) fails."""
    real = real_transcript()
    lines = real.split("\n")
    lines[-1] = lines[-1].replace("gate exited", "gate exited 9 and")
    page = tmp_path / "page.md"
    page.write_text("`make example` prints:\n\n```text\n" + "\n".join(lines) + "\n```\n", "utf-8")
    try:
        assert_shows_make_example(page)
    except AssertionError:
        pass
    else:
        raise AssertionError("a drifted transcript passed")
    page.write_text("```text\n" + real + "\n```\n", "utf-8")
    assert_shows_make_example(page)
