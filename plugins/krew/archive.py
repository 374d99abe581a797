"""The krew plugin's release archive and its manifest, byte for byte the same on every machine.

The archive, `kubectl-prune_gate-V.zip`, holds the plugin (`kubectl-prune_gate`, a POSIX shell
file with V written in) and the LICENSE. prune-gate is a Python package, so one archive serves
every platform: the four platforms of the manifest name the same file and sha256. It is a zip
whose members are stored, not deflated, with fixed times and modes, so that its sha256 depends
on its content alone (no zlib version, no clock, no umask): the manifest committed here can name
the sha256 of the archive a release builds (`scripts/dist` builds it and checks the two agree),
as action/helper.sha256 pins the helper binaries.

usage: python plugins/krew/archive.py zip DIR       write DIR/kubectl-prune_gate-V.zip, print it
       python plugins/krew/archive.py manifest      write plugins/krew/prune-gate.yaml for V
       python plugins/krew/archive.py check         exit 1 if prune-gate.yaml is not that file
V is gate.__version__, read from gate/__init__.py.
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MANIFEST = HERE / "prune-gate.yaml"
PLUGIN = "kubectl-prune_gate"
#: Where a release publishes its assets (`gh release create ... dist/*`).
RELEASES = "https://github.com/prune-gate/prune-gate/releases/download"
PLATFORMS = (("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64"))
#: The manifest's first lines: where it comes from.
HEADER = """\
# Written by `python plugins/krew/archive.py manifest`; a test holds it equal to what that
# writes for gate.__version__, and scripts/dist checks its sha256 against the archive it builds.
"""
#: zip's earliest time: the members' time, whenever the archive is built.
EPOCH = (1980, 1, 1, 0, 0, 0)


def version() -> str:
    """gate.__version__, without importing gate."""
    text = (REPO / "gate" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise SystemExit("archive: no __version__ in gate/__init__.py")
    return found.group(1)


def archive_name(v: str) -> str:
    return f"{PLUGIN}-{v}.zip"


def _member(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.create_system = 3  # Unix: krew takes the mode from the external attributes
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_STORED
    return info


def archive_bytes(v: str) -> bytes:
    """The archive for version `v`: the plugin with `v` written in (mode 755), and the LICENSE."""
    plugin = (HERE / PLUGIN).read_text(encoding="utf-8")
    if plugin.count("@VERSION@") != 2:  # the header comment and `version=`
        raise SystemExit(f"archive: plugins/krew/{PLUGIN} lost its @VERSION@ placeholders")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(_member(PLUGIN, 0o755), plugin.replace("@VERSION@", v).encode())
        z.writestr(_member("LICENSE", 0o644), (REPO / "LICENSE").read_bytes())
    return out.getvalue()


def manifest_text(v: str, sha256: str) -> str:
    """The krew manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin) for `v`."""
    uri = f"{RELEASES}/v{v}/{archive_name(v)}"
    platforms = "".join(
        f"""  - selector:
      matchLabels:
        os: {os}
        arch: {arch}
    uri: {uri}
    sha256: {sha256}
    bin: {PLUGIN}
    files:
      - from: {PLUGIN}
        to: .
      - from: LICENSE
        to: .
"""
        for os, arch in PLATFORMS
    )
    return f"""{HEADER}apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: prune-gate
spec:
  version: v{v}
  homepage: https://github.com/prune-gate/prune-gate
  shortDescription: Explain and heal stuck deletions of volumes and claims
  description: |
    prune-gate's cluster commands: doctor explains what each stuck deletion (a claim
    Terminating behind kubernetes.io/pvc-protection, a namespace that will not go) waits
    on, with the pod and node that pin it and the command that fixes it; heal gets out
    of the wedge without losing data (a dry run unless --apply); audit lists the guarded
    claims whose data a deletion would destroy; retire shows where each two-stage
    retirement stands; fence shows or moves the speculation fence a merge queue holds.
    kubectl's --kubeconfig, --context and -n/--namespace work as in kubectl.
  caveats: |
    prune-gate is a Python package: the plugin needs Python 3.11 or later (python3 on
    PATH). Its first run installs prune-gate {v} from PyPI with pip into
    ~/.local/share/prune-gate/kubectl-plugin/{v}; run `kubectl prune-gate version`
    once now, while the network is there, not in an incident. To use a prune-gate you
    installed yourself, set PRUNE_GATE_PYTHON to its Python.
    `gate check` (the merge-queue gate) is not part of the plugin: pip install prune-gate.
  platforms:
{platforms}"""


def main(argv: list[str]) -> int:
    v = version()
    if argv[:1] == ["zip"] and len(argv) == 2:
        path = Path(argv[1]) / archive_name(v)
        path.write_bytes(archive_bytes(v))
        print(path)
        return 0
    want = manifest_text(v, hashlib.sha256(archive_bytes(v)).hexdigest())
    if argv == ["manifest"]:
        MANIFEST.write_text(want, encoding="utf-8")
        print(MANIFEST)
        return 0
    if argv == ["check"]:
        if MANIFEST.is_file() and MANIFEST.read_text(encoding="utf-8") == want:
            return 0
        print(
            f"archive: {MANIFEST.relative_to(REPO)} is not the manifest of prune-gate {v}'s "
            f"archive: run `python plugins/krew/archive.py manifest` and commit it",
            file=sys.stderr,
        )
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
