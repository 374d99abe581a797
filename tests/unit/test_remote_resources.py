"""Remote kustomize resources (issue 33): a URL in `resources:` is not an exit 2.

Each repository is built here with git, shaped like a Flux repository that installs a CRD or a
controller from a release URL beside its own app. Offline, the helper leaves the URL out and the
check compares the two revisions' URLs; with `--fetch-remote` the content is fetched from an
HTTPS server on loopback (a self-signed certificate made in the test, trusted through
PRUNE_GATE_REMOTE_CA) and judged.
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.sources.remote import LEDGER
from tests.unit.helpers import GitRepo, claim, deployment
from tests.unit.test_build_server import needs_helper
from tests.unit.test_cli import gate

PINNED = "https://github.com/example/snapshot-controller/releases/download/v8.2.0/crds.yaml"
NEXT = "https://github.com/example/snapshot-controller/releases/download/v8.3.0/crds.yaml"
MOVING = "https://github.com/example/infra//crds?ref=main"
ARGS = ("check", "--base", "HEAD~1", "--head", "HEAD", "--path", "app", "--render", "kustomize")


def _kustomization(*urls: str) -> str:
    return "resources:\n  - claim.yaml\n  - app.yaml\n" + "".join(f"  - {u}\n" for u in urls)


def _repo(tmp_path: Path, base: tuple[str, ...], head: tuple[str, ...]) -> GitRepo:
    """Base names `base` URLs in app/kustomization.yaml; the candidate names `head` and
    touches the Deployment's file (nothing deleted locally)."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "app/kustomization.yaml": _kustomization(*base),
            "app/claim.yaml": claim(),
            "app/app.yaml": deployment(),
        },
        "base",
    )
    candidate: dict[str, str | None] = {
        "app/kustomization.yaml": _kustomization(*head),
        "app/app.yaml": deployment() + "# the candidate's own change\n",
    }
    repo.commit(candidate, "candidate")
    return repo


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


@needs_helper
def test_an_unchanged_url_builds_and_is_noted_in_every_format(tmp_path: Path) -> None:
    repo = _repo(tmp_path, (PINNED,), (PINNED,))
    for fmt in ("text", "json", "markdown", "github", "sarif"):
        done = gate(*ARGS, "--format", fmt, cwd=repo.root)
        assert done.returncode == 0, (fmt, done.stdout + done.stderr)
        assert PINNED in done.stdout, (fmt, done.stdout)
        assert "read, not fetched" in done.stdout, (fmt, done.stdout)
    data = _json(gate(*ARGS, "--format", "json", cwd=repo.root))
    assert data["verdict"] == "allow"
    notes = data["notes"]
    assert isinstance(notes, list) and len(notes) == 1 and "app/kustomization.yaml" in notes[0]


@needs_helper
def test_an_added_url_is_a_note_not_a_finding(tmp_path: Path) -> None:
    data = _json(gate(*ARGS, "--format", "json", cwd=_repo(tmp_path, (), (PINNED,)).root))
    assert data["verdict"] == "allow" and data["findings"] == []
    assert any("is added" in n and PINNED in n for n in data["notes"])  # type: ignore[attr-defined]


def _codes(data: dict[str, object]) -> list[tuple[str, str, str]]:
    findings = data["findings"]
    assert isinstance(findings, list)
    return [(f["code"], f["severity"], f["object"]["name"]) for f in findings]


@needs_helper
def test_a_removed_url_is_a_finding_and_not_a_pass_in_speculative_context(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, (PINNED,), ())
    preview = gate(*ARGS, "--format", "json", "--context", "preview", cwd=repo.root)
    assert preview.returncode == 0, preview.stderr
    assert _codes(_json(preview)) == [("REMOTE_CONTENT_UNKNOWN", "warn", PINNED)]
    findings = _json(preview)["findings"]
    assert isinstance(findings, list)
    finding = findings[0]
    assert finding["source"] == {"path": "app/kustomization.yaml", "line": 4}  # base's entry
    assert finding["headSource"] == {"path": "app/kustomization.yaml", "line": None}
    spec = gate(*ARGS, "--format", "json", "--context", "speculative", cwd=repo.root)
    assert spec.returncode == 1, spec.stdout + spec.stderr
    data = _json(spec)
    assert data["verdict"] == "defer"
    assert _codes(data) == [("REMOTE_CONTENT_UNKNOWN", "defer", PINNED)]


