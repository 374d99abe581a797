"""A code's page as text (`gate codes CODE`) and as markdown (docs/codes/, SARIF rule help).

One source, `gate.model.codepages.PAGES`, two renderings that say the same in the same order:
the meaning and default severity, what it means, why it matters, the evidence, the fixes, how
the policy changes it, and an example made by the real rule (`gate.model.codeexamples`).
"""

from __future__ import annotations

import textwrap

from gate.model.codeexamples import EXAMPLES
from gate.model.codepages import PAGES, docs_url, security_severity
from gate.model.findings import CODES, Code

#: The door an example shows at, in words (`gate.model.codeexamples`).
EXAMPLE_LEAD = {
    "check": "A finding as `gate check` reports it (the rule run on a tiny fixture):",
    "webhook": "The webhook's refusal, as kubectl prints it after `denied the request:` (the "
    "webhook's decision on a tiny admission review):",
}

#: Width of the text page's paragraphs.
WIDTH = 96


def summary_line(code: Code) -> str:
    """`block by default; security severity 9.0 (critical); harm: data-loss`."""
    score = security_severity(code)
    return (
        f"{CODES[code].severity.value} by default; security severity {score} "
        f"({_rating(score)}); harm: {PAGES[code].harm.value}"
    )


def _rating(score: str) -> str:
    """GitHub's name for a security severity score."""
    value = float(score)
    if value >= 9.0:
        return "critical"
    if value >= 7.0:
        return "high"
    return "medium" if value >= 4.0 else "low"


def _policy_yaml(code: Code) -> str:
    """How `prune-gate.yaml` changes this code: its severity, or an exemption."""
    return (
        "severity:\n"
        f"  {code.value}: warn  # or block, defer, off; per context: {{speculative: defer}}\n"
        "exemptions:\n"
        "  - kind: PersistentVolumeClaim  # the finding's object; namespace, name: patterns\n"
        "    namespace: app\n"
        "    name: scratch-*\n"
        f"    codes: [{code.value}]\n"
        "    reason: why this one may go (a ticket)\n"
        '    expires: "2027-06-30"'
    )


def page_text(code: Code) -> str:
    """The page for a terminal: `gate codes CODE`."""
    page = PAGES[code]
    door, example = EXAMPLES[code]
    out = [f"{code.value}: {CODES[code].meaning}", f"({summary_line(code)})", ""]
    out += _section("What it means", [page.what, f"Raised by: {page.where}"])
    out += _section("Why it matters", [page.why])
    out += ["Evidence the finding carries:", *_bullets(page.evidence, "  - "), ""]
    out += ["Fixes:", *_bullets(page.fixes, "  "), ""]
    out += ["Policy (prune-gate.yaml):", textwrap.indent(_policy_yaml(code), "  "), ""]
    out += [_wrap(EXAMPLE_LEAD[door]), textwrap.indent(example, "  "), ""]
    if page.see_also:
        out += ["See also: " + ", ".join(c.value for c in page.see_also)]
    out += [f"Online: {docs_url(code)}"]
    return "\n".join(out)


def _section(title: str, paragraphs: list[str]) -> list[str]:
    return [f"{title}:", *(textwrap.indent(_wrap(p, WIDTH - 2), "  ") for p in paragraphs), ""]


def _wrap(text: str, width: int = WIDTH) -> str:
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def _bullets(items: tuple[str, ...], marker: str) -> list[str]:
    """Numbered fixes (`marker` of spaces) or dashed evidence, wrapped under their marker."""
    out = []
    for i, item in enumerate(items, 1):
        first = marker if marker.strip() else f"{marker}{i}. "
        body = textwrap.fill(
            item,
            WIDTH,
            initial_indent=first,
            subsequent_indent=" " * len(first),
            break_long_words=False,
            break_on_hyphens=False,
        )
        out.append(body)
    return out


def page_markdown(code: Code, *, links: bool = True) -> str:
    """The page as markdown: docs/codes/CODE.md, and each SARIF rule's `help.markdown`.

    `links`: cross-references as relative links to the sibling pages (the docs site); without,
    as links to the docs site itself (a SARIF viewer has no siblings)."""
    page = PAGES[code]
    door, example = EXAMPLES[code]
    out = [
        f"# {code.value}",
        "",
        f"> {CODES[code].meaning}",
        "",
        f"**{summary_line(code)}**",
        "",
        "## What it means",
        "",
        page.what,
        "",
        f"Raised by: {page.where}",
        "",
        "## Why it matters",
        "",
        page.why,
        "",
        "## Evidence the finding carries",
        "",
        *(f"- {e}" for e in page.evidence),
        "",
        "## Fixes",
        "",
        *(f"{i}. {fix}" for i, fix in enumerate(page.fixes, 1)),
        "",
        "## Policy",
        "",
        "Change its severity, or exempt an object from it with a reason and an expiry, in "
        "`prune-gate.yaml`:",
        "",
        "```yaml",
        _policy_yaml(code),
        "```",
        "",
        "## Example",
        "",
        EXAMPLE_LEAD[door],
        "",
        "```text",
        example,
        "```",
    ]
    if page.see_also:
        out += ["", "## See also", ""]
        out += [f"- {_link(c, links)}: {CODES[c].meaning}" for c in page.see_also]
    return "\n".join(out) + "\n"


def _link(code: Code, relative: bool) -> str:
    target = f"{code.value}.md" if relative else docs_url(code)
    return f"[{code.value}]({target})"


def index_markdown() -> str:
    """docs/codes/index.md: every code, its default severity, security severity, meaning."""
    out = [
        "# Finding codes",
        "",
        "Every finding prune-gate makes has one of these codes. A code is stable: it appears "
        "verbatim in the reports, the webhook's `status.reason` and Kubernetes Events, so "
        "scripts and alerts can key on it. `gate codes` lists them; `gate codes CODE` prints "
        "a code's page.",
        "",
        "The security severity is what GitHub code scanning shows for the code's SARIF rule "
        "(9.0 and up critical, 7.0 high, 4.0 medium). It is derived from the default severity "
        "and the harm: a block that destroys data 9.0, that bypasses a guard 8.5, that wedges "
        "a deploy 7.5, that cannot see what it deletes 7.0; a defer 7.0; a warning 4.0 to 5.0.",
        "",
        "| code | default | security severity | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for code in Code:
        meaning = CODES[code].meaning.replace("|", "\\|")
        out.append(
            f"| [{code.value}]({code.value}.md) | {CODES[code].severity.value} | "
            f"{security_severity(code)} | {meaning} |"
        )
    return "\n".join(out) + "\n"
