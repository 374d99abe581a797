"""prune-gate-yaml's build backend: maturin's, except that without cargo it stops at once.

Finding no cargo, maturin's backend asks pip for `puccinialin` and downloads a whole Rust
toolchain (657 MB) into a temporary folder, to build a reader gate does not need: gate reads YAML
in Python without it, with the same results. Here a missing cargo is one message saying how to
get the reader (a prebuilt wheel, or Rust), and the build stops before anything is downloaded
(`MATURIN_NO_INSTALL_RUST`, maturin's own switch, is set for every hook). The paths that reach
this: `pip install ./native` (the README's), and pip building this project's sdist.
scripts/build-native checks for cargo before it calls pip, and only warns.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

os.environ["MATURIN_NO_INSTALL_RUST"] = "1"

from maturin import (
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_wheel,
)
from maturin import get_requires_for_build_wheel as _maturin_requires_for_build_wheel

__all__ = [
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_wheel",
]

NO_CARGO = """\
prune-gate-yaml: cargo not found, so the native YAML reader is not built (no Rust toolchain is
downloaded). prune-gate works without it: gate reads YAML in Python, several times slower, with
the same results. To get the reader: install the prebuilt wheel (Linux x86_64 and aarch64:
`pip install prune-gate-yaml`, or the prune_gate_yaml-*.whl of a release or of `make dist`), or
install Rust (https://rustup.rs) and run this install again.
"""


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """pip's first call into the backend for a wheel: without cargo, the one message and stop."""
    if shutil.which("cargo") is None:
        sys.stderr.write(NO_CARGO)
        sys.exit(1)
    requires: list[str] = _maturin_requires_for_build_wheel(config_settings)
    return requires


get_requires_for_build_editable = get_requires_for_build_wheel
