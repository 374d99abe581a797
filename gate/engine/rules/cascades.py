"""Parents and cascades: a removed object whose deletion deletes guarded objects it made.

No DELETE of a claim ever reaches the manifests when a parent takes it: helm-controller
uninstalls a removed HelmRelease's release, kustomize-controller's finalizer deletes what a
removed Kustomization applied, Argo CD's resources finalizer deletes what an Application synced,
and the garbage collector deletes the dependents of a removed owner. Each rule here makes one
finding ON THE PARENT that names the guarded children dying with it, read from the live view
(release annotations, `status.inventory`, `status.resources`, ownerReferences). Pure, like
the other rules, whose helpers it reuses (`gate.engine.rules.common`, `.world`).

A child is not counted when its own change already judges it (this deploy deletes it), when its
retirement holds (stage 1 merged and deployed), when the tool that deletes it leaves it (its keep
mark, read live as the tool reads it), or, for a Kustomization or an Application, when the
candidate still declares it (a move to another root).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from gate.engine.argocd import prune_orphans as argo_prune_orphans
from gate.engine.argocd import was_read as argo_was_read
from gate.engine.context import Context
from gate.engine.deployers import FLUX, Event, argocd, helm, keep_mark, live_keep_mark, parent_of
from gate.engine.flux import POINTING, parent_ref, root_removed, was_read, was_rendered
from gate.engine.livestate import ARGO_APPLICATION, FLUX_KUSTOMIZATION, KEEP_MANAGERS
from gate.engine.plan import Action, Change
from gate.engine.rules.common import finding, source_of, with_data
from gate.engine.rules.volumes import data_fate
from gate.engine.rules.world import NAMESPACE, STATEFULSET, World, retirement, when_deleted
from gate.model.findings import Code, Finding, FixAction, Severity, command, edit
from gate.model.objects import Manifest
from gate.model.refs import ObjectRef

HELM_RELEASE = helm.HELM_RELEASE.gk
#: Owners whose dependents other rules judge: a StatefulSet's claims (STATEFULSET_DELETES_CLAIMS)
#: and a pod's generic ephemeral claims, which are meant to go with it.
SKIPPED_OWNERS = frozenset({("apps", "StatefulSet"), ("", "Pod")})
#: Further down a cascade, a StatefulSet's dependents are no change of their own: only a pod's
#: ephemeral claims, meant to go with it, are left out.
SKIPPED_CHAIN_OWNERS = frozenset({("", "Pod")})
#: The finalizers with which Argo CD deletes an Application's resources (foreground by default).
ARGO_FINALIZERS = argocd.FINALIZERS
ARGO_SYNC_OPTIONS = argocd.SYNC_OPTIONS
HELM_KEEP = helm.RESOURCE_POLICY
#: helm-controller shortens a composed release name longer than Helm's limit (53): the first 40
#: characters, `-`, and 12 hex digits of its SHA-256.
_RELEASE_NAME_MAX = 53


@dataclass(frozen=True, slots=True)
class Child:
    """A guarded object that dies with its parent, and the evidence line that says why."""

    ref: ObjectRef
    why: str


def _kind(ref: ObjectRef) -> tuple[str, str]:
    return (ref.group, ref.kind)


def _spec_of(m: Manifest | None) -> dict[str, Any]:
    return m.spec if m is not None else {}


# --- which children die ------------------------------------------------------------------------


def _release_child(ref: ObjectRef, release: str, ns: str, world: World) -> Child | None:
    """A guarded member of the release that Helm's uninstall deletes, with why; None when its own
    change judges it, its retirement holds, or the release keeps it (`helm.sh/resource-policy:
    keep`). Helm reads the mark from the stored release, not from the live object: a mark that
    only kubectl put on the live object (its managedFields say so) keeps nothing."""
    if ref in world.deleting or not world.policy.is_guarded_kind(*_kind(ref)):
        return None
    if _retired(ref, world):
        return None
    why = f"{ref.display()} carries {helm.RELEASE_NAME}: {release}, release-namespace: {ns}"
    live = world.live.get(ref) if world.live is not None else None
    if live is None or helm.HELM.keeps(live.annotations, live.labels, Event.DELETE) is None:
        return Child(ref, why)
    by = [m for m in live.facts.get(KEEP_MANAGERS, "").split(",") if m]
    if not helm.live_only_keep(by):
        return None
    return Child(
        ref,
        f"{why}; its `{HELM_KEEP}: keep` was set by {', '.join(by)} on the live object, not by "
        "the release: Helm reads the stored release when it uninstalls, so it keeps nothing",
    )


def _parent_kept(change: Change, world: World) -> bool:
    """The deployer orphans the parent itself (its keep mark, in base or live): nothing cascades.
    ORPHANED_BY_KEEP reports it."""
    if change.action is not Action.DELETE:
        return False
    if change.base is not None and keep_mark(change.base.annotations):
        return True
    live = world.live.get(change.ref) if world.live is not None else None
    return live is not None and live_keep_mark(live.annotations) is not None


def _retired(ref: ObjectRef, world: World) -> bool:
    """Stage 1 holds for a child as `check_not_retired` decides it for the object itself."""
    stage_1 = Change(ref, Action.DELETE, world.base.get(ref), world.head.get(ref), "parent removed")
    return retirement(stage_1, world).reason is not None


def _flux_owned(parent: ObjectRef, child: ObjectRef, world: World) -> bool:
    """The finalizer skips an object whose Flux labels now name another Kustomization."""
    obj = world.live.get(child) if world.live is not None else None
    owner = FLUX.owner(obj.annotations, obj.labels) if obj is not None else None
    return owner is None or (owner.name, owner.namespace) == (parent.name, parent.namespace)


def _applied_children(
    parent: ObjectRef, world: World, seen: set[ObjectRef], chain: str = ""
) -> list[Child]:
    """The guarded objects that die with a live Kustomization or Application whose deletion
    deletes what it applied (the caller decided that it does): what it applied, unless the
    candidate still declares it (moved to another root), another Kustomization owns it now, or
    it carries the deployer's keep mark; and what dies with those (a Namespace's content, a
    nested Kustomization's or Application's, an owner's dependents)."""
    assert world.live is not None
    flux = _kind(parent) == FLUX_KUSTOMIZATION
    known = parent_of(*_kind(parent))
    assert known is not None  # a Kustomization or an Application: the caller's
    deployer, what = known[0], known[1].lists
    out: list[Child] = []
    for child in sorted(set(world.live.applied_by(parent) or ())):
        if child in seen or child in world.head or child in world.deleting:
            continue
        if flux and not _flux_owned(parent, child, world):
            continue
        live = world.live.get(child)
        if live is not None and deployer.keeps_live(live.annotations, {}, Event.DELETE):
            continue  # the deployer's keep mark, read live as it reads it (annotations)
        seen.add(child)
        state = "" if live is not None else " (not in the live view)"
        why = f"{child.display()} is listed in {what} of {parent.display()}{state}{chain}"
        out.extend(_with_descendants(child, why, world, seen))
    return out


