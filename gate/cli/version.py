"""`gate version` (and `gate --version`): the version, and which optional parts are active.

A verdict can depend on them: the native YAML reader reads faster with the same results, and the
confined renderer (`prune-gate-kustomize`) builds a kustomization as Flux does, where the
fallbacks (`kustomize build`, `kubectl kustomize`) refuse a file outside the kustomization's own
directory. So a CI log should say which ran and from where: the Action prints this before the
check. Imports nothing heavy (no YAML library, no engine): it runs on every CI step.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from gate import __version__

#: The renderer names and environment variable of gate.sources.render (not imported: it loads
#: the YAML readers); test_version holds them equal.
HELPER = "prune-gate-kustomize"
HELPER_ENV = "PRUNE_GATE_KUSTOMIZE"
NATIVE_ENV = "PRUNE_GATE_NATIVE_YAML"
#: gate.cli.root.WEBHOOK_EXTRA (not imported: root imports this module), held equal by test_version.
WEBHOOK_EXTRA = ("h11", "h2", "prometheus_client", "cryptography")
_OFF = ("off", "0", "false", "no")


@dataclass(frozen=True)
class Part:
    """One optional part: its name, whether it is used, and what says so (version, path)."""

    name: str
    active: bool
    detail: str


def native_reader() -> Part:
    """The native YAML reader (`prune_gate_yaml`): installed, importable and not turned off."""
    name = "native YAML reader"
    if os.environ.get(NATIVE_ENV, "").lower() in _OFF:
        return Part(name, False, f"off ({NATIVE_ENV}={os.environ[NATIVE_ENV]})")
    if importlib.util.find_spec("prune_gate_yaml") is None:
        return Part(
            name,
            False,
            "not installed: YAML is read in Python, several times slower, with the same results "
            "(pip install prune-gate-yaml, a binary wheel for Linux; or scripts/build-native)",
        )
    try:
        module = importlib.import_module("prune_gate_yaml")
    except ImportError as exc:
        return Part(name, False, f"installed but does not load ({exc}): YAML is read in Python")
    where = getattr(module, "__file__", None) or "?"
    build = getattr(module, "BUILD", "?")
    return Part(name, True, f"prune-gate-yaml {module.__version__} (build {build}) from {where}")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def renderer(search_path: str | None = None) -> Part:
    """The kustomize renderer `--render kustomize` and `--flux-root` would run, found as
    gate.sources.render.find_kustomize finds it; the helper with its sha256, which the Action
    compares with the release's pinned checksum."""
    name = "kustomize renderer"
    explicit = os.environ.get(HELPER_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            return Part(name, False, f"{HELPER_ENV}={explicit} is not an executable file")
        where = f"{HELPER_ENV}={explicit}"
        return Part(name, True, f"{HELPER} (confined) from {where}, sha256 {_sha256(explicit)}")
    helper = shutil.which(HELPER, path=search_path)
    if helper:
        digest = _sha256(helper)
        return Part(name, True, f"{HELPER} (confined) from PATH: {helper}, sha256 {digest}")
    for command, label in (("kustomize", "kustomize build"), ("kubectl", "kubectl kustomize")):
        found = shutil.which(command, path=search_path)
        if found:
            return Part(
                name,
                True,
                f"{label} from {found} (fallback: {HELPER} is not on PATH; files outside a "
                "kustomization's own directory are refused, where Flux reads them)",
            )
    return Part(name, False, f"none: {HELPER}, kustomize and kubectl are not on PATH")


def webhook_extra() -> Part:
    """Whether `gate webhook` can run here (its extra's modules, looked up, not imported)."""
    missing = [m for m in WEBHOOK_EXTRA if importlib.util.find_spec(m) is None]
    if missing:
        return Part("webhook extra", False, "not installed (pip install 'prune-gate[webhook]')")
    return Part("webhook extra", True, "installed")


def report() -> str:
    """The lines `gate version` prints."""
    lines = [
        f"gate {__version__} (Python {platform.python_version()}, {sys.executable}; "
        f"{platform.system().lower()}/{platform.machine()})"
    ]
    for part in (native_reader(), renderer(), webhook_extra()):
        state = "active" if part.active else "inactive"
        lines.append(f"{part.name}: {state}: {part.detail}")
    return "\n".join(lines)


@click.command("version")
def version_command() -> None:
    """Print the version, and which native reader and kustomize renderer are active, from where."""
    click.echo(report())


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`gate --version`: the same report as `gate version`."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(report())
    ctx.exit()
