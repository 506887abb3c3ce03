"""Rendering of Node, DM NodeFeature and Devices from scenario nodes (reference §2.2, §3.2, §8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import Devices
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario, parse_scenario
from gpustack_worker.simulate.synthetic import synthetic

if TYPE_CHECKING:
    from gpustack_worker.simulate.scenario import NodeSpec

MIXED = {n.name: n for n in packaged_scenario("mixed-4").nodes}
FAMILIES = {n.name: n for n in packaged_scenario("families").nodes}
UID = "00000000-0000-0000-0000-000000000001"
SINCE = "2026-01-01T00:00:00Z"


def _node(**acc: Any) -> NodeSpec:
    data = {"name": "n1", "cpu": {"vendor": "AMD", "model": "AMD EPYC 7R32", "cores": 8}, "memory": "32Gi"}
    return parse_scenario({"nodes": [{**data, "accelerators": [acc]}]}).nodes[0]


@pytest.mark.parametrize(
    ("node", "pools"),
    [
        pytest.param(
            MIXED["gpu-a100"],
            {
                "nvidia.com/gpu": 4,
                "nvidia.com/gpu.shared": 40,
                "nvidia.com/gpu.sliced": 4 * 128,
                "nvidia.com/gpu.partitioned": 4 * 7,
            },
            id="mixed-node-both-families",
        ),
        pytest.param(
            MIXED["gpu-hygon"],
            {"hygon.com/dcu": 4, "hygon.com/dcu.shared": 40, "hygon.com/dcu.sliced": 4 * 4},
            id="hygon-four-slices",
        ),
        pytest.param(
            MIXED["ppu-thead"], {"alibabacloud.com/ppu.partitioned": 8 * 3}, id="thead-all-partitioned"
        ),
        pytest.param(MIXED["cpu-a"], {}, id="cpu-only"),
        pytest.param(
            FAMILIES["mlu-cambricon"],
            {"cambricon.com/mlu": 3, "cambricon.com/mlu.shared": 30, "cambricon.com/mlu.sliced": 3 * 16},
            id="unhealthy-card-offers-no-token",
        ),
        pytest.param(
            FAMILIES["gpu-iluvatar"],
            {"iluvatar.com/gpu": 4, "iluvatar.com/gpu.shared": 40},
            id="no-logical-slicing",
        ),
        pytest.param(
            FAMILIES["npu-ascend"],
            {"huawei.com/npu": 8, "huawei.com/npu.shared": 80, "huawei.com/npu.sliced": 8 * 63},
            id="ascend-63",
        ),
    ],
)
def test_device_plugin_pools(node: NodeSpec, pools: dict[str, int]) -> None:
    assert render.device_plugin_resources(node) == pools
    status = render.render_node_status(node, SINCE)
    for name, value in pools.items():
        assert status["capacity"][name] == status["allocatable"][name] == str(value)
    assert not any(
        k.endswith(tuple(f".{s}" for s in keys.SLICED_COUNTING_SUFFIXES)) for k in status["capacity"]
    )


def test_node_object_for_the_a100_node() -> None:
    node = render.render_node(MIXED["gpu-a100"], SINCE)
    assert node["metadata"]["labels"] == {
        keys.HOSTNAME: "gpu-a100",
        keys.OS: "linux",
        keys.ARCH: "amd64",
        keys.NFD_CPU_VENDOR: "AMD",
        keys.NFD_CPU_FAMILY: "25",
        keys.NFD_CPU_ID: "1",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "topology.gpustack.ai/rack": "r1",
    }
    notes = node["metadata"]["annotations"]
    assert notes[keys.CPU_NAME_ANNOTATION] == "AMD EPYC 7763 64-Core Processor"
    assert notes["feature.gpustack.ai/cpu-physical-cores"] == "64"
    assert set(notes) - {keys.CPU_NAME_ANNOTATION} <= set(keys.CPU_DETAIL_ANNOTATIONS)
    assert node["spec"] == {}
    status = node["status"]
    assert {k: status["capacity"][k] for k in ("cpu", "memory", "pods", "ephemeral-storage")} == {
        "cpu": "128",
        "memory": "1024Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
    }
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "Ready",
        "True",
        "KubeletReady",
        SINCE,
    )


def test_a_node_a_kubelet_reports_for_keeps_its_registered_labels_and_status() -> None:
    """On a real node the simulator writes NFD's labels and the plugins' pools, never the kubelet's."""
    spec = MIXED["gpu-a100"]
    metadata = render.render_node_metadata(spec, kubelet=True)
    labels = metadata["metadata"]["labels"]
    assert not set(labels) & set(render.KUBELET_LABELS)
    assert labels == {k: v for k, v in render.node_labels(spec).items() if k not in render.KUBELET_LABELS}
    assert metadata["metadata"]["annotations"] == render.node_annotations(spec)
    status = render.render_plugin_status(spec)
    assert status == {"capacity": {k: str(v) for k, v in render.device_plugin_resources(spec).items()}}
    assert not {"cpu", "memory", "pods", "ephemeral-storage"} & set(status["capacity"])
    assert render.render_plugin_status(MIXED["cpu-a"]) == {"capacity": {}}


