"""The policy: guarded kinds, severities, exemptions, annotation names, and their defaults.

Pure data; defaults live here, in one place. Reading and validating the policy file
(`prune-gate.yaml`) is `gate.sources.policyfile`'s job.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from dataclasses import dataclass, field

from gate.engine.context import Context
from gate.model.errors import ConfigError
from gate.model.findings import CODES, Code, Severity
from gate.model.refs import ObjectRef, parse_group_kind
from gate.model.stateful import CATALOGUE

DEFAULT_GUARDED = (
    "PersistentVolumeClaim",
    "PersistentVolume",
    "VolumeSnapshot.snapshot.storage.k8s.io",
    # The stateful custom kinds (database operators' clusters, storage systems' volumes): their
    # deletion takes data with it, and their CRDs rarely sit beside them (gate.model.stateful).
    *(k.name for k in CATALOGUE),
)
#: Kinds whose deletion takes guarded objects with it: a Namespace its claims, a StatefulSet the
#: claims its retention policy deletes, a CRD every custom resource of it. `gate check` judges
#: them by its cascade rules whatever `guardedKinds` says; the webhook sees a DELETE only of a
#: kind in `webhook.guardedKinds`, so its default adds these to the guarded kinds.
CASCADE_KINDS = (
    "Namespace",
    "StatefulSet.apps",
    "CustomResourceDefinition.apiextensions.k8s.io",
)
#: One default for both doors: the kinds the webhook decides are the guarded kinds (a deployer's
#: prune of an unretired VolumeSnapshot or CNPG Cluster is refused at the door as in CI) and the
#: kinds that cascade to them. A policy that sets `guardedKinds` and not `webhook.guardedKinds`
#: gets its own kinds at the door too (`webhook_kinds_for`).
DEFAULT_WEBHOOK_GUARDED = (*DEFAULT_GUARDED, *CASCADE_KINDS)


def webhook_kinds_for(guarded: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """The kinds the webhook decides when the policy does not list them: the guarded kinds and
    the kinds whose deletion cascades to them."""
    return guarded | {parse_group_kind(k) for k in CASCADE_KINDS}


#: Default severity of every code, in every context unless a context is named: the code table's
#: (`gate.model.findings.CODES`), the one place it is written.
DEFAULT_SEVERITY: dict[Code, dict[Context | None, Severity]] = {
    code: {None: CODES[code].severity} for code in Code
}

#: The field managers whose `Update` writes are a person's hand (`heal.trustedManagers`): the
#: names kubectl's hand commands write under (`kubectl label`, `annotate`, `edit`). A mark (the
#: disposable annotation, a label `heal.disposableClaims` reads) counts for unattended heal only
#: when these alone wrote it (`gate.engine.marks`); every other manager, a name never heard of
#: included, is a deployer's. Not `kubectl-patch`: deploy scripts patch more than people do.
DEFAULT_TRUSTED_MANAGERS = ("kubectl-label", "kubectl-annotate", "kubectl-edit")

#: The least `webhook.maxCacheAge`: a watch ends and restarts every minute and a re-list of a
#: big cluster takes a while; below a few minutes readiness flaps on a quiet, healthy cluster.
MIN_MAX_CACHE_AGE_SECONDS = 300.0

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`1h30m` -> 5400.0 seconds. Units are required (a bare number is ambiguous)."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration with units (like 30s, 5m, 1h30m)")
    return total


def duration_text(seconds: float) -> str:
    """300.0 -> `5m`, 5400.0 -> `1h30m`, 90.0 -> `1m30s`: a duration as the policy writes it
    (the inverse of `parse_duration`)."""
    whole = int(seconds)
    if whole != seconds or whole == 0:
        return f"{seconds:g}s"
    parts = [(whole // 3600, "h"), (whole % 3600 // 60, "m"), (whole % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n)


@dataclass(frozen=True)
class Exemption:
    """A documented, expiring exception for matching objects (optionally only some codes)."""

    group: str
    kind: str
    reason: str
    expires: dt.date
    namespace: str = "*"
    name: str = "*"
    labels: tuple[tuple[str, str], ...] = ()
    codes: frozenset[Code] | None = None

    def matches(self, ref: ObjectRef, labels: dict[str, str], code: Code) -> bool:
        """True when this exemption covers the finding (expiry is checked by the caller)."""
        return (
            ref.group == self.group
            and ref.kind == self.kind
            and fnmatch.fnmatchcase(ref.namespace, self.namespace)
            and fnmatch.fnmatchcase(ref.name, self.name)
            and all(labels.get(k) == v for k, v in self.labels)
            and (self.codes is None or code in self.codes)
        )


@dataclass(frozen=True)
class DisposableClaims:
    """Claims whose data `gate heal` may lose to release them (`heal.disposableClaims`)."""

    reason: str
    namespace: str = "*"
    name: str = "*"
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, ref: ObjectRef, labels: dict[str, str]) -> bool:
        return (
            fnmatch.fnmatchcase(ref.namespace, self.namespace)
            and fnmatch.fnmatchcase(ref.name, self.name)
            and all(labels.get(k) == v for k, v in self.labels)
        )


@dataclass(frozen=True)
class HealWatch:
    """The actions `gate heal --watch` takes unasked (`heal.watch` in the policy file)."""

    release_disposable_claims: bool = False
    rescue_volumes: bool = False
    force_delete_pods_on_dead_nodes: bool = False


@dataclass(frozen=True)
class WebhookSettings:
    """What the admission webhook needs beyond the rules."""

    guarded_kinds: frozenset[tuple[str, str]]
    deployers: tuple[str, ...] = ()
    break_glass_groups: tuple[str, ...] = ()
    fence: tuple[str, str] | None = None
    resync_seconds: float = 300.0
    max_cache_age_seconds: float = 900.0
    #: Label keys a deployer may not add, change or remove on a guarded object: the keys the
    #: webhook's objectSelector reads (the chart adds them), so a relabel cannot hide an object.
    protected_labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """The validated policy, with defaults filled in."""

    guarded_kinds: frozenset[tuple[str, str]] = frozenset(
        parse_group_kind(k) for k in DEFAULT_GUARDED
    )
    severity: dict[Code, dict[Context | None, Severity]] = field(
        default_factory=lambda: {c: dict(v) for c, v in DEFAULT_SEVERITY.items()}
    )
    configured: frozenset[Code] = frozenset()
    exemptions: tuple[Exemption, ...] = ()
    retire_annotation: str = "prune-gate.io/retire"
    allow_delete_annotation: str = "prune-gate.io/allow-delete"
    live_timeout_seconds: float = 30.0
    live_page_size: int = 500
    #: MASS_PRUNE: a root with at least `mass_prune_min_objects` objects that loses more than
    #: this share of them at once, or one with at least `mass_prune_empty_min_objects` that
    #: loses every object (renders to nothing: a broken path or build).
    mass_prune_fraction: float = 0.5
    mass_prune_min_objects: int = 20
    mass_prune_empty_min_objects: int = 5
    disposable_claims: tuple[DisposableClaims, ...] = ()
    #: Whose writes are a person's hand, for the marks unattended heal reads
    #: (`heal.trustedManagers`).
    heal_trusted_managers: tuple[str, ...] = DEFAULT_TRUSTED_MANAGERS
    #: What `gate heal --watch` may do on its own (`heal.watch`): each off by default.
    heal_watch: HealWatch = field(default_factory=lambda: HealWatch())
    webhook: WebhookSettings = field(
        default_factory=lambda: WebhookSettings(
            frozenset(parse_group_kind(k) for k in DEFAULT_WEBHOOK_GUARDED)
        )
    )

    def heal_disposable(self, ref: ObjectRef, labels: dict[str, str]) -> bool:
        """True when the policy says this claim's data may be lost to release it."""
        return any(d.matches(ref, labels) for d in self.disposable_claims)

    def disposable_label_keys(self) -> tuple[str, ...]:
        """The label keys `heal.disposableClaims` reads, sorted: the marks a deployer may not
        add to a claim (`gate.engine.updates.disposable_marks_added`)."""
        return tuple(sorted({key for d in self.disposable_claims for key, _ in d.labels}))

    def disposable_label_values(self, ref: ObjectRef, key: str) -> frozenset[str]:
        """The values of label `key` that some `heal.disposableClaims` entry whose namespace and
        name patterns cover `ref` reads: the values that would mark this claim disposable."""
        return frozenset(
            value
            for d in self.disposable_claims
            if fnmatch.fnmatchcase(ref.namespace, d.namespace)
            and fnmatch.fnmatchcase(ref.name, d.name)
            for k, value in d.labels
            if k == key
        )

    def is_guarded_kind(self, group: str, kind: str) -> bool:
        return (group, kind) in self.guarded_kinds

    def severity_for(
        self, code: Code, context: Context, suggested: Severity | None = None
    ) -> Severity:
        """The configured severity of `code` in `context`; a rule's suggestion beats defaults."""
        if suggested is not None and code not in self.configured:
            return suggested
        table = self.severity[code]
        return table.get(context, table.get(None, Severity.BLOCK))

    def exemption_for(
        self, ref: ObjectRef, labels: dict[str, str], code: Code, today: dt.date
    ) -> Exemption | None:
        """The first unexpired exemption covering this finding, if any."""
        for ex in self.exemptions:
            if ex.expires >= today and ex.matches(ref, labels, code):
                return ex
        return None

    def expired_exemption_for(
        self, ref: ObjectRef, labels: dict[str, str], code: Code, today: dt.date
    ) -> Exemption | None:
        """An exemption that would cover this finding but has expired: worth saying so."""
        for ex in self.exemptions:
            if ex.expires < today and ex.matches(ref, labels, code):
                return ex
        return None


