"""`gate codes [CODE]`: every finding code in one line each, or one code's page.

The list and the pages come from the model (`gate.model.findings.CODES`,
`gate.model.codepages.PAGES`); the page is rendered by `gate.report.codepage`, the same page as
docs/codes/CODE.md and each SARIF rule's help. Nothing here loads the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from gate.cli.common import fail

if TYPE_CHECKING:
    from gate.model.findings import Code


@click.command("codes")
@click.argument("code", required=False, metavar="[CODE]")
def codes_command(code: str | None) -> None:
    """List every finding code and what it means, or print one code's page.

    `gate codes NOT_RETIRED` (any case) prints what the code means, why it matters, the evidence
    its findings carry, the fixes and an example. The list ends with the stateful custom kinds
    guarded by default (what deleting one does to its data, and the operator's own protection).
    """
    if code is None:
        _list_codes()
        return
    from gate.report.codepage import page_text

    click.echo(page_text(_resolve(code)))


def _list_codes() -> None:
    from gate.model.findings import MEANING, Code
    from gate.model.stateful import CATALOGUE

    width = max(len(c.value) for c in Code)
    for code in Code:
        click.echo(f"{code.value:<{width}}  {MEANING[code]}")
    click.echo(
        "\nStateful custom kinds, guarded by default without their CRD in sight (guardedKinds):"
    )
    width = max(len(k.name) for k in CATALOGUE)
    for k in CATALOGUE:
        click.echo(f"{k.name:<{width}}  {k.operator}: {k.claims}")
        if k.protection:
            click.echo(f"{'':<{width}}  protection: {k.protection}")
    click.echo("\n`gate codes CODE` prints a code's page: what, why, evidence, fixes, an example.")


def _resolve(name: str) -> Code:
    """The code `name` spells, whatever its case (`not-retired` too); else exit 2 naming the
    nearest codes."""
    from gate.model.findings import Code

    key = name.strip().upper().replace("-", "_")
    if key not in Code.__members__:
        near = near_codes(key)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        fail(f"no finding code {name!r}: {hint}`gate codes` lists every code")
    return Code[key]


def near_codes(key: str, limit: int = 4) -> list[str]:
    """Codes close to `key`: those it is part of (or that are part of it), then spellings
    difflib finds close."""
    import difflib  # only for a wrong name: `gate codes` itself stays light

    from gate.model.findings import Code

    names = [c.value for c in Code]
    parts = [n for n in names if key and (key in n or n in key)]
    close = difflib.get_close_matches(key, names, n=limit, cutoff=0.6)
    return list(dict.fromkeys([*parts, *close]))[:limit]
