"""Findings and their closed vocabulary of codes.

A code is stable: it appears verbatim in CLI output, JSON reports, the webhook's `status.reason`
and Kubernetes Event reasons, so scripts and alerts can key on it. Each has a one-line meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gate.model.objects import Source
from gate.model.refs import ObjectRef


class Code(StrEnum):
    """Every finding code prune-gate can emit."""

    NOT_RETIRED = "NOT_RETIRED"
    SPECULATIVE_PRUNE = "SPECULATIVE_PRUNE"
    CONSUMER_REMAINS = "CONSUMER_REMAINS"
    FORCED_REPLACEMENT = "FORCED_REPLACEMENT"
    IMMUTABLE_FIELD_CHANGE = "IMMUTABLE_FIELD_CHANGE"
    NAMESPACE_HOLDS_CLAIMS = "NAMESPACE_HOLDS_CLAIMS"
    STATEFULSET_DELETES_CLAIMS = "STATEFULSET_DELETES_CLAIMS"
    CRD_HOLDS_RESOURCES = "CRD_HOLDS_RESOURCES"
    PV_BOUND = "PV_BOUND"
    ORPHANED_BY_KEEP = "ORPHANED_BY_KEEP"
    CLAIM_MOUNTED = "CLAIM_MOUNTED"
    RECLAIM_DELETE_LOSES_DATA = "RECLAIM_DELETE_LOSES_DATA"
    ALREADY_TERMINATING = "ALREADY_TERMINATING"
    SPECULATION_FENCE = "SPECULATION_FENCE"
    UNIDENTIFIED_OBJECT = "UNIDENTIFIED_OBJECT"
    OWNER_REFERENCE_ADDED = "OWNER_REFERENCE_ADDED"
    RETENTION_DELETES_CLAIMS = "RETENTION_DELETES_CLAIMS"
    OVERRIDE_IN_MANIFEST = "OVERRIDE_IN_MANIFEST"
    GUARD_TAMPERED = "GUARD_TAMPERED"
    RESOURCES_UNCOUNTED = "RESOURCES_UNCOUNTED"
    RECLAIM_SWITCHED_TO_DELETE = "RECLAIM_SWITCHED_TO_DELETE"
    RELEASE_UNINSTALL_DELETES = "RELEASE_UNINSTALL_DELETES"
    RELEASE_CONTENT_UNKNOWN = "RELEASE_CONTENT_UNKNOWN"
    KUSTOMIZATION_PRUNES_GUARDED = "KUSTOMIZATION_PRUNES_GUARDED"
    APPLICATION_DELETES_RESOURCES = "APPLICATION_DELETES_RESOURCES"
    OWNER_DELETES_DEPENDENTS = "OWNER_DELETES_DEPENDENTS"
    MASS_PRUNE = "MASS_PRUNE"
    FORCE_DISABLED_VOID = "FORCE_DISABLED_VOID"
    FLUX_MOVE_PRUNES = "FLUX_MOVE_PRUNES"


#: One line per code: what it means. Reused in `gate codes`, the README and the JSON schema.
MEANING: dict[Code, str] = {
    Code.NOT_RETIRED: "a guarded object is deleted without stage 1 of retirement "
    "(the prune-gate.io/retire annotation) deployed first",
    Code.SPECULATIVE_PRUNE: "a merge-queue candidate, which may never merge, would delete a "
    "guarded object",
    Code.CONSUMER_REMAINS: "a claim that is removed or retiring is still used by a workload "
    "template",
    Code.FORCED_REPLACEMENT: "an immutable field changes with force on: the object is deleted "
    "and recreated",
    Code.IMMUTABLE_FIELD_CHANGE: "an immutable field changes without force: the apply fails and "
    "every later deploy wedges",
    Code.NAMESPACE_HOLDS_CLAIMS: (
        "a removed Namespace still holds guarded objects, which die with it"
    ),
    Code.STATEFULSET_DELETES_CLAIMS: "a removed StatefulSet's claim retention policy deletes its "
    "claims",
    Code.CRD_HOLDS_RESOURCES: "a removed CustomResourceDefinition still has custom resources, "
    "which die with it",
    Code.PV_BOUND: "a removed PersistentVolume is bound to a claim that stays",
    Code.ORPHANED_BY_KEEP: "a removed object stays in the cluster, unmanaged: it carries a keep "
    "annotation, or its Flux Kustomization does not prune",
    Code.CLAIM_MOUNTED: "a pod still uses the claim: the deletion would stick Terminating behind "
    "kubernetes.io/pvc-protection",
    Code.RECLAIM_DELETE_LOSES_DATA: "the claim's volume has reclaimPolicy Delete and no ready "
    "snapshot: its data goes with it",
    Code.ALREADY_TERMINATING: "the object already has a deletionTimestamp: the deploy will wedge "
    "on it",
    Code.SPECULATION_FENCE: "a speculative deploy holds the speculation fence: guarded deletions "
    "by deployers wait for the merge",
    Code.UNIDENTIFIED_OBJECT: "the webhook cannot tell which object a request deletes or changes: "
    "it refuses rather than decide blind",
    Code.OWNER_REFERENCE_ADDED: "an ownerReference is added to a guarded object: the garbage "
    "collector deletes it with its owner, at once if the owner is gone",
    Code.RETENTION_DELETES_CLAIMS: "a StatefulSet's claim retention is switched to Delete: its "
    "controller deletes claims on scale-down or deletion",
    Code.OVERRIDE_IN_MANIFEST: "the allow-delete override annotation is added by a deploy: an "
    "override is a person's act, not a candidate's",
    Code.GUARD_TAMPERED: "a request would delete or weaken prune-gate's own guards: its webhook "
    "configuration or the speculation fence",
    Code.RESOURCES_UNCOUNTED: "the custom resources of a CustomResourceDefinition being deleted "
    "cannot be counted: refused rather than guessed",
    Code.RECLAIM_SWITCHED_TO_DELETE: "a PersistentVolume's reclaimPolicy is switched to Delete: "
    "its data is deleted with its claim",
    Code.RELEASE_UNINSTALL_DELETES: "a removed Flux HelmRelease is uninstalled: the guarded "
    "objects its release made are deleted with it",
    Code.RELEASE_CONTENT_UNKNOWN: "a removed Flux HelmRelease is uninstalled, and nothing says "
    "which guarded objects its release holds (no live view, chart not rendered)",
    Code.KUSTOMIZATION_PRUNES_GUARDED: "a Flux Kustomization with prune on is removed or "
    "re-pointed (path, targetNamespace, sourceRef): the guarded objects it applied are deleted",
    Code.APPLICATION_DELETES_RESOURCES: "a removed Argo CD Application with the resources "
    "finalizer deletes the guarded objects it synced",
    Code.OWNER_DELETES_DEPENDENTS: "a removed object owns guarded objects (their "
    "ownerReferences name it): the garbage collector deletes them with it",
    Code.MASS_PRUNE: "a root loses all, or more than the policy's share, of its objects at once: "
    "a broken path or render, not a deliberate removal",
    Code.FORCE_DISABLED_VOID: "an object's kustomize.toolkit.fluxcd.io/force: disabled does "
    "nothing: the Flux Kustomization that applies it has spec.force: true",
    Code.FLUX_MOVE_PRUNES: "a guarded object moves from one Flux Kustomization to another: the "
    "old one's prune deletes it unless the new one has applied it first",
}


class Severity(StrEnum):
    """How a finding weighs in the verdict. `off` findings are dropped."""

    BLOCK = "block"
    DEFER = "defer"
    WARN = "warn"
    OFF = "off"


class Runner(StrEnum):
    """Who carries out a fix action: what tells a reader whether it is theirs to do."""

    #: A change to the repository, reviewed, merged and deployed by the pipeline.
    CI = "ci"
    #: A person with access to the cluster, at kubectl.
    KUBECTL = "kubectl"
    #: `gate heal`, which acts only on evidence, dry run first, and records an Event.
    HEAL = "heal"


class ActionKind(StrEnum):
    """A command to run as it is written, or an edit to make to a manifest."""

    COMMAND = "command"
    EDIT = "edit"


@dataclass(frozen=True)
class FixAction:
    """One step of a fix, in the order given: reports show commands as commands and `gate heal`
    acts on them, so nothing ever has to be read back out of the prose."""

    kind: ActionKind
    runner: Runner
    #: The command line, exactly (`kubectl annotate -n app pvc/data ...`), or the edit in words.
    text: str
    #: For an edit: the manifest to change, when it is known.
    source: Source | None = None


def command(text: str, runner: Runner = Runner.KUBECTL) -> FixAction:
    """A command to run as written (at kubectl unless said otherwise)."""
    return FixAction(ActionKind.COMMAND, runner, text)


def edit(text: str, source: Source | None = None) -> FixAction:
    """A change to the repository, merged and deployed by CI."""
    return FixAction(ActionKind.EDIT, Runner.CI, text, source)


@dataclass(frozen=True)
class Finding:
    """One reason to stop or warn: the object, why, the evidence, and the fix: in words for the
    reader of the door it is shown at (`remediation`), and as steps with who does each
    (`actions`)."""

    code: Code
    ref: ObjectRef
    message: str
    evidence: tuple[str, ...] = ()
    remediation: str = ""
    severity: Severity = Severity.BLOCK
    api_version: str = ""
    source: Source | None = None
    #: Severity the rule itself suggests (e.g. a warning on a retired claim); policy may override.
    suggested: Severity | None = field(default=None, compare=False)
    #: The fix as steps, in order; every finding a rule makes has at least one.
    actions: tuple[FixAction, ...] = ()
    #: Where the candidate shows it, for annotations (`gate.engine.placement`); None: `source`.
    head_source: Source | None = None

    def commands(self) -> list[str]:
        """The fix's command lines, in order."""
        return [a.text for a in self.actions if a.kind is ActionKind.COMMAND]
