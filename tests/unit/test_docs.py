"""The documentation holds true: the site builds strictly, every link resolves, every example
works (docs that cannot drift, as test_readme holds the README's `make example` transcript).

The README is the front page and `docs/` the site (`mkdocs.yml`, `make docs`). What is checked:

- `mkdocs build --strict` builds the site: a broken link between pages, or an anchor no heading
  makes, fails it (mkdocs.yml's `validation`);
- every relative link of the README and the pages names a file that exists, and an anchor a
  heading of that page makes; a link to this repository's files on GitHub names a file of this
  checkout; an anchor the README links to is the same on GitHub and on the site;
- every `gate ...` command of a shell block (and every `$ gate ...` line of a transcript) parses
  with the real command line: an option that does not exist, or a value it refuses, fails;
- every `prune-gate.yaml` shown (a YAML block whose keys are the policy's, or the chart's
  `policy` value) loads with the real policy reader, schema and all;
- the getting-started page shows the same `make example` transcript as the README.

mkdocs is the `docs` extra (`make` installs it); without it the build test skips outside CI and
fails in CI (tests/ci.py). The lowest-versions tier deselects it (scripts/lowest-versions): the
docs tools are not floors of the package.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from gate.cli.root import main
from gate.sources.policyfile import policy_from_text
from tests.ci import ci

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: Links to this repository's files on GitHub; the path after it must exist in the checkout.
GITHUB_FILES = re.compile(r"^https://github\.com/prune-gate/prune-gate/(?:blob|tree)/main/(.+)$")
SHELLS = {"sh", "shell", "bash", "console"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> Iterator[tuple[str, int, str]]:
    """Each fenced code block of `path`: its language, its first line's number, its text."""
    lang, start, body, indent = "", 0, list[str](), ""
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if match and not inside:
            inside, indent, lang, start, body = True, match[1], match[2], number + 1, []
        elif match and inside and not match[2]:
            inside = False
            yield lang, start, "\n".join(body)
        elif inside:
            body.append(line.removeprefix(indent))


def prose(path: Path) -> str:
    """`path`'s text outside code blocks and inline code: where its links are."""
    kept, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            kept.append(re.sub(r"`[^`]*`", "``", line))
    return "\n".join(kept)


def headings(path: Path) -> list[str]:
    """The headings of `path`, outside code blocks, as written (without the #s)."""
    found, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside and (match := re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.append(match[1])
    return found


def _plain(heading: str) -> str:
    """A heading's text as rendered: links to their text, no code or emphasis marks."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return text.replace("`", "").replace("*", "")


def site_slug(heading: str) -> str:
    """The id the site gives a heading: Python-Markdown's toc slugify."""
    text = unicodedata.normalize("NFKD", _plain(heading)).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", _plain(heading).strip().lower())
    return text.replace(" ", "-")


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path))


def test_every_relative_link_resolves() -> None:
    broken = []
    checked = 0
    for page in pages():
        for target in links(page):
            if match := GITHUB_FILES.match(target):
                checked += 1
                if not (ROOT / match[1].split("#")[0]).exists():
                    broken.append(f"{page.relative_to(ROOT)}: {target}: no such file here")
                continue
            if re.match(r"^[a-z]+:", target):  # another site, mailto:
                continue
            checked += 1
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md":
                slugs = {site_slug(h) for h in headings(dest)}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)}: {target}: no heading makes #{anchor}")
                if page == README and anchor not in {github_slug(h) for h in headings(dest)}:
                    broken.append(f"README.md: {target}: #{anchor} is another id on GitHub")
    assert checked > 20, checked
    assert broken == [], "\n".join(broken)


def test_the_readme_links_every_page_of_the_site() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    named = {page for entry in nav for page in entry.values()}
    linked = {
        str((ROOT / t.partition("#")[0]).resolve().relative_to(DOCS))
        for t in links(README)
        if t.startswith("docs/")
    }
    assert named - linked == set(), f"README.md links no {sorted(named - linked)}"


def shell_commands(text: str) -> Iterator[list[str]]:
    """The commands of a shell block: continuation lines joined, heredocs and comments skipped,
    split at `&&`, `||`, `;` and `|`, a leading `$ ` prompt and `VAR=value` words dropped."""
    lines = iter(text.replace("\\\n", " ").splitlines())
    for line in lines:
        if here := HEREDOC.search(line):
            for rest in lines:
                if rest.strip() == here[1]:
                    break
            line = line[: here.start()]
        lexer = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word in {";", "&&", "||", "|", "&"}:
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words.pop(0)
                if words:
                    yield words
                words = []
            else:
                words.append(word)


