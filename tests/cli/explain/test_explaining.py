"""``explain`` as pure functions, on objects captured from a real control plane (``fixtures/
explain_racks.json``: the ``placement-racks`` scenario with a ConfigMap TopologySource placing the L4 nodes
in two racks, one L4 of each rack taken by a foreign Workload, and a two-role ModelDeployment ``disagg``
— prefill 4 Pods, decode 2 Pods, ``requiredLevel`` rack — of which decode reserved a rack and is held by
the joint check while prefill waits for quota).

The Node's labels and capacities carry the writers recorded in its ``managedFields`` (the simulator, the
node agent's managers, the topology controller, nfd-master), projected labels name the NodeFeature that
carries them; the Node → flavor → ClusterQueue → InstanceType → LocalQueue chain; a Workload's topology
request and decoded v1beta2 assignment, its checks, and Kueue's ``QuotaReserved`` message verbatim; the
deployment with one role waiting and one held ``1 of 2``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.api import keys
from gpustack_worker.chain import managers as chain_managers
from gpustack_worker.cli.explain import explaining as x
from gpustack_worker.placement import deployments, joint_controller, node_devices
from gpustack_worker.simulate import render
from gpustack_worker.topology import managers as topology_managers

FIXTURE = Path(__file__).parent / "fixtures" / "explain_racks.json"
L4 = "gpustack--nvidia-l4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
L4_FLAVOR = "gpustack--intel-xeon-platinum-8375c--nvidia-l4-linux-amd64-2d-fnv64-dde125aa4572179a"
CPU_FLAVOR = "gpustack--intel-xeon-platinum-8375c-linux-amd64-8c-fnv64-dde125aa4572179a"
TOPOLOGY = "gpustack-fnv64-dde125aa4572179a"
TEAM = "team-admission"
LQ_L4 = keys.local_queue_name(L4)
PREFILL = "disagg-prefill-0-11d78ed796"
DECODE = "disagg-decode-0-fdae94a2e1"


@pytest.fixture
def objs() -> dict[str, list[dict[str, Any]]]:
    data: dict[str, list[dict[str, Any]]] = json.loads(FIXTURE.read_text())
    return data


def _one(items: list[dict[str, Any]], name: str, namespace: str | None = None) -> dict[str, Any]:
    for item in items:
        meta = item["metadata"]
        if meta["name"] == name and (namespace is None or meta.get("namespace") == namespace):
            return item
    raise KeyError(name)


def _node(objs: dict[str, list[dict[str, Any]]], node: dict[str, Any] | None = None) -> x.NodeExplanation:
    return x.explain_node(
        node if node is not None else _one(objs["nodes"], "rack-node-2"),
        node_features=objs["nodefeatures"],
        flavors=objs["resourceflavors"],
        cluster_queues=objs["clusterqueues"],
        instance_types=objs["instancetypes"],
        local_queues=objs["localqueues"],
    )


def _workload(objs: dict[str, list[dict[str, Any]]], wl: dict[str, Any] | None) -> x.WorkloadExplanation:
    lq = None
    if wl is not None:
        lq = next(
            (
                q
                for q in objs["localqueues"]
                if q["metadata"]["namespace"] == wl["metadata"]["namespace"]
                and q["metadata"]["name"] == wl["spec"]["queueName"]
            ),
            None,
        )
    return x.explain_workload(
        wl,
        local_queue=lq,
        cluster_queue=_one(objs["clusterqueues"], L4),
        flavors=objs["resourceflavors"],
        nodes=objs["nodes"],
    )


def _label(e: x.NodeExplanation, key: str) -> x.LabelLine:
    return next(line for line in e.labels if line.key == key)


def _managers(writers: tuple[x.Writer, ...]) -> list[str]:
    return [w.manager for w in writers]


# --- field managers → components --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manager", "expected"),
    [
        (nodefeature.FIELD_MANAGER, "node agent: the worker NodeFeature"),
        (capacity.FIELD_MANAGER, "node agent: the counting capacities"),
        (fit.FIELD_MANAGER, "node agent: the per-card fit labels"),
        (topology_managers.NODE_TOPOLOGY, "topology controller: the Node profile and Kueue Topologies"),
        (topology_managers.SOURCE, "topology controller: a TopologySource's NodeFeatures"),
        (chain_managers.QUEUE, "chain: ClusterQueues"),
        (deployments.FIELD_MANAGER, "placement: ModelDeployment Pods and status"),
        (joint_controller.FIELD_MANAGER, "placement: the joint admission check"),
        (node_devices.FIELD_MANAGER, "placement: Gate 3 (node devices check)"),
        ("nfd-master", "NFD master: projects NodeFeature labels onto the Node"),
        ("kubelet", "kubelet"),
        ("kueue", "Kueue"),
        ("kueue-admission", "Kueue"),
        ("kueue-job-controller-PodsReady", "Kueue"),
        ("kubectl-label", "kubectl (by hand)"),
        ("kueuex", x.UNKNOWN),
        ("python-httpx", x.UNKNOWN),
    ],
)
def test_component(manager: str, expected: str) -> None:
    assert x.component(manager) == expected


def test_every_field_manager_of_ours_is_named() -> None:
    ours = [
        nodefeature.FIELD_MANAGER,
        capacity.FIELD_MANAGER,
        fit.FIELD_MANAGER,
        topology_managers.NODE_TOPOLOGY,
        topology_managers.SOURCE,
        topology_managers.SOURCE_STATUS,
        chain_managers.FLAVOR,
        chain_managers.AUTHOR,
        chain_managers.INSTANCE_TYPE,
        chain_managers.QUEUE,
        chain_managers.LOCAL_QUEUE,
        deployments.FIELD_MANAGER,
        joint_controller.FIELD_MANAGER,
        node_devices.FIELD_MANAGER,
        render.FIELD_MANAGER,
    ]
    assert all(x.component(m) != x.UNKNOWN for m in ours)
    assert len({x.component(m) for m in ours}) == len(ours)


def test_field_writers_read_managed_fields(objs: dict[str, list[dict[str, Any]]]) -> None:
    node = _one(objs["nodes"], "rack-node-2")
    labels = x.field_writers(node, ("metadata", "labels"))
    assert _managers(labels[keys.TOPOLOGY_PROFILE]) == [topology_managers.NODE_TOPOLOGY]
    assert _managers(labels[keys.MANAGED]) == ["nfd-master"]
    # Shared ownership: the simulator's apply first, then the create's Update.
    assert _managers(labels[keys.OS]) == [render.FIELD_MANAGER, "gpustack-worker"]
    assert [w.operation for w in labels[keys.OS]] == ["Apply", "Update"]
    caps = x.field_writers(node, ("status", "capacity"))
    assert _managers(caps["nvidia.com/gpu.sliced.units"]) == [capacity.FIELD_MANAGER]
    assert _managers(caps["nvidia.com/gpu"]) == [render.FIELD_MANAGER]
    assert x.field_writers({"metadata": {}}, ("metadata", "labels")) == {}
    # A malformed entry (fieldsV1 not a map at the path) is skipped, not a crash.
    odd = {"metadata": {"managedFields": [{"manager": "m", "fieldsV1": {"f:metadata": "x"}}]}}
    assert x.field_writers(odd, ("metadata", "labels")) == {}


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("", set()),
        ("gpustack.ai/managed", {"gpustack.ai/managed"}),
        (
            "pci-10de.present,gpustack.ai/managed",
            {"feature.node.kubernetes.io/pci-10de.present", "gpustack.ai/managed"},
        ),
        (" a.example/x , ,b ", {"a.example/x", "feature.node.kubernetes.io/b"}),
    ],
)
def test_projected_labels(annotation: str, expected: set[str]) -> None:
    node = {"metadata": {"annotations": {keys.NFD_FEATURE_LABELS_ANNOTATION: annotation}}}
    assert x.projected_labels(node) == expected


# --- a Node --------------------------------------------------------------------------------------------


def test_node_labels_capacities_and_who_wrote_each(objs: dict[str, list[dict[str, Any]]]) -> None:
    e = _node(objs)
    assert e.exists and e.name == "rack-node-2"
    node = _one(objs["nodes"], "rack-node-2")
    assert [line.key for line in e.labels] == sorted(node["metadata"]["labels"])

    managed = _label(e, keys.MANAGED)
    assert managed.projected and _managers(managed.writers) == ["nfd-master"]
    (carrier,) = managed.carriers
    assert carrier.nodefeature == f"gpustack-system/{keys.worker_nodefeature_name('rack-node-2')}"
    assert _managers(carrier.writers) == [nodefeature.FIELD_MANAGER]

    rack = _label(e, keys.PRIVATE_RACK)
    assert rack.value == "rack-1" and rack.projected
    (carrier,) = rack.carriers
    assert carrier.nodefeature.startswith("gpustack-system/gpustack-topology-")
    assert _managers(carrier.writers) == [topology_managers.SOURCE]

    product = _label(e, keys.accelerator_key("nvidia-l4") + ".product")
    (carrier,) = product.carriers
    assert carrier.nodefeature == f"gpustack-system/{keys.device_manager_nodefeature_name('rack-node-2')}"
    assert _managers(carrier.writers) == [render.FIELD_MANAGER]

    fit_label = _label(e, keys.sliced_max_free_units_key("nvidia-l4"))
    assert not fit_label.projected and not fit_label.carriers
    assert _managers(fit_label.writers) == [fit.FIELD_MANAGER]
    assert _managers(_label(e, keys.TOPOLOGY_PROFILE).writers) == [topology_managers.NODE_TOPOLOGY]

    caps = {c.resource: c for c in e.capacities}
    assert caps["nvidia.com/gpu.sliced.units"].capacity == "3200k"
    assert _managers(caps["nvidia.com/gpu.sliced.units"].writers) == [capacity.FIELD_MANAGER]
    assert _managers(caps["nvidia.com/gpu"].writers) == [render.FIELD_MANAGER]


def test_node_feeds_flavor_queue_instance_type_and_local_queues(
    objs: dict[str, list[dict[str, Any]]],
) -> None:
    e = _node(objs)
    assert [f.name for f in e.flavors] == sorted([L4_FLAVOR, CPU_FLAVOR])
    assert e.problems == ()
    l4 = next(f for f in e.flavors if f.name == L4_FLAVOR)
    assert l4.topology_name == TOPOLOGY
    assert l4.node_labels[keys.TOPOLOGY_PROFILE] == "fnv64-dde125aa4572179a"
    (queue,) = l4.queues
    assert queue.name == L4 and queue.exists
    assert queue.topology_ready is not None and queue.topology_ready.status == "True"
    assert queue.active is not None and queue.active.status == "True"
    assert queue.admission_checks == (keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK)
    assert queue.quota == {keys.credits_resource("nvidia"): "12800k"}  # 4 nodes x 2 cards x M
    (itype,) = l4.instance_types
    assert itype.name == L4 and itype.exists and itype.phase == "Active"
    assert itype.entrance == LQ_L4
    assert l4.local_queues == (f"default/{LQ_L4}", f"{TEAM}/{LQ_L4}")
    cpu = next(f for f in e.flavors if f.name == CPU_FLAVOR)
    assert [q.name for q in cpu.queues] == [GENERIC]
    assert cpu.queues[0].quota == {"cpu": "32"}

    text = x.render_text(e)
    for needle in (
        "Node rack-node-2",
        f"by nfd-master ({x.component('nfd-master')})",
        f"NodeFeature gpustack-system/{keys.worker_nodefeature_name('rack-node-2')}",
        f"{keys.MANAGED}=true",
        f"Feeds ResourceFlavor {L4_FLAVOR}",
        f"ClusterQueue {L4} (stopPolicy None)",
        f"InstanceType {L4}: phase Active",
        f"{TEAM}/{LQ_L4}",
        "nvidia.com/gpu.sliced.units: 3200k",
    ):
        assert needle in text, needle


def test_node_without_a_profile_feeds_nothing_and_says_why(objs: dict[str, list[dict[str, Any]]]) -> None:
    node = copy.deepcopy(_one(objs["nodes"], "rack-node-2"))
    del node["metadata"]["labels"][keys.TOPOLOGY_PROFILE]
    e = _node(objs, node)
    assert e.flavors == ()
    assert len(e.problems) == 1 and keys.TOPOLOGY_PROFILE in e.problems[0]
    assert "Feeds no ResourceFlavor" in x.render_text(e)
    node["metadata"]["labels"].pop(keys.MANAGED)
    assert len(_node(objs, node).problems) == 2


def test_node_with_an_odd_managed_value_names_it(objs: dict[str, list[dict[str, Any]]]) -> None:
    node = copy.deepcopy(_one(objs["nodes"], "rack-node-2"))
    node["metadata"]["labels"][keys.MANAGED] = "yes"
    problems = _node(objs, node).problems
    assert any("'yes' is neither 'true' nor 'false'" in p for p in problems)
    node["metadata"]["labels"][keys.MANAGED] = "false"
    assert any(f"no {keys.MANAGED}=true" in p for p in _node(objs, node).problems)


def test_node_projected_label_no_nodefeature_carries(objs: dict[str, list[dict[str, Any]]]) -> None:
    e = x.explain_node(_one(objs["nodes"], "rack-node-2"), node_features=())
    assert _label(e, keys.MANAGED).carriers == ()
    assert "from no NodeFeature of this node" in x.render_text(e)
    assert e.flavors == ()  # no flavors given


def test_missing_node() -> None:
    e = x.explain_node(None, name="ghost")
    assert not e.exists and "does not exist" in x.render_text(e)
    assert json.loads(x.to_json(e))["exists"] is False


# --- a Workload ----------------------------------------------------------------------------------------


def test_waiting_workload_reflects_kueue_verbatim(objs: dict[str, list[dict[str, Any]]]) -> None:
    raw = _one(objs["workloads"], PREFILL)
    kueue = next(c for c in raw["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert kueue["status"] == "False"
    e = _workload(objs, raw)
    assert e.kueue_message == kueue["message"]
    assert e.verdict.startswith("waiting for quota")
    assert e.local_queue == LQ_L4 and e.local_queue_exists and e.cluster_queue == L4
    (ps,) = e.podsets
    assert (ps.name, ps.count, ps.required) == ("prefill", 4, keys.PRIVATE_RACK)
    assert ps.flavors == {} and ps.domains == ()
    assert e.queue_flavors == {L4_FLAVOR: TOPOLOGY}  # Kueue's candidates, though none is assigned yet
    assert [(c.name, c.state) for c in e.checks] == [
        (keys.JOINT_CHECK, "Pending"),
        (keys.NODE_DEVICES_CHECK, "Pending"),
    ]
    text = x.render_text(e)
    assert kueue["message"] in text
    assert "Kueue's message (verbatim):" in text
    assert f"flavor {L4_FLAVOR} (topology {TOPOLOGY})" in text


def test_reserved_workload_held_by_the_joint_check(objs: dict[str, list[dict[str, Any]]]) -> None:
    e = _workload(objs, _one(objs["workloads"], DECODE))
    assert e.kueue_message == ""
    assert "held by admission checks" in e.verdict and "1 of 2 groups reserved" in e.verdict
    assert keys.NODE_DEVICES_CHECK not in e.verdict  # Ready checks hold nothing
    (ps,) = e.podsets
    assert ps.required == keys.PRIVATE_RACK
    assert ps.flavors == {keys.credits_resource("nvidia"): L4_FLAVOR}
    assert ps.topology_names == {L4_FLAVOR: TOPOLOGY}
    assert ps.levels == (keys.HOSTNAME,)
    assert ps.domains == (x.DomainView({keys.HOSTNAME: "rack-node-2"}, 2, "rack-1"),)
    checks = {c.name: c for c in e.checks}
    assert checks[keys.JOINT_CHECK].message == f"1 of 2 groups reserved; waiting: {L4}"
    assert checks[keys.NODE_DEVICES_CHECK].state == "Ready"
    text = x.render_text(e)
    assert f"{keys.JOINT_CHECK}: Pending: 1 of 2 groups reserved; waiting: {L4}" in text
    assert f"assigned: {keys.HOSTNAME}=rack-node-2 [{keys.PRIVATE_RACK}=rack-1]: 2 Pods" in text


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        (  # one node, universal values and counts (as captured)
            {
                "levels": [keys.HOSTNAME],
                "slices": [
                    {
                        "domainCount": 1,
                        "podCounts": {"universal": 2},
                        "valuesPerLevel": [{"universal": "rack-node-2"}],
                    }
                ],
            },
            [({keys.HOSTNAME: "rack-node-2"}, 2, "rack-1")],
        ),
        (  # two nodes sharing a prefix, individual counts
            {
                "levels": [keys.HOSTNAME],
                "slices": [
                    {
                        "domainCount": 2,
                        "podCounts": {"individual": [3, 1]},
                        "valuesPerLevel": [{"individual": {"prefix": "rack-node-", "roots": ["2", "3"]}}],
                    }
                ],
            },
            [({keys.HOSTNAME: "rack-node-2"}, 3, "rack-1"), ({keys.HOSTNAME: "rack-node-3"}, 1, "rack-2")],
        ),
        (  # two levels, two slices, a suffix
            {
                "levels": [keys.PRIVATE_RACK, keys.HOSTNAME],
                "slices": [
                    {
                        "domainCount": 1,
                        "podCounts": {"universal": 1},
                        "valuesPerLevel": [{"universal": "rack-1"}, {"universal": "rack-node-2"}],
                    },
                    {
                        "domainCount": 2,
                        "podCounts": {"universal": 2},
                        "valuesPerLevel": [
                            {"universal": "rack-2"},
                            {"individual": {"prefix": "rack-", "suffix": "-x", "roots": ["a", "b"]}},
                        ],
                    },
                ],
            },
            [
                ({keys.PRIVATE_RACK: "rack-1", keys.HOSTNAME: "rack-node-2"}, 1, ""),
                ({keys.PRIVATE_RACK: "rack-2", keys.HOSTNAME: "rack-a-x"}, 2, ""),
                ({keys.PRIVATE_RACK: "rack-2", keys.HOSTNAME: "rack-b-x"}, 2, ""),
            ],
        ),
    ],
)
def test_topology_assignment_slices_decoded(
    objs: dict[str, list[dict[str, Any]]], assignment: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    wl = copy.deepcopy(_one(objs["workloads"], DECODE))
    wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = assignment
    (ps,) = _workload(objs, wl).podsets
    assert [(d.values, d.pods, d.requested_level_value) for d in ps.domains] == expected


def test_unreadable_assignment_is_reported_not_raised(objs: dict[str, list[dict[str, Any]]]) -> None:
    wl = copy.deepcopy(_one(objs["workloads"], DECODE))
    wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = {
        "levels": [keys.HOSTNAME],
        "slices": [{"domainCount": 2, "podCounts": {"universal": 1}, "valuesPerLevel": [{"individual": {}}]}],
    }
    (ps,) = _workload(objs, wl).podsets
    assert ps.domains == () and "roots" in ps.assignment_error
    assert "topology assignment unreadable" in x.render_text(_workload(objs, wl))


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        ({"spec": {"active": False}}, "deactivated"),
        ({"condition": ("Admitted", "True", "Admitted", "")}, "admitted"),
        ({"condition": ("Finished", "True", "Succeeded", "")}, "finished"),
        ({"checks_ready": True}, "every admission check Ready"),
    ],
)
def test_workload_verdicts(
    objs: dict[str, list[dict[str, Any]]], change: dict[str, Any], verdict: str
) -> None:
    wl = copy.deepcopy(_one(objs["workloads"], DECODE))
    if "spec" in change:
        wl["spec"].update(change["spec"])
    if "condition" in change:
        type_, status, reason, message = change["condition"]
        wl["status"]["conditions"].append(
            {"type": type_, "status": status, "reason": reason, "message": message}
        )
    if change.get("checks_ready"):
        for entry in wl["status"]["admissionChecks"]:
            entry["state"] = "Ready"
    assert verdict in _workload(objs, wl).verdict


def test_workload_local_queue_missing(objs: dict[str, list[dict[str, Any]]]) -> None:
    wl = copy.deepcopy(_one(objs["workloads"], PREFILL))
    wl["spec"]["queueName"] = "no-such-queue"
    e = x.explain_workload(wl, local_queue=None, cluster_queue=None)
    assert not e.local_queue_exists and "'no-such-queue' does not exist" in e.verdict
    assert e.queue is None and "(does not exist)" in x.render_text(e)


def test_missing_workload() -> None:
    e = x.explain_workload(None, namespace=TEAM, name="ghost")
    assert not e.exists and "no Workload" in e.verdict
    assert "Workload team-admission/ghost" in x.render_text(e)


# --- a ModelDeployment ---------------------------------------------------------------------------------


def _deployment(
    objs: dict[str, list[dict[str, Any]]], roles: tuple[str, ...] = ()
) -> x.DeploymentExplanation:
    explained = {w["metadata"]["name"]: _workload(objs, w) for w in objs["workloads"]}
    return x.explain_deployment(
        _one(objs["modeldeployments"], "disagg"), pods=objs["pods"], workloads=explained, roles=roles
    )


def test_two_role_deployment_one_role_waiting(objs: dict[str, list[dict[str, Any]]]) -> None:
    e = _deployment(objs)
    kueue = next(
        c["message"]
        for c in _one(objs["workloads"], PREFILL)["status"]["conditions"]
        if c["type"] == "QuotaReserved"
    )
    assert [r.name for r in e.roles] == ["prefill", "decode"]
    prefill, decode = e.roles
    assert (prefill.kind, prefill.size, prefill.required_level) == ("Prefill", 4, keys.PRIVATE_RACK)
    assert prefill.message == f"role prefill replica 0: {kueue}"
    (replica,) = prefill.replica_views
    assert (replica.replica, replica.group, replica.pods, replica.size) == (0, PREFILL, 4, 4)
    assert replica.workload is not None and replica.workload.kueue_message == kueue
    (replica,) = decode.replica_views
    assert replica.group == DECODE and replica.pods == 2
    assert replica.workload is not None and "1 of 2" in replica.workload.verdict
    quota = next(c for c in e.conditions if c.type == "QuotaReserved")
    assert (quota.status, quota.reason) == ("False", "Waiting")

    text = x.render_text(e)
    assert kueue in text
    assert f"{keys.JOINT_CHECK}: Pending: 1 of 2 groups reserved; waiting: {L4}" in text
    assert f"replica 0: pod group {PREFILL} (4 of 4 Pods)" in text
    doc = json.loads(x.to_json(e))
    assert doc["kind"] == "ModelDeployment"
    assert doc["roles"][0]["replica_views"][0]["workload"]["kueue_message"] == kueue


def test_deployment_one_role(objs: dict[str, list[dict[str, Any]]]) -> None:
    e = _deployment(objs, roles=("decode", "nope"))
    assert [r.name for r in e.roles] == ["decode"]
    assert e.unknown_roles == ("nope",)
    assert "role nope: not in the deployment's spec" in x.render_text(e)


def test_deployment_groups_without_workloads_or_pods(objs: dict[str, list[dict[str, Any]]]) -> None:
    md = copy.deepcopy(_one(objs["modeldeployments"], "disagg"))
    md["spec"]["roles"][1]["replicas"] = 2  # decode replica 1 has no Pods yet
    e = x.explain_deployment(md, pods=objs["pods"], workloads={})
    prefill, decode = e.roles
    assert prefill.replica_views[0].workload is not None
    assert not prefill.replica_views[0].workload.exists  # Pods exist, Workload not (yet)
    assert [rv.group for rv in decode.replica_views] == [DECODE, ""]
    text = x.render_text(e)
    assert "replica 1: no Pods yet" in text and "no Workload" in text


def test_missing_deployment() -> None:
    e = x.explain_deployment(None, namespace=TEAM, name="ghost")
    assert not e.exists and "does not exist" in x.render_text(e)
