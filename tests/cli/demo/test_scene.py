"""The demo's pure parts: the inventory and objects it creates, and the summary it prints."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpustack_worker.api import keys
from gpustack_worker.api.crds.model_deployment import ModelDeployment
from gpustack_worker.api.crds.topology_source import TopologySource
from gpustack_worker.cli.demo import scene as demo_scene
from gpustack_worker.cli.demo.scene import Observed, table, workload_state
from gpustack_worker.simulate.load import packaged_scenario

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


def _cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def _obj(name: str, **fields: Any) -> dict[str, Any]:
    meta = {"name": name, **fields.pop("meta", {})}
    return {"metadata": meta, **fields}


# --- the inventory --------------------------------------------------------------------------------------


def test_the_inventory_places_every_demo_node_in_two_zones_of_two_racks() -> None:
    scenario = packaged_scenario(demo_scene.DEMO_SCENARIO)
    names = {node.name for node in scenario.nodes}
    assert set(demo_scene.RACK_OF) == names
    zones: dict[str, set[str]] = {}
    for zone, rack in demo_scene.RACK_OF.values():
        zones.setdefault(zone, set()).add(rack)
    assert len(zones) == 2 and all(len(racks) == 2 for racks in zones.values())
    # every node carries the source's selector label
    for node in scenario.nodes:
        assert (node.labels or {}).get(demo_scene.INVENTORY[0]) == demo_scene.INVENTORY[1], node.name


def test_the_scenario_has_every_kind_the_demo_promises() -> None:
    scenario = packaged_scenario(demo_scene.DEMO_SCENARIO)
    products = {a.product for node in scenario.nodes for a in node.accelerators or ()}
    assert products == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "910B2", "Tesla T4"}
    modes = {
        (a.product, alloc.mode)
        for node in scenario.nodes
        for a in node.accelerators or ()
        for alloc in a.allocations or ()
    }
    assert ("NVIDIA H100 80GB HBM3", "sliced") in modes
    assert ("NVIDIA A100-SXM4-80GB", "partitioned") in modes
    assert any(not node.accelerators for node in scenario.nodes)  # CPU-only nodes


def test_the_snapshot_and_the_source_are_valid_and_agree() -> None:
    cm = demo_scene.snapshot_config_map()
    doc = yaml.safe_load(cm["data"][demo_scene.SNAPSHOT_KEY])
    assert doc["apiVersion"] == keys.SNAPSHOT_API_VERSION
    assert doc["nodes"]["t4-3"] == {
        keys.PRIVATE_REGION: demo_scene.REGION,
        keys.PRIVATE_ZONE: "zone-b",
        keys.PRIVATE_RACK: "rack-b1",
    }
    source = TopologySource.model_validate(demo_scene.topology_source())
    dumped = source.model_dump(by_alias=True, exclude_none=True)
    ref = dumped["spec"]["configMap"]
    assert ref["configMapRef"] == {"namespace": cm["metadata"]["namespace"], "name": cm["metadata"]["name"]}
    assert ref["key"] == demo_scene.SNAPSHOT_KEY
    assert dumped["spec"]["levels"] == list(demo_scene.LEVELS)


def test_the_deployments_are_valid_one_fits_one_waits() -> None:
    chat, disagg = demo_scene.deployments(H100, T4)
    for md in (chat, disagg):
        ModelDeployment.model_validate(md)
    assert [(r["name"], r["size"], r["instanceType"]) for r in chat["spec"]["roles"]] == [("server", 2, H100)]
    sizes = {r["name"]: r["size"] for r in disagg["spec"]["roles"]}
    t4_per_rack = {
        rack: sum(
            a.count
            for node in packaged_scenario(demo_scene.DEMO_SCENARIO).nodes
            if demo_scene.RACK_OF[node.name][1] == rack
            for a in node.accelerators or ()
            if a.product == "Tesla T4"
        )
        for _, rack in demo_scene.RACK_OF.values()
    }
    # decode fits a rack, prefill fits none: the set waits for capacity by construction
    assert sizes["decode"] <= max(t4_per_rack.values()) < sizes["prefill"]
    for role in disagg["spec"]["roles"]:
        assert role["topology"] == {"requiredLevel": keys.PRIVATE_RACK}


@pytest.mark.parametrize(
    ("names", "product", "expected"),
    [
        ([T4, H100, "gpustack--generic-linux-amd64"], "t4", T4),
        ([T4, H100], "h100", H100),
        (["gpustack--generic-linux-amd64"], "t4", None),
        (["gpustack--nvidia-tesla-t4-linux-arm64"], "t4", None),
    ],
)
def test_instance_type_for(names: list[str], product: str, expected: str | None) -> None:
    its = [_obj(n, spec={"acceleratable": "generic" not in n}) for n in names]
    assert demo_scene.instance_type_for(product, its) == expected


# --- reading it back ----------------------------------------------------------------------------------


def test_table_aligns_every_column_but_the_last() -> None:
    lines = table(("A", "LONGER", "MSG"), [("xx", "y", "a long message"), ("x", "yyyyyyy", "")])
    assert lines == [
        "A   LONGER   MSG",
        "xx  y        a long message",
        "x   yyyyyyy",
    ]


RESERVED = _cond("QuotaReserved", "True", "QuotaReserved")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"conditions": [RESERVED, _cond("Admitted", "True")]}, ("Admitted", "")),
        (
            {
                "conditions": [RESERVED],
                "admissionChecks": [
                    {"name": "node-devices", "state": "Ready", "message": "fits"},
                    {"name": "joint", "state": "Pending", "message": "1 of 2 groups reserved"},
                ],
            },
            ("Reserved", "joint Pending: 1 of 2 groups reserved"),
        ),
        (
            {"conditions": [_cond("QuotaReserved", "False", "Pending", "couldn't assign flavors")]},
            ("Pending", "couldn't assign flavors"),
        ),
        ({}, ("Pending", "not yet seen by Kueue")),
    ],
)
def test_workload_state(status: dict[str, Any], expected: tuple[str, str]) -> None:
    assert workload_state(_obj("w", status=status)) == expected


def _assignment(host: str, pods: int) -> dict[str, Any]:
    return {
        "levels": [keys.PRIVATE_RACK, keys.HOSTNAME],
        "slices": [
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "rack-a1"}, {"universal": host}],
                "podCounts": {"universal": pods},
            }
        ],
    }


def _observed(*, bound: bool, chat_counts: tuple[int, int, int] = (1, 1, 0)) -> Observed:
    chat_md = _obj(
        "chat",
        meta={"namespace": "demo", "uid": "u-chat"},
        spec={"roles": [{"name": "server", "replicas": 1, "size": 2}]},
        status={"roles": [{"name": "server", "admittedReplicas": 1}]},
    )
    disagg_md = _obj(
        "disagg",
        meta={"namespace": "demo", "uid": "u-disagg"},
        spec={"roles": [{"name": "prefill", "size": 4}, {"name": "decode", "size": 2}]},
        status={
            "roles": [
                {"name": "prefill", "admittedReplicas": 0, "message": "role prefill replica 0: no fit"},
                {"name": "decode", "admittedReplicas": 0, "message": "role decode replica 0: 1 of 2 groups"},
            ]
        },
    )
    admission = {
        "clusterQueue": H100,
        "podSetAssignments": [{"topologyAssignment": _assignment("h100-1", 2)}],
    }
    chat_wl = _obj(
        "chat-server-0-x",
        spec={"queueName": keys.local_queue_name(H100)},
        status={"conditions": [RESERVED, _cond("Admitted", "True")], "admission": admission},
    )
    pods = [
        _obj(
            f"chat-server-0-x-{i}",
            meta={
                "labels": {
                    keys.POD_GROUP_NAME: "chat-server-0-x",
                    keys.MODEL_DEPLOYMENT_UID: "u-chat",
                    keys.MODEL_DEPLOYMENT_ROLE: "server",
                }
            },
            spec={"nodeName": "h100-1"} if bound else {},
        )
        for i in range(2)
    ]
    a, r, p = chat_counts
    queue = _obj(
        H100, spec={}, status={"admittedWorkloads": a, "reservingWorkloads": r, "pendingWorkloads": p}
    )
    return Observed(deployments=[chat_md, disagg_md], workloads=[chat_wl], pods=pods, queues=[queue])


def test_settled_once_chat_is_bound_and_the_queue_counted_it() -> None:
    assert demo_scene.deployments_settled(_observed(bound=True))
    assert not demo_scene.deployments_settled(_observed(bound=False))
    assert not demo_scene.deployments_settled(_observed(bound=True, chat_counts=(0, 0, 1)))


def test_the_summary_names_where_each_workload_is_placed_and_why() -> None:
    text = demo_scene.summary(_observed(bound=True))
    (row,) = [line for line in text.splitlines() if line.startswith("chat-server-0-x ")]
    assert "chat/server" in row and "Admitted" in row and "h100-1 x2 (bound)" in row
    assert "role prefill replica 0: no fit" in text
    assert "== Pools" in text and "== Flavors per topology profile" in text and "== Queues" in text
    unbound = demo_scene.summary(_observed(bound=False))
    assert "h100-1 x2 (reserved)" in unbound


def test_flavors_are_grouped_by_profile_with_their_nodes() -> None:
    topology = "gpustack-fnv64-abc"
    o = Observed(
        nodes=[
            _obj("t4-1", meta={"labels": {"pool": "t4"}}),
            _obj("cpu-1", meta={"labels": {"pool": "cpu"}}),
        ],
        topologies=[
            _obj(topology, spec={"levels": [{"nodeLabel": keys.PRIVATE_RACK}, {"nodeLabel": keys.HOSTNAME}]})
        ],
        flavors=[
            _obj("f-t4", spec={"topologyName": topology, "nodeLabels": {"pool": "t4"}}),
            _obj("f-cpu", spec={"nodeLabels": {"pool": "cpu"}}),
        ],
        queues=[_obj("q", spec={"resourceGroups": [{"flavors": [{"name": "f-t4"}]}]})],
    )
    lines = demo_scene._flavors_table(o)
    assert lines[0] == "no topology profile (no Kueue Topology)"
    assert lines[2].split() == ["f-cpu", "-", "cpu-1"]
    assert lines[3] == f"profile fnv64-abc: rack > hostname (Kueue Topology {topology})"
    assert lines[5].split() == ["f-t4", "q", "t4-1"]


def test_explore_commands_name_the_kubeconfig_and_the_waiting_deployment() -> None:
    lines = demo_scene.explore_commands("/x/kubeconfig")
    assert lines[0] == "export KUBECONFIG=/x/kubeconfig"
    assert "kubectl get topologysources" in lines
    assert f"gpustack-worker explain modeldeployment {demo_scene.NAMESPACE}/disagg" in lines