def _deletes_what_it_applied(ref: ObjectRef, world: World) -> bool:
    """A live Kustomization or Application (further down a cascade) that deletes what it applied
    when it is deleted itself."""
    m = world.base.get(ref)
    if _kind(ref) == FLUX_KUSTOMIZATION:
        return _kustomization_deletes(ref, m, world)[0]
    return _kind(ref) == ARGO_APPLICATION and _argo_finalizer(ref, m, world) is not None


def _with_descendants(ref: ObjectRef, why: str, world: World, seen: set[ObjectRef]) -> list[Child]:
    """`ref` if it is guarded and not retired, and what its own deletion deletes in turn."""
    assert world.live is not None
    out = []
    if world.policy.is_guarded_kind(*_kind(ref)) and not _retired(ref, world):
        out.append(Child(ref, why))
    via = f", which dies with it: {why}"
    if _kind(ref) == NAMESPACE:
        for g in world.live.guarded_in_namespace(ref.name):
            if g not in seen and g not in world.deleting:
                seen.add(g)
                out.extend(
                    _with_descendants(g, f"{g.display()} is in {ref.display()}{via}", world, seen)
                )
    elif _deletes_what_it_applied(ref, world):
        out.extend(_applied_children(ref, world, seen, f" ({ref.display()}: {why})"))
    if _kind(ref) not in SKIPPED_CHAIN_OWNERS:
        for d in world.live.dependents(ref):
            if d in seen or d in world.deleting or _other_owner_stays(d, ref, world):
                continue
            seen.add(d)
            out.extend(
                _with_descendants(d, f"{d.display()} is owned by {ref.display()}{via}", world, seen)
            )
    return out


# --- the parents -------------------------------------------------------------------------------


