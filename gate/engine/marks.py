"""Whose word a mark is: the managedFields of an object, read as evidence of who wrote a label
or an annotation.

Heal loses a claim's data on the strength of a mark: `prune-gate.io/data: disposable`, or a label
that `heal.disposableClaims` reads (`tier: cache`). Labels and annotations come from the
deployer's manifests, a speculative deploy's included, so a mark's value says nothing about who
means it. The API server records who wrote each field (managedFields: `manager`, `operation`
Apply or Update, `time`); this module reads that record and answers one question: is this mark
a person's hand?

A mark is a person's hand only when every managedFields entry that owns it is an `Update`, not
through a subresource, by one of the trusted managers (`heal.trustedManagers`, by default the
names `kubectl label`, `annotate` and `edit` write under: kubectl-label, kubectl-annotate,
kubectl-edit). Fail closed, each for a reason:
- an allow-list, not a list of deployers: deployers' manager names are open-ended
  (kustomize-controller, helm-controller, helm, argocd-controller, kapp,
  kubectl-client-side-apply, kubectl for server-side apply, any operator's or script's), and a
  name never heard of must not count; the policy's `webhook.deployers` are usernames, which
  managedFields do not record;
- never an `Apply` entry, whatever its manager is called: applied configuration is a manifest;
- every owner: a field that a deployer co-owns (server-side apply of the same value) is the
  deployer's word too, and a person's `kubectl label --overwrite` of the value a deployer wrote
  changes nothing, so it takes nothing over;
- a mark no entry owns (managedFields stripped, an entry without fields) has no writer that can
  be told: it does not count.

What managedFields cannot tell: a manager name is the client's choice, and an UPDATE can rewrite
managedFields (client-side apply sends what the manifest carries). The doors bind them to an
identity instead (`gate.engine.updates.disposable_marks_added`): a deployer may not add a mark,
nor make a trusted manager the owner of one. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gate.engine.ledger import DATA_ANNOTATION, DISPOSABLE, Meta, Writer
from gate.engine.policy import DEFAULT_TRUSTED_MANAGERS, DisposableClaims, Policy

#: The operation of a write that is not applied configuration.
UPDATE = "Update"


def is_hand(writer: Writer, trusted: Collection[str]) -> bool:
    """True when this write is a person's hand: an Update, not through a subresource, by a
    trusted manager."""
    return writer.operation == UPDATE and not writer.subresource and writer.manager in trusted


def hand_owners(writers: Iterable[Writer], trusted: Collection[str]) -> frozenset[str]:
    """The trusted managers among a field's owners: what a forged or borrowed manager name
    would add (`gate.engine.updates`)."""
    return frozenset(w.manager for w in writers if is_hand(w, trusted))


def writers_text(writers: Iterable[Writer]) -> str:
    """`kustomize-controller (Apply, 2026-...), kubectl-label (Update, 2026-...)`."""
    return ", ".join(w.display() for w in writers) or "no managedFields entry (writer unknown)"


def by_hand(writers: tuple[Writer, ...], trusted: Collection[str]) -> tuple[bool, str]:
    """Whether a mark with these owners is a person's hand, and the evidence in words."""
    if not writers:
        return False, "no managedFields entry owns it, so who wrote it cannot be told"
    others = [w for w in writers if not is_hand(w, trusted)]
    if others:
        return False, f"written by {writers_text(writers)}: not a person's hand"
    return True, f"written by {writers_text(writers)}: a person's hand"


@dataclass(frozen=True)
class Mark:
    """One mark on a live object, with who wrote it: what `gate doctor` shows."""

    #: `label` or `annotation`
    field: str
    key: str
    value: str
    writers: tuple[Writer, ...]
    #: What the mark does to heal, empty for a mark heal does not read (the retire mark).
    heal_note: str = ""

    def describe(self) -> str:
        note = f"; {self.heal_note}" if self.heal_note else ""
        return (
            f'{self.field} {self.key}="{self.value}": written by {writers_text(self.writers)}{note}'
        )


