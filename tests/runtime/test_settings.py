"""The settings mechanism: runtime tunables, the start-up-only marker, env seeding under ConfigMap
precedence, rules in words, orders between settings across composed models."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import pytest
from pydantic import Field

from gpustack_worker.runtime.informer import InformerOptions
from gpustack_worker.runtime.settings import (
    STARTUP_ONLY,
    Order,
    RuntimeSettings,
    SettingsError,
    SettingsModel,
    env_name,
    kebab,
    live_keys,
    rule,
    settings_from,
    startup_only_keys,
)


class _Window(SettingsModel):
    """A stage's own settings, with a live ordered pair (to show cross-field checks in the ConfigMap)."""

    ORDERS: ClassVar[tuple[Order, ...]] = (Order("low_seconds", "high_seconds", why="a window"),)

    low_seconds: float = Field(default=1.0, ge=0, le=100)
    """Lower end."""
    high_seconds: float = Field(default=2.0, ge=0, le=100)
    """Upper end."""
    mode: Literal["A", "B"] = "A"
    """A mode."""
    pinned: int = Field(default=3, ge=1, le=9, json_schema_extra=STARTUP_ONLY)
    """A start-up-only knob."""


class _Composed(RuntimeSettings, _Window):
    """Runtime tunables and the stage's settings in one model, as the command line composes them."""


def test_every_runtime_field_documents_its_reason() -> None:
    missing = [name for name, f in RuntimeSettings.model_fields.items() if not (f.description or "").strip()]
    assert missing == []


def test_only_log_level_is_live_among_runtime_tunables() -> None:
    assert live_keys(RuntimeSettings) == ["log-level"]
    assert set(startup_only_keys(RuntimeSettings)) == {
        kebab(n) for n in RuntimeSettings.model_fields if n != "log_level"
    }


def test_composition_keeps_every_field_marker_and_order() -> None:
    assert set(_Composed.model_fields) == set(RuntimeSettings.model_fields) | set(_Window.model_fields)
    assert "pinned" in startup_only_keys(_Composed) and "mode" in live_keys(_Composed)
    assert _Composed.model_fields["low_seconds"].description == "Lower end."
    orders = {(o.low, o.high) for o in _Composed.all_orders()}
    assert ("low_seconds", "high_seconds") in orders
    assert ("watch_timeout_min_seconds", "watch_timeout_max_seconds") in orders


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        ({}, {}, {"mode": "A", "pinned": 3, "controller_workers": 2}),
        ({}, {"GPUSTACK_MODE": "B", "GPUSTACK_PINNED": "5"}, {"mode": "B", "pinned": 5}),
        ({"mode": "A"}, {"GPUSTACK_MODE": "B"}, {"mode": "A"}),
        ({"low-seconds": "4", "high-seconds": "4"}, {}, {"low_seconds": 4.0, "high_seconds": 4.0}),
        ({"log-level": "debug"}, {}, {"log_level": "DEBUG"}),
        ({"mode": "  B\n"}, {}, {"mode": "B"}),
        ({}, {"GPUSTACK_CONTROLLER_WORKERS": "8"}, {"controller_workers": 8}),
        ({}, {"GPUSTACK_SOMETHING_ELSE": "x", "OTHER": "y"}, {"mode": "A"}),
    ],
    ids=[
        "defaults",
        "env-seeds",
        "configmap-beats-env",
        "order-allows-equal",
        "log-level-any-case",
        "surrounding-whitespace-stripped",
        "startup-only-from-env",
        "foreign-env-ignored",
    ],
)
def test_settings_from(data: dict[str, str], env: dict[str, str], expected: dict[str, Any]) -> None:
    settings = settings_from(_Composed, data, env)
    assert {k: getattr(settings, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("data", "env", "errors"),
    [
        (
            {"low-seconds": "5"},
            {},
            ["low-seconds='5' must not exceed high-seconds=2 (default): a window"],
        ),
        (
            {"high-seconds": "0.5"},
            {"GPUSTACK_LOW_SECONDS": "1"},
            ["GPUSTACK_LOW_SECONDS='1' must not exceed high-seconds='0.5': a window"],
        ),
        (
            {"pinned": "4"},
            {},
            [
                "pinned='4': start-up-only setting, read once when the process starts; "
                "set GPUSTACK_PINNED on the workload instead"
            ],
        ),
        (
            {"mode": "C", "low-seconds": "x", "unknown": "1"},
            {},
            [
                "unknown='1': unknown setting",
                "low-seconds='x' is invalid: expected a number from 0 to 100",
                "mode='C' is invalid: expected one of A, B",
            ],
        ),
    ],
    ids=["configmap-order", "order-across-sources", "startup-only-key", "every-problem-listed"],
)
def test_settings_from_rejects(data: dict[str, str], env: dict[str, str], errors: list[str]) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from(_Composed, data, env)
    assert info.value.errors == errors
    assert str(info.value) == "; ".join(errors)


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("controller_workers", "an integer from 1 to 64"),
        ("requeue_base_delay_seconds", "a number greater than 0 and at most 60"),
        ("watch_timeout_min_seconds", "a number from 10 to 3600"),
        ("log_level", "one of DEBUG, INFO, WARNING, ERROR"),
    ],
)
def test_rule_in_words(field: str, words: str) -> None:
    assert rule(RuntimeSettings.model_fields[field]) == words


def test_runtime_orders_hold_for_the_defaults_and_are_enforced() -> None:
    RuntimeSettings()  # the defaults keep every order
    with pytest.raises(ValueError, match="leader-renew-deadline-seconds=15 must be less than"):
        RuntimeSettings(leader_renew_deadline_seconds=15.0)


def test_informer_options() -> None:
    settings = settings_from(
        RuntimeSettings,
        None,
        {"GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS": "20", "GPUSTACK_WATCH_BACKOFF_MAX_SECONDS": "5"},
    )
    assert settings.informer_options() == InformerOptions(
        watch_timeout_min_s=20.0,
        watch_timeout_max_s=600.0,
        inactivity_timeout_s=120.0,
        backoff_initial_s=0.8,
        backoff_max_s=5.0,
    )


def test_env_name_and_key() -> None:
    assert env_name("instance_type_mixed_on_node") == "GPUSTACK_INSTANCE_TYPE_MIXED_ON_NODE"
    assert kebab("instance_type_mixed_on_node") == "instance-type-mixed-on-node"
