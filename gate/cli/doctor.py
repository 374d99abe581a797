"""`gate doctor`: every stuck deletion, what it waits on, its evidence and the fix.

The options both `gate doctor` and `gate heal` take (what to look at, the thresholds, what git
declares) and the reading of the ledger live here too; `gate.cli.heal` reuses them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, cast

import click

from gate.cli.common import (
    POLICY_FILE,
    F,
    fail,
    flux_source_options,
    kube_options,
    parse_flux_ignore,
    parse_flux_source,
    say,
    text_or_json_option,
)
from gate.model.errors import GateError, InputError

if TYPE_CHECKING:
    from gate.app.sides import GitReading
    from gate.engine.doctor import Diagnosis, Doctor, Thresholds
    from gate.engine.ledger import Ledger, Meta
    from gate.engine.policy import Policy
    from gate.model.refs import ObjectRef

# The engine, the policy and the sources are imported where a run uses them, so that `gate
# doctor --help` and `gate heal --help` cost click and the option table (test_startup).

#: Exit codes of doctor: nothing stuck, something stuck, could not read.
EXIT_NOTHING_STUCK, EXIT_STUCK = 0, 1

#: `KIND/NAME` as kubectl spells kinds: short names, singular and plural.
_KINDS: dict[str, tuple[str, str]] = {}
for _group, _kind, _names in (
    ("", "PersistentVolumeClaim", ("pvc", "persistentvolumeclaim", "persistentvolumeclaims")),
    ("", "PersistentVolume", ("pv", "persistentvolume", "persistentvolumes")),
    ("", "Pod", ("po", "pod", "pods")),
    ("", "Namespace", ("ns", "namespace", "namespaces")),
    ("apps", "StatefulSet", ("sts", "statefulset", "statefulsets", "statefulset.apps")),
    (
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        ("crd", "crds", "customresourcedefinition", "customresourcedefinitions"),
    ),
    (
        "snapshot.storage.k8s.io",
        "VolumeSnapshot",
        ("volumesnapshot", "volumesnapshots", "vs"),
    ),
):
    for _n in _names:
        _KINDS[_n] = (_group, _kind)


def parse_target(text: str) -> tuple[str, str, str]:
    """`pvc/data` -> (``, `PersistentVolumeClaim`, `data`); anything else is an InputError."""
    kind, slash, name = text.partition("/")
    found = _KINDS.get(kind.lower())
    if not slash or not name or "/" in name or found is None:
        raise InputError(
            f"{text!r}: give KIND/NAME, KIND one of pvc, pv, pod, ns, sts, crd, volumesnapshot"
        )
    return found[0], found[1], name


def duration_option(option: str, text: str, minimum: float = 0.0) -> float:
    """A duration option's seconds; no unit, or less than `minimum`, is a usage error."""
    from gate.engine.policy import duration_text, parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if seconds < minimum:
        raise click.BadParameter(f"at least {duration_text(minimum)}", param_hint=option)
    return seconds


@dataclass(frozen=True)
class Scope:
    """What one doctor or heal run looks at."""

    target: tuple[str, str, str] | None
    #: None: every namespace (-A, or a cluster-scoped target).
    namespace: str | None
    thresholds: Thresholds


def scope_options(f: F) -> F:
    """[KIND/NAME] -n/-A, the thresholds, what git declares, the cluster and the policy."""
    options: list[Callable[[F], F]] = [
        click.argument("target", required=False, metavar="[KIND/NAME]"),
        click.option(
            "-n",
            "--namespace",
            help="Namespace to look in (default: the kubeconfig context's, as kubectl).",
        ),
        click.option("-A", "--all-namespaces", is_flag=True, help="Look in every namespace."),
        click.option(
            "--older-than",
            default="2m",
            show_default=True,
            metavar="DURATION",
            help="Report deletions asked for at least this long ago (30s, 5m, 1h30m).",
        ),
        click.option(
            "--deadline-slack",
            default="1m",
            show_default=True,
            metavar="DURATION",
            help="A pod is past its deadline only this long after its deletionTimestamp.",
        ),
        click.option(
            "--node-dead-after",
            default="5m",
            show_default=True,
            metavar="DURATION",
            help="A node is dead only when Ready has not been True this long, with the "
            "unreachable taint.",
        ),
        click.option(
            "--manifests",
            metavar="PATH",
            help="What git declares (rendered manifests: a file, a directory, - for stdin): a "
            "stuck object still declared comes back, empty, once its deletion completes.",
        ),
        click.option("--rev", metavar="REV", help="What git declares: this revision of --repo."),
        click.option(
            "--repo",
            default=".",
            show_default=True,
            type=click.Path(file_okay=False),
            help="Git repository of --rev.",
        ),
        click.option(
            "--path",
            "paths",
            multiple=True,
            metavar="DIR",
            help="Directory of --rev to read (repeatable; default: the whole tree).",
        ),
        click.option(
            "--render",
            type=click.Choice(["kustomize"]),
            help="Build each --path of --rev with kustomize.",
        ),
        click.option(
            "--flux-root",
            "flux_roots",
            multiple=True,
            metavar="DIR",
            help="A Flux cluster entry point of --rev (repeatable): what git declares is what "
            "its Kustomizations apply, as in `gate check --flux-root` (instead of --path and "
            "--render).",
        ),
        flux_source_options,
        kube_options,
        click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False),
            help=f"Policy file (default: ./{POLICY_FILE} if present).",
        ),
        text_or_json_option,
    ]

    @functools.wraps(f)
    def with_inputs(**kw: Any) -> Any:
        inputs = Inputs(**{name: kw.pop(name) for name in _INPUTS})
        return f(inputs=inputs, **kw)

    command: Any = with_inputs
    for option in reversed(options):
        command = option(command)
    return cast(F, command)


