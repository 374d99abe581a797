"""The policy a command runs under: one set of rules, wherever it is read from.

A candidate must not switch its own gate off nor choose its guards, so a policy file that a
revision of the repository holds is read at the revision the caller trusts (the base for
`gate check` and `gate fence`, the range's end for `gate history`), never from the working tree
that may be the candidate's checkout. A `--config` outside the repository is read from disk (no
candidate writes it). A symlink is refused everywhere: on disk and in the revision.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gate.engine.guardsettings import PolicySide, check_guard_settings
from gate.engine.policy import (
    POLICY_API_VERSION,
    Policy,
    migrate_policy_text,
    policy_api_version,
)
from gate.model.errors import ConfigError, GateError, GitError, InputError
from gate.model.findings import Finding
from gate.sources import yamlread
from gate.sources.github import CIContext
from gate.sources.policyfile import (
    POLICY_FILE,
    decode_policy,
    load_policy,
    policy_from_text,
    policy_key_lines,
    require_regular_file,
)

#: Where a command's notes go (stderr by default; a door may pass its own).
Say = Callable[[str], None]


def to_stderr(message: str) -> None:
    """The default `Say`: one line on stderr."""
    print(message, file=sys.stderr)


def policy_for_files(config_path: str | None) -> Policy:
    """The policy when there is no revision to read it at: `--config`, else `prune-gate.yaml`
    in the working directory if it exists, else the defaults (a symlink is refused)."""
    if config_path:
        return load_policy(config_path)
    default = Path(POLICY_FILE)
    # lexists, not is_file: a symlink to /dev/null must be refused, not read as "no policy".
    return load_policy(default) if os.path.lexists(default) else Policy()


def policy_at(
    repo: str, revision: str | None, config_path: str | None, say: Say = to_stderr
) -> Policy:
    """The policy as `revision` (a resolved sha) has it; with no revision, from the files.

    A `--config` inside the repository is read at the revision too (if the revision lacks it,
    the defaults apply until it is merged, with a note); one outside the repository is read from
    disk. A symlink is refused on disk and in the revision; so are bytes that are not UTF-8 and
    an invalid policy (a `ConfigError` naming the file and the revision).
    """
    if revision is None:
        return policy_for_files(config_path)
    where = policy_in_repository(repo, config_path)
    if where is None:
        assert config_path is not None  # only a --config can be outside the repository
        return load_policy(config_path)
    found = read_policy_at(repo, revision, where)
    if found is None:
        if config_path is not None:
            say(
                f"note: {where} does not exist at the base revision {revision[:12]}: using the "
                "default policy (a candidate's policy takes effect once it is merged)"
            )
        return Policy()
    return found[0]


def policy_in_repository(repo: str, config_path: str | None) -> str | None:
    """Where the policy is in the repository (a posix path from its root), to be read at a
    revision: `POLICY_FILE` by default, `--config` when it is inside the work tree. None when
    `--config` is outside it (or there is no repository): that file is read from disk, since no
    candidate writes it.

    The path is never resolved through a symlink (a candidate's link to `/dev/null` or outside
    the tree would otherwise choose the policy), and a symlink on disk is refused.
    """
    if config_path is None:
        return POLICY_FILE
    require_regular_file(config_path)
    from gate.sources import gitsource  # git mode only

    try:
        root = gitsource.work_tree(repo)
    except GateError:
        root = None
    return _inside(Path(root), config_path) if root is not None else None


def in_a_checkout(path: str) -> bool:
    """True when the file `path` lies in a git work tree (its directory is in a repository):
    with a base revision to read at, such a policy may be a candidate's checkout, and is read
    from disk only when it is outside every checkout."""
    from gate.sources import gitsource  # git only

    return gitsource.is_repository(os.path.dirname(os.path.abspath(path)) or ".")  # noqa: PTH100, PTH120


def read_policy_at(repo: str, sha: str, where: str) -> tuple[Policy, str] | None:
    """The policy file `where` as revision `sha` has it, and its text; None when the revision
    has no such file. A symlink blob, bytes that are not UTF-8 text, or an invalid policy is a
    `ConfigError` naming `where at sha`."""
    from gate.sources import gitsource

    blob = gitsource.read_blob(repo, sha, where)
    if blob is None:
        return None
    label = f"{where} at {sha[:12]}"
    is_link, data = blob
    if is_link:
        raise ConfigError(
            f"{label}: the policy file is a symlink in that revision (git mode 120000); a "
            "policy must be a regular file: commit the file itself"
        )
    text = decode_policy(data, label)
    return policy_from_text(text, label), text


def rendered_policy(
    repo: str, config_path: str | None, ci: CIContext, say: Say = to_stderr
) -> tuple[Policy, list[Finding]]:
    """The policy of rendered mode, and GUARD_TAMPERED for the guard settings the candidate
    changes. In a CI job whose event names a base revision the working tree is the candidate's
    (a merge-group job checks out the candidate), so the policy is read at that base revision as
    in git mode, never from disk: a candidate would otherwise choose its own severities and
    guards. Outside CI (no event base) the working tree is the person's own, read from disk; so
    is a `--config` outside the repository, or outside any checkout when there is no repository
    (a job that gates downloaded renders against a policy from a secret). With an event base, no
    repository to read it from and a policy in a checkout or the working tree, the policy is
    refused (it may be the candidate's), and so is a base revision the clone lacks (a shallow
    clone), whatever the working tree holds."""
    if not ci.base:
        return policy_for_files(config_path), []
    from gate.sources import gitsource  # git only

    if not gitsource.is_repository(repo):
        if config_path is None and not os.path.lexists(POLICY_FILE):
            return Policy(), []  # no repository and no policy: the defaults
        if config_path is not None and not in_a_checkout(config_path):
            return policy_for_files(config_path), []  # a file no checkout holds
        raise InputError(
            f"the {ci.event} event names base revision {ci.base}, so the policy "
            f"{config_path or POLICY_FILE} may be the candidate's, and it is read at that "
            f"revision; but {repo} is not a git repository to read it from: run in the "
            "repository's clone, or give it with --repo"
        )
    if config_path is not None and policy_in_repository(repo, config_path) is None:
        return policy_for_files(config_path), []  # outside the repository: no candidate's
    try:
        target = gitsource.resolve_revision(repo, ci.base)
    except GitError as exc:
        raise InputError(
            f"the {ci.event} event names base revision {ci.base}, so "
            f"{config_path or POLICY_FILE} in the working tree may be the candidate's; it is "
            f"read at that revision, which cannot be read here ({exc}); fetch it "
            "(actions/checkout with fetch-depth: 0), or pass --config with a policy file "
            "outside the checkout"
        ) from None
    policy = policy_at(repo, target, config_path, say)
    if not ci.head:
        return policy, []
    head = gitsource.resolve_revision(repo, ci.head)
    base = gitsource.merge_base(repo, target, head) if ci.from_merge_base else target
    return policy, guard_setting_findings(repo, config_path, base, head)


def guard_setting_findings(
    repo: str, config_path: str | None, base_sha: str, head_sha: str
) -> list[Finding]:
    """GUARD_TAMPERED for each guard setting (`gate.engine.guardsettings`) that the policy file
    changes from the base side to the candidate; one for the file when the candidate's cannot be
    read (a symlink, invalid YAML, an unknown key). A `--config` outside the repository is no
    candidate's: nothing to compare. On a pull request the base side is the merge base, so a
    change the base branch made since is not taken for the pull request's own, reversed."""
    from gate.sources import gitsource

    where = policy_in_repository(repo, config_path)
    if where is None:
        return []
    if gitsource.read_blob(repo, base_sha, where) == gitsource.read_blob(repo, head_sha, where):
        return []  # the same bytes (or no file on either side): nothing changes

    def side(sha: str) -> PolicySide:
        found = read_policy_at(repo, sha, where)
        if found is None:
            return PolicySide(None)
        return PolicySide(found[0], policy_key_lines(found[1]))

    base = side(base_sha)
    try:
        head: PolicySide | str = side(head_sha)
    except ConfigError as exc:
        head = str(exc)
    return check_guard_settings(where, base, head)


