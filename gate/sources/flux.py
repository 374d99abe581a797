"""What a Flux cluster is told to hold at one revision, found from the repository itself.

A Flux repository says which directories reach the cluster: the entry point (`clusters/prod`,
applied by the `flux-system` Kustomization) holds Kustomization objects, each naming a
`spec.path` in a source; those hold more. `--flux-root DIR` follows that graph at each revision,
so a Kustomization that is removed, or whose `spec.path`, `targetNamespace` or `sourceRef`
changes, is compared as what the cluster will be told to hold, and a repository that moves its
roots needs no flags per revision.

Each path is built as kustomize-controller builds it (`gate.sources.render.ExportedTree`: a
generated kustomization where there is none), then given what the Kustomization adds:
`spec.targetNamespace` on namespaced objects and `spec.postBuild` variable substitution (inline
`substitute`, and `substituteFrom` ConfigMaps and plain Secrets found in the same revision; a
variable with no known value keeps its `${VAR}` text, so identities stay stable between the two
revisions). Every object is tagged with the Kustomization that applies it (`flux:NS/NAME`), which
the engine reads (`gate.engine.flux`) to tell a prune from an orphaning.

Only Kustomizations whose `sourceRef` is this repository are followed: the GitRepository the
entry point's own Kustomization reads (else `flux-system/flux-system`), or those named with
`--flux-source`. Others read a source prune-gate does not have; what they apply is unknown and
stays out of both sides (a Kustomization re-pointed to one is a change the engine names).
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gate.engine.deployers import flux, helm
from gate.model.errors import GitError, InputError, RenderError
from gate.model.objects import RawObject
from gate.model.refs import CLUSTER_SCOPED, crd_kind, group_of
from gate.sources.manifests import parse_stream
from gate.sources.render import DEFAULT_TIMEOUT, ExportedTree

FLUX_GROUP = flux.GROUP
HELM_GROUP = helm.GROUP
HELM_PREFIX = "helm:"
#: The helm binary for HelmReleases (`helm` on PATH by default).
HELM_ENV = "PRUNE_GATE_HELM"
#: The root tag of the objects a Kustomization applies; the entry point's are tagged with its path.
ROOT_PREFIX = "flux:"
DEFAULT_SOURCE = ("flux-system", "flux-system")
#: An object that opts out of substitution (kustomize-controller honours it).
SUBSTITUTE_ANNOTATION = flux.SUBSTITUTE
#: Fields of a Flux Kustomization that change what its path builds; a `$patch: delete` in
#: `spec.patches` removes an object as surely as deleting its file.
BUILD_FIELDS = ("patches", "images", "components", "namePrefix", "nameSuffix")
#: How many Kustomizations one revision may chain before it is called a loop.
MAX_KUSTOMIZATIONS = 2000

_VAR_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?=|:?-)(.*))?\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Job:
    path: str
    root: str
    namespace: str
    target_namespace: str
    substitute: dict[str, str]
    substitute_from: tuple[dict[str, Any], ...]
    #: Kustomization fields Flux adds to the build (patches, images, components, name affixes).
    extra: dict[str, Any] | None = None


def root_of(namespace: str, name: str) -> str:
    """The root tag of the objects Kustomization `namespace/name` applies."""
    return f"{ROOT_PREFIX}{namespace}/{name}"


def render_flux(
    repo: str | Path,
    rev: str,
    entry: str,
    *,
    sources: Sequence[tuple[str, str]] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> list[RawObject]:
    """Every object the Kustomizations reachable from `entry` apply at `rev`, tagged by root."""
    with ExportedTree(repo, rev, timeout=timeout) as tree:
        entry = _clean(entry)
        if not tree.exists(entry):
            raise GitError(
                f"--flux-root {entry} does not exist at revision {rev} ({tree.sha[:12]})"
            )
        out: list[RawObject] = []
        own = set(sources)
        first = _entry_job(tree, entry, own)
        queue, seen = [first], {first.root}
        while queue:
            job = queue.pop(0)
            objects = [_finish(o, job, out) for o in tree.build(job.path, job.root, job.extra)]
            out.extend(objects)
            kustomizations = [o for o in objects if _is_kustomization(o.body)]
            if not own:
                own = _own_sources(kustomizations, entry)
            for hr in (o for o in objects if _is_helm_release(o.body)):
                out.extend(render_helm_release(tree, hr, own, timeout))
            for k in kustomizations:
                job_for = _job_for(k, own)
                if job_for is None or job_for.root in seen:
                    continue
                seen.add(job_for.root)
                if len(seen) > MAX_KUSTOMIZATIONS:
                    raise InputError(
                        f"more than {MAX_KUSTOMIZATIONS} Kustomizations reachable from "
                        f"{entry}: a loop in spec.path?"
                    )
                if not tree.exists(job_for.path):
                    raise GitError(
                        f"Kustomization {job_for.root.removeprefix(ROOT_PREFIX)} names spec.path "
                        f"{job_for.path}, which does not exist at revision {rev} "
                        f"({tree.sha[:12]}): Flux would fail to build it",
                        str(k.source),
                    )
                queue.append(job_for)
        return out


def _entry_job(tree: ExportedTree, entry: str, own: set[tuple[str, str]]) -> _Job:
    """How the entry point is applied: by the Kustomization in it that applies it (flux-system,
    whose spec.path names the entry, or which is named as this repository's GitRepository), so
    its objects are that Kustomization's (its prune decides their removal); when the candidate
    re-points it elsewhere, Flux applies the new path instead, and so does this."""
    plain = _Job(entry, entry, "", "", {}, (), None)
    found = [o for o in tree.build(entry) if _is_kustomization(o.body)]
    sources = own or _own_sources(found, entry)
    for k in found:
        job = _job_for(k, sources)
        if job is None:
            continue
        meta = _meta(k.body)
        named = (str(meta.get("namespace") or ""), str(meta.get("name", ""))) in sources
        if job.path == entry or named:
            if job.path != entry and not tree.exists(job.path):
                raise GitError(
                    f"Kustomization {job.root.removeprefix(ROOT_PREFIX)} applies the entry point "
                    f"but names spec.path {job.path}, which does not exist at revision "
                    f"{tree.rev} ({tree.sha[:12]})",
                    str(k.source),
                )
            return job
    return plain


def _is_helm_release(body: dict[str, Any]) -> bool:
    return group_of(str(body.get("apiVersion", ""))) == HELM_GROUP and body.get("kind") == (
        "HelmRelease"
    )


def release_identity(body: dict[str, Any]) -> tuple[str, str]:
    """(release namespace, release name) of a Flux HelmRelease, as helm-controller names it:
    `spec.releaseName`, else `<targetNamespace>-<name>` with a targetNamespace, else its name;
    installed in `spec.targetNamespace`, else its own namespace."""
    spec, meta = _spec(body), _meta(body)
    name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "")
    target = str(spec.get("targetNamespace") or "")
    release = str(spec.get("releaseName") or (f"{target}-{name}" if target else name))
    return target or ns, release


def helm_root(namespace: str, name: str) -> str:
    """The root tag of the objects HelmRelease `namespace/name` installs."""
    return f"{HELM_PREFIX}{namespace}/{name}"


def render_helm_release(
    tree: ExportedTree, hr: RawObject, own: set[tuple[str, str]], timeout: float
) -> list[RawObject]:
    """What a HelmRelease installs, when its chart is a directory of this repository
    (`spec.chart.spec.chart: ./charts/x` from our GitRepository) and helm is on PATH: `helm
    template` with its inline `spec.values`, each object tagged `helm:NS/NAME` and placed at the
    HelmRelease's own line (where a reader edits). Anything else (a HelmRepository, OCI, a
    chartRef, valuesFrom) is not rendered: the engine says the release's content is unknown."""
    spec, meta = _spec(hr.body), _meta(hr.body)
    chart = (
        ((spec.get("chart") or {}).get("spec") or {}) if isinstance(spec.get("chart"), dict) else {}
    )
    if not isinstance(chart, dict) or spec.get("valuesFrom"):
        return []
    source = chart.get("sourceRef") if isinstance(chart.get("sourceRef"), dict) else {}
    assert isinstance(source, dict)
    src_ns = str(source.get("namespace") or meta.get("namespace") or "")
    if source.get("kind") != "GitRepository" or (src_ns, str(source.get("name", ""))) not in own:
        return []
    helm = shutil.which(os.environ.get(HELM_ENV, "helm"))
    path = _clean(str(chart.get("chart") or ""))
    if helm is None or not (tree.tree / path / "Chart.yaml").is_file():
        return []
    namespace, release = release_identity(hr.body)
    values = spec.get("values") if isinstance(spec.get("values"), dict) else {}
    with tempfile.TemporaryDirectory(prefix="prune-gate-helm-") as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        values_file = Path(home) / "values.json"
        values_file.write_text(json.dumps(values), encoding="utf-8")
        argv = [helm, "template", release, str(tree.tree / path), "--namespace", namespace]
        argv += ["--include-crds", "--values", str(values_file)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RenderError(f"{hr.source}: helm template {path}: {exc}") from None
    if done.returncode != 0:
        raise RenderError(
            f"{hr.source}: HelmRelease {meta.get('namespace')}/{meta.get('name')}: "
            f"`helm template {path}` failed: {tree.repository_paths(done.stderr.strip())}"
        )
    root = helm_root(str(meta.get("namespace") or ""), str(meta.get("name", "")))
    out = []
    for o in parse_stream(done.stdout, f"{path} (helm template)"):
        body = o.body
        if not _meta(body).get("namespace") and not _cluster_scoped(body, ()):
            body = {**body, "metadata": {**_meta(body), "namespace": namespace}}
        out.append(RawObject(body, hr.source, root))
    return out


def _clean(path: str) -> str:
    norm = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if norm == ".." or norm.startswith("../"):
        raise InputError(f"{path} is outside the repository")
    return norm


def _is_kustomization(body: dict[str, Any]) -> bool:
    return group_of(str(body.get("apiVersion", ""))) == FLUX_GROUP and body.get("kind") == (
        "Kustomization"
    )


def _meta(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _source_of(body: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a Kustomization's sourceRef (namespace defaults to its own)."""
    ref = _spec(body).get("sourceRef")
    ref = ref if isinstance(ref, dict) else {}
    ns = str(ref.get("namespace") or _meta(body).get("namespace") or "")
    return str(ref.get("kind", "")), ns, str(ref.get("name", ""))


def _own_sources(kustomizations: Iterable[RawObject], entry: str) -> set[tuple[str, str]]:
    """The GitRepository that is this repository: the one the Kustomization applying the entry
    point reads, else flux-system/flux-system."""
    for k in kustomizations:
        kind, ns, name = _source_of(k.body)
        if kind == "GitRepository" and _clean(str(_spec(k.body).get("path") or ".")) == entry:
            return {(ns, name)}
    return {DEFAULT_SOURCE}


def _job_for(k: RawObject, own: set[tuple[str, str]]) -> _Job | None:
    """What to build for one Kustomization, or None when its source is not this repository."""
    kind, ns, name = _source_of(k.body)
    if kind != "GitRepository" or (ns, name) not in own:
        return None
    spec, meta = _spec(k.body), _meta(k.body)
    post = spec.get("postBuild") if isinstance(spec.get("postBuild"), dict) else {}
    assert isinstance(post, dict)
    inline = post.get("substitute") if isinstance(post.get("substitute"), dict) else {}
    assert isinstance(inline, dict)
    sources = post.get("substituteFrom") if isinstance(post.get("substituteFrom"), list) else []
    assert isinstance(sources, list)
    own_ns = str(meta.get("namespace") or "")
    return _Job(
        path=_clean(str(spec.get("path") or ".")),
        root=root_of(own_ns, str(meta.get("name", ""))),
        namespace=own_ns,
        target_namespace=str(spec.get("targetNamespace") or ""),
        substitute={str(k): str(v) for k, v in inline.items()},
        substitute_from=tuple(s for s in sources if isinstance(s, dict)),
        extra={f: spec[f] for f in BUILD_FIELDS if spec.get(f)} or None,
    )


def _finish(raw: RawObject, job: _Job, known: Sequence[RawObject]) -> RawObject:
    """One built object as the Kustomization applies it: substituted, then its namespace set."""
    body = raw.body
    if job.substitute or job.substitute_from:
        annotations = _meta(body).get("annotations")
        disabled = isinstance(annotations, dict) and (
            str(annotations.get(SUBSTITUTE_ANNOTATION, "")).lower() == "disabled"
        )
        if not disabled:
            body = _substitute(body, _variables(job, known))
    if job.target_namespace and not _cluster_scoped(body, known):
        meta = dict(_meta(body))
        meta["namespace"] = job.target_namespace
        body = {**body, "metadata": meta}
    return replace(raw, body=body) if body is not raw.body else raw


def _cluster_scoped(body: dict[str, Any], known: Sequence[RawObject]) -> bool:
    key = (group_of(str(body.get("apiVersion", ""))), str(body.get("kind", "")))
    if key in CLUSTER_SCOPED:
        return True
    for o in known:
        declared = crd_kind(o.body)
        if declared == key:
            return str(_spec(o.body).get("scope", "")) == "Cluster"
    return False


def _variables(job: _Job, known: Sequence[RawObject]) -> dict[str, str]:
    """substituteFrom in order (later wins), then substitute inline (wins over all)."""
    values: dict[str, str] = {}
    for src in job.substitute_from:
        kind, name = str(src.get("kind", "")), str(src.get("name", ""))
        for o in known:
            meta = _meta(o.body)
            if (
                o.body.get("kind") == kind
                and meta.get("name") == name
                and str(meta.get("namespace") or "") == job.namespace
            ):
                values.update(_data_of(o.body))
                break
    values.update(job.substitute)
    return values


def _data_of(body: dict[str, Any]) -> dict[str, str]:
    """A ConfigMap's data, or a plain Secret's (stringData, base64 data); SOPS-encrypted Secrets
    are not readable and give nothing."""
    if "sops" in body:
        return {}
    out: dict[str, str] = {}
    data = body.get("data") if isinstance(body.get("data"), dict) else {}
    assert isinstance(data, dict)
    for k, v in data.items():
        if body.get("kind") == "Secret":
            try:
                out[str(k)] = base64.b64decode(str(v), validate=True).decode("utf-8")
            except ValueError:
                continue
        else:
            out[str(k)] = str(v)
    string_data = body.get("stringData")
    if isinstance(string_data, dict):
        out.update({str(k): str(v) for k, v in string_data.items()})
    return out


def _substitute(value: Any, variables: dict[str, str]) -> Any:
    """`${VAR}`, `${VAR:=default}`, `${VAR:-default}` (defaults may hold variables) in every
    string; `$${VAR}` is a literal `${VAR}`. A variable with no value and no default keeps its
    text."""
    if isinstance(value, str):
        return _expand(value, variables) if "${" in value else value
    if isinstance(value, dict):
        return {_substitute(k, variables): _substitute(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables) for v in value]
    return value


def _expand(text: str, variables: dict[str, str]) -> str:
    out: list[str] = []
    i = 0
    while True:
        j = text.find("$", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        escaped = text.startswith("$${", j)
        start = j + 1 if escaped else j
        if not text.startswith("${", start):
            out.append("$")
            i = j + 1
            continue
        end = _closing(text, start + 2)
        if end < 0:
            out.append(text[j:])
            return "".join(out)
        if escaped:
            out.append(text[start : end + 1])
        else:
            out.append(_one(text[start : end + 1], text[start + 2 : end], variables))
        i = end + 1


def _closing(text: str, pos: int) -> int:
    """The index of the `}` that closes a `${` whose body starts at `pos`, or -1."""
    depth = 1
    while pos < len(text):
        if text.startswith("${", pos):
            depth += 1
            pos += 2
            continue
        if text[pos] == "}":
            depth -= 1
            if depth == 0:
                return pos
        pos += 1
    return -1


def _one(whole: str, inner: str, variables: dict[str, str]) -> str:
    m = _VAR_BODY.match(inner)
    if m is None:
        return whole
    name, op, default = m.group(1), m.group(2), m.group(3)
    value = variables.get(name)
    if value is not None and (value != "" or not (op or "").startswith(":")):
        return value
    if op is not None:
        return _expand(default or "", variables)
    return whole
