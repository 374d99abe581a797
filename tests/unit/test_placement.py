"""Where the candidate shows a removal (gate.engine.placement): pure, from file texts and the
kustomizations gate.sources.placement reads.

Base's `path:line` of a removed object is another object in the candidate, or a file that is
gone; GitHub annotates the candidate's files. These pin the head-side place for each way an
object leaves: from the middle of a file, from its end, or with the file rewritten entirely (the
file, which stays: "removed from FILE"), with its file (a kustomization entry dropped, or none).
"""

from __future__ import annotations

from gate.engine.placement import (
    FILE_LEVEL,
    RemovedFrom,
    document_span,
    dropped_entry_line,
    place_removal,
    removal_line,
    removed_from,
)
from gate.model.objects import Source
from gate.sources.manifests import parse_stream
from gate.sources.placement import kustomization_files, resource_entries


def _object(kind: str, name: str) -> str:
    return f"apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: app\n"


def _stream(*docs: str) -> str:
    return "---\n".join(docs)


def _line_of(text: str, name: str) -> int:
    """The line `parse_stream` gives the object `name` (what base's finding would say)."""
    return next(
        o.source.line for o in parse_stream(text, "x.yaml") if o.body["metadata"]["name"] == name
    )


CM_A, CLAIM, CM_B = (
    _object("ConfigMap", "a"),
    _object("PersistentVolumeClaim", "data"),
    _object("ConfigMap", "b"),
)


def _removed_from(path: str, at: Source) -> None:
    """`at` is `path` as a whole, marked as a file the candidate keeps without the object."""
    assert at == removed_from(path) == RemovedFrom(path, FILE_LEVEL)
    assert isinstance(at, RemovedFrom)


def test_an_object_removed_from_the_middle_is_placed_on_its_file_not_on_a_separator() -> None:
    """The line now standing where the claim's text was is the `---` between a and b: no label
    says what it is, so the place is the file, "removed from x.yaml" (issue 37)."""
    base = _stream(CM_A, CLAIM, CM_B)
    head = _stream(CM_A, CM_B)
    _removed_from(
        "x.yaml", place_removal(Source("x.yaml", _line_of(base, "data")), "x.yaml", base, head)
    )


def test_the_base_line_is_another_object_in_the_candidate_and_is_not_named() -> None:
    base = _stream(CM_A, CLAIM, CM_B, _object("Secret", "s"))
    head = _stream(CM_A, CM_B, _object("Secret", "s"))
    base_line = _line_of(base, "data")
    at = place_removal(Source("x.yaml", base_line), "x.yaml", base, head)
    assert base_line == _line_of(head, "b")  # base's line is ConfigMap b's in the candidate
    _removed_from("x.yaml", at)


def test_an_object_removed_from_the_end_is_placed_on_its_file_not_the_last_line() -> None:
    """The last line belongs to ConfigMap b."""
    base = _stream(CM_A, CM_B, CLAIM)
    head = _stream(CM_A, CM_B)
    _removed_from(
        "x.yaml", place_removal(Source("x.yaml", _line_of(base, "data")), "x.yaml", base, head)
    )


def test_the_only_object_removed_leaves_an_empty_file() -> None:
    _removed_from("x.yaml", place_removal(Source("x.yaml", 1), "x.yaml", CLAIM, ""))


def test_a_file_rewritten_entirely_is_the_file() -> None:
    base = _stream(CM_A, CLAIM)
    head = "# nothing alike\nkind: Secret\nstringData: {}\n"
    _removed_from(
        "x.yaml", place_removal(Source("x.yaml", _line_of(base, "data")), "x.yaml", base, head)
    )


def test_a_renamed_object_is_removed_from_its_file_under_its_old_name() -> None:
    base = _stream(CM_A, CLAIM)
    head = _stream(CM_A, CLAIM.replace("name: data", "name: data2"))
    _removed_from(
        "x.yaml", place_removal(Source("x.yaml", _line_of(base, "data")), "x.yaml", base, head)
    )


def test_the_head_side_name_of_the_file_is_named() -> None:
    """Rendered mode: the candidate's copy of the file has its own path."""
    base, head = _stream(CM_A, CLAIM), CM_A
    at = place_removal(Source("base/x.yaml", _line_of(base, "data")), "head/x.yaml", base, head)
    _removed_from("head/x.yaml", at)


KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"


def test_a_gone_file_points_at_the_kustomization_entry_that_dropped_it() -> None:
    base_k = KUSTOMIZATION + "resources:\n  - cm.yaml\n  - claim.yaml # data\n  - web.yaml\n"
    head_k = KUSTOMIZATION + "resources:\n  - cm.yaml\n  - web.yaml\n"
    k = kustomization_files("apps/kustomization.yaml", "apps/kustomization.yaml", base_k, head_k)
    at = place_removal(Source("apps/claim.yaml", 1), "apps/claim.yaml", CLAIM, None, [k])
    assert at.path == "apps/kustomization.yaml"
    assert head_k.splitlines()[at.line - 1] == "  - web.yaml"  # where `- claim.yaml` was


