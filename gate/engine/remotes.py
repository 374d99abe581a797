"""Remote kustomize resources compared between two revisions (`gate check` and `gate history`).

The helper leaves each remote `resources:` entry out of an offline build and names it
(`gate.sources.remote`). What that content holds the gate cannot read offline, so it judges the
URLs instead, per kustomization file:

- the same URL in the same kustomization at base and head is the same content at deploy time
  (the cluster already holds what it deploys): no finding, a note naming it as read, not
  fetched. A URL whose ref moves (`?ref=main`, a branch in a raw URL) is not content-stable:
  upstream may have changed since the last deploy, so it is REMOTE_CONTENT_UNKNOWN, a warning
  in every context (nothing in the change itself deletes through it);
- a removed or changed URL (a changed ref is a removed URL and an added one) is content the
  deploy stops applying and the gate cannot see: REMOTE_CONTENT_UNKNOWN, a warning, deferred in
  speculative context (what it held may be pruned). Read as Flux applies it, `--defer-to` keeps
  it by keeping base's Kustomizations and sources, which build base's file until the merge;
  read any other way, the artifact cannot keep what it never read, and `--defer-to` refuses it
  (`gate.engine.defer`). As RELEASE_CONTENT_UNKNOWN for a HelmRelease;
- an added URL deletes nothing: a note.

With `--fetch-remote` nothing is left out: the objects are judged themselves, and nothing here.
Pure: the entries come from the reader (`gate.sources.remote.LEDGER`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gate.engine.placement import removed_from
from gate.model.findings import Code, Finding, Severity, edit
from gate.model.objects import Source
from gate.model.refs import ObjectRef

#: The pseudo-object a remote resource finding names (as a policy finding names a setting).
REMOTE_GROUP = "prune-gate.io"
REMOTE_KIND = "RemoteResource"

#: A ref that names a branch, not a fixed revision.
_MOVING_REF = re.compile(r"[?&]ref=(main|master|head|develop|trunk)(&|$)", re.IGNORECASE)
_MOVING_PATH = re.compile(r"/(main|master|HEAD|latest)(/|$)")


def moving(url: str) -> bool:
    """True when `url` names a branch (or `latest`), whose content changes without the URL: a
    branch ref or path, or a git repository without a ref (its default branch)."""
    path = url.split("?", 1)[0]
    if _MOVING_REF.search(url) or _MOVING_PATH.search(path):
        return True
    rest = path.split("://", 1)[-1]
    is_git = url.startswith("git@") or ".git" in rest or "//" in rest
    return is_git and "ref=" not in url and not path.endswith((".yaml", ".yml", ".json"))


def remote_ref(url: str) -> ObjectRef:
    """The object a REMOTE_CONTENT_UNKNOWN finding names: the URL."""
    return ObjectRef(REMOTE_GROUP, REMOTE_KIND, "", url)


Lines = Mapping[tuple[str, str], int]


def compare_remotes(
    base: set[tuple[str, str]],
    head: set[tuple[str, str]],
    speculative: bool,
    lines: tuple[Lines, Lines] = ({}, {}),
) -> tuple[list[Finding], list[str]]:
    """The findings and notes for the (kustomization file, URL) entries each side left out;
    `lines` says where each entry is in base's and head's file (line 1 where it does not)."""
    base_lines, head_lines = lines
    findings: list[Finding] = []
    notes: list[str] = []
    for file, url in sorted(base & head):
        if moving(url):
            findings.append(_moving(file, url, head_lines.get((file, url), 1)))
        else:
            notes.append(
                f"remote resource {url} (in {file}) was read, not fetched: the same URL on both "
                "sides is the same content at deploy time, and its objects were not judged "
                "(--fetch-remote fetches and judges them)"
            )
    for file, url in sorted(base - head):
        findings.append(_removed(file, url, speculative, base_lines.get((file, url), 1)))
    for file, url in sorted(head - base):
        notes.append(
            f"remote resource {url} is added in {file} and was not fetched: an addition "
            "deletes nothing, and its objects were not judged (--fetch-remote judges them)"
        )
    return findings, notes


def _removed(file: str, url: str, speculative: bool, line: int) -> Finding:
    at = Source(file, line)
    return Finding(
        code=Code.REMOTE_CONTENT_UNKNOWN,
        ref=remote_ref(url),
        message=f"the candidate no longer builds remote resource {url} from {file} (removed, "
        "or its URL changed): Flux prunes whatever it held and the candidate no longer "
        "declares, and offline nothing says what that is",
        evidence=(f"base: {file} names {url}; candidate: it does not", "not fetched (offline)"),
        remediation="run gate check with --fetch-remote on a runner with network: both URLs "
        "are fetched and the objects judged; or vendor the file into the repository",
        actions=(
            edit(
                "check again with --fetch-remote, or vendor the remote file into the repository", at
            ),
        ),
        source=at,
        head_source=removed_from(file),  # the candidate keeps the file; it no longer names it
        suggested=Severity.DEFER if speculative else None,
    )


def _moving(file: str, url: str, line: int) -> Finding:
    at = Source(file, line)
    return Finding(
        code=Code.REMOTE_CONTENT_UNKNOWN,
        ref=remote_ref(url),
        message=f"remote resource {url} (in {file}) names a branch, not a fixed revision: "
        "what it holds at deploy time may differ from what the cluster holds, and offline "
        "nothing says how",
        evidence=(f"{file} names {url} on both sides", "a moving ref; not fetched (offline)"),
        remediation="pin the URL to a tag or commit; or run gate check with --fetch-remote",
        actions=(edit(f"pin {url} to a tag or commit in {file}", at),),
        source=at,
        head_source=at,
    )
