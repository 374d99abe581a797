"""The version has one place, `gate.__version__`; everything released follows it: the package's
metadata (pyproject reads the attribute), the chart's version and appVersion, the native reader's
crate and wheel, the image's label, and a CHANGELOG section (.github/workflows/release.yml refuses
a tag that names another)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from gate import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gate.__version__"}


def test_the_chart_follows_it() -> None:
    chart = yaml.safe_load((ROOT / "charts/prune-gate/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_native_reader_follows_it() -> None:
    crate = tomllib.loads((ROOT / "native/Cargo.toml").read_text())
    wheel = tomllib.loads((ROOT / "native/pyproject.toml").read_text())
    assert crate["package"]["version"] == wheel["project"]["version"] == __version__
    lock = (ROOT / "native/Cargo.lock").read_text()
    assert f'name = "prune-gate-yaml"\nversion = "{__version__}"' in lock


def test_the_image_follows_it() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.M) == [__version__]


def test_the_changelog_has_a_section_for_it() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M)
