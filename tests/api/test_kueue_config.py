"""The Kueue configuration the chain relies on: transformations to credits, from the manufacturer table."""

from __future__ import annotations

from gpustack_worker.api import kueue_config
from gpustack_worker.api.manufacturers import MANUFACTURERS


def test_every_manufacturer_resource_becomes_credits() -> None:
    by_input = {t["input"]: t for t in kueue_config.transformations()}
    assert by_input["nvidia.com/gpu"] == {
        "input": "nvidia.com/gpu",
        "strategy": "Replace",
        "outputs": {"credits.gpustack.ai/nvidia": "1600000"},
    }
    assert by_input["nvidia.com/gpu.shared"]["outputs"] == {"credits.gpustack.ai/nvidia": "160000"}
    assert by_input["nvidia.com/gpu.sliced.units"] == {
        "input": "nvidia.com/gpu.sliced.units",
        "strategy": "Replace",
        "multiplyBy": "nvidia.com/gpu.sliced",
        "outputs": {"credits.gpustack.ai/nvidia": "1"},
    }
    assert by_input["nvidia.com/gpu.partitioned.units"]["outputs"] == {"credits.gpustack.ai/nvidia": "1"}
    # Only manufacturers with a partition kind get the partitioned transformation.
    partitioned = {i.split(".partitioned")[0] for i in by_input if i.endswith(".partitioned.units")}
    assert partitioned == {m.resource for m in MANUFACTURERS.values() if m.partition_kind}
    assert len(by_input) == 3 * len(MANUFACTURERS) + len(partitioned)
    assert all(t["strategy"] == "Replace" for t in by_input.values())


def test_quota_check_strategy_ignores_undeclared_resources() -> None:
    assert kueue_config.kueue_resources()["quotaCheckStrategy"] == "IgnoreUndeclared"