def release_of(m: Manifest) -> tuple[str, str]:
    """(namespace, name) of a Flux HelmRelease's Helm release: spec.releaseName, else
    `[targetNamespace-]name` (shortened as helm-controller shortens it); in spec.targetNamespace,
    else the HelmRelease's namespace."""
    spec = m.spec
    target = spec.get("targetNamespace")
    target = target if isinstance(target, str) and target else ""
    name = spec.get("releaseName")
    if not isinstance(name, str) or not name:
        name = f"{target}-{m.ref.name}" if target else m.ref.name
        if len(name) > _RELEASE_NAME_MAX:
            import hashlib  # here: this rare name is the only hash a check needs OpenSSL for

            digest = hashlib.sha256(name.encode()).hexdigest()
            name = f"{name[:40]}-{digest[:12]}"
    return (target or m.ref.namespace, name)


def uninstalling_release(change: Change, world: World) -> ObjectRef | None:
    """The HelmRelease whose removal deletes this object: it was made by that release's chart
    (rendered from the repository, or with --fetch-charts from where the chart lives) and the
    candidate removes the HelmRelease, so helm-controller uninstalls the release; else None."""
    if change.action is not Action.DELETE or change.base is None:
        return None
    root = change.base.root
    parent = parent_ref(root)
    if parent is None or _kind(parent) != HELM_RELEASE:
        return None
    return parent if root_removed(root, world.base, world.head) else None


def check_uninstalled_member(change: Change, world: World) -> Iterator[Finding]:
    """RELEASE_UNINSTALL_DELETES, read from the chart: a guarded object (or a StatefulSet whose
    retention deletes its claims) that a removed HelmRelease's chart made. Said once, on the
    object, in the release's terms (the uninstall deletes it, the fix is on the HelmRelease);
    settles the change, so NOT_RETIRED and STATEFULSET_DELETES_CLAIMS do not say it again. In
    speculative context it defers too: the artifact keeps the HelmRelease as base declares it
    (`gate.engine.defer`), and no uninstall happens."""
    hr = uninstalling_release(change, world)
    if hr is None:
        return
    guarded = world.policy.is_guarded_kind(*_kind(change.ref))
    claims = _kind(change.ref) == STATEFULSET and when_deleted(change, world) == "Delete"
    if not guarded and not claims:
        return
    fate = data_fate(change, world)
    if fate is not None and fate.kept:
        return  # its volume keeps the data: VOLUME_RETAINS_DATA says so, as for any claim
    m = world.base.get(hr)
    ns, release = release_of(m) if m is not None else (hr.namespace, hr.name)
    stage_1 = retirement(change, world)
    whom = change.ref.display()
    what = (
        f"{whom}, whose persistentVolumeClaimRetentionPolicy.whenDeleted: Delete deletes its "
        "claims with it"
        if claims
        else whom
    )
    found: list[Finding] = []
    if claims or stage_1.reason is None:
        found.append(
            finding(
                Code.RELEASE_UNINSTALL_DELETES,
                change,
                f"{hr.display()} is removed: helm-controller uninstalls release {ns}/{release}, "
                f"and Helm deletes {what}",
                with_data(
                    change,
                    world,
                    [
                        f"{hr.display()}'s chart makes {whom} (rendered: {_rendered_from(m)})",
                        f"cause: {change.cause}",
                        *([] if claims else [stage_1.evidence]),
                    ],
                ),
                f"keep the data first: add `{HELM_KEEP}: keep` to {whom} in the chart (or its "
                "values) and let the upgrade deploy (Helm reads it from the stored release when "
                "it uninstalls), or retire it in two stages; then remove the HelmRelease",
                [
                    edit(
                        f"add `{HELM_KEEP}: keep` to {whom} in the chart; merge and let it deploy",
                        source_of(change),
                    ),
                    edit(f"then remove {hr.display()}"),
                ],
            )
        )
    if world.context is Context.SPECULATIVE:
        found.append(_member_speculative(change, world, hr))
    yield from found


def _member_speculative(change: Change, world: World, hr: ObjectRef) -> Finding:
    """SPECULATIVE_PRUNE for a chart's object that a candidate's removed HelmRelease would
    uninstall: deferred by keeping the HelmRelease as base declares it."""
    return finding(
        Code.SPECULATIVE_PRUNE,
        change,
        f"this merge-queue candidate removes {hr.display()}, whose uninstall deletes "
        f"{change.ref.display()}; a deletion cannot be undone if the candidate is evicted",
        [f"context: {world.context}", f"cause: {change.cause}"],
        f"let the uninstall wait for the merge: deploy this candidate with {hr.display()} kept "
        "exactly as in base (gate check --defer-to DIR writes it so), so that only the merged "
        "deploy uninstalls the release, after these checks run again",
        [
            edit(
                f"deploy the candidate with {hr.display()} kept exactly as base declares it; the "
                "merged deploy removes it",
                source_of(change),
            )
        ],
    )


