"""How much work the reading edge and the CLI do, counted: the figures that were once unit tests.

A unit test says what a reader gives (the same objects, warm or cold, git or files); how many
queries, processes, collections or MiB it takes to give them is a figure, printed here with the
target it is held to, so a change that costs more work shows as a number, not as a failed test
that reads a private counter. Each line is `name: figure (target: ...)`, and `OVER` marks one that
misses its target (the module then exits 1, and `python -m bench` reports it).

Counted:
- the parse cache's queries (`_STORE.read` calls) for a warm directory: one per batch of files;
- a git tree read: blobs asked of `git cat-file` per side (none when the parse cache has them),
  the cache's queries per side, the git commands a commit's reads run (one `rev-parse`, one
  `ls-tree`), the `ls-tree` for a path outside those listed, and the one kept `cat-file` process
  for single-file reads;
- the cyclic collector's collections during an in-process `gate check` (`gate.speed` pauses it);
- the webhook's RSS after a burst of TLS connections closes (`MALLOC_ENV`): grown and
  kept, with and without it.

Run: `python -m bench.bench_internals`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from bench.bench_check import write_tree
from gate.cli import main as gate_main
from gate.sources import gitsource, manifests, parsecache
from webhook.serve import MALLOC_ENV

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: n}}\ndata: {{k: v}}\n"

#: Names of figures that missed their target.
OVER: list[str] = []


def report(name: str, figure: object, target: object, ok: bool) -> None:
    """Print one figure with its target; remember it when it misses."""
    print(f"{name}: {figure} (target: {target}){'' if ok else '  OVER'}", flush=True)
    if not ok:
        OVER.append(name)


@contextlib.contextmanager
def spy(owner: Any, name: str, record: Callable[..., None]) -> Iterator[None]:
    """Call `record(*args)` before each call of `owner.name`, for the duration of the block."""
    real = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        record(*args)
        return real(*args, **kwargs)

    setattr(owner, name, counting)
    try:
        yield
    finally:
        setattr(owner, name, real)


def forget_this_process() -> None:
    """What a new process sees: only what the parse cache wrote."""
    parsecache.flush()
    parsecache.reset()
    gitsource._TREES.clear()
    gitsource._COMMITS.clear()
    gitsource._FOUND.clear()
    gitsource._close_reader()


def commit(repo: Path, files: dict[str, str]) -> str:
    """Write `files` into the repository `repo` (created when new), commit them, return the sha."""
    if not repo.exists():
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    author = ["-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    author += ["-c", "commit.gpgsign=false"]
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *author, "commit", "-qm", "bench"], check=True)
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def parse_cache_queries(tmp: Path) -> None:
    """A warm directory: one cache query per batch of files, every file's key asked once."""
    root = tmp / "m"
    files = 3 * manifests._BATCH + 5
    for i in range(files):
        (root / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}.yaml").write_text(CM.format(name=f"c{i}"))
    manifests.read_path(root)
    forget_this_process()
    reads: list[int] = []
    with spy(parsecache._STORE, "read", lambda entries: reads.append(len(entries))):
        manifests.read_path(root)
    batches = -(-files // manifests._BATCH)
    report(
        f"parse cache: queries for a warm directory of {files} files",
        f"{len(reads)}, {sum(reads)} keys",
        f"{batches} (one per batch of {manifests._BATCH}), {files} keys",
        len(reads) == batches and sum(reads) == files,
    )


def git_reads(tmp: Path) -> None:
    """Two commits read cold then warm; a commit's reads; single files by one kept process."""
    repo = tmp / "repo"
    base = commit(
        repo,
        {
            "apps/a.yaml": CM.format(name="a"),
            "apps/copy-of-a.yaml": CM.format(name="a"),
            "apps/b.yaml": CM.format(name="b"),
            "apps/kustomization.yaml": "resources: [a.yaml]\n",
            "other/c.yaml": CM.format(name="c"),
            ".github/ci.yaml": "on: push\n",
        },
    )
    head = commit(repo, {"apps/b.yaml": CM.format(name="b2"), "other/d.yaml": CM.format(name="d")})
    commands: list[str] = []
    with contextlib.ExitStack() as spies:
        spies.enter_context(
            spy(
                gitsource,
                "_run_git",
                lambda *args: commands.append("discover" if args[0] == "-C" else args[1]),
            )
        )
        spies.enter_context(
            spy(gitsource, "_blobs", lambda r, entries: commands.append(f"cat-file {len(entries)}"))
        )
        spies.enter_context(
            spy(gitsource._BlobReader, "__init__", lambda *args: commands.append("cat-file"))
        )
        spies.enter_context(spy(gitsource._BlobReader, "read", lambda *a: commands.append("blob")))

        forget_this_process()
        gitsource.read_tree(repo, base)
        gitsource.read_tree(repo, head)
        batches = [c for c in commands if c.startswith("cat-file ")]
        report(
            "git: blobs read per side, cold (base a, its copy, b, c; head b2, d)",
            batches,
            ["cat-file 3", "cat-file 2"],
            batches == ["cat-file 3", "cat-file 2"],
        )
        forget_this_process()
        commands.clear()
        reads: list[int] = []
        with spy(parsecache._STORE, "read", lambda entries: reads.append(len(entries))):
            gitsource.read_tree(repo, base)
            gitsource.read_tree(repo, head)
        batches = [c for c in commands if c.startswith("cat-file ")]
        report(
            "git: blobs read per side, warm parse cache",
            batches,
            ["cat-file 0", "cat-file 0"],
            batches == ["cat-file 0", "cat-file 0"],
        )
        report(
            "git: parse cache queries per side, warm (keys not shared with the other side)",
            reads,
            [3, 2],
            reads == [3, 2],
        )

        forget_this_process()
        commands.clear()
        gitsource.resolve_revision(repo, base)
        gitsource.submodules(repo, base)
        gitsource.kustomization_files(repo, base)
        gitsource.read_tree(repo, base)
        gitsource.read_file(repo, base, "apps/b.yaml")
        gitsource.read_file(repo, base, "apps/missing.yaml")
        gitsource.read_file(repo, base, "apps")
        gitsource.read_blob(repo, base, ".github/ci.yaml")
        listed = [c for c in commands if not c.startswith("cat-file") and c != "blob"]
        report(
            "git: commands for a commit's eight reads (besides cat-file)",
            listed,
            ["discover", "rev-parse", "ls-tree"],
            listed == ["discover", "rev-parse", "ls-tree"],
        )

        forget_this_process()
        gitsource.read_tree(repo, base, ["apps"])
        commands.clear()
        gitsource.read_file(repo, base, "apps/a.yaml")
        gitsource.read_file(repo, base, "other/c.yaml")
        gitsource.read_file(repo, base, "other/none.yaml")
        expected = ["cat-file", "blob", "ls-tree", "blob", "ls-tree"]
        report(
            "git: commands for a listed path, then two outside the listed ones",
            commands,
            expected,
            commands == expected,
        )

        forget_this_process()
        commands.clear()
        for _ in range(3):
            gitsource.read_file(repo, base, "apps/b.yaml")
            gitsource.read_file(repo, head, "apps/b.yaml")
            gitsource.read_blob(repo, head, "other/d.yaml")
        started, blobs = commands.count("cat-file"), commands.count("blob")
        report(
            "git: cat-file processes started for 9 single-file reads",
            f"{started} ({blobs} blobs asked)",
            "1 (9 blobs asked)",
            (started, blobs) == (1, 9),
        )
        (reader,) = gitsource._READER.values()
        reader.process.kill()
        reader.process.wait()
        gitsource.read_file(repo, base, "apps/a.yaml")
        started = commands.count("cat-file")
        report("git: cat-file processes after the kept one died", started, 2, started == 2)
    forget_this_process()


#: Where a check reads and decides: a collection with one of these on the stack walked its objects.
_CHECK_CODE = tuple(str(Path(gitsource.__file__).parents[1] / p) for p in ("sources", "engine"))


def collections_during_a_check(tmp: Path) -> None:
    """The collector's collections while a `gate check` in this process reads and decides: none,
    it is paused. Counted on a second check: the first imports the check's modules, outside
    the command and so outside the pause; click's own work around the command is not counted."""
    write_tree(tmp / "base", 400, 5, set())
    write_tree(tmp / "head", 400, 5, {0, 40, 80})
    args = ["check", "--context", "speculative", "-o", "json"]
    args += ["--base-manifests", str(tmp / "base"), "--head-manifests", str(tmp / "head")]
    seen: list[bool] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            frames = traceback.extract_stack()
            seen.append(any(f.filename.startswith(_CHECK_CODE) for f in frames))

    CliRunner().invoke(gate_main, args)
    gc.callbacks.append(watch)
    try:
        result = CliRunner().invoke(gate_main, args)
    finally:
        gc.callbacks.remove(watch)
    if result.exit_code not in (0, 1):
        sys.exit(f"gate check failed: {result.output}")
    during = seen.count(True)
    report(
        "gate check, 2,000 objects a side, in-process: collections while it read and decided",
        f"{during} ({len(seen)} in the whole invocation)",
        "0 (gate.speed.without_cyclic_gc pauses the collector)",
        during == 0,
    )
    report("gate check: the collector is back on after it", gc.isenabled(), True, gc.isenabled())


#: A TLS server answering "ok", started with `MALLOC_ENV` (the environment the image and the
#: chart give `gate webhook serve`) when "tuned", without when "plain". Prints its port when it
#: listens.
_TLS_CHILD = """
import sys
from webhook.httpserver import HttpsServer
from webhook.serve import CertReloader, listen_socket
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
sock = listen_socket("127.0.0.1", 0)
server = HttpsServer(app, CertReloader(sys.argv[1], sys.argv[2]).context)
server.run(sock, ready=lambda: print(sock.getsockname()[1], flush=True))
"""


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])


