"""`gate check --defer-to DIR`: write the candidate as a speculative deploy should apply it.

The artifact is the candidate's objects, file by file (rendered and plain git mode: one file per
input file, named as in the input) or root by root (`--render kustomize`: `<path>.yaml` per
`--path`; `--flux-root`: `flux/<namespace>/<name>.yaml` per Kustomization), with every object whose
deletion is deferred put back exactly as base declares it, in the file base has it in. Objects
are written as YAML from what was parsed (the values as Kubernetes reads them; comments are not
kept). Flux objects are written as base declares them (`gate.engine.defer` says why), a new one
left out. The record, `<DIR>.deferred.json`, says what was kept or left out, why and from where;
it lives beside DIR, never in it, because a deployer given DIR reads every manifest-looking file
there (kubectl `apply -R -f` every `.json`, `.yaml` and `.yml`, cli-runtime's `FileExtensions`;
Flux's generated kustomization every `.yaml` and `.yml`) and stops on one with no apiVersion
and kind.

The directory must be new or empty: a stale file from an earlier run would be deployed too (a
stale record beside it is only replaced: nothing deploys it). Both are written beside DIR first
and moved into place, so a failed write leaves no half artifact.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from gate.engine.argocd import ROOT_PREFIX as ARGOCD_ROOT
from gate.engine.argosync import AppPart
from gate.engine.defer import Deferral, Kept
from gate.engine.deployers.argocd import GROUP
from gate.model.errors import InputError
from gate.model.objects import Manifest, RawObject, learn_scopes, to_manifest
from gate.model.refs import ObjectRef, Scopes, group_of
from gate.sources.argocd import app_root

#: The record of what the artifact keeps is `<DIR>` with this suffix, beside DIR.
RECORD_SUFFIX = ".deferred.json"

#: Version of the record's shape.
SCHEMA_VERSION = 1

#: Where an object goes in the artifact: a relative file name, or None to leave it out.
Placer = Callable[[RawObject], str | None]


def record_path(directory: str) -> Path:
    """Where the record of the artifact in `directory` goes: beside it, `<DIR>.deferred.json`."""
    target = _target(directory)
    return target.with_name(target.name + RECORD_SUFFIX)


def _target(directory: str) -> Path:
    target = Path(os.path.normpath(directory))
    if target.name in ("", ".", ".."):  # `.`, `..`, `/`: name it by where it is
        target = Path(directory).resolve()
    if not target.name:
        raise InputError("cannot hold the artifact: its record goes beside it", directory)
    return target


def write_artifact(
    directory: str,
    head: Sequence[RawObject],
    base: Sequence[RawObject],
    deferral: Deferral,
    *,
    head_file: Placer,
    base_file: Placer,
    namespace: str,
    meta: dict[str, Any],
) -> list[str]:
    """Write the artifact into `directory` and its record beside it (`record_path`); return the
    files written (relative, sorted)."""
    target = _target(directory)
    record_file = record_path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(
            "exists and is not an empty directory: the artifact must hold nothing else (a "
            "stale file would be deployed too); give a new directory",
            directory,
        )
    if record_file.is_dir():
        raise InputError(
            "is a directory: the artifact's record goes there; remove it or give another DIR",
            str(record_file),
        )
    scopes = Scopes()
    learn_scopes(scopes, base, head)
    leave_out = deferral.refs | deferral.withheld_refs
    # What an Application base does not declare renders goes nowhere: the Application is new
    # (withheld with the other builders), and `gate argocd sync` would sync its part into
    # whatever live Application has its name, another team's perhaps.
    declared = {_application_root(r.body) for r in base} - {None}
    undeclared: set[str] = set()
    files: dict[str, list[dict[str, Any]]] = {}
    for raw in head:
        name = head_file(raw)
        if name is not None and raw.root.startswith(ARGOCD_ROOT) and raw.root not in declared:
            undeclared.add(raw.root)
        elif name is not None and to_manifest(raw, scopes, namespace).ref not in leave_out:
            files.setdefault(_safe(name), []).append(raw.body)
    kept_at: dict[ObjectRef, str] = {}
    by_ref = {k.manifest.ref: k for k in deferral.kept}
    for raw in base:
        ref = to_manifest(raw, scopes, namespace).ref
        if ref in by_ref and ref not in kept_at:
            name = base_file(raw)
            if name is None:  # cannot happen for a keepable object: say so rather than drop it
                raise InputError(f"{ref.display()} is kept but has no place in the artifact")
            kept_at[ref] = _safe(name)
            files.setdefault(kept_at[ref], []).append(raw.body)
    record = {
        "schemaVersion": SCHEMA_VERSION,
        **meta,
        "files": sorted(files),
        "kept": [_kept(k, kept_at) for k in deferral.kept],
        "withheld": [{"object": _object(w.manifest), "why": w.reason} for w in deferral.withheld],
        "builtFromBase": [
            {"remote": f.ref.name, "codes": [f.code.value], "why": why}
            for f, why in deferral.built_from_base
        ],
        "undeclaredApplications": [
            {
                "application": root.removeprefix(ARGOCD_ROOT),
                "why": "base declares no such Application: what it renders reaches the cluster "
                "with the merged deploy",
            }
            for root in sorted(undeclared)
        ],
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staged_record = staging.with_name(staging.name + RECORD_SUFFIX)
    placed = False
    try:
        for name, bodies in files.items():
            out = staging / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(_yaml_stream(bodies), encoding="utf-8")
        staged_record.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.replace(target)
        placed = True
        staged_record.replace(record_file)
    except OSError as exc:
        shutil.rmtree(target if placed else staging, ignore_errors=True)
        staged_record.unlink(missing_ok=True)
        raise InputError(f"cannot write the artifact: {exc.strerror or exc}", directory) from None
    return sorted(files)


def _application_root(body: dict[str, Any]) -> str | None:
    """The root tag of what `body` renders, when it is an Argo CD Application."""
    if body.get("kind") != "Application" or group_of(str(body.get("apiVersion", ""))) != GROUP:
        return None
    return app_root(body)


def _object(m: Manifest) -> dict[str, Any]:
    return {
        "apiVersion": m.api_version,
        "kind": m.ref.kind,
        "namespace": m.ref.namespace or None,
        "name": m.ref.name,
    }


def _kept(k: Kept, kept_at: dict[ObjectRef, str]) -> dict[str, Any]:
    m = k.manifest
    return {
        "object": _object(m),
        "codes": sorted({f.code.value for f in k.findings}),
        "why": [f.message for f in k.findings] or [k.reason],
        "from": {"path": m.source.path, "line": m.source.line} if m.source else None,
        "file": kept_at.get(m.ref),
    }


def _yaml_stream(bodies: list[dict[str, Any]]) -> str:
    docs = (yaml.safe_dump(b, sort_keys=False, allow_unicode=True) for b in bodies)
    return "---\n" + "---\n".join(docs)


def _safe(name: str) -> str:
    """A relative path inside the artifact; anything that would leave it is an error."""
    clean = posixpath.normpath(name.replace("\\", "/"))
    if clean.startswith(("/", "../")) or clean in ("..", ".", ""):
        raise InputError(f"cannot be a file of the artifact: {name!r}")
    return clean


# --- where objects go, per mode -----------------------------------------------------------------


def by_input_file(label: str) -> Placer:
    """Rendered mode: a file named as in the input (`label`, as given to --*-manifests)."""
    prefix = label.rstrip("/") + "/"

    def place(raw: RawObject) -> str:
        path = raw.source.path
        if label == "-" or path.startswith("<"):
            return "stdin.yaml"
        if path.startswith(prefix):
            return path[len(prefix) :]
        return posixpath.basename(path)

    return place


def by_repository_file(raw: RawObject) -> str:
    """Plain git mode: the file's path in the repository."""
    return raw.source.path


