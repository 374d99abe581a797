"""The Applications an ApplicationSet generates at one revision, as the ApplicationSet controller
generates them (argo-cd `applicationset/generators`, `applicationset/utils`).

Generators that read only the repository are expanded here: `list` (its `elements` and
`elementsYaml`), `git` directories and files (this repository's), `matrix` and `merge` of those,
and `clusters` from the clusters known (the local `in-cluster`, cluster Secrets the repository
declares, and `--argocd-cluster`). Templates are fasttemplate's `{{param}}` (a parameter that is
not there stays as written, as Argo CD leaves it), or goTemplate's, rendered by the helper; so is
a `templatePatch`, which the helper applies as Argo CD does (a strategic merge: ObjectMeta's for
metadata, key by key with lists replaced for the rest). An ApplicationSet whose Applications
cannot be known here (goTemplate or a templatePatch without the helper, a generator that reads
an API: pull requests, SCM providers, cluster decision resources, plugins; a git generator on
another repository) raises `InputError`: what it generates is unknown, and nothing is allowed on
what happens to be readable.

Pure: the repository is seen through `Files` (the revision's paths and a reader of one file).
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gate.engine.deployers import argocd
from gate.model.errors import InputError
from gate.sources import yamlread

Params = dict[str, Any]
#: The generators whose parameters come from an API this gate does not call.
API_GENERATORS = ("pullRequest", "scmProvider", "clusterDecisionResource", "plugin")
#: The label of a Secret that declares a cluster to Argo CD, and the value that says so.
CLUSTER_SECRET_LABEL = "argocd.argoproj.io/secret-type"
#: The cluster every Argo CD has unless it is switched off (argo-cd `util/db/cluster.go`).
IN_CLUSTER = ("in-cluster", "https://kubernetes.default.svc")
#: The finalizer with which deleting an Application deletes what it deployed.
RESOURCES_FINALIZER = argocd.RESOURCES_FINALIZER
#: The one member of a helper job's template that asks for a templatePatch (appset_patch.go).
PATCH_JOB = "templatePatch"
_TAG = re.compile(r"\{\{(.*?)\}\}", re.S)
_UNSAFE = re.compile(r"[^-a-z0-9.]")


@dataclass(frozen=True)
class Files:
    """One revision of this repository: its file paths, its directory paths, and a reader."""

    paths: Sequence[str]
    read: Callable[[str], str]

    @functools.cached_property
    def directories(self) -> list[str]:
        """Every directory, hidden ones left out (the repo-server's `GetGitDirectories`)."""
        found: set[str] = set()
        for p in self.paths:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                if parts[i - 1].startswith("."):
                    break
                found.add("/".join(parts[:i]))
        return sorted(found)


@dataclass(frozen=True)
class Cluster:
    """A cluster the `clusters` generator can select: its name, server URL and labels."""

    name: str
    server: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def params(self, go: bool) -> Params:
        """argo-cd `ClusterGenerator`'s parameters: flat, or nested for goTemplate."""
        out: Params = {"name": self.name, "nameNormalized": sanitize(self.name)}
        out["server"] = self.server
        if go:
            out["metadata"] = {"labels": dict(self.labels), "annotations": dict(self.annotations)}
            return out
        out.update({f"metadata.labels.{k}": v for k, v in self.labels.items()})
        out.update({f"metadata.annotations.{k}": v for k, v in self.annotations.items()})
        return out


#: Renders goTemplate templates: (template, parameters) jobs and the goTemplateOptions in, the
#: rendered templates out (the helper, `gate.sources.argocd`).
GoRender = Callable[[Sequence[tuple[Any, Params]], Sequence[str]], list[Any]]


@dataclass(frozen=True)
class Context:
    """What generators read: this revision's files, whether a repoURL is this repository, the
    clusters known, and the renderer of goTemplate templates."""

    files: Files
    ours: Callable[[str], bool]
    clusters: Sequence[Cluster]
    #: Who asks, for messages (`ApplicationSet NS/NAME (file:line)`).
    who: str
    go_render: GoRender | None = None


def sanitize(name: str) -> str:
    """argo-cd `utils.SanitizeName`: lower case, every other character than `-`, `.` and
    alphanumerics turned into `-`, at most 253 characters, trimmed of `-` and `.`."""
    return _UNSAFE.sub("-", name.lower())[:253].strip("-.")


def render(template: Any, params: Mapping[str, Any]) -> Any:
    """The template with each `{{ name }}` in its strings replaced by the parameter's value;
    a tag with no parameter stays as written (fasttemplate, as Argo CD runs it)."""
    if isinstance(template, str):
        return _TAG.sub(lambda m: _tag(m, params), template)
    if isinstance(template, list):
        return [render(v, params) for v in template]
    if isinstance(template, dict):  # keys are templated too (argo-cd `deeplyReplace`)
        return {render(k, params): render(v, params) for k, v in template.items()}
    return template


def _tag(m: re.Match[str], params: Mapping[str, Any]) -> str:
    value = params.get(m.group(1).strip())
    return value if isinstance(value, str) else m.group(0)


def generate(appset: Mapping[str, Any], ctx: Context) -> list[dict[str, Any]]:
    """The Applications `appset` generates: each generator's parameter sets, each rendered
    into the template (a generator's own `template` merged over the ApplicationSet's), then
    patched by the `templatePatch` if there is one."""
    spec = _dict(appset.get("spec"))
    go = spec.get("goTemplate") is True
    patch = spec.get("templatePatch")
    if patch is not None and not isinstance(patch, str):
        raise InputError(f"{ctx.who}: its templatePatch is not a string")
    needs = "goTemplate" if go else "a templatePatch" if patch is not None else None
    if needs and ctx.go_render is None:
        raise InputError(
            f"{ctx.who} uses {needs}, which needs prune-gate-kustomize (the helper renders "
            "Go templates and applies template patches as Argo CD does): put it on PATH"
        )
    options = [str(o) for o in _list(spec.get("goTemplateOptions"))]
    expander = _Expander(ctx, go, options)
    template = _dict(spec.get("template"))
    preserve = _dict(spec.get("syncPolicy")).get("preserveResourcesOnDeletion") is True
    apps: list[dict[str, Any]] = []
    for gen in _list(spec.get("generators")):
        own = _dict(_dict(_dict(gen).get(_generator_kind(_dict(gen), ctx))).get("template"))
        merged = _merge(template, own)
        sets = expander.params_of(_dict(gen))
        # argo-cd `RenderTemplateParams`: the resources finalizer, unless the template names
        # finalizers or the ApplicationSet preserves resources on deletion (added here, before
        # rendering, which changes no list's length; a templatePatch comes after it)
        finalized = copy.deepcopy(merged)
        meta = _dict(finalized.setdefault("metadata", {}))
        if not preserve and not meta.get("finalizers"):
            meta["finalizers"] = [RESOURCES_FINALIZER]
        jobs = [(finalized if params else merged, params) for params in sets]
        apps.extend(_dict(a) for a in expander.applications(jobs, patch))
    return apps


def _generator_kind(gen: Mapping[str, Any], ctx: Context) -> str:
    for kind in ("list", "git", "clusters", "matrix", "merge"):
        if kind in gen:
            return kind
    named = next((k for k in gen if k in API_GENERATORS), None)
    what = f"a {named} generator" if named else f"a generator prune-gate does not know ({gen})"
    raise InputError(
        f"{ctx.who} has {what}, whose Applications come from outside the repository: what it "
        "generates is unknown. Check it against the cluster (gate check --live), or leave its "
        "directory out of --argocd-root"
    )


class _Expander:
    """One ApplicationSet's generators, in its template mode: fasttemplate's flat parameters
    (`path.basename`), or goTemplate's nested ones (`.path.basename`)."""

    def __init__(self, ctx: Context, go: bool, options: Sequence[str]) -> None:
        self.ctx, self.go, self.options = ctx, go, options

    def fill(self, jobs: Sequence[tuple[Any, Params]]) -> list[Any]:
        """Each template rendered with its parameters."""
        if not jobs:
            return []
        if self.go:
            assert self.ctx.go_render is not None
            return self.ctx.go_render(jobs, self.options)
        return [render(t, p) for t, p in jobs]

    def applications(
        self, jobs: Sequence[tuple[dict[str, Any], Params]], patch: str | None
    ) -> list[Any]:
        """The Applications of (template, parameters) jobs: rendered when there are parameters
        (argo-cd `RenderTemplateParams`), then patched by the `templatePatch`, if there is one,
        by the helper (`renderTemplatePatch`: the patch rendered with the same parameters)."""
        if patch is None:
            filled = self.fill([(t, p) for t, p in jobs if p])
            return [filled.pop(0) if p else copy.deepcopy(t) for t, p in jobs]
        assert self.ctx.go_render is not None
        if self.go:  # the helper renders the template and the patch
            asked = [(_patch_job(t, patch, True), p) for t, p in jobs]
        else:  # rendered here, as fasttemplate; the helper only patches
            asked = [
                (_patch_job(render(t, p) if p else t, render(patch, p), False), {}) for t, p in jobs
            ]
        return self.ctx.go_render(asked, self.options)

    def params_of(self, gen: Mapping[str, Any]) -> list[Params]:
        """The parameter sets one generator produces, filtered by its `selector`."""
        ctx = self.ctx
        kind = _generator_kind(gen, ctx)
        body = _dict(gen.get(kind))
        if kind == "list":
            elements = [_dict(e) for e in _list(body.get("elements"))]
            out = elements if self.go else [_flatten(e) for e in elements]
            out += _elements_yaml(body.get("elementsYaml"), ctx.who)
        elif kind == "git":
            out = self._values(self._git(body), body)
        elif kind == "clusters":
            selector = _dict(body.get("selector"))
            chosen = [c for c in ctx.clusters if _selects(selector, c.labels)]
            out = self._values([c.params(self.go) for c in chosen], body)
        elif kind == "matrix":
            out = self._matrix(_list(body.get("generators")))
        else:  # merge
            out = self._merged(body)
        selector = _dict(gen.get("selector"))
        return [p for p in out if _selects(selector, _flatten(p))] if selector else out

    def _values(self, sets: list[Params], body: Mapping[str, Any]) -> list[Params]:
        """A generator's `values`, each rendered with the set's parameters, as `values.KEY`
        (`.values.KEY` with goTemplate)."""
        values = _dict(body.get("values"))
        if not values:
            return sets
        filled = self.fill([({str(k): str(v) for k, v in values.items()}, p) for p in sets])
        if self.go:
            return [{**p, "values": v} for p, v in zip(sets, filled, strict=True)]
        return [
            {**p, **{f"values.{k}": x for k, x in v.items()}}
            for p, v in zip(sets, filled, strict=True)
        ]

    def _git(self, body: Mapping[str, Any]) -> list[Params]:
        ctx = self.ctx
        url = str(body.get("repoURL") or "")
        if not ctx.ours(url):
            raise InputError(
                f"{ctx.who} has a git generator on {url}, which is not this repository (name "
                "it with --argocd-repo if it is): the Applications it generates are unknown"
            )
        prefix = str(body.get("pathParamPrefix") or "")
        if "files" in body:
            return self._git_files(_list(body.get("files")), prefix)
        found = _directories(_list(body.get("directories")), ctx)
        return [self._path(d, prefix, None) for d in found]

    def _git_files(self, items: Sequence[Any], prefix: str) -> list[Params]:
        """argo-cd `generateParamsForGitFiles`: the files matched by an item (`git ls-files`
        with the pattern) and by no excluding item, in path order; each file an object or a
        list of them."""
        ctx = self.ctx
        include = [
            str(_dict(i).get("path", "")) for i in items if _dict(i).get("exclude") is not True
        ]
        exclude = [str(_dict(i).get("path", "")) for i in items if _dict(i).get("exclude") is True]
        chosen = sorted(
            p
            for p in ctx.files.paths
            if any(_ls_files_match(p, pat) for pat in include)
            and not any(_ls_files_match(p, pat) for pat in exclude)
        )
        out: list[Params] = []
        for path in chosen:
            try:
                loaded = yaml.safe_load(ctx.files.read(path))
            except yaml.YAMLError as exc:
                raise InputError(
                    f"{ctx.who}: its git files generator cannot parse {path}: {exc}"
                ) from None
            docs = loaded if isinstance(loaded, list) else [loaded or {}]
            for doc in docs:
                params = dict(_dict(doc)) if self.go else _flatten(_dict(doc))
                params.update(self._path(posixpath.dirname(path), prefix, path))
                out.append(params)
        return out

    def _path(self, directory: str, prefix: str, file: str | None) -> Params:
        """The path parameters of a directory (and of the file found there)."""
        base = posixpath.basename(directory)
        if self.go:
            path: Params = {
                "path": directory,
                "basename": base,
                "basenameNormalized": sanitize(base),
                "segments": directory.split("/"),
            }
            if file is not None:
                path["filename"] = posixpath.basename(file)
                path["filenameNormalized"] = sanitize(posixpath.basename(file))
            return {prefix: {"path": path}} if prefix else {"path": path}
        name = f"{prefix}.path" if prefix else "path"
        out: Params = {name: directory, f"{name}.basename": base}
        out[f"{name}.basenameNormalized"] = sanitize(base)
        if file is not None:
            out[f"{name}.filename"] = posixpath.basename(file)
            out[f"{name}.filenameNormalized"] = sanitize(posixpath.basename(file))
        out.update({f"{name}[{i}]": s for i, s in enumerate(directory.split("/")) if s})
        return out

    def _matrix(self, children: Sequence[Any]) -> list[Params]:
        """Every pair of the two child generators' sets; the second may use the first's
        parameters in its own fields (argo-cd `MatrixGenerator`)."""
        if len(children) != 2:
            raise InputError(f"{self.ctx.who}: a matrix generator takes exactly two generators")
        out: list[Params] = []
        firsts = self.params_of(_dict(children[0]))
        seconds = self.fill([(_dict(children[1]), a) for a in firsts])
        for a, second in zip(firsts, seconds, strict=True):
            for b in self.params_of(_dict(second)):
                out.append(_deep_merge(a, b) if self.go else {**a, **b})
        return out

    def _merged(self, body: Mapping[str, Any]) -> list[Params]:
        """argo-cd `MergeGenerator`: the first generator's sets, each updated by the sets of
        the later ones that agree with it on every `mergeKeys` value."""
        keys = [str(k) for k in _list(body.get("mergeKeys"))]
        children = [self.params_of(_dict(g)) for g in _list(body.get("generators"))]
        if not children:
            return []
        base = [dict(p) for p in children[0]]
        for later in children[1:]:
            index = {tuple(_flatten(p).get(k) for k in keys): p for p in later}
            for i, p in enumerate(base):
                found = index.get(tuple(_flatten(p).get(k) for k in keys))
                if found is not None:
                    base[i] = _deep_merge(p, found) if self.go else {**p, **found}
        return base


def _elements_yaml(text: object, who: str) -> list[Params]:
    """argo-cd `ListGenerator`: the objects of a YAML list, after the `elements`, as they are
    (not flattened for fasttemplate: a value that is not a string stays unreplaced there)."""
    if not text:
        return []
    try:
        loaded = yamlread.load(str(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{who}: its elementsYaml is not YAML: {exc}") from None
    if loaded is None:
        return []
    if not isinstance(loaded, list) or not all(isinstance(e, dict | None) for e in loaded):
        raise InputError(f"{who}: its elementsYaml is not a list of objects")
    return [dict(e or {}) for e in loaded]


def _patch_job(application: Any, patch: str, go: bool) -> dict[str, Any]:
    """A helper job that asks for `application` patched by `patch` (tools/kustomize/
    appset_patch.go), rendered there first with goTemplate."""
    return {PATCH_JOB: {"application": application, "patch": patch, "goTemplate": go}}


def _directories(items: Sequence[Any], ctx: Context) -> list[str]:
    """argo-cd `filterApps`: a directory matched by an item's `path` (Go's `path.Match`) and
    by no item with `exclude: true`."""
    rules = [
        (_go_match(str(_dict(i).get("path", ""))), _dict(i).get("exclude") is True) for i in items
    ]
    out = []
    for d in ctx.files.directories:
        hits = [excluding for match, excluding in rules if match(d)]
        if False in hits and True not in hits:  # an exclusion wins over any inclusion
            out.append(d)
    return out


def _deep_merge(a: Params, b: Params) -> Params:
    out = dict(a)
    for k, v in b.items():
        out[k] = (
            _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against labels or parameters."""
    for k, v in _dict(selector.get("matchLabels")).items():
        if labels.get(str(k)) != str(v):
            return False
    for e in _list(selector.get("matchExpressions")):
        e = _dict(e)
        key, op = str(e.get("key", "")), str(e.get("operator", ""))
        values = {str(v) for v in _list(e.get("values"))}
        have = key in labels
        ok = {
            "In": have and labels.get(key) in values,
            "NotIn": not have or labels.get(key) not in values,
            "Exists": have,
            "DoesNotExist": not have,
        }.get(op)
        if not ok:
            return False
    return True


def clusters_in(objects: Iterable[Mapping[str, Any]], given: Sequence[Cluster]) -> list[Cluster]:
    """The clusters a `clusters` generator selects from: `in-cluster`, each cluster Secret
    among `objects` (its `name` and `server` from stringData or base64 data), then `given`."""
    import base64

    found = [Cluster(IN_CLUSTER[0], IN_CLUSTER[1], {}, {})]
    for o in objects:
        meta = _dict(o.get("metadata"))
        labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
        if o.get("kind") != "Secret" or labels.get(CLUSTER_SECRET_LABEL) != "cluster":
            continue
        data = {str(k): str(v) for k, v in _dict(o.get("stringData")).items()}
        for k, v in _dict(o.get("data")).items():
            try:
                data.setdefault(str(k), base64.b64decode(str(v)).decode("utf-8"))
            except ValueError:
                continue
        annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
        name = data.get("name") or str(meta.get("name", ""))
        found.append(Cluster(name, data.get("server", ""), labels, annotations))
    return found + list(given)


def parse_cluster(text: str) -> Cluster:
    """`--argocd-cluster NAME=SERVER[,LABEL=VALUE...]`."""
    first, *rest = text.split(",")
    name, eq, server = first.partition("=")
    if not eq or not name or not server:
        raise InputError(f"--argocd-cluster {text}: expected NAME=SERVER[,LABEL=VALUE...]")
    labels = {}
    for item in rest:
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise InputError(f"--argocd-cluster {text}: {item!r} is not LABEL=VALUE")
        labels[k] = v
    return Cluster(name, server, labels, {})


def _go_match(pattern: str) -> Callable[[str], bool]:
    """Go's `path.Match`: `*` and `?` stop at `/`, `[...]` (with `^` negating) a class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                return lambda _: False  # a bad pattern matches nothing (Argo CD logs it)
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("^") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    compiled = re.compile("".join(out) + r"\Z")
    return lambda s: compiled.match(s) is not None


def _ls_files_match(path: str, pattern: str) -> bool:
    """`git ls-files -- PATTERN`: a pathspec's wildcards also cross `/`; a pattern without
    one names a file, or a directory whose files it all matches."""
    pattern = pattern.strip().lstrip("/")
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(path, pattern)
    bare = pattern.rstrip("/")
    return path == bare or path.startswith(bare + "/")


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> Params:
    """A parameter object as fasttemplate sees it: nested keys joined with `.`, values as Go's
    `%v` prints them (argo-cd uses `flatten.DotStyle`)."""
    out: Params = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = _go_value(v)
    return out


def _go_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "<nil>"
    if isinstance(v, list | dict):
        return json.dumps(v)
    return str(v)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A generator's template over the ApplicationSet's: maps merged key by key, the rest
    replaced where the generator's is set."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif v not in (None, "", [], {}):
            out[k] = copy.deepcopy(v)
    return out


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