def test_cpu_only_node_has_no_feature_and_no_devices() -> None:
    node = MIXED["cpu-a"]
    assert render.render_node_feature(node, UID) is None
    assert render.render_devices(node, UID) is None
    assert render.render_devices_status(node) is None
    assert render.node_labels(node)[keys.ACCELERATABLE] == "false"


@pytest.mark.parametrize(
    ("acc", "a_key", "expected"),
    [
        pytest.param(
            {
                "manufacturer": "nvidia",
                "product": "NVIDIA A10G",
                "memoryMiB": 24576,
                "cores": 10240,
                "count": 1,
                "family": "Ampere",
                "computeCapability": "8.6",
                "driverVersion": "580.159.03",
                "runtimeVersion": "13.0",
            },
            "nvidia-a10g",
            {
                "product": "NVIDIA-A10G",
                "memory": "24Gi",
                "cores": "10240",
                "count": "1",
                "family": "Ampere",
                "comcap": "8.6",
            },
            id="reference-a10g",
        ),
        pytest.param(
            {
                "manufacturer": "amd",
                "product": "AMD Radeon RX 7800 XT",
                "memoryMiB": 16368,
                "cores": 60,
                "count": 2,
                "family": "GC 11.0.0",
                "computeCapability": "gfx1101",
            },
            "amd-radeon-rx-7800-xt",
            {
                "product": "AMD-Radeon-RX-7800-XT",
                "memory": "16368Mi",
                "cores": "60",
                "count": "2",
                "family": "GC-11.0.0",
                "comcap": "gfx1101",
            },
            id="reference-rx-7800-xt",
        ),
        pytest.param(
            {"manufacturer": "hygon", "product": "K100_AI", "memoryMiB": 65536, "count": 4},
            "hygon-k100_ai",
            {"product": "K100_AI", "memory": "64Gi", "count": "4"},
            id="reference-hygon-unknowns-omitted",
        ),
    ],
)
def test_device_manager_node_feature(acc: dict[str, Any], a_key: str, expected: dict[str, str]) -> None:
    feature = render.render_node_feature(_node(**acc), UID)
    assert feature is not None
    assert feature["metadata"]["name"] == "n1-gpustack-device-manager"
    assert feature["metadata"]["namespace"] == "gpustack-system"
    assert feature["metadata"]["labels"] == {keys.NFD_NODE_NAME: "n1"}
    assert feature["metadata"]["ownerReferences"][0]["uid"] == UID
    mfr_key = keys.accelerator_key(acc["manufacturer"])
    model_key = keys.accelerator_key(a_key)
    want = {keys.ACCELERATABLE: "true", mfr_key: "true", model_key: "true"}
    want |= {f"{model_key}.{suffix}": value for suffix, value in expected.items()}
    if "driverVersion" in acc:
        want[f"{mfr_key}.driver-version"] = acc["driverVersion"]
        want[f"{mfr_key}.runtime-version"] = acc["runtimeVersion"]
    assert feature["spec"]["labels"] == want