@needs_helper
def test_defer_to_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    repo = _repo(tmp_path, (PINNED,), ())
    out = tmp_path / "artifact"
    done = gate(*ARGS, "--context", "speculative", "--defer-to", str(out), cwd=repo.root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot defer REMOTE_CONTENT_UNKNOWN on RemoteResource {PINNED}" in done.stderr
    assert "was never read" in done.stderr and "--fetch-remote" in done.stderr
    assert not (out / "app").exists()


@needs_helper
def test_with_flux_the_dropped_url_is_kept_by_flux_building_base(tmp_path: Path) -> None:
    """Read as Flux applies it, the artifact's Kustomizations and sources are base's, so
    kustomize-controller goes on building base's kustomization (the URL with it) until the merge:
    the deferral holds, and its record says so."""
    from tests.unit.test_flux_roots import SYNC, apps

    repo = GitRepo(tmp_path / "repo")
    base: dict[str, str | None] = {
        "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
        "clusters/prod/apps.yaml": apps(path="./app"),
        "app/kustomization.yaml": _kustomization(PINNED),
        "app/claim.yaml": claim(),
        "app/app.yaml": deployment(),
    }
    repo.commit(base, "base")
    repo.commit({"app/kustomization.yaml": _kustomization()}, "drop the remote CRDs")
    out = tmp_path / "artifact"
    flux = ("check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", "clusters/prod")
    done = gate(*flux, "--context", "speculative", "--defer-to", str(out), cwd=repo.root)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "artifact.deferred.json").read_text())
    (kept,) = record["builtFromBase"]
    assert kept["remote"] == PINNED and kept["codes"] == ["REMOTE_CONTENT_UNKNOWN"]
    assert "kustomize-controller goes on building app/kustomization.yaml" in kept["why"]
    written = "\n".join(p.read_text() for p in sorted(out.rglob("*.yaml")))
    assert "name: apps" in written  # the Kustomization that builds it, as base declares it


@needs_helper
def test_a_changed_ref_is_the_old_url_removed_and_the_new_one_added(tmp_path: Path) -> None:
    data = _json(gate(*ARGS, "--format", "json", cwd=_repo(tmp_path, (PINNED,), (NEXT,)).root))
    assert _codes(data) == [("REMOTE_CONTENT_UNKNOWN", "warn", PINNED)]
    assert any(NEXT in n and "is added" in n for n in data["notes"])  # type: ignore[attr-defined]


@needs_helper
def test_an_unchanged_moving_ref_is_a_warning(tmp_path: Path) -> None:
    data = _json(gate(*ARGS, "--format", "json", cwd=_repo(tmp_path, (MOVING,), (MOVING,)).root))
    assert _codes(data) == [("REMOTE_CONTENT_UNKNOWN", "warn", MOVING)]
    assert "notes" not in data


# --- --fetch-remote, against HTTPS on loopback --------------------------------------------------

