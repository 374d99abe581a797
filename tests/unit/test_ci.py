"""`tests.ci.ci()`: one answer to "is this CI?" for every test that must not skip there."""

from __future__ import annotations

import pytest

from tests.ci import ci


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", "woodpecker", " true "])
def test_ci_set_to_anything_but_a_false_value_is_ci(value: str) -> None:
    assert ci({"CI": value})


@pytest.mark.parametrize("value", ["", "0", "false", "FALSE", "False", "no", "off", " false "])
def test_ci_unset_or_false_is_not_ci(value: str) -> None:
    assert not ci({"CI": value})
    assert not ci({})


def test_only_ci_counts_not_what_github_actions_sets_beside_it() -> None:
    assert not ci({"GITHUB_ACTIONS": "true"})  # a test faking an Actions run is not CI