@dataclass(frozen=True)
class Inputs:
    """The options doctor and heal share, as given on the command line."""

    target: str | None
    namespace: str | None
    all_namespaces: bool
    older_than: str
    deadline_slack: str
    node_dead_after: str
    manifests: str | None
    rev: str | None
    repo: str
    paths: tuple[str, ...]
    render: str | None
    flux_roots: tuple[str, ...]
    flux_sources: tuple[str, ...]
    flux_ignores: tuple[str, ...]
    kubeconfig: str | None
    kube_context: str | None
    config_path: str | None

    @property
    def cluster(self) -> tuple[str | None, str | None]:
        return self.kubeconfig, self.kube_context

    def resolve(self) -> tuple[Scope, Policy, Callable[[ObjectRef], str | None]]:
        """What to look at, the policy, and where git declares an object; a bad option is a
        usage error, an unreadable input a `GateError`, both before any cluster is read."""
        from gate.app.policy import policy_at

        scope = make_scope(
            self.target,
            self.namespace,
            self.all_namespaces,
            (self.older_than, self.deadline_slack, self.node_dead_after),
            self.kubeconfig,
            self.kube_context,
        )
        # The operator's own policy, from the files: --rev says what git declares, not whose
        # policy the cluster is read under.
        policy = policy_at(self.repo, None, self.config_path, say)
        declared = declared_lookup(
            self.manifests,
            self.rev,
            self.repo,
            self.paths,
            self.render,
            scope.namespace or "default",
            flux=(self.flux_roots, self.flux_sources, self.flux_ignores),
        )
        return scope, policy, declared


_INPUTS = tuple(f.name for f in fields(Inputs))


def make_scope(
    target: str | None,
    namespace: str | None,
    all_namespaces: bool,
    thresholds: tuple[str, str, str],
    kubeconfig: str | None,
    kube_context: str | None,
) -> Scope:
    from gate.engine.doctor import Thresholds

    if namespace and all_namespaces:
        raise click.UsageError("give -n NAMESPACE or -A, not both")
    older, slack, dead = thresholds
    th = Thresholds(
        older_than=duration_option("--older-than", older),
        deadline_slack=duration_option("--deadline-slack", slack),
        node_dead_after=duration_option("--node-dead-after", dead),
    )
    parsed = parse_target(target) if target else None
    if parsed is not None and parsed[1] in {
        "PersistentVolume",
        "Namespace",
        "CustomResourceDefinition",
    }:
        return Scope(parsed, None, th)
    if all_namespaces:
        return Scope(parsed, None, th)
    if not namespace:
        from gate.kube.client import context_namespace

        namespace = context_namespace(kubeconfig, kube_context)
    return Scope(parsed, namespace, th)


def declared_lookup(
    manifests: str | None,
    rev: str | None,
    repo: str,
    paths: Sequence[str],
    render: str | None,
    default_namespace: str = "default",
    *,
    flux: tuple[Sequence[str], Sequence[str], Sequence[str]] = ((), (), ()),
) -> Callable[[ObjectRef], str | None]:
    """Where git declares an object (`path:line`), from --manifests or --rev (read as `gate
    check` reads a revision: files, kustomize builds or Flux entry points); nothing given:
    nothing is known to be declared. An object without a namespace is in `default_namespace`
    (-n, as `kubectl apply -n NS -f DIR` or a Flux Kustomization's targetNamespace put it)."""
    from gate.app.sides import read_revision
    from gate.engine.check import build_sides

    flux_roots = flux[0]
    if manifests and rev:
        raise InputError("give --manifests or --rev, not both")
    if (paths or render) and not rev:
        raise InputError("--path and --render read --rev: give --rev too")
    if flux_roots and not rev:
        raise InputError("--flux-root reads --rev: give --rev too")
    if manifests:
        from gate.sources.manifests import read_path

        raw = read_path(manifests)
    elif rev:
        raw = read_revision(_reading(repo, paths, render, flux), rev, paths)
    else:
        return lambda _ref: None
    inventory, _ = build_sides(raw, [], default_namespace)

    def declared(ref: ObjectRef) -> str | None:
        m = inventory.get(ref)
        if m is None:
            return None
        return str(m.source) if m.source is not None else "the manifests"

    return declared