# --- the policy file's apiVersion -------------------------------------------------------------

#: The policy file's `apiVersion`: what `gate config migrate` writes, and every example.
POLICY_API_VERSION = "prune-gate.io/v1"
#: A policy file without `apiVersion`: the layout from before it existed, read as this version.
#: It has the same keys as v1, so migrating one only adds the line.
LEGACY_API_VERSION = "prune-gate.io/v1alpha1"
#: Every version a policy file may declare, the current one first.
KNOWN_API_VERSIONS = (POLICY_API_VERSION, LEGACY_API_VERSION)

#: A top-level `apiVersion:` line of a block-style YAML mapping.
_API_VERSION_LINE = re.compile(r"^apiVersion[ \t]*:")
#: A line before a document's first key: blank, a comment, a directive or `---`.
_PREAMBLE_LINE = re.compile(r"^(?:[ \t]*(?:#.*)?|%.*|---[ \t]*(?:#.*)?)$")


def policy_api_version(data: object, label: str) -> str:
    """The version a decoded policy document declares (`LEGACY_API_VERSION` when it declares
    none). An unknown one is a `ConfigError` naming the file and the versions known: checked
    before the keys, since another version's keys are not this one's to judge."""
    if not isinstance(data, dict) or "apiVersion" not in data:
        return LEGACY_API_VERSION
    version = data["apiVersion"]
    if isinstance(version, str) and version in KNOWN_API_VERSIONS:
        return version
    raise ConfigError(
        f"{label}: apiVersion: {version!r} is not a policy version this gate knows: it reads "
        f"{' and '.join(KNOWN_API_VERSIONS)} (a file without apiVersion as "
        f"{LEGACY_API_VERSION}); write apiVersion: {POLICY_API_VERSION}, or run a prune-gate "
        f"that knows {version!r}"
    )


def migrate_policy_text(text: str) -> str:
    """A policy file's text as a `POLICY_API_VERSION` file: its `apiVersion` line set, or one
    added before its first key; comments and layout kept. The caller checks that the result
    reads as the same policy (a flow-style mapping cannot take a line so)."""
    lines = text.splitlines(keepends=True)
    line = f"apiVersion: {POLICY_API_VERSION}\n"
    for i, old in enumerate(lines):
        if _API_VERSION_LINE.match(old):
            return "".join([*lines[:i], line, *lines[i + 1 :]])
    at = 0
    while at < len(lines) and _PREAMBLE_LINE.match(lines[at].rstrip("\r\n")):
        at += 1
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    return "".join([*lines[:at], line, *lines[at:]])
