"""Capacity flavors: golden names and bodies for the four-node mixed cluster, under both mixing values."""

from __future__ import annotations

import json

import pytest

from gpustack_worker.chain import flavors
from gpustack_worker.chain.nodes import node_hardware
from tests.chain.builders import HOSTNAME_PROFILE, mixed_cluster, node

P = HOSTNAME_PROFILE
INTEL = "intel-xeon-platinum-8259cl"


def _hardware(objs):  # type: ignore[no-untyped-def]
    return [h for h in (node_hardware(o) for o in objs) if h is not None]


def test_hostname_only_profile_is_the_spec_value() -> None:
    assert P == "fnv64-87bf574bea2a4f23"


@pytest.mark.parametrize(
    ("mixed", "want"),
    [
        (
            True,
            {
                f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}": (("t4-b",), 4),
                f"gpustack--amd-epyc-7r13-linux-amd64-48c-{P}": (("t4-b",), 48),
                f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}": (("a10g-a",), 1),
                f"gpustack--amd-epyc-7r32-linux-amd64-8c-{P}": (("a10g-a",), 8),
                f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}": (("t4-a",), 1),
                f"gpustack--{INTEL}-linux-amd64-4c-{P}": (("cpu-a", "t4-a"), 8),
            },
        ),
        (
            False,
            {
                f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}": (("t4-b",), 4),
                f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}": (("a10g-a",), 1),
                f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}": (("t4-a",), 1),
                f"gpustack--{INTEL}-linux-amd64-4c-{P}": (("cpu-a",), 4),
            },
        ),
    ],
    ids=["mixed-on-node", "cpu-only"],
)
def test_mixed_cluster_flavors(mixed: bool, want: dict[str, tuple[tuple[str, ...], int]]) -> None:
    plans = flavors.plan_flavors(_hardware(mixed_cluster()), mixed_on_node=mixed)
    assert {p.name: (p.nodes, p.capacity) for p in plans} == want


def test_device_flavor_body() -> None:
    hw = _hardware(mixed_cluster())
    bodies = flavors.desired_flavors(hw, mixed_on_node=True, aware=False)
    body = bodies[f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"]
    key = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
    assert body["metadata"]["labels"] == {
        "resource.gpustack.ai/type": "nodes",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        "general.feature.gpustack.ai/amd-epyc-7r13": "true",
        key: "true",
        f"{key}.count": "4",
        f"{key}.capacity": "4",
        "topology.gpustack.ai/profile": P,
    }
    assert body["metadata"]["annotations"] == {
        "note.gpustack.ai/acceleratable": "true",
        "note.gpustack.ai/generalGroup": "amd-epyc-7r13",
        "note.gpustack.ai/acceleratorGroup": "nvidia-tesla-t4",
        "note.gpustack.ai/manufacturer": "nvidia",
        "note.gpustack.ai/product": "Tesla-T4",
        "note.gpustack.ai/memory": "15Gi",
        "note.gpustack.ai/topologyProfile": P,
    }
    assert body["spec"] == {
        "nodeLabels": {
            "gpustack.ai/managed": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "general.feature.gpustack.ai/amd-epyc-7r13": "true",
            key: "true",
            f"{key}.count": "4",
            "topology.gpustack.ai/profile": P,
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": f"gpustack-{P}",
    }


def test_cpu_detail_note_always_on_cpu_flavors_and_on_accelerated_only_when_aware() -> None:
    hw = _hardware(mixed_cluster())
    cpu_name = f"gpustack--{INTEL}-linux-amd64-4c-{P}"
    dev_name = f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}"
    detail = "note.gpustack.ai/cpuDetail"
    for aware in (False, True):
        bodies = flavors.desired_flavors(hw, mixed_on_node=True, aware=aware)
        assert json.loads(bodies[cpu_name]["metadata"]["annotations"][detail]) == {"physicalCores": "4"}
        notes = bodies[dev_name]["metadata"]["annotations"]
        if aware:
            assert json.loads(notes[detail]) == {
                "physicalCores": "4",
                "manufacturer": "intel",
                "product": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
            }
        else:
            assert detail not in notes


def test_cpu_only_selector_when_mixing_is_off() -> None:
    hw = _hardware(mixed_cluster())
    on = flavors.desired_flavors(hw, mixed_on_node=True, aware=False)[f"gpustack--{INTEL}-linux-amd64-4c-{P}"]
    off = flavors.desired_flavors(hw, mixed_on_node=False, aware=False)[
        f"gpustack--{INTEL}-linux-amd64-4c-{P}"
    ]
    assert "feature.gpustack.ai/cpu-only" not in on["spec"]["nodeLabels"]
    assert off["spec"]["nodeLabels"]["feature.gpustack.ai/cpu-only"] == "true"


@pytest.mark.parametrize(
    "obj",
    [
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed=None),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed="True"),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed="false"),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, profile=None),
    ],
    ids=["unmanaged", "managed-True-is-not-true", "managed-false", "no-profile"],
)
def test_nodes_outside_the_chain(obj: dict[str, object]) -> None:
    assert node_hardware(obj) is None


def test_no_node_in_two_flavors_of_one_kind() -> None:
    hw = _hardware(mixed_cluster())
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    cpu = [n for p in plans if not p.accelerated for n in p.nodes]
    assert len(cpu) == len(set(cpu))
    for plan in plans:
        body = flavors.flavor_body(plan, mixed_on_node=True, aware=False)
        assert flavors.flavor_nodes(body, hw) == list(plan.nodes)


def test_a_node_without_cards_or_cores_contributes_nothing() -> None:
    obj = node(
        "odd", vendor="Intel", cpu_name="Intel Xeon", cores=0, devices=(("nvidia", "Tesla T4", 0, 15360),)
    )
    assert flavors.plan_flavors(_hardware([obj]), mixed_on_node=True) == []


def test_object_names_turn_key_underscores_into_dashes_labels_keep_them() -> None:
    # Hygon's K100_AI has the aKey hygon-k100_ai (reference §3.3): valid in a label, not in an object name.
    obj = node(
        "dcu",
        vendor="Hygon",
        cpu_name="Hygon C86 7285 32-core Processor",
        cores=64,
        devices=(("hygon", "K100_AI", 4, 65536),),
    )
    (plan,) = [p for p in flavors.plan_flavors(_hardware([obj]), mixed_on_node=True) if p.accelerated]
    assert plan.name == f"gpustack--hygon-c86-7285--hygon-k100-ai-linux-amd64-4d-{P}"
    body = flavors.flavor_body(plan, mixed_on_node=True, aware=False)
    assert body["spec"]["nodeLabels"]["acceleratable.feature.gpustack.ai/hygon-k100_ai"] == "true"
    assert body["metadata"]["annotations"]["note.gpustack.ai/acceleratorGroup"] == "hygon-k100_ai"