def gate_commands() -> list[tuple[str, list[str]]]:
    """Every `gate` command shown: in a shell block, or on a `$ ` line of a transcript."""
    found = []
    for page in pages():
        for lang, start, text in blocks(page):
            if lang in SHELLS:
                commands = list(shell_commands(text))
            elif lang == "text":
                shown = [ln for ln in text.splitlines() if ln.startswith("$ gate ")]
                commands = [c for ln in shown for c in shell_commands(ln)]
            else:
                continue
            where = f"{page.relative_to(ROOT)}:{start}"
            found += [(where, words[1:]) for words in commands if words[0] == "gate"]
    return found


def parse(args: list[str]) -> click.Context:
    """Resolve `gate ARGS` to its command and parse its options as the real CLI does, without
    running it: an unknown command or option, or a value a choice refuses, raises."""
    command: click.Command = main
    ctx = command.make_context("gate", list(args))
    while isinstance(command, click.Group):
        # click >= 8.2 keeps the words after the group's options in _protected_args (the
        # public name warns); 8.1 in protected_args
        held = vars(ctx).get("_protected_args", vars(ctx).get("protected_args", []))
        name, sub, rest = command.resolve_command(ctx, [*held, *ctx.args])
        assert sub is not None and name is not None, args
        command, ctx = sub, sub.make_context(name, rest, parent=ctx)
    return ctx


def test_the_parser_refuses_an_option_that_does_not_exist() -> None:
    parse(["check", "--base", "a", "--head", "b", "--flux-root", "auto"])
    with pytest.raises(click.NoSuchOption):
        parse(["check", "--base", "a", "--head", "b", "--flux-roots", "auto"])
    with pytest.raises(click.UsageError):
        parse(["checks"])


def test_every_gate_command_shown_parses() -> None:
    commands = gate_commands()
    assert len(commands) > 20, commands
    wrong = []
    for where, args in commands:
        try:
            parse(args)
        except click.ClickException as exc:
            wrong.append(f"{where}: gate {shlex.join(args)}: {exc.format_message()}")
    assert wrong == [], "\n".join(wrong)


def test_the_command_line_page_lists_every_command() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    table = page[page.index("| command | what it does | where |") :].split("\n\n")[0]
    names = main.list_commands(click.Context(main))
    assert len(names) > 5, names
    firsts = " ".join(row.split(" | ")[0] for row in table.splitlines()[2:])
    missing = [name for name in names if f"`gate {name}" not in firsts]
    assert missing == [], f"docs/cli.md's table of commands lacks {missing}"


def policy_examples() -> list[tuple[str, str]]:
    """Each `prune-gate.yaml` shown: a YAML block whose keys are all the policy's, or the
    `policy` value of a chart's values."""
    schema_keys = set(_policy_schema()["properties"])
    found = []
    for page in pages():
        for lang, start, text in blocks(page):
            if lang not in {"yaml", "yml"}:
                continue
            data = yaml.safe_load(text)
            where = f"{page.relative_to(ROOT)}:{start}"
            if isinstance(data, dict) and data and set(data) <= schema_keys:
                found.append((where, text))
            elif isinstance(data, dict) and isinstance(data.get("policy"), dict):
                found.append((f"{where} (the chart's policy)", yaml.safe_dump(data["policy"])))
    return found


def _policy_schema() -> dict[str, Any]:
    import json

    schema: dict[str, Any] = json.loads(
        (ROOT / "gate" / "schemas" / "policy.schema.json").read_text(encoding="utf-8")
    )
    return schema


def test_every_policy_shown_loads_with_the_real_reader() -> None:
    examples = policy_examples()
    assert len(examples) >= 2, examples  # configuration.md's and the chart's
    for where, text in examples:
        policy_from_text(text, where)  # raises ConfigError naming the key


def _transcript(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index("```text\n$ gate check --base-manifests examples/incident/base ")
    return text[start : text.index("\n```\n", start)]


def test_getting_started_shows_the_readmes_make_example_transcript() -> None:
    assert _transcript(DOCS / "getting-started.md") == _transcript(README), (
        "docs/getting-started.md's `make example` transcript differs from README.md's "
        "(which test_readme holds to the real output): copy the README's block"
    )


def built_page(site: Path, page: str) -> Path:
    """Where mkdocs writes `page` (its directory URLs: a.md is a/index.html)."""
    path = Path(page)
    if path.stem == "index":
        return site / path.parent / "index.html"
    return site / path.with_suffix("") / "index.html"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        reason = "mkdocs and its Material theme are missing: pip install -e '.[docs]' (make does)"
        if ci():
            pytest.fail(reason)
        pytest.skip(reason)
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    for entry in nav:
        (page,) = entry.values()
        assert built_page(site, page).is_file(), page
    # the ids the site really gives the headings the README links to are the ones site_slug
    # computes (which test_every_relative_link_resolves checks the README's anchors against)
    for target in links(README):
        file, _, anchor = target.partition("#")
        if file.startswith("docs/") and anchor:
            html = built_page(site, file.removeprefix("docs/")).read_text(encoding="utf-8")
            assert f'id="{anchor}"' in html, target