def test_devices_spec_of_the_mixed_node() -> None:
    devices = render.render_devices(MIXED["gpu-a100"], UID)
    assert devices is not None
    assert devices["metadata"]["labels"] == {
        keys.OS: "linux",
        keys.ARCH: "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-a100-sxm4-80gb": "true",
    }
    (group,) = devices["spec"]["groups"]
    assert (group["id"], group["manufacturer"], group["memory"]) == ("a100-sxm4-80gb", "nvidia", 81920)
    cards = group["accelerators"]
    assert [c["index"] for c in cards] == list(range(8))
    assert len({c["id"] for c in cards}) == 8
    assert [c["status"]["logicalSliced"]["count"] for c in cards] == [128] * 4 + [0] * 4
    assert [c["status"]["physicalSliced"]["count"] for c in cards] == [0] * 4 + [7] * 4
    profiles = {p["name"]: p for p in cards[4]["status"]["physicalSliced"]["profiles"]}
    assert profiles["3g.40gb"]["placements"] == [{"start": 0, "length": 4}, {"start": 4, "length": 4}]
    assert group["acceleratorSlicedDetail"]["logical"] == {"coresPercentageOvercommit": True, "count": 512}
    assert group["acceleratorSlicedDetail"]["physical"]["count"] == 28
    assert devices["spec"]["interfaces"] == [
        {
            "name": "mlx5_0",
            "rdma": True,
            "state": "Active",
            "linkLayer": "InfiniBand",
            "numaAffinity": "0",
            "distance": "PIX",
        }
    ]


def test_devices_ledger_of_the_mixed_node() -> None:
    body = render.render_devices_status(MIXED["gpu-a100"])
    assert body is not None
    (group,) = body["status"]["groups"]
    cards = group["accelerators"]
    assert [(c["mode"], c["allocated"], c["remaining"], c["allocatedSlices"]) for c in cards[:4]] == [
        (3, 480_000, 1_120_000, 1),
        (2, 480_000, 1_120_000, 0),
        (1, 1_600_000, 0, 0),
        (0, 0, 1_600_000, 0),
    ]
    assert cards[4]["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    remaining = {p["name"]: p["count"] for p in cards[4]["remainingProfiles"]}
    assert (remaining["3g.40gb"], remaining["7g.80gb"]) == (1, 0)
    assert {p["name"]: p["count"] for p in cards[5]["remainingProfiles"]}["7g.80gb"] == 1


def test_thead_keeps_the_manufacturer_spelling_in_devices() -> None:
    # 7 compute slices per card (the CRD's bound): a 4g48gb leaves 3, room for one 2g24gb only.
    body = render.render_devices_status(MIXED["ppu-thead"])
    assert body is not None
    card0 = body["status"]["groups"][0]["accelerators"][0]
    assert card0["allocatedProfiles"] == [{"name": "4g48gb", "count": 1}]
    assert {p["name"]: p["count"] for p in card0["remainingProfiles"]} == {
        "2g24gb": 1,
        "4g48gb": 0,
        "7g96gb": 0,
    }


def test_unpublished_ledger_is_in_spec_but_not_in_status() -> None:
    node = FAMILIES["gpu-mixed-vendors"]
    devices = render.render_devices(node, UID)
    ledger = render.render_devices_status(node)
    assert devices is not None and ledger is not None
    assert [g["manufacturer"] for g in devices["spec"]["groups"]] == ["amd", "metax", "mthreads"]
    assert [g["manufacturer"] for g in ledger["status"]["groups"]] == ["amd", "metax"]


ALL_NODES = [
    *MIXED.values(),
    *FAMILIES.values(),
    *synthetic(40, seed=7).nodes,
]


@pytest.mark.parametrize("node", [pytest.param(n, id=n.name) for n in ALL_NODES])
def test_rendered_devices_round_trip_through_the_crd_model(node: NodeSpec) -> None:
    devices = render.render_devices(node, UID)
    ledger = render.render_devices_status(node)
    if devices is None or ledger is None:
        assert not node.accelerators
        return
    whole = {**devices, "status": ledger["status"]}
    assert Devices.model_validate(whole).dump() == whole


def test_synthetic_is_deterministic_and_mixed() -> None:
    first, again, other = synthetic(200, seed=3), synthetic(200, seed=3), synthetic(200, seed=4)
    assert first == again
    assert first != other
    kinds = {n.accelerators[0].manufacturer if n.accelerators else "cpu" for n in first.nodes}
    assert {"cpu", "nvidia", "ascend", "hygon", "amd"} <= kinds
    assert any(a.allocations for n in first.nodes for a in n.accelerators)