REMOTE_CLAIM = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: snapshots, namespace: app}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests: {storage: 1Gi}
"""
REMOTE_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: snapshot-config, namespace: app}
data: {mode: fast}
"""


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback serving tmp_path/www, with a self-signed certificate for
    127.0.0.1 (the base URL, and the certificate to trust)."""
    www, cert, key = tmp_path / "www", tmp_path / "cert.pem", tmp_path / "key.pem"
    www.mkdir()
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(www))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


@needs_helper
def test_fetch_remote_judges_the_fetched_objects(
    tmp_path: Path, https_server: tuple[str, Path]
) -> None:
    """v1 of the remote manifest holds a claim, v2 drops it: fetched, the claim's deletion is
    found on the real objects, not guessed from the URLs."""
    url, cert = https_server
    www = tmp_path / "www"
    (www / "v1").mkdir()
    (www / "v2").mkdir()
    (www / "v1" / "install.yaml").write_text(REMOTE_CLAIM + "---\n" + REMOTE_CONFIG)
    (www / "v2" / "install.yaml").write_text(REMOTE_CONFIG)
    repo = _repo(tmp_path, (f"{url}/v1/install.yaml",), (f"{url}/v2/install.yaml",))
    env = {"PRUNE_GATE_REMOTE_CA": str(cert), "PRUNE_GATE_CACHE": str(tmp_path / "cache")}
    done = gate(*ARGS, "--format", "json", "--fetch-remote", cwd=repo.root, env_extra=env)
    assert done.returncode == 1, done.stdout + done.stderr
    data = _json(done)
    found = _codes(data)
    assert found and all(name == "snapshots" for _, _, name in found), found
    assert "REMOTE_CONTENT_UNKNOWN" not in {code for code, _, _ in found}
    assert "notes" not in data
    cached = sorted((tmp_path / "cache" / "remote").glob("*/*.yaml"))
    assert len(cached) == 2 and all(not os.access(f, os.W_OK) or os.geteuid() == 0 for f in cached)
    assert all(f.stat().st_mode & 0o222 == 0 for f in cached)  # read-only input
    # Offline the same change is only the URL's removal.
    offline = _json(gate(*ARGS, "--format", "json", cwd=repo.root))
    assert _codes(offline) == [("REMOTE_CONTENT_UNKNOWN", "warn", f"{url}/v1/install.yaml")]


def test_fetch_remote_refuses_a_git_url_with_a_message(tmp_path: Path) -> None:
    LEDGER.reset(fetch=True)
    try:
        tree = tmp_path / "tree" / "app"
        tree.mkdir(parents=True)
        (tree / "kustomization.yaml").write_text(_kustomization(MOVING))
        with pytest.raises(Exception, match="only HTTPS files are fetched"):
            LEDGER.fetched_for(tmp_path / "tree")
    finally:
        LEDGER.reset()


# --- Flux repositories and gate history ----------------------------------------------------------

SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1m, url: "https://example.com/repo", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec:
  interval: 10m
  path: ./clusters/prod
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
INFRA = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: snapshot-controller, namespace: flux-system}
spec:
  interval: 1h
  path: ./infrastructure/snapshot-controller
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""


def _flux_repo(tmp_path: Path, head_urls: tuple[str, ...]) -> GitRepo:
    """A Flux repository whose snapshot-controller Kustomization installs the CRDs from a
    release URL beside a claim of its own (the common layout); the candidate names `head_urls`
    and touches the entry point."""
    repo = GitRepo(tmp_path / "repo")
    repo.commit(
        {
            "clusters/prod/flux-system/gotk-sync.yaml": SYNC,
            "clusters/prod/infrastructure.yaml": INFRA,
            "infrastructure/snapshot-controller/kustomization.yaml": (
                f"resources:\n  - {PINNED}\n  - claim.yaml\n"
            ),
            "infrastructure/snapshot-controller/claim.yaml": claim(),
        },
        "base",
    )
    repo.commit(
        {
            "infrastructure/snapshot-controller/kustomization.yaml": "resources:\n"
            + "".join(f"  - {u}\n" for u in head_urls)
            + "  - claim.yaml\n",
            "clusters/prod/infrastructure.yaml": INFRA + "# the candidate's own change\n",
        },
        "candidate",
    )
    return repo


FLUX = ("check", "--base", "HEAD~1", "--head", "HEAD", "--flux-root", "clusters/prod")


@needs_helper
def test_flux_root_with_an_unchanged_remote_resource_is_not_exit_2(tmp_path: Path) -> None:
    done = gate(*FLUX, "--format", "json", cwd=_flux_repo(tmp_path, (PINNED,)).root)
    assert done.returncode == 0, done.stdout + done.stderr
    data = _json(done)
    assert data["verdict"] == "allow"
    assert data["notes"] == [
        f"remote resource {PINNED} (in infrastructure/snapshot-controller/kustomization.yaml) "
        "was read, not fetched: the same URL on both sides is the same content at deploy "
        "time, and its objects were not judged (--fetch-remote fetches and judges them)"
    ]


@needs_helper
def test_flux_root_with_a_removed_remote_resource_is_found(tmp_path: Path) -> None:
    data = _json(gate(*FLUX, "--format", "json", cwd=_flux_repo(tmp_path, ()).root))
    assert _codes(data) == [("REMOTE_CONTENT_UNKNOWN", "warn", PINNED)]


@needs_helper
def test_history_reads_remote_resources_without_error_rows(tmp_path: Path) -> None:
    repo = _flux_repo(tmp_path, ())
    args = ("history", "--flux-root", "clusters/prod", "--format", "json", "--no-progress")
    done = gate(*args, "--range", "HEAD~1..HEAD", cwd=repo.root)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)["commits"]
    assert [(r["verdict"], [f["code"] for f in r["findings"]]) for r in rows] == [
        ("warn", ["REMOTE_CONTENT_UNKNOWN"])
    ]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (PINNED, False),
        ("https://github.com/example/infra//crds?ref=v1.2.0", False),
        ("https://github.com/example/infra//crds?ref=0123456789abcdef", False),
        (MOVING, True),
        ("https://github.com/example/infra//crds", True),  # no ref: the default branch
        ("git@github.com:example/infra.git//crds", True),
        ("https://raw.githubusercontent.com/example/infra/main/crds.yaml", True),
        ("https://github.com/example/op/releases/latest/download/install.yaml", True),
        ("https://raw.githubusercontent.com/example/infra/v1.2.0/crds.yaml", False),
    ],
)
def test_which_urls_move(url: str, expected: bool) -> None:
    from gate.engine.remotes import moving

    assert moving(url) is expected


GIT_PINNED = "https://github.com/example/system-upgrade-controller?ref=v0.18.0"

_NAMESPACE_PATCH = (
    "patches:\n"
    "  - patch: |\n"
    "      apiVersion: v1\n"
    "      kind: Namespace\n"
    "      metadata: {name: system-upgrade, labels: {team: ops}}\n"
)


@needs_helper
def test_a_patch_on_a_remote_bases_object_is_left_out_with_it(tmp_path: Path) -> None:
    """A patch whose target only the remote base holds cannot apply offline (kustomize fails
    on "no matches for Id"): it is left out with the remote content, whose objects the gate
    does not judge, and noted; the unchanged URL allows (zhorvath83/home-ops patches the
    Namespace of system-upgrade-controller's remote base so, and Flux renders it)."""
    repo = GitRepo(tmp_path / "repo")
    kustomization = (
        f"resources:\n  - claim.yaml\n  - {PINNED}\n  - {GIT_PINNED}\n" + _NAMESPACE_PATCH
    )
    repo.commit({"app/kustomization.yaml": kustomization, "app/claim.yaml": claim()}, "base")
    repo.commit({"app/claim.yaml": claim() + "# touched\n"}, "candidate")
    done = gate(*ARGS, "--format", "json", cwd=repo.root)
    assert done.returncode == 0, done.stdout + done.stderr
    data = _json(done)
    assert data["verdict"] == "allow" and data["findings"] == []
    notes = data["notes"]
    assert isinstance(notes, list)
    assert any(GIT_PINNED in n and "read, not fetched" in n for n in notes), notes
    assert any(
        "patch on Namespace/system-upgrade (in app/kustomization.yaml) was left out" in n
        for n in notes
    ), notes


@needs_helper
def test_a_parents_patch_on_a_childs_remote_object_is_left_out_with_it(tmp_path: Path) -> None:
    """The same patch one kustomization up (an overlay patching what its base's remote entry
    holds): exit 2 before, as only the kustomization holding the remote entry dropped it."""
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {
        "app/kustomization.yaml": "resources:\n  - claim.yaml\n  - ./upstream\n" + _NAMESPACE_PATCH,
        "app/upstream/kustomization.yaml": f"resources:\n  - {GIT_PINNED}\n",
        "app/claim.yaml": claim(),
    }
    repo.commit(files, "base")
    repo.commit({"app/claim.yaml": claim() + "# touched\n"}, "candidate")
    done = gate(*ARGS, "--format", "json", cwd=repo.root)
    assert done.returncode == 0, done.stdout + done.stderr
    notes = _json(done)["notes"]
    assert isinstance(notes, list)
    assert any(GIT_PINNED in n and "app/upstream/kustomization.yaml" in n for n in notes), notes
    assert any(
        "patch on Namespace/system-upgrade (in app/kustomization.yaml) was left out" in n
        for n in notes
    ), notes


@needs_helper
def test_a_patch_on_a_missing_local_object_stays_an_error(tmp_path: Path) -> None:
    """Without a remote entry left out, a patch on a missing target is the repository's own
    error: exit 2, nothing left out."""
    repo = GitRepo(tmp_path / "repo")
    kustomization = "resources:\n  - claim.yaml\n" + _NAMESPACE_PATCH
    repo.commit({"app/kustomization.yaml": kustomization, "app/claim.yaml": claim()}, "base")
    repo.commit({"app/claim.yaml": claim() + "# touched\n"}, "candidate")
    done = gate(*ARGS, "--format", "json", cwd=repo.root)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no matches for Id Namespace" in done.stderr, done.stderr
    assert "left out" not in done.stderr, done.stderr


# --- a generator's remote file (a dashboard from a release) ------------------------------------

DASHBOARDS = """\
resources:
  - claim.yaml
configMapGenerator:
  - name: dashboards
    files:
      - local.json
      - {entry}
    options: {{disableNameSuffixHash: true}}
"""


def _dashboard_repo(tmp_path: Path, base_entry: str, head_entry: str) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    files: dict[str, str | None] = {
        "app/kustomization.yaml": DASHBOARDS.format(entry=base_entry),
        "app/claim.yaml": claim(),
        "app/local.json": '{"title": "local"}\n',
    }
    repo.commit(files, "base")
    candidate: dict[str, str | None] = {
        "app/kustomization.yaml": DASHBOARDS.format(entry=head_entry),
        "README": "x\n",
    }
    repo.commit(candidate, "candidate")
    return repo


def _dashboards(repo: GitRepo) -> dict[str, str]:
    from gate.sources.render import render_kustomize

    (cm,) = [o for o in render_kustomize(repo.root, "HEAD", "app") if o.body["kind"] == "ConfigMap"]
    data = cm.body["data"]
    assert isinstance(data, dict)
    return data


@needs_helper
def test_a_generators_remote_file_is_left_out_offline_and_not_exit_2(tmp_path: Path) -> None:
    """Failed before (exit 2, every commit): kustomize fetches a `files:` URL, the offline helper
    refused it. Now the object is generated from the rest of its data, the URL compared."""
    entry = f"nginx.json={PINNED}"
    repo = _dashboard_repo(tmp_path, entry, entry)
    LEDGER.reset()
    assert _dashboards(repo) == {"local.json": '{"title": "local"}\n'}
    data = _json(gate(*ARGS, "--format", "json", cwd=repo.root))
    assert data["verdict"] == "allow", data
    notes = data["notes"]
    assert isinstance(notes, list) and any(PINNED in n and "read, not fetched" in n for n in notes)
    changed = _dashboard_repo(tmp_path / "changed", entry, f"nginx.json={NEXT}")
    assert _codes(_json(gate(*ARGS, "--format", "json", cwd=changed.root))) == [
        ("REMOTE_CONTENT_UNKNOWN", "warn", PINNED)
    ]


@needs_helper
@pytest.mark.parametrize("keyed", [True, False])
def test_fetch_remote_reads_a_generators_remote_file_under_its_key(
    tmp_path: Path,
    https_server: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    keyed: bool,
) -> None:
    """Fetched, the file is the generator's data under the key the entry gives, else the URL's
    last path element (kustomize's own default)."""
    url, cert = https_server
    (tmp_path / "www" / "nginx.json").write_text('{"title": "nginx"}\n')
    entry = f"ingress.json={url}/nginx.json" if keyed else f"{url}/nginx.json"
    repo = _dashboard_repo(tmp_path, entry, entry)
    monkeypatch.setenv("PRUNE_GATE_REMOTE_CA", str(cert))
    monkeypatch.setenv("PRUNE_GATE_CACHE", str(tmp_path / "cache"))
    LEDGER.reset(fetch=True)
    try:
        data = _dashboards(repo)
    finally:
        LEDGER.reset()
    key = "ingress.json" if keyed else "nginx.json"
    assert data == {"local.json": '{"title": "local"}\n', key: '{"title": "nginx"}\n'}