@dataclass(frozen=True)
class MarkReader:
    """Which labels and annotations are marks, and whose hand counts: the policy's part."""

    entries: tuple[DisposableClaims, ...] = ()
    retire_annotation: str = Policy.retire_annotation
    trusted: tuple[str, ...] = DEFAULT_TRUSTED_MANAGERS

    @classmethod
    def of(cls, policy: Policy) -> MarkReader:
        return cls(policy.disposable_claims, policy.retire_annotation, policy.heal_trusted_managers)

    def _heal_note(self, writers: tuple[Writer, ...]) -> str:
        counts, _ = by_hand(writers, self.trusted)
        if counts:
            return "a person's hand: unattended heal takes it"
        return (
            "not a person's hand (trusted: an Update by "
            f"{', '.join(self.trusted) or 'no manager'}): unattended heal does not take it"
        )

    def marks(self, meta: Meta) -> tuple[Mark, ...]:
        """The marks an object carries: the disposable annotation, the labels a
        `heal.disposableClaims` entry covering it reads with the value it reads, and the retire
        annotation; each with its writers."""
        out: list[Mark] = []
        claim = (meta.ref.group, meta.ref.kind) == ("", "PersistentVolumeClaim")
        if claim and meta.annotations.get(DATA_ANNOTATION) == DISPOSABLE:
            writers = meta.writers.get(("annotations", DATA_ANNOTATION), ())
            out.append(
                Mark("annotation", DATA_ANNOTATION, DISPOSABLE, writers, self._heal_note(writers))
            )
        if claim:
            for key, value in sorted(meta.labels.items()):
                if any(
                    d.matches(meta.ref, meta.labels) and (key, value) in d.labels
                    for d in self.entries
                ):
                    writers = meta.writers.get(("labels", key), ())
                    out.append(Mark("label", key, value, writers, self._heal_note(writers)))
        retire = meta.annotations.get(self.retire_annotation)
        if retire is not None:
            writers = meta.writers.get(("annotations", self.retire_annotation), ())
            out.append(Mark("annotation", self.retire_annotation, retire, writers))
        return tuple(out)

    def disposable(self, meta: Meta, *, unattended: bool) -> tuple[str, str]:
        """Whether heal may lose this claim's data: (why it may, "") or ("", why a mark it
        carries does not count here; "" when it carries none).

        Attended (a person confirms the plan), every mark counts and the reason names its
        writers. Unattended, `heal.disposableClaims` counts by namespace and name; an entry that
        reads labels counts only when each of them is a person's hand, and so does the disposable
        annotation (`by_hand`).
        """
        doubts: list[str] = []
        for entry in self.entries:
            if not entry.matches(meta.ref, meta.labels):
                continue
            if not entry.labels:
                return f"heal.disposableClaims names it by namespace and name ({entry.reason})", ""
            judged = [
                (key, value, *by_hand(meta.writers.get(("labels", key), ()), self.trusted))
                for key, value in entry.labels
            ]
            said = "; ".join(f"label {k}={v} {why}" for k, v, _, why in judged)
            if not unattended or all(ok for _, _, ok, _ in judged):
                return f"heal.disposableClaims matches it ({entry.reason}): {said}", ""
            doubts.append(
                "heal.disposableClaims matches it only by "
                + "; ".join(f"label {k}={v}, {why}" for k, v, ok, why in judged if not ok)
            )
        if meta.annotations.get(DATA_ANNOTATION) == DISPOSABLE:
            ok, why = by_hand(meta.writers.get(("annotations", DATA_ANNOTATION), ()), self.trusted)
            if ok or not unattended:
                return f"it is marked {DATA_ANNOTATION}={DISPOSABLE}, {why}", ""
            doubts.append(f"it is marked {DATA_ANNOTATION}={DISPOSABLE}, {why}")
        return "", "; ".join(doubts)


#: The policy's defaults: no `heal.disposableClaims`, kubectl's hand commands trusted.
DEFAULT_MARKS = MarkReader()