def by_root(raw: RawObject) -> str | None:
    """`--render kustomize`: `<path>.yaml` per --path; `--flux-root`: one file per
    Kustomization; `--argocd-root`: one per Application. What a HelmRelease's chart renders is
    left out (helm-controller installs it from the HelmRelease, which is in its Kustomization's
    file), and so are the Applications an ApplicationSet generates."""
    root = raw.root
    if root.startswith(("helm:", "appset:")):
        return None  # made by a controller from an object in its parent's file
    if root.startswith("flux:"):
        return f"flux/{root.removeprefix('flux:')}.yaml"
    if root.startswith(ARGOCD_ROOT):
        ns, _, name = root.removeprefix(ARGOCD_ROOT).partition("/")
        return f"argocd/{ns or '_'}/{name}.yaml"
    clean = posixpath.normpath(root or ".")
    return "root.yaml" if clean == "." else f"{clean}.yaml"


# --- reading an artifact back: what each Argo CD Application syncs -------------------------------

#: Where `by_root` puts an Application's part: `argocd/<namespace>/<name>.yaml` (`_` for none).
ARGOCD_DIR = "argocd/"
#: A namespace (a DNS label) and an Application's name (a DNS subdomain), as the API takes them.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def argocd_parts(directory: str, default_namespace: str) -> tuple[dict[str, Any], list[AppPart]]:
    """The artifact's record, and each Application's part of it, in file order: what
    `gate argocd sync` asks each Application to sync. Only an artifact with its record is read
    (so only what `--defer-to` wrote); an Application written without a namespace (`_`) is taken
    to be in `default_namespace`."""
    record_file = record_path(directory)
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"no record beside it ({record_file.name}): give the directory gate check "
            "--defer-to wrote",
            directory,
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the artifact's record: {exc}", str(record_file)) from None
    if not isinstance(record, dict) or record.get("schemaVersion") != SCHEMA_VERSION:
        raise InputError(
            f"is not a record of this version of prune-gate (schemaVersion {SCHEMA_VERSION})",
            str(record_file),
        )
    parts = []
    for name in record.get("files") or ():
        if not isinstance(name, str) or not name.startswith(ARGOCD_DIR):
            continue
        namespace, slash, file = name.removeprefix(ARGOCD_DIR).partition("/")
        app = file.removesuffix(".yaml")
        if not (slash and file.endswith(".yaml") and _NAME.match(app)) or not (
            namespace == "_" or _NAMESPACE.match(namespace)
        ):
            raise InputError("is not an Application's part (argocd/NAMESPACE/NAME.yaml)", name)
        path = Path(directory) / _safe(name)
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read the artifact: {exc}", str(path)) from None
        objects = tuple(d for d in docs if d is not None)
        if not all(isinstance(d, dict) for d in objects):
            raise InputError("holds a YAML document that is not an object", str(path))
        ns = default_namespace if namespace == "_" else namespace
        parts.append(AppPart(ns, app, name, objects))
    return record, parts