def _reading(
    repo: str,
    paths: Sequence[str],
    render: str | None,
    flux: tuple[Sequence[str], Sequence[str], Sequence[str]],
) -> GitReading:
    """How --rev is read. Its files are read even beside a kustomization (`--render none`):
    what git declares is a hint here, not a verdict."""
    from gate.app.sides import FLUX_ROOT_ALONE, GitReading

    flux_roots, flux_sources, flux_ignores = flux
    if flux_roots and (paths or render):
        raise InputError(FLUX_ROOT_ALONE)
    if render == "kustomize" and not paths and not flux_roots:
        raise InputError("--render kustomize needs at least one --path to build")
    sources = tuple(parse_flux_source(s) for s in flux_sources)
    ignores = tuple(parse_flux_ignore(s) for s in flux_ignores)
    return GitReading(repo, render or "none", tuple(flux_roots), sources, ignores)


def read_cluster(
    scope: Scope, policy: Policy, kubeconfig: str | None, kube_context: str | None, hint: str | None
) -> Ledger:
    from gate.kube.ledger import read_ledger
    from gate.kube.snapshot import ApiLister

    with ApiLister.from_kubeconfig(
        kubeconfig, kube_context, policy.live_timeout_seconds, hint=hint
    ) as lister:
        return read_ledger(lister, policy.live_page_size, scope.namespace, policy.guarded_kinds)


def find(ledger: Ledger, target: tuple[str, str, str], namespace: str | None) -> Meta | None:
    """The ledger's object for a KIND/NAME target, or None."""
    from gate.model.refs import ObjectRef

    group, kind, name = target
    ns = namespace or ""
    if kind == "PersistentVolumeClaim":
        claim = ledger.claims.get((ns, name))
        return claim.meta if claim else None
    if kind == "Pod":
        pod = ledger.pods.get((ns, name))
        return pod.meta if pod else None
    if kind == "PersistentVolume":
        volume = ledger.volumes.get(name)
        return volume.meta if volume else None
    if kind == "Namespace":
        nsobj = ledger.namespaces.get(name)
        return nsobj.meta if nsobj else None
    return ledger.others.get(ObjectRef(group, kind, ns, name))


def select(doctor: Doctor, scope: Scope) -> tuple[list[Diagnosis], Meta | None]:
    """The diagnoses a run reports: the target's (whatever its age), or every stuck one."""
    if scope.target is None:
        return doctor.stuck(scope.namespace), None
    meta = find(doctor.ledger, scope.target, scope.namespace)
    if meta is None or not meta.deleting:
        return [], meta
    return [doctor.diagnose(meta)], meta


def describe_target(scope: Scope) -> str:
    assert scope.target is not None
    _, kind, name = scope.target
    where = f" in namespace {scope.namespace}" if scope.namespace else ""
    return f"{kind} {name}{where}"


@click.command("doctor")
@scope_options
def doctor_command(inputs: Inputs, fmt: str) -> None:
    """Explain what each stuck deletion is waiting on, with its evidence and the fix.

    What it waits on: the pods that pin a claim and their nodes, a finalizer and its owner, a
    namespace's content, a pod's dead node.

    With KIND/NAME (pvc/data, pod/web-0, ns/shop, pv/pv-1), that object whatever its age. With
    --manifests or --rev, say which stuck objects git still declares (they come back empty).
    Exit 0 nothing stuck, 1 something stuck, 2 could not read.
    """
    from gate.engine.doctor import Doctor
    from gate.engine.marks import MarkReader
    from gate.report.common import inert
    from gate.report.doctor import doctor_json, doctor_text
    from gate.sources.clock import utc_now

    try:
        scope, policy, declared = inputs.resolve()
        ledger = read_cluster(scope, policy, *inputs.cluster, None)
    except GateError as exc:
        fail(str(exc))
    now = utc_now()
    doctor = Doctor(ledger, now, scope.thresholds, declared, MarkReader.of(policy))
    stuck, meta = select(doctor, scope)
    if scope.target is not None and meta is None:
        fail(f"no {describe_target(scope)} exists in the cluster")
    if scope.target is not None and not stuck and fmt == "text":
        click.echo(f"{describe_target(scope)} is not being deleted: nothing to diagnose")
        sys.exit(EXIT_NOTHING_STUCK)
    unknown = [d for r in stuck for d in r.walk() if d.state.value == "Unknown"]
    for d in unknown:
        click.echo(
            f"warning: {inert(d.ref.display())} is in a state prune-gate cannot name: "
            f"{inert(d.reason)}",
            err=True,
        )
    if fmt == "json":
        click.echo(doctor_json(stuck, now))
    else:
        click.echo(doctor_text(stuck, now, scope.thresholds.older_than))
    sys.exit(EXIT_STUCK if stuck else EXIT_NOTHING_STUCK)