def _chart_of(m: Manifest) -> str:
    """Where a HelmRelease's chart comes from, as its spec says it (for evidence lines)."""
    ref = m.spec.get("chartRef")
    if isinstance(ref, dict):
        where = ref.get("namespace") or m.ref.namespace
        return f"chartRef {ref.get('kind')}/{where}/{ref.get('name')}"
    chart = m.spec.get("chart")
    spec = chart.get("spec") if isinstance(chart, dict) else None
    if not isinstance(spec, dict):
        return "none named"
    found = spec.get("sourceRef")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    version = spec.get("version") or "* (latest)"
    return (
        f"{spec.get('chart')} {version} from {source.get('kind')}/"
        f"{source.get('namespace') or m.ref.namespace}/{source.get('name')}"
    )


def _why_unrendered(m: Manifest) -> str:
    """Why a release's chart was not rendered, as far as its spec says."""
    if m.spec.get("valuesFrom"):
        return "spec.valuesFrom reads values from the cluster"
    chart = m.spec.get("chart")
    spec = chart.get("spec") if isinstance(chart, dict) else None
    source = spec.get("sourceRef") if isinstance(spec, dict) else None
    if m.spec.get("chartRef") is not None or (
        isinstance(source, dict) and source.get("kind") in ("HelmRepository", "Bucket")
    ):
        return (
            "a chart from a registry is read with --fetch-charts, at a pinned version, "
            "or not at all"
        )
    return "not a chart directory of this repository that helm could render"


def _rendered_from(m: Manifest | None) -> str:
    return _chart_of(m) if m is not None else "its chart"


def check_release_uninstall(change: Change, world: World) -> Iterator[Finding]:
    """RELEASE_UNINSTALL_DELETES / RELEASE_CONTENT_UNKNOWN: a removed HelmRelease is uninstalled,
    and Helm deletes what its release made."""
    m = change.base or change.head
    if _kind(change.ref) != HELM_RELEASE or m is None:
        return
    ns, release = release_of(m)
    hr = change.ref.display()
    get = command(f"helm get manifest {release} -n {ns}")
    if world.live is None:
        if was_rendered(change.ref, world.base):
            return  # its chart was rendered: what it made is in base, each judged as a deletion
        speculative = world.context is Context.SPECULATIVE
        yield finding(
            Code.RELEASE_CONTENT_UNKNOWN,
            change,
            f"{hr} is removed: helm-controller uninstalls release {ns}/{release}, and without "
            "the live cluster or its chart nothing says which guarded objects it holds"
            + (
                "; a merge-queue candidate must not uninstall it unseen, so it waits for the merge"
                if speculative
                else ""
            ),
            [
                f"cause: {change.cause}",
                f"release {ns}/{release}",
                f"chart: {_chart_of(m)}; not rendered ({_why_unrendered(m)})",
                "no live view (--live not given)",
            ],
            (
                f"deploy the candidate with {hr} kept exactly as in base (gate check --defer-to "
                "DIR writes it so): the merged deploy uninstalls it, after these checks run "
                "again; or "
                if speculative
                else ""
            )
            + "let the gate read the chart: gate check --fetch-charts on a runner with network "
            "(a pinned chart version), or --live to see the release's guarded objects "
            f"(those carrying meta.helm.sh/release-name: {release}); or read them with: {get.text}",
            [
                get,
                edit("run gate check with --fetch-charts (network) or --live (a kubeconfig)"),
            ],
            suggested=Severity.DEFER if speculative else None,
        )
        return
    found = (_release_child(r, release, ns, world) for r in world.live.release_members(ns, release))
    children = [c for c in found if c is not None]
    if not children:
        return
    yield _cascade(
        Code.RELEASE_UNINSTALL_DELETES,
        change,
        children,
        f"{hr} is removed: helm-controller uninstalls release {ns}/{release}, which deletes",
        [f"release {ns}/{release} (spec.releaseName, else [targetNamespace-]name)"],
        f"keep the data first: add `{HELM_KEEP}: keep` to these objects in the chart and let "
        "the upgrade deploy (Helm reads it from the stored release when it uninstalls), or "
        "retire each in two stages; then remove the HelmRelease",
        [
            get,
            edit(
                f"add `{HELM_KEEP}: keep` to them in the chart (values); merge and let it deploy",
                source_of(change),
            ),
            edit(f"then remove {hr}"),
        ],
    )


