"""Settings parsing: reference §4.2 defaults, env seeding, ConfigMap precedence, rejection of bad values."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.runtime.settings import Settings, SettingsError, env_name, settings_from

REFERENCE_DEFAULTS = {
    "node-management-manual": False,
    "instance-type-mixed-on-node": True,
    "instance-type-derived-from-node": True,
    "instance-type-drain-when-no-flavors": True,
    "instance-type-aware-cpu-manufacturer": False,
    "workload-fit-affinity": True,
    "instance-general-resources-overcommit": True,
    "instance-persistent-volume-placement": True,
    "model-artifact-delivery-mode": "Engine",
    "fit-label-coalesce-seconds": 3.0,
}


def test_reference_defaults() -> None:
    dumped = Settings().model_dump(by_alias=True)
    assert {k: dumped[k] for k in REFERENCE_DEFAULTS} == REFERENCE_DEFAULTS


def test_every_field_documents_its_reason() -> None:
    missing = [name for name, f in Settings.model_fields.items() if not (f.description or "").strip()]
    assert missing == []


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        ({}, {}, {"node_management_manual": False, "model_artifact_delivery_mode": "Engine"}),
        ({}, {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "true"}, {"node_management_manual": True}),
        (
            {"node-management-manual": "false"},
            {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "true"},
            {"node_management_manual": False},
        ),
        ({"model-artifact-delivery-mode": "Node"}, {}, {"model_artifact_delivery_mode": "Node"}),
        (
            {"controller-workers": "8", "requeue-qps": "2.5"},
            {},
            {"controller_workers": 8, "requeue_qps": 2.5},
        ),
        ({"some-other-component-key": "x"}, {}, {"workload_fit_affinity": True}),
    ],
    ids=[
        "defaults",
        "env-seed",
        "configmap-beats-env",
        "delivery-mode",
        "runtime-tunables",
        "foreign-keys-ignored",
    ],
)
def test_settings_from(data: dict[str, str], env: dict[str, str], expected: dict[str, Any]) -> None:
    settings = settings_from(data, env)
    assert {k: getattr(settings, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("data", "bad_key"),
    [
        ({"workload-fit-affinity": "maybe"}, "workload-fit-affinity"),
        ({"model-artifact-delivery-mode": "Carrier-Pigeon"}, "model-artifact-delivery-mode"),
        ({"controller-workers": "0"}, "controller-workers"),
        ({"controller-workers": "many"}, "controller-workers"),
    ],
    ids=["not-a-bool", "unknown-mode", "below-minimum", "not-a-number"],
)
def test_invalid_values_are_rejected_with_the_key(data: dict[str, str], bad_key: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from(data, {})
    assert any(e.startswith(f"{bad_key}:") for e in info.value.errors)


def test_env_name() -> None:
    assert env_name("instance_type_mixed_on_node") == "GPUSTACK_INSTANCE_TYPE_MIXED_ON_NODE"
