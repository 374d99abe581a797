"""Reports: one decision, five renderings (text, json, github, markdown, sarif).

A report is read by a person paged at 3 a.m., by a script keying on codes, and by GitHub, which
turns workflow commands into annotations on the file and line of the object. All four say the same
thing in the same order (the order `gate.engine.verdict.decide` chose), so they can be compared line
by line. Pure functions: they return strings and never print, read the environment or the clock; the
CLI decides where the text goes and whether the terminal takes colour.

Everything a manifest can put into a message (annotation values, paths) is untrusted: control
characters are shown escaped in text and markdown, so a value cannot move the cursor or split a
line, and GitHub's escaping rules keep it from starting a workflow command of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gate.engine.check import CheckResult
    from gate.engine.context import Context
    from gate.report.tree import SourceLinks

#: The formats `render_report` knows, the default first.
FORMATS = ("text", "json", "github", "markdown", "sarif")


def render_report(
    result: CheckResult,
    fmt: str,
    *,
    context: Context,
    base: str,
    head: str,
    color: bool = False,
    show_standing: bool = False,
    links: SourceLinks | None = None,
) -> str:
    """Render the decision in `fmt` (one of `FORMATS`), without a trailing newline
    (`show_standing`: the text format lists the standing warnings, not only counts them).

    `base` and `head` label the revisions compared (a SHA, a ref, a path); `color` adds ANSI
    colour to the text format only, and the caller decides it (a TTY, no NO_COLOR); `links`
    makes the markdown format's places links to their lines on the forge.
    """
    # Each renderer is imported when its format is asked for: `gate check` pays for one.
    # `gate.report.common` too: `FORMATS` is read by `gate check --help`, which loads no engine.
    from gate.engine.plantree import build_plan_tree
    from gate.report.common import inert

    decision = result.decision
    tree = build_plan_tree(result)
    if fmt == "text":
        from gate.report.text import render_text

        shown = show_standing
        text = render_text(
            decision,
            context=context,
            base=base,
            head=head,
            color=color,
            show_standing=shown,
            tree=tree,
        )
        return text if color else inert(text)  # colour is for a terminal, never a CI log
    if fmt == "json":
        from gate.report.json import render_json

        return render_json(decision, context=context, base=base, head=head, tree=tree)
    if fmt == "github":
        from gate.report.github import render_github

        return render_github(decision, context=context, base=base, head=head)
    if fmt == "markdown":
        from gate.report.markdown import render_markdown

        md = render_markdown(
            decision, context=context, base=base, head=head, tree=tree, links=links
        )
        return inert(md)
    if fmt == "sarif":
        from gate.report.sarif import render_sarif

        return render_sarif(decision, context=context, base=base, head=head)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
