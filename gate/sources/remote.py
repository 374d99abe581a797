"""Remote kustomize resources: what the confined helper left out of a build, and `--fetch-remote`.

A `resources:` entry naming a URL (a CRD or a controller's install manifest), or a generator's
`files:` entry naming one (a dashboard from a release), is content outside the repository. The
helper stays offline: it builds everything else and names each remote entry it left out
(`prune-gate-kustomize: remote not fetched: FILE: URL` on stderr), and `RemoteLedger` keeps
those per revision so the check can compare the two sides' URLs (`gate.app.remotes`).
With `--fetch-remote` (a CI runner with network), each HTTPS URL is fetched here, in Python, into
a content cache (`~/.cache/prune-gate/remote`, a file per URL and content hash, read-only, size
and time limited) and the helper builds from that file: the decision is on the real objects.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import yaml

from gate.model.errors import RenderError
from gate.sources.cachedirs import cache_root
from gate.sources.manifests import KUSTOMIZATION_NAMES

#: The stderr line prefix by which the helper names a remote entry it left out.
NOT_FETCHED = "prune-gate-kustomize: remote not fetched: "

#: The stderr line prefix by which the helper names a patch it left out with the remote content
#: (its target was only there): `FILE: Kind/name`.
PATCH_LEFT_OUT = (
    "prune-gate-kustomize: patch left out (its target is in remote content not fetched): "
)

#: A fetched remote resource larger than this is refused (an install manifest is far below).
MAX_REMOTE_BYTES = 16 << 20

#: Seconds one fetch may take.
FETCH_TIMEOUT = 60.0

#: An extra CA bundle (PEM) to trust for `--fetch-remote`, beside the system's.
CA_ENV = "PRUNE_GATE_REMOTE_CA"


def cache_dir() -> Path:
    """Where fetched remote resources are kept (under `gate.sources.cachedirs.cache_root`)."""
    return cache_root() / "remote"


def is_remote(entry: str) -> bool:
    """True for a kustomization entry naming content elsewhere (as the helper's `isRemote`)."""
    lower = entry.lower()
    if "://" in lower or lower.startswith("git@") or "?ref=" in lower:
        return True
    hosts = ("github.com/", "gitlab.com/", "bitbucket.org/", "dev.azure.com/")
    return lower.startswith(hosts)


class RemoteLedger:
    """The remote entries each revision's builds left out, and the fetched files (thread-safe:
    both sides are built at once). `fetch` is `--fetch-remote`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fetching = threading.Lock()  # one fetch at a time: both sides may name a URL
        self.fetch = False
        self._skipped: dict[str, set[tuple[str, str]]] = {}
        self._lines: dict[str, dict[tuple[str, str], int]] = {}
        self._fetched: dict[str, str] = {}
        self._patches: dict[str, set[tuple[str, str]]] = {}

    def reset(self, fetch: bool = False) -> None:
        """Forget every revision (a new check), and say whether to fetch."""
        with self._lock:
            self.fetch, self._skipped, self._lines, self._fetched = fetch, {}, {}, {}
            self._patches = {}

    def record(self, sha: str, stderr: str, tree: Path) -> None:
        """Keep the entries a build of `sha` (exported at `tree`) names in its `stderr`."""
        found = set()
        lines = {}
        patches = set()
        for line in stderr.splitlines():
            if line.startswith(PATCH_LEFT_OUT):
                file, _, target = line[len(PATCH_LEFT_OUT) :].rpartition(": ")
                patches.add((_relative(file, tree), target))
            elif line.startswith(NOT_FETCHED):
                file, _, url = line[len(NOT_FETCHED) :].partition(": ")
                entry = (_relative(file, tree), url)
                found.add(entry)
                lines[entry] = _line_of(Path(file), url)
        with self._lock:
            self._skipped.setdefault(sha, set()).update(found)
            self._lines.setdefault(sha, {}).update(lines)
            self._patches.setdefault(sha, set()).update(patches)

    def patches(self, sha: str) -> set[tuple[str, str]]:
        """(kustomization file, "Kind/name") of each patch `sha`'s builds left out with the
        remote content its target was in."""
        with self._lock:
            return set(self._patches.get(sha, set()))

    def skipped(self, sha: str) -> set[tuple[str, str]]:
        """(kustomization file from the repository root, URL) left out of `sha`'s builds."""
        with self._lock:
            return set(self._skipped.get(sha, set()))

    def lines(self, sha: str) -> dict[tuple[str, str], int]:
        """The line of each left-out entry of `sha` in its kustomization file (1 if unsure)."""
        with self._lock:
            return dict(self._lines.get(sha, {}))

    def patch_notes(self, sha: str) -> list[str]:
        """The notes naming each patch `sha`'s builds left out with the remote content."""
        return [
            f"patch on {target} (in {file}) was left out of the build: its target is in remote "
            "content not fetched, whose objects were not judged (--fetch-remote fetches them)"
            for file, target in sorted(self.patches(sha))
        ]

    def fetched_for(self, tree: Path) -> dict[str, str]:
        """With `fetch`: each remote URL the kustomizations of `tree` name, fetched (URL ->
        file); else nothing."""
        if not self.fetch:
            return {}
        out = {}
        for url in sorted(remote_entries(tree)):
            with self._fetching:
                known = self._fetched.get(url)
                if known is None:
                    known = self._fetched[url] = str(fetch_url(url))
            out[url] = known
        return out


#: The one ledger of this process (`gate check` resets it per check).
LEDGER = RemoteLedger()


def remote_entries(tree: Path) -> set[str]:
    """Every remote entry of `resources:`, and of a generator's `files:` (`[KEY=]URL`), in the
    kustomization files below `tree`."""
    urls: set[str] = set()
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            if name not in KUSTOMIZATION_NAMES:
                continue
            try:
                data: Any = yaml.safe_load((Path(dirpath) / name).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue  # the build reports it
            if isinstance(data, dict):
                urls.update(_remote_entries_of(data))
    return urls


def _remote_entries_of(kustomization: dict[str, Any]) -> set[str]:
    entries = kustomization.get("resources")
    urls = (
        {e for e in entries if isinstance(e, str) and is_remote(e)}
        if isinstance(entries, list)
        else set()
    )
    for field in ("configMapGenerator", "secretGenerator"):
        generators = kustomization.get(field)
        for gen in generators if isinstance(generators, list) else []:
            files = gen.get("files") if isinstance(gen, dict) else None
            for f in files if isinstance(files, list) else []:
                if not isinstance(f, str):
                    continue
                key, eq, src = f.partition("=")
                src = src if eq and is_remote(src) and not is_remote(key) else f
                if is_remote(src):
                    urls.add(src)
    return urls


def fetch_url(url: str) -> Path:
    """The cached content of `url`, fetched over HTTPS when not cached; a `RenderError` naming
    the URL and why when it cannot be (not HTTPS, a git URL, too large, an HTTP error)."""
    # Here: only --fetch-remote pays for OpenSSL and urllib at import.
    import hashlib
    import ssl
    import urllib.request

    if not url.lower().startswith("https://") or "?ref=" in url.lower() or url.endswith(".git"):
        raise RenderError(
            f"--fetch-remote: cannot fetch {url}: only HTTPS files are fetched (a git "
            "repository or another scheme is not); vendor it into the repository, or check "
            "without --fetch-remote (the URL is then compared between the two revisions)"
        )
    context = ssl.create_default_context()
    extra = os.environ.get(CA_ENV)
    if extra:
        context.load_verify_locations(cafile=extra)
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT, context=context) as response:
            body = response.read(MAX_REMOTE_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise RenderError(f"--fetch-remote: cannot fetch {url}: {exc}") from None
    if len(body) > MAX_REMOTE_BYTES:
        raise RenderError(
            f"--fetch-remote: {url} is larger than {MAX_REMOTE_BYTES >> 20} MiB: refused"
        )
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    digest = hashlib.sha256(body).hexdigest()[:16]
    directory = cache_dir() / key
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{digest}.yaml"
    if not path.exists():
        tmp = directory / f".{digest}.{os.getpid()}.tmp"
        tmp.write_bytes(body)
        tmp.chmod(0o444)  # read-only input
        tmp.replace(path)
    return path


def _line_of(file: Path, url: str) -> int:
    """The first line of `file` naming `url` (1 when it cannot be read or found)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return 1
    return next((n for n, line in enumerate(text.splitlines(), 1) if url in line), 1)


def _relative(file: str, tree: Path) -> str:
    """`file` from the exported tree's root (the helper names absolute temporary paths)."""
    try:
        return Path(file).relative_to(tree).as_posix()
    except ValueError:
        return Path(file).name
