"""The scheduling-chain settings: reference §4.2 names, seeds and defaults; all live."""

from __future__ import annotations

from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.runtime.settings import env_name, live_keys, settings_from, startup_only_keys

#: Reference §4.2: setting → default.
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
}


def test_reference_names_and_defaults() -> None:
    assert ChainSettings().model_dump(by_alias=True) == REFERENCE_DEFAULTS


def test_all_live_and_documented() -> None:
    assert startup_only_keys(ChainSettings) == []
    assert live_keys(ChainSettings) == list(REFERENCE_DEFAULTS)
    assert [n for n, f in ChainSettings.model_fields.items() if not (f.description or "").strip()] == []


def test_reference_env_seeds() -> None:
    assert env_name("instance_type_mixed_on_node") == "GPUSTACK_INSTANCE_TYPE_MIXED_ON_NODE"
    seeded = settings_from(
        ChainSettings,
        {"workload-fit-affinity": "false"},
        {"GPUSTACK_MODEL_ARTIFACT_DELIVERY_MODE": "Node", "GPUSTACK_WORKLOAD_FIT_AFFINITY": "true"},
    )
    assert (seeded.model_artifact_delivery_mode, seeded.workload_fit_affinity) == ("Node", False)