def _grown_and_kept(cert: Path, key: Path, context: ssl.SSLContext, mode: str) -> tuple[int, int]:
    """KiB the server grew with 400 open TLS connections, and KiB it kept once they closed."""
    argv = [sys.executable, "-c", _TLS_CHILD, str(cert), str(key), mode]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if mode == "tuned":
        env.update(MALLOC_ENV)
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            before = _rss_kib(proc.pid)
            with contextlib.ExitStack() as held:
                for _ in range(400):
                    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
                    conn = context.wrap_socket(raw, server_hostname="127.0.0.1")
                    held.callback(conn.close)
                    conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    conn.recv(1000)
                grown = _rss_kib(proc.pid) - before
            # the server closes its side as each close arrives: give it up to 10 s to settle
            deadline = time.monotonic() + 10
            kept = grown
            while time.monotonic() < deadline:
                kept = _rss_kib(proc.pid) - before
                if kept < grown // 2:
                    break
                time.sleep(0.05)
            return grown, kept
        finally:
            proc.terminate()
            proc.wait(30)


def webhook_memory_after_a_burst(tmp: Path) -> None:
    """RSS grown by 400 TLS connections and kept after they close, with and without the tuning."""
    if not Path("/proc/self/status").exists():
        print("webhook memory: skipped (reads /proc)")
        return
    from webhook import tls

    ca = tls.make_ca()
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    tls.write_pair(tls.make_serving_cert(ca, ["127.0.0.1"]), cert, key)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    for mode in ("tuned", "plain"):
        grown, kept = _grown_and_kept(cert, key, context, mode)
        figure = f"grew {grown / 1024:.0f} MiB, kept {kept / 1024:.0f} MiB once closed"
        if mode == "plain":
            print(f"webhook, 400 TLS connections, without MALLOC_ENV: {figure}")
            continue
        report(
            "webhook, 400 TLS connections, with MALLOC_ENV (as served)",
            figure,
            "grew over 50 MiB (the burst is real), kept under half of it",
            grown > 50 * 1024 and kept < grown // 2,
        )


MEASURES = (
    parse_cache_queries,
    git_reads,
    collections_during_a_check,
    webhook_memory_after_a_burst,
)


def main() -> int:
    """Every count, in a scratch parse cache; exit 1 if any misses its target."""
    os.environ.pop("GITHUB_ACTIONS", None)
    with tempfile.TemporaryDirectory(prefix="prune-gate-internals-") as tmp:
        for part, measure in enumerate(MEASURES):
            scratch = Path(tmp) / str(part)
            scratch.mkdir()
            os.environ["PRUNE_GATE_PARSE_CACHE"] = str(scratch / "cache")  # each its own, empty
            forget_this_process()
            measure(scratch)
    if OVER:
        print(f"over target: {', '.join(OVER)}")
    return 1 if OVER else 0


if __name__ == "__main__":
    sys.exit(main())