def _kustomization_deletes(ref: ObjectRef, m: Manifest | None, world: World) -> tuple[bool, str]:
    """Whether kustomize-controller's finalizer deletes the inventory, and the evidence: not
    suspended, and deletionPolicy Delete or WaitForTermination, or MirrorPrune (the default) with
    prune on. Live facts when the Kustomization is live, else its manifest `m`."""
    live = world.live.get(ref) if world.live is not None else None
    if live is not None and "deletionPolicy" in live.facts:
        prune, suspend = live.facts["prune"] == "true", live.facts["suspend"] == "true"
        policy, where = live.facts["deletionPolicy"], "live"
    else:
        spec = _spec_of(m)
        prune, suspend = spec.get("prune") is True, spec.get("suspend") is True
        policy, where = str(spec.get("deletionPolicy") or "MirrorPrune"), "base manifest"
    deletes = not suspend and (
        policy in ("Delete", "WaitForTermination") or (policy == "MirrorPrune" and prune)
    )
    evidence = f"spec.prune: {str(prune).lower()}, spec.deletionPolicy: {policy} ({where})"
    return deletes, evidence


def check_kustomization_prune(change: Change, world: World) -> Iterator[Finding]:
    """KUSTOMIZATION_PRUNES_GUARDED: a removed Kustomization's finalizer deletes its inventory."""
    if _kind(change.ref) != FLUX_KUSTOMIZATION or world.live is None:
        return
    deletes, evidence = _kustomization_deletes(change.ref, change.base or change.head, world)
    if not deletes:
        return
    ref = change.ref
    children = _applied_children(ref, world, {ref})
    if not children:
        return
    orphan = '{"spec":{"deletionPolicy":"Orphan"}}'
    patch = f"kubectl patch {ref.kubectl()} --type merge -p '{orphan}'"
    yield _cascade(
        Code.KUSTOMIZATION_PRUNES_GUARDED,
        change,
        children,
        f"{ref.display()} is removed with pruning on: kustomize-controller deletes what it "
        "applied, which includes",
        [evidence],
        "set `spec.deletionPolicy: Orphan` on the Kustomization, merge and let it deploy, then "
        "remove it; or move these objects to another Kustomization in two stages (mark them "
        f"`{FLUX.keep_keys[0]}: disabled` where it applies them and let that "
        "deploy, then move them: see FLUX_MOVE_PRUNES), or retire them in two stages first",
        [
            edit(
                f"set spec.deletionPolicy: Orphan on {ref.display()}; merge and let it deploy",
                source_of(change),
            ),
            command(patch),
            edit(f"then remove {ref.display()}"),
        ],
    )


def check_kustomization_removed(change: Change, world: World) -> Iterator[Finding]:
    """KUSTOMIZATION_REMOVED: a removed Kustomization whose finalizer deletes what it applied,
    when nothing says what that is: no live view (`status.inventory`) and its build not read
    (`--flux-root` reads it: then each object it applied is a deletion of its own, judged by the
    other rules, and this finding would only say the same thing twice). Path mode and plain git
    mode see the Kustomization object leave (a `./app/ks.yaml` line commented out of a
    kustomization's `resources:`), never its content: failing closed, this blocks."""
    if _kind(change.ref) != FLUX_KUSTOMIZATION or world.live is not None:
        return
    if was_read(change.ref, world.base):
        return
    deletes, evidence = _kustomization_deletes(change.ref, change.base or change.head, world)
    if not deletes:
        return
    ref = change.ref
    spec = _spec_of(change.base)
    where = f"spec.path {spec.get('path')}" if spec.get("path") else "its spec.path"
    yield finding(
        Code.KUSTOMIZATION_REMOVED,
        change,
        f"{ref.display()} is removed with pruning on: kustomize-controller deletes everything it "
        f"applied ({where}), and these manifests do not say what that is",
        [
            f"cause: {change.cause}",
            evidence,
            "its build was not read (no --flux-root) and there is no live view (--live not given)",
        ],
        "check it with the Flux entry point, which reads what the Kustomization applied and "
        "judges each object (gate check --flux-root DIR, the directory of your cluster's "
        "flux-system Kustomization), or with --live; to remove it safely, set `spec.prune: "
        "false` (or `spec.deletionPolicy: Orphan`) on it first, merge and let it deploy, then "
        "remove it; or retire its guarded objects in two stages first",
        [
            edit("run gate check with --flux-root DIR (or --live) to see what it applied"),
            command(f"kubectl get {ref.kubectl()} -o jsonpath='{{.status.inventory}}'"),
            edit(
                f"set spec.prune: false on {ref.display()}; merge and let it deploy",
                source_of(change),
            ),
            edit(f"then remove {ref.display()}"),
        ],
    )


