"""The Kueue configuration the chain relies on: transformations to credits, from the manufacturer table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpustack_worker.api import kueue_config
from gpustack_worker.api.manufacturers import MANUFACTURERS

if TYPE_CHECKING:
    import pytest


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


# --- the whole Configuration and the chart file ---------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_manager_config_carries_what_the_chain_relies_on() -> None:
    config = kueue_config.kueue_manager_config()
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    assert config["namespace"] == "kueue-system"
    assert {"pod", "batch/job"} <= set(config["integrations"]["frameworks"])
    assert config["manageJobsWithoutQueueName"] is False
    assert config["resources"] == kueue_config.kueue_resources()
    assert config["featureGates"] == kueue_config.FEATURE_GATES
    assert config["featureGates"]["TopologyAwareScheduling"] is True
    assert config["featureGates"]["AssignQueueLabelsForPods"] is False
    # Where Kueue runs is not in it.
    assert not {"health", "metrics", "webhook", "leaderElection", "internalCertManagement"} & set(config)


def test_namespace_moves_the_managed_jobs_selector() -> None:
    config = kueue_config.kueue_manager_config(namespace="queues")
    assert config["namespace"] == "queues"
    excluded = config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"]
    assert excluded == ["kube-system", "queues", "gpustack-system"]


def test_merge_lays_nested_values_over_without_touching_the_inputs() -> None:
    base = {"featureGates": {"A": True, "B": True}, "x": [1]}
    extra = {"featureGates": {"B": False}, "x": [2], "y": 1}
    assert kueue_config.merge(base, extra) == {"featureGates": {"A": True, "B": False}, "x": [2], "y": 1}
    assert base == {"featureGates": {"A": True, "B": True}, "x": [1]}


def test_chart_config_adds_kueues_in_cluster_defaults() -> None:
    config = kueue_config.chart_manager_config()
    assert config["webhook"] == {"port": 9443}
    assert config["leaderElection"]["leaderElect"] is True
    assert config["resources"] == kueue_config.kueue_resources()
    assert "internalCertManagement" not in config  # Kueue manages its certificates in a cluster


def test_committed_chart_file_is_fresh(tmp_path: Path) -> None:
    committed = ROOT / kueue_config.CHART_FILE
    assert kueue_config.check(committed) == [], "regenerate: python -m gpustack_worker.api.kueue_config"
    written = kueue_config.write(tmp_path / "out.yaml")
    assert written.read_bytes() == committed.read_bytes()
    assert yaml.safe_load(committed.read_text()) == kueue_config.chart_manager_config()
    # The chart's ConfigMap template renders that very file.
    template = (ROOT / "chart" / "templates" / "kueue-manager-config.yaml").read_text()
    assert '.Files.Get "files/kueue-manager-config.yaml"' in template


def test_check_reports_missing_and_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cfg.yaml"
    assert kueue_config.check(out) == [f"missing: {out}"]
    assert kueue_config.main([str(out)]) == 0
    assert kueue_config.main(["--check", str(out)]) == 0
    out.write_text(out.read_text() + "# edited\n")
    assert kueue_config.main(["--check", str(out)]) == 1
    assert f"stale: {out}" in capsys.readouterr().err