def _inside(root: Path, config_path: str) -> str | None:
    """`config_path` relative to the work tree `root` (posix), or None when it is outside.

    Lexical first: a path inside the tree as written is that path, whatever the working tree's
    directories link to (a candidate that turns `ci/` into a link to a directory base lacks must
    not have `ci/policy.yaml` read at the link's target, where base has nothing: the defaults).
    Only a path outside the tree as written has its directory resolved (the tree reached through
    another spelling, e.g. /tmp and /private/tmp); the file's own name is never followed.
    """
    target = Path(os.path.normpath(Path(config_path).absolute()))
    roots = (Path(os.path.normpath(root.absolute())), root.resolve())
    for candidate in (target, target.parent.resolve() / target.name):
        for base in roots:
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
    return None


@dataclass(frozen=True)
class Migrated:
    """A policy file as `gate config migrate` writes it: its new text, and the version the old
    text was read as (`LEGACY_API_VERSION` when it declared none)."""

    text: str
    was: str

    @property
    def changed(self) -> bool:
        return self.was != POLICY_API_VERSION


def migrate_policy(path: str) -> Migrated:
    """The policy file at `path` as a `POLICY_API_VERSION` file, with its comments and layout.

    The file must read as a valid policy first (an invalid one is a `ConfigError`, as for every
    command); the migrated text must read as the same policy, or it is a `ConfigError` that says
    what to add by hand. Nothing is written: the caller prints it, or writes it (`write_policy`).
    """
    require_regular_file(path)
    text = decode_policy(Path(path).read_bytes(), path)
    before = policy_from_text(text, path)
    was = policy_api_version(yamlread.load(text), path)
    migrated = migrate_policy_text(text) if was != POLICY_API_VERSION else text
    try:
        same = policy_from_text(migrated, path) == before
        declared = yamlread.load(migrated)
    except ConfigError:
        same, declared = False, None
    if (
        not same
        or not isinstance(declared, dict)
        or declared.get("apiVersion") != POLICY_API_VERSION
    ):
        raise ConfigError(
            f"{path}: cannot add apiVersion to this file's text and keep its meaning (a "
            f"flow-style mapping?): add `apiVersion: {POLICY_API_VERSION}` as its first key by "
            "hand"
        )
    return Migrated(migrated, was)


def write_policy(path: str, text: str) -> None:
    """Replace the policy file at `path` with `text` in one step (a reader sees the old file or
    the new, never half of one), keeping its permissions."""
    target = Path(path)
    require_regular_file(target)
    temporary = target.with_name(f".{target.name}.migrating")
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.chmod(target.stat().st_mode & 0o7777)
        temporary.replace(target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write it: {exc.strerror or exc}") from None