class _Repoint(NamedTuple):
    """A Kustomization the candidate keeps with prune on but re-points: the change, and what
    moved (`spec.path: a -> b; ...`)."""

    change: Change
    what: str


def _repoints(world: World) -> Iterator[_Repoint]:
    """Each Kustomization whose `spec.path`, `targetNamespace` or `sourceRef` the candidate
    changes, with prune on: its next apply prunes what the old spec built and the new one does
    not. A suspended one counts too: the prune waits for the change that resumes it, which
    changes none of these fields and so would pass unseen."""
    for now in world.head.of_kind(*FLUX_KUSTOMIZATION):
        before = world.base.get(now.ref)
        if before is None or now.spec.get("prune") is not True:
            continue
        moved = [f for f in POINTING if before.spec.get(f) != now.spec.get(f)]
        if moved:
            change = Change(now.ref, Action.UPDATE, before, now, "changed by the candidate")
            what = "; ".join(
                f"spec.{f}: {_shown(before.spec.get(f))} -> {_shown(now.spec.get(f))}"
                for f in moved
            )
            yield _Repoint(change, what)


def check_kustomization_repointed(world: World) -> Iterator[Finding]:
    """KUSTOMIZATION_PRUNES_GUARDED for a Kustomization that stays but whose `spec.path`,
    `targetNamespace` or `sourceRef` changes, with prune on: on its next apply it prunes every
    object of its live inventory that the new path does not build. Live, what it applied and the
    candidate does not declare (with `--flux-root` the candidate is what the new path builds)."""
    if world.live is None:
        return
    for change, what in _repoints(world):
        ref = change.ref
        children = _applied_children(ref, world, {ref})
        if not children:
            continue
        yield _cascade(
            Code.KUSTOMIZATION_PRUNES_GUARDED,
            change,
            children,
            f"{ref.display()} is re-pointed ({what}) with pruning on: its next apply prunes what "
            "it applied and the new source does not build, which includes",
            [what, "spec.prune: true (candidate)"],
            "keep these objects in what the Kustomization builds after the change (move their "
            "manifests to the new path, or re-point in a later change once they are retired), "
            "or retire them in two stages first",
            [
                command(f"kubectl get {ref.kubectl()} -o jsonpath='{{.status.inventory}}'"),
                edit(
                    f"make the new spec of {ref.display()} still build these objects",
                    source_of(change),
                ),
            ],
        )


def check_kustomization_repointed_unread(world: World) -> Iterator[Finding]:
    """KUSTOMIZATION_REMOVED for a Kustomization that stays but is re-pointed (`spec.path`,
    `targetNamespace`, `sourceRef`) with prune on, when nothing says what it applied: no live
    inventory and its build not read. Its next apply prunes whatever the old path built and
    the new one does not; path mode sees only the Kustomization object change, so, failing
    closed, this blocks (`--flux-root` builds both paths and judges each object instead)."""
    if world.live is not None:
        return
    for change, what in _repoints(world):
        ref = change.ref
        if was_read(ref, world.base):
            continue
        yield finding(
            Code.KUSTOMIZATION_REMOVED,
            change,
            f"{ref.display()} is re-pointed ({what}) with pruning on: its next apply prunes "
            "everything it applied that the new source does not build, and these manifests do "
            "not say what that is",
            [
                what,
                "spec.prune: true (candidate)",
                "its build was not read (no --flux-root) and there is no live view (--live not "
                "given)",
            ],
            "check it with the Flux entry point, which builds the old and the new path and "
            "judges each object that leaves (gate check --flux-root DIR), or with --live; to "
            "re-point it safely, make the new path still build what must stay, or set "
            "`spec.prune: false` on it first, merge and let it deploy, then re-point it",
            [
                edit("run gate check with --flux-root DIR (or --live) to see what it prunes"),
                command(f"kubectl get {ref.kubectl()} -o jsonpath='{{.status.inventory}}'"),
                edit(
                    f"make the new spec of {ref.display()} still build what must stay",
                    source_of(change),
                ),
            ],
        )


