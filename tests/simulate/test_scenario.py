"""Scenario validation: every problem is reported with the node and the field it is about."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.simulate.load import load_scenario, packaged_scenario, parse_scenario
from gpustack_worker.simulate.scenario import CPU_DETAIL_FIELDS, ScenarioError

_CPU = {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 64}
_A100: dict[str, Any] = {
    "manufacturer": "nvidia",
    "product": "NVIDIA A100-SXM4-80GB",
    "memoryMiB": 81920,
    "count": 8,
    "partitioning": {
        "kind": "mig",
        "cards": [4, 5, 6, 7],
        "profiles": [
            {"name": "3g.40gb", "memoryMiB": 40192, "computeSlices": 3, "memorySlices": 4},
            {"name": "7g.80gb", "memoryMiB": 80384, "computeSlices": 7, "memorySlices": 8},
        ],
    },
}


def _base() -> dict[str, Any]:
    return {
        "nodes": [
            {"name": "cpu-a", "cpu": dict(_CPU), "memory": "64Gi"},
            {"name": "gpu-a", "cpu": dict(_CPU), "memory": "512Gi", "accelerators": [copy.deepcopy(_A100)]},
            {
                "name": "gpu-b",
                "cpu": dict(_CPU),
                "memory": "512Gi",
                "accelerators": [
                    {"manufacturer": "hygon", "product": "K100_AI", "memoryMiB": 65536, "count": 4}
                ],
            },
        ]
    }


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = _base()
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "count"), 0),
            "nodes[2] (name=gpu-b).accelerators[0].count: must be ≥ 1",
            id="count-zero",
        ),
        pytest.param(
            _with(("nodes", 0, "gpus"), 2), "nodes[0] (name=cpu-a).gpus: unknown key", id="unknown-node-key"
        ),
        pytest.param(
            _with(("nodes", 1, "accelerators", 0, "vram"), 1),
            "nodes[1] (name=gpu-a).accelerators[0].vram: unknown key",
            id="unknown-accelerator-key",
        ),
        pytest.param(
            _with(("nodes", 0, "cpu", "cores"), "many"),
            "nodes[0] (name=cpu-a).cpu.cores: must be an integer",
            id="cores-not-integer",
        ),
        pytest.param(
            _with(("nodes", 0, "memory"), "lots"),
            "nodes[0] (name=cpu-a).memory: must match",
            id="memory-not-a-quantity",
        ),
        pytest.param(
            _with(("nodes", 0, "cpu", "details"), {"colour": "red"}),
            "nodes[0] (name=cpu-a).cpu.details.colour (the key): must be one of",
            id="unknown-cpu-detail",
        ),
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "manufacturer"), "acme"),
            "nodes[2] (name=gpu-b).accelerators[0].manufacturer: unknown manufacturer 'acme'",
            id="unknown-manufacturer",
        ),
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "allocations"), [{"card": 4, "mode": "exclusive"}]),
            "nodes[2] (name=gpu-b).accelerators[0].allocations[0].card: card 4 does not exist (count is 4)",
            id="card-out-of-range",
        ),
        pytest.param(
            _with(
                ("nodes", 2, "accelerators", 0, "allocations"),
                [{"card": 0, "mode": "sliced", "units": 800000, "slices": 5}],
            ),
            "nodes[2] (name=gpu-b).accelerators[0].allocations[0].slices: must be ≤ 4",
            id="hygon-fifth-slice",
        ),
        pytest.param(
            _with(
                ("nodes", 2, "accelerators", 0, "allocations"),
                [{"card": 0, "mode": "sliced", "units": 1600001, "slices": 1}],
            ),
            "nodes[2] (name=gpu-b).accelerators[0].allocations[0].units: must be within 1..1600000",
            id="units-beyond-M",
        ),
        pytest.param(
            _with(
                ("nodes", 2, "accelerators", 0, "allocations"), [{"card": 0, "mode": "shared", "shares": 11}]
            ),
            "nodes[2] (name=gpu-b).accelerators[0].allocations[0].shares: shares must be within 1..10",
            id="eleven-shares",
        ),
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "allocations"), [{"card": 0, "mode": "shared"}]),
            "nodes[2] (name=gpu-b).accelerators[0].allocations[0].shares: required with mode shared",
            id="shares-missing",
        ),
        pytest.param(
            _with(
                ("nodes", 1, "accelerators", 0, "allocations"),
                [{"card": 5, "mode": "sliced", "units": 100, "slices": 1}],
            ),
            "nodes[1] (name=gpu-a).accelerators[0].allocations[0].mode: card 5 is partitioned",
            id="sliced-on-partitioned-card",
        ),
        pytest.param(
            _with(
                ("nodes", 1, "accelerators", 0, "allocations"),
                [{"card": 0, "mode": "partitioned", "profiles": {"3g.40gb": 1}}],
            ),
            "nodes[1] (name=gpu-a).accelerators[0].allocations[0].mode: card 0 is not in partitioning mode",
            id="partition-on-whole-card",
        ),
        pytest.param(
            _with(
                ("nodes", 1, "accelerators", 0, "allocations"),
                [{"card": 4, "mode": "partitioned", "profiles": {"3g.40gb": 1, "7g.80gb": 1}}],
            ),
            "nodes[1] (name=gpu-a).accelerators[0].allocations[0].profiles: 1 x 3g.40gb do not fit",
            id="profile-does-not-fit",
        ),
        pytest.param(
            _with(
                ("nodes", 1, "accelerators", 0, "allocations"),
                [{"card": 4, "mode": "partitioned", "profiles": {"1g.5gb": 1}}],
            ),
            "nodes[1] (name=gpu-a).accelerators[0].allocations[0].profiles: profile '1g.5gb' is not offered",
            id="unknown-profile",
        ),
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "partitioning"), _A100["partitioning"]),
            "nodes[2] (name=gpu-b).accelerators[0].partitioning: hygon has no hardware partitioning",
            id="partitioning-without-kind",
        ),
        pytest.param(
            _with(("nodes", 1, "accelerators", 0, "partitioning", "kind"), "mps"),
            "nodes[1] (name=gpu-a).accelerators[0].partitioning.kind: must be 'mig' for nvidia",
            id="wrong-partition-kind",
        ),
        pytest.param(
            _with(("nodes", 0, "labels"), {keys.HOSTNAME: "other"}),
            "nodes[0] (name=cpu-a).labels.kubernetes.io/hostname: written by the simulator",
            id="reserved-label",
        ),
        pytest.param(
            _with(("nodes", 2, "name"), "gpu-a"),
            "nodes[2] (name=gpu-a).name: duplicate of nodes[1]",
            id="duplicate-node-name",
        ),
        pytest.param(
            _with(("nodes", 0, "name"), "CPU_A"),
            "nodes[0] (name=CPU_A).name: 'CPU_A' is not a DNS subdomain (a Node name): must be lowercase",
            id="name-not-dns",
        ),
        pytest.param(
            _with(("nodes", 1, "rdma"), [{"name": "mlx5_0", "linkLayer": "Infiniband"}]),
            "nodes[1] (name=gpu-a).rdma[0].linkLayer: must be one of 'InfiniBand' or 'Ethernet'",
            id="rdma-bad-link-layer",
        ),
        pytest.param(
            _with(("nodes", 2, "accelerators", 0, "ledgerPublished"), "no"),
            "nodes[2] (name=gpu-b).accelerators[0].ledgerPublished: must be true or false",
            id="ledger-flag-not-bool",
        ),
    ],
)
def test_problems_name_node_and_field(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert any(line.startswith(problem) for line in caught.value.problems), caught.value.problems


def test_all_problems_are_reported_at_once() -> None:
    data = _with(("nodes", 2, "accelerators", 0, "count"), 0)
    data["nodes"][0]["gpus"] = 1
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert len(caught.value.problems) == 2


def test_top_level_must_have_nodes() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({"hosts": []})
    assert caught.value.problems == ["nodes: required", "hosts: unknown key"]


def test_the_base_scenario_is_valid() -> None:
    scenario = parse_scenario(_base())
    assert [n.name for n in scenario.nodes] == ["cpu-a", "gpu-a", "gpu-b"]
    assert scenario.nodes[0].os == "linux" and scenario.nodes[0].arch == "amd64"
    assert scenario.nodes[0].pods == 110


def test_cpu_detail_fields_are_the_catalogue_annotations() -> None:
    assert tuple(f"{keys.FEATURE_PREFIX}cpu-{s}" for s in CPU_DETAIL_FIELDS) == keys.CPU_DETAIL_ANNOTATIONS


@pytest.mark.parametrize("name", ["mixed-4", "families"])
def test_packaged_scenarios_are_valid(name: str) -> None:
    assert packaged_scenario(name).nodes


def test_load_reports_the_file(tmp_path: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("nodes:\n  - name: x\n    cpu: {vendor: AMD, model: m, cores: 0}\n    memory: 1Gi\n")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: invalid scenario") as caught:
        load_scenario(path)
    assert caught.value.problems == ["nodes[0] (name=x).cpu.cores: must be ≥ 1"]
