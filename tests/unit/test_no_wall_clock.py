"""The property tests run without a deadline or a speed health check (tests/conftest.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.unit import test_engine_fuzz, test_plan_properties, test_webhook_fuzz


def test_hypothesis_has_no_deadline_and_no_speed_check() -> None:
    current = settings()
    assert current.deadline is None
    assert HealthCheck.too_slow in current.suppress_health_check


def test_every_property_test_inherits_it() -> None:
    """An explicit `@settings(...)` must not bring a deadline back."""
    modules = (test_engine_fuzz, test_plan_properties, test_webhook_fuzz)
    tests = [
        f
        for m in modules
        for name, f in vars(m).items()
        if name.startswith("test_") and hasattr(f, "hypothesis")
    ]
    assert tests
    for f in tests:
        chosen = f._hypothesis_internal_use_settings
        assert chosen.deadline is None, f.__name__