def _shown(value: object) -> str:
    if isinstance(value, dict):
        return f"{value.get('kind', '')} {value.get('name', '')}".strip()
    return "unset" if value in (None, "") else str(value)


def _argo_finalizer(ref: ObjectRef, m: Manifest | None, world: World) -> str | None:
    """The resources finalizer on the Application and where it was read (live, else `m`)."""
    live = world.live.get(ref) if world.live is not None else None
    if live is not None:
        finalizers, where = live.finalizers, "live"
    else:
        raw = (m.body.get("metadata") or {}).get("finalizers") if m is not None else None
        finalizers, where = tuple(raw) if isinstance(raw, list) else (), "base manifest"
    found = next((f for f in finalizers if f in ARGO_FINALIZERS), None)
    return f"finalizer {found} ({where})" if found else None


def _application_unread(change: Change, world: World, finalizer: str) -> Iterator[Finding]:
    """APPLICATION_DELETES_RESOURCES without a live view, for an Application whose content was
    not rendered (no --argocd-root, or a source it does not read): its deletion deletes what it
    deployed, and nothing here says what that is. A warning, deferred in a merge queue, as for
    a HelmRelease whose chart is not read; with --argocd-root each deployed object is judged."""
    if argo_was_read(change.ref, world.base):
        return
    ref = change.ref
    speculative = world.context is Context.SPECULATIVE
    status = f"kubectl get {ref.kubectl()} -o jsonpath='{{.status.resources}}'"
    yield finding(
        Code.APPLICATION_DELETES_RESOURCES,
        change,
        f"{ref.display()} is removed with the resources finalizer: Argo CD deletes what it "
        "deployed, and without the live cluster or its rendered source nothing says which "
        "guarded objects that includes"
        + ("; a merge-queue candidate must not delete it unseen" if speculative else ""),
        [
            finalizer,
            "its source was not rendered (no --argocd-root, or a source that is not this "
            "repository or follows another revision) and there is no live view (--live not given)",
        ],
        "check it with the live cluster (gate check --live, which reads its status.resources), "
        "or render it with --argocd-root; to remove it safely, remove its resources finalizer "
        "first, merge and let it deploy, then remove it",
        [command(status), edit("run gate check with --live or --argocd-root DIR")],
        suggested=Severity.DEFER if speculative else Severity.WARN,
    )


def check_application_finalizer(change: Change, world: World) -> Iterator[Finding]:
    """APPLICATION_DELETES_RESOURCES: a removed Application with the resources finalizer deletes
    what it synced."""
    if _kind(change.ref) != ARGO_APPLICATION or change.orphaned:
        return
    finalizer = _argo_finalizer(change.ref, change.base or change.head, world)
    if finalizer is None:
        return
    if world.live is None:
        yield from _application_unread(change, world, finalizer)
        return
    children = _applied_children(change.ref, world, {change.ref})
    if not children:
        return
    ref = change.ref
    unset = (
        f'kubectl patch {ref.kubectl()} --type merge -p \'{{"metadata":{{"finalizers":null}}}}\''
    )
    yield _cascade(
        Code.APPLICATION_DELETES_RESOURCES,
        change,
        children,
        f"{ref.display()} is removed with the resources finalizer: Argo CD deletes what it "
        "synced, which includes",
        [finalizer],
        "remove the resources finalizer from the Application (in its manifest, merged and "
        f"deployed, or: {unset}), or mark these objects `{ARGO_SYNC_OPTIONS}: Delete=false`, "
        "then remove the Application; or retire them in two stages first",
        [
            edit(
                f"remove metadata.finalizers from {ref.display()}; merge and let it deploy",
                source_of(change),
            ),
            command(unset),
            edit(f"then remove {ref.display()}"),
        ],
    )


def _same(a: ObjectRef, b: ObjectRef) -> bool:
    """The same owner: a cluster-scoped custom owner is resolved into the dependent's namespace
    by the live view, which cannot know its scope."""
    return (a.group, a.kind, a.name) == (b.group, b.kind, b.name) and (
        a.namespace == b.namespace or "" in (a.namespace, b.namespace)
    )


def _deleted(owner: ObjectRef, world: World) -> bool:
    """`_same` as one of the objects this deploy deletes."""
    namespaces = world.deleting_by_name.get((owner.group, owner.kind, owner.name))
    if not namespaces:
        return False
    return owner.namespace == "" or "" in namespaces or owner.namespace in namespaces


