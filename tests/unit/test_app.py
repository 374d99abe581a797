"""`gate.app`: one policy at a revision, one way to read a revision, one check behind the doors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result

from gate.app.check import CheckRequest, GitInputs, RenderedInputs, run_check, write_deferral
from gate.app.policy import policy_at
from gate.app.sides import (
    FLUX_ROOT_ALONE,
    FluxSide,
    GitReading,
    KustomizeSide,
    TreeSide,
    read_both,
    read_revision,
)
from gate.cli import main
from gate.cli.doctor import declared_lookup
from gate.engine.context import Context
from gate.engine.verdict import Verdict
from gate.model.errors import ConfigError, InputError
from gate.model.findings import Code, Severity
from gate.model.refs import ObjectRef
from gate.sources.deferral import by_repository_file, by_root
from gate.sources.flux import FluxSource
from tests.unit.helpers import GitRepo, claim, cli_runner
from tests.unit.test_flux_roots import repo_with
from tests.unit.test_kustomize_trees import needs_renderer

WARN_NOT_RETIRED = "severity:\n  NOT_RETIRED: warn\n"


def _symlinked_policy(tmp_path: Path) -> tuple[GitRepo, str, str]:
    """A repository whose second commit replaces the policy file with a symlink."""
    repo = GitRepo(tmp_path / "repo")
    first = repo.commit({"apps/claim.yaml": claim(), "prune-gate.yaml": WARN_NOT_RETIRED})
    (repo.root / "prune-gate.yaml").unlink()
    (repo.root / "prune-gate.yaml").symlink_to("/dev/null")
    second = repo.commit({"apps/claim.yaml": None}, "drop the claim, link the policy")
    return repo, first, second


def _gate(*args: str) -> Result:
    return cli_runner().invoke(main, list(args))


# policy_at -----------------------------------------------------------------------------------


def test_policy_at_refuses_a_symlink_in_the_revision(tmp_path: Path) -> None:
    repo, first, second = _symlinked_policy(tmp_path)
    assert (
        policy_at(str(repo.root), first, None).severity_for(Code.NOT_RETIRED, Context.PREVIEW)
        is Severity.WARN
    )
    with pytest.raises(ConfigError, match="symlink in that revision"):
        policy_at(str(repo.root), second, None)


def test_history_refuses_the_symlinked_policy_as_check_does(tmp_path: Path) -> None:
    """`gate history` reads the policy at the range's end through `policy_at`: the same refusal,
    word for word, as `gate check` at its base."""
    repo, first, second = _symlinked_policy(tmp_path)
    history = _gate("history", "--repo", str(repo.root), "--range", f"{first}..{second}")
    check = _gate("check", "--repo", str(repo.root), "--base", second, "--head", second)
    assert history.exit_code == check.exit_code == 2, (history.output, check.output)
    message = f"prune-gate.yaml at {second[:12]}: the policy file is a symlink in that revision"
    assert message in history.stderr
    assert message in check.stderr


def test_history_reads_a_config_inside_the_repository_at_the_ranges_end(
    tmp_path: Path,
) -> None:
    """A `--config` in the work tree is read at B, not from disk: one rule for every door."""
    repo = GitRepo(tmp_path / "repo")
    start = repo.commit({"apps/claim.yaml": claim(), "ci/policy.yaml": WARN_NOT_RETIRED})
    end = repo.commit({"apps/claim.yaml": None}, "drop the claim")
    (repo.root / "ci" / "policy.yaml").write_text("severity:\n  NOT_RETIRED: off\n")
    config = str(repo.root / "ci" / "policy.yaml")
    done = _gate(
        "history", "--repo", str(repo.root), "--range", f"{start}..{end}", "--config", config,
        "-o", "json",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    (row,) = json.loads(done.stdout)["commits"]
    assert (row["verdict"], row["codes"]) == ("warn", ["NOT_RETIRED"])  # B's, not the disk's


def test_policy_at_without_a_revision_reads_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert policy_at(".", None, None).severity_for(Code.NOT_RETIRED, Context.PREVIEW) is (
        Severity.BLOCK
    )
    (tmp_path / "prune-gate.yaml").write_text(WARN_NOT_RETIRED)
    policy = policy_at(".", None, None)
    assert policy.severity_for(Code.NOT_RETIRED, Context.PREVIEW) is Severity.WARN
    (tmp_path / "linked.yaml").symlink_to(tmp_path / "prune-gate.yaml")
    with pytest.raises(ConfigError, match="symlink"):
        policy_at(".", None, "linked.yaml")


def test_a_config_the_revision_lacks_is_the_defaults_with_a_note(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit({"apps/claim.yaml": claim()})
    (repo.root / "ci").mkdir()
    (repo.root / "ci" / "policy.yaml").write_text(WARN_NOT_RETIRED)
    said: list[str] = []
    policy = policy_at(str(repo.root), sha, str(repo.root / "ci" / "policy.yaml"), said.append)
    assert policy.severity_for(Code.NOT_RETIRED, Context.PREVIEW) is Severity.BLOCK
    assert said == [
        f"note: ci/policy.yaml does not exist at the base revision {sha[:12]}: using the default "
        "policy (a candidate's policy takes effect once it is merged)"
    ]


# sides ---------------------------------------------------------------------------------------


def test_git_reading_picks_one_reader_per_way_of_reading() -> None:
    tree = GitReading("r").side("s", "l", ["apps"])
    assert isinstance(tree, TreeSide) and tree.strict and tree.layout is by_repository_file
    assert not GitReading("r", "none").side("s", "l", ["apps"]).strict  # type: ignore[attr-defined]
    built = GitReading("r", "kustomize").side("s", "l", ["apps"])
    assert isinstance(built, KustomizeSide) and built.layout is by_root
    flux = GitReading(
        "r", None, ("clusters/prod",), (FluxSource("GitRepository", "flux-system", "repo"),)
    )
    side = flux.side("s", "l", ("clusters/prod",))
    assert isinstance(side, FluxSide) and side.roots == ("clusters/prod",)
    assert (
        side.sources == (FluxSource("GitRepository", "flux-system", "repo"),)
        and side.layout is by_root
    )


def test_plain_reading_refuses_kustomize_input_unless_told(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit(
        {"apps/kustomization.yaml": "resources: [claim.yaml]\n", "apps/claim.yaml": claim()}
    )
    strict = GitReading(str(repo.root)).side(sha, "l", ["apps"])
    with pytest.raises(InputError, match="is kustomize input"):
        read_both(strict, strict)
    assert len(read_revision(GitReading(str(repo.root), "none"), sha, ["apps"])) == 1


def test_option_refusals_keep_their_words() -> None:
    with pytest.raises(InputError, match=r"^--flux-root builds what Flux applies"):
        GitInputs("a", "b", ("apps",), ("apps",), flux_roots=("clusters/prod",))
    with pytest.raises(InputError, match=r"needs at least one --path to build \(per side\)"):
        GitInputs("a", "b", render="kustomize")
    with pytest.raises(InputError, match="only one side can be read from stdin"):
        RenderedInputs("-", "-")
    with pytest.raises(InputError, match=r"^--flux-root builds what Flux applies"):
        declared_lookup(None, "HEAD", ".", ("apps",), None, flux=(("clusters/prod",), (), ()))
    with pytest.raises(InputError, match="--flux-root reads --rev"):
        declared_lookup(None, None, ".", (), None, flux=(("clusters/prod",), (), ()))
    assert FLUX_ROOT_ALONE.startswith("--flux-root")


def test_retire_status_refuses_a_render_without_a_base() -> None:
    done = _gate("retire", "status", "--render", "kustomize")
    assert done.exit_code == 2
    assert "--render and --flux-root read --base: give --base too" in done.stderr


# run_check and write_deferral ----------------------------------------------------------------


def _rendered(tmp_path: Path, base: str, head: str) -> RenderedInputs:
    for side, text in (("base", base), ("head", head)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "app.yaml").write_text(text)
    return RenderedInputs(str(tmp_path / "base"), str(tmp_path / "head"))


def test_run_check_of_rendered_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    inputs = _rendered(tmp_path, claim(), "")
    run = run_check(CheckRequest(inputs, Context.PREVIEW))
    assert run.labels == (str(tmp_path / "base"), str(tmp_path / "head"))
    assert run.result.decision.verdict is Verdict.BLOCK
    (found,) = run.result.decision.findings
    assert found.code is Code.NOT_RETIRED
    assert found.source is not None and found.source.path == "base/app.yaml"  # placed
    assert [len(side) for side in run.objects] == [1, 0]


def test_run_check_of_two_revisions_from_their_merge_base(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    other = claim().replace("name: data", "name: kept")
    fork = repo.commit({"apps/claim.yaml": claim(), "apps/kept.yaml": other})
    repo.git("checkout", "-q", "-b", "topic")
    topic = repo.commit({"apps/claim.yaml": None}, "drop it")
    repo.git("checkout", "-q", "main")
    main_sha = repo.commit({"apps/other.yaml": claim().replace("name: data", "name: other")})
    inputs = GitInputs("main", topic, ("apps",), ("apps",), from_merge_base=True)
    run = run_check(CheckRequest(inputs, Context.PREVIEW, repo=str(repo.root)))
    assert run.labels == (
        f"merge base {fork[:12]} of main ({main_sha[:12]}) and head",
        topic,
    )
    assert [f.ref.name for f in run.result.decision.findings] == ["data"]


def test_write_deferral_writes_nothing_for_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = run_check(CheckRequest(_rendered(tmp_path, claim(), ""), Context.SPECULATIVE))
    said: list[str] = []
    deferred = write_deferral(
        str(tmp_path / "out"), run, Context.SPECULATIVE, "default", said.append
    )
    assert (deferred.exit_code, deferred.record) == (1, None)
    assert not (tmp_path / "out").exists()
    assert said and "a block is not deferred" in said[0]


def test_write_deferral_keeps_a_retired_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    inputs = _rendered(tmp_path, claim(retire="done"), "")
    run = run_check(CheckRequest(inputs, Context.SPECULATIVE))
    assert run.result.decision.verdict is Verdict.DEFER
    said: list[str] = []
    deferred = write_deferral(
        str(tmp_path / "out"), run, Context.SPECULATIVE, "default", said.append
    )
    assert deferred.exit_code == 0 and deferred.record is not None
    record = json.loads(Path(deferred.record).read_text())
    assert "PersistentVolumeClaim app/data" in json.dumps(record)
    assert said[-1].startswith(f"defer: wrote {tmp_path / 'out'} (")


@needs_renderer
def test_doctor_and_retire_read_a_flux_root_as_check_does(tmp_path: Path) -> None:
    """`gate doctor --rev --flux-root` and `gate retire status --base --flux-root` read the
    revision through the same Flux reader as `gate check`: the claim is where Flux puts it
    (targetNamespace shop, substituted name), not where its file sits."""
    repo = repo_with(tmp_path, {"apps/prod/other.yaml": "# nothing\n"})
    roots = (("clusters/prod",), (), ())
    declared = declared_lookup(None, "HEAD", str(repo.root), (), None, "default", flux=roots)
    assert declared(ObjectRef("", "PersistentVolumeClaim", "shop", "web-data")) == (
        "apps/prod/claim.yaml:1"
    )
    reading = GitReading(str(repo.root), "none", ("clusters/prod",))
    names = {
        (o.body["metadata"].get("namespace"), o.body["metadata"]["name"])
        for o in read_revision(reading, "HEAD", ())
    }
    assert ("shop", "web-data") in names