def test_a_gone_directory_points_at_the_parent_entry_that_named_it() -> None:
    gone = kustomization_files(
        "apps/db/kustomization.yaml", "apps/db/kustomization.yaml", "x", None
    )
    parent = kustomization_files(
        "kustomization.yaml",
        "kustomization.yaml",
        KUSTOMIZATION + "resources: [apps/web, ./apps/db]\n",
        KUSTOMIZATION + "resources: [apps/web]\n",
    )
    at = place_removal(
        Source("apps/db/claim.yaml", 3), "apps/db/claim.yaml", CLAIM, None, [gone, parent]
    )
    assert at == Source("kustomization.yaml", 3)


def test_a_gone_file_without_a_dropped_entry_is_a_file_level_place_on_its_base_path() -> None:
    same = KUSTOMIZATION + "resources:\n  - other.yaml\n"
    k = kustomization_files("apps/kustomization.yaml", "apps/kustomization.yaml", same, same)
    at = place_removal(Source("apps/claim.yaml", 12), "apps/claim.yaml", CLAIM, None, [k])
    assert at == Source("apps/claim.yaml", FILE_LEVEL)
    assert place_removal(Source("claim.yaml", 4), "claim.yaml", CLAIM, None) == Source(
        "claim.yaml", FILE_LEVEL
    )


def test_an_unchanged_file_a_render_dropped_points_at_the_entry_not_the_same_line() -> None:
    base_k = KUSTOMIZATION + "resources:\n- claim.yaml\n- cm.yaml\n"
    head_k = KUSTOMIZATION + "resources:\n- cm.yaml\n"
    k = kustomization_files("kustomization.yaml", "kustomization.yaml", base_k, head_k)
    at = place_removal(Source("claim.yaml", 1), "claim.yaml", CLAIM, CLAIM, [k])
    assert at == Source("kustomization.yaml", 4)
    assert head_k.splitlines()[at.line - 1] == "- cm.yaml"  # where `- claim.yaml` was
    # With no kustomization to blame, the same text's line in the candidate.
    assert place_removal(Source("claim.yaml", 1), "claim.yaml", CLAIM, CLAIM) == Source(
        "claim.yaml", 1
    )


def test_a_still_listed_or_remote_entry_is_not_blamed() -> None:
    base_k = KUSTOMIZATION + "resources:\n- https://example.com/x.yaml\n- claim.yaml\n"
    k = kustomization_files("kustomization.yaml", "kustomization.yaml", base_k, base_k)
    assert dropped_entry_line(k, "claim.yaml") is None
    remote_only = kustomization_files(
        "kustomization.yaml", "kustomization.yaml", base_k, KUSTOMIZATION + "resources: []\n"
    )
    assert dropped_entry_line(remote_only, "x.yaml") is None
    assert dropped_entry_line(remote_only, "claim.yaml") == 3


def test_resource_entries_read_block_and_flow_lists_with_lines() -> None:
    text = (
        "namespace: app\n"
        "resources:\n"
        "# a comment\n"
        "- a.yaml\n"
        '- "b.yaml"  # quoted\n'
        "bases: [../base,\n"
        "  'c']\n"
        "patches:\n"
        "- path: p.yaml\n"
    )
    assert resource_entries(text) == (("a.yaml", 4), ("b.yaml", 5), ("../base", 6), ("c", 7))


def test_resource_entries_are_read_as_yaml_reads_them() -> None:
    """A more indented `- x` continues the plain scalar above it (kustomize reads one entry,
    `a.yaml - b.yaml`), and a text that is no YAML document has no entries to blame."""
    text = "resources:\n- a.yaml\n  - b.yaml\n- c.yaml\n"
    assert resource_entries(text) == (("a.yaml - b.yaml", 2), ("c.yaml", 4))
    assert resource_entries("resources: [a.yaml\n") is None
    assert resource_entries("just text") == ()
    unreadable = kustomization_files(
        "kustomization.yaml",
        "kustomization.yaml",
        KUSTOMIZATION + "resources:\n- claim.yaml\n",
        KUSTOMIZATION + "resources: [\n",
    )
    assert dropped_entry_line(unreadable, "claim.yaml") is None


def test_document_span_ends_before_the_next_separator() -> None:
    text = _stream(CM_A, CLAIM)
    assert document_span(text, 1) == (1, 5)
    assert document_span(text, 7) == (7, 11)


def test_removal_line_says_when_the_lines_are_all_still_there() -> None:
    assert removal_line(CLAIM, CLAIM, 1, 5) == (1, False)
    assert removal_line(CLAIM, "", 1, 5) == (1, True)


def test_an_object_removed_from_a_large_bundle_of_alike_documents() -> None:
    """A CRD bundle repeats the same lines thousands of times; the removed one is still found
    where it was (the common head and tail are cut before the line diff)."""
    body = "spec:\n  versions:\n" + "  - type: string\n    description: a field\n" * 300

    def crd(i: int) -> str:
        return _object("CustomResourceDefinition", f"crd{i}") + body

    base = _stream(*(crd(i) for i in range(20)))
    head = _stream(*(crd(i) for i in range(20) if i != 10))
    at = place_removal(Source("crds.yaml", _line_of(base, "crd10")), "crds.yaml", base, head)
    _removed_from("crds.yaml", at)