def _other_owner_stays(child: ObjectRef, owner: ObjectRef, world: World) -> ObjectRef | None:
    """An owner of `child` besides `owner` that this deploy keeps (declared by the candidate,
    or live and not deleted): the garbage collector deletes a dependent only when all are gone."""
    assert world.live is not None
    for other in world.live.owners(child):
        if _same(other, owner) or _deleted(other, world):
            continue
        if other in world.head or world.live.get(other) is not None:
            return other
    return None


def check_owner_dependents(change: Change, world: World) -> Iterator[Finding]:
    """OWNER_DELETES_DEPENDENTS: live guarded objects whose ownerReferences name the removed
    object; the garbage collector deletes them once no owner is left."""
    if world.live is None or _kind(change.ref) in SKIPPED_OWNERS:
        return
    if argo_prune_orphans(change, world.base, world.head):
        return
    ref = change.ref
    seen = {ref}
    children: list[Child] = []
    for d in world.live.dependents(ref):
        if d in world.deleting or _other_owner_stays(d, ref, world) is not None:
            continue
        seen.add(d)
        why = (
            f"{d.display()} has an ownerReference to {ref.display()} and no other owner that stays"
        )
        children.extend(_with_descendants(d, why, world, seen))
    if not children:
        return
    first = children[0].ref
    unown = (
        f"kubectl patch {first.kubectl()} --type json "
        '-p \'[{"op":"remove","path":"/metadata/ownerReferences"}]\''
    )
    yield _cascade(
        Code.OWNER_DELETES_DEPENDENTS,
        change,
        children,
        f"{ref.display()} is removed: the garbage collector deletes its dependents, which include",
        [f"cause: {change.cause}"],
        f"keep {ref.display()} in the candidate until its dependents are safe: remove the "
        f"ownerReference from each (e.g. {unown}; its operator may have a setting that stops "
        "it putting it back), or retire them in two stages; then remove it",
        [
            edit(f"keep {ref.display()} in the candidate as base declares it", source_of(change)),
            command(unown),
            edit(f"then remove {ref.display()}"),
        ],
    )


# --- the finding -------------------------------------------------------------------------------


def _cascade(
    code: Code,
    change: Change,
    children: list[Child],
    what: str,
    evidence: Iterable[str],
    fix: str,
    actions: Iterable[FixAction],
) -> Finding:
    names = [c.ref.display() for c in children]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return finding(
        code,
        change,
        f"{what} {len(children)} guarded object(s): {shown}",
        [*evidence, *(c.why for c in children[:20])],
        fix,
        actions,
    )


def _speculative(change: Change, world: World, cascade: Finding) -> Finding:
    """SPECULATIVE_PRUNE for a parent whose deletion takes guarded objects, as for a Namespace
    that holds claims: the candidate may be evicted, the children would be gone anyway."""
    return finding(
        Code.SPECULATIVE_PRUNE,
        change,
        f"this merge-queue candidate would delete {change.ref.display()} and with it the guarded "
        f"objects {cascade.code} names; a deletion cannot be undone if the candidate is evicted",
        [f"context: {world.context}", f"cause: {change.cause}"],
        f"let the deletion wait for the merge: deploy this candidate with {change.ref.display()} "
        "kept exactly as in base, so that only the merged deploy deletes it, after these checks "
        "run again",
        [
            edit(
                f"deploy the candidate with {change.ref.display()} kept exactly as base "
                "declares it; the merged deploy deletes it",
                source_of(change),
            )
        ],
    )


PARENT_RULES: tuple[Callable[[Change, World], Iterator[Finding]], ...] = (
    check_release_uninstall,
    check_kustomization_prune,
    check_kustomization_removed,
    check_application_finalizer,
    check_owner_dependents,
)


def check_cascades(world: World) -> Iterator[Finding]:
    """Every parent's finding for the deleted objects among the deploy's changes (see the module
    docstring); a speculative candidate also defers a parent whose children die."""
    for change in world.changes:
        if not change.deletes or _parent_kept(change, world):
            continue
        found = [f for rule in PARENT_RULES for f in rule(change, world)]
        yield from found
        dying = [f for f in found if f.code is not Code.RELEASE_CONTENT_UNKNOWN]
        if dying and world.context is Context.SPECULATIVE:
            yield _speculative(change, world, dying[0])
    yield from check_kustomization_repointed(world)
    yield from check_kustomization_repointed_unread(world)
