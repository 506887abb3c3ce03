"""ModelDeployment role replicas as Kueue pod groups, end to end on the real control plane (kube-apiserver,
kube-scheduler, Kueue's Pod integration), with the node agent, the chain and topology controllers and the
ModelDeployment controller running as the controller's ServiceAccount, on the ``topology-8`` scenario
(eight two-L4 nodes and four CPU nodes; no TopologySource, so every node has the hostname-only profile).

- Pods of a node-delivered model prefer the nodes holding the digest: both Pods of a replica bind to the
  one hot node; a download finishing later on another node changes no existing Pod, and a replica added
  afterwards prefers both hot nodes and, the first being full, binds to the second;
- a 3 × 8 role produces three Workloads (one PodSet named after the role, eight Pods each), each admitted
  and placed on its own, every Pod bound where its Workload's topology assignment says;
- a role that does not fit carries Kueue's inadmissible message verbatim, with the role and replica named;
  a level the queue's hierarchy lacks is a ``Rendered=False`` condition and creates no Pod, and so is a
  template carrying Kueue's own metadata.

No kubelet runs: a bound Pod stays ``Pending`` with ``spec.nodeName`` set, and no garbage collector runs
either (no kube-controller-manager), so the tests never rely on a Pod going away.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.deployments import ModelDeployments
from tests import stack as support
from tests.kit import models
from tests.stack import Stack, module_cluster, running_stack
from tests.stack import condition as _cond
from tests.topology.cluster_helpers import decode_topology_assignment

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

TEAM = "team-md"
L4_TYPE = "gpustack--nvidia-l4-linux-amd64"
CPU_TYPE = "gpustack--generic-linux-amd64"
DIGEST = "sha256:" + "5" * 64
HOT, LATER = "rack-node-5", "rack-node-6"
#: A fresh CI machine is slower than a warm one: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _deployment(name: str, *roles: dict[str, Any], model: dict[str, Any] | None = None) -> dict[str, Any]:
    return models.model_deployment(name, TEAM, *roles, model=model)


def _role(name: str, instance_type: str, *, replicas: int, size: int, **extra: Any) -> dict[str, Any]:
    return models.role(
        name, replicas=replicas, size=size, instanceType=instance_type, template=models.template(), **extra
    )


class Running:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.admin = stack.admin
        (self.deployments,) = stack.extra

    async def pods(self, deployment: str) -> list[dict[str, Any]]:
        md = await self.admin.get(kinds.MODEL_DEPLOYMENT, deployment, TEAM)
        if md is None:
            return []
        uid = md["metadata"]["uid"]
        items, _ = await self.admin.list(
            kinds.POD, namespace=TEAM, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={uid}"
        )
        return items

    async def queue_ready(self, name: str) -> bool:
        cq = await self.admin.get(kinds.CLUSTER_QUEUE, name)
        lq = await self.admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(name), TEAM)
        return bool(
            _cond(cq, "Active").get("status") == "True"
            and _cond(cq, "TopologyReady").get("status") == "True"
            and lq is not None
        )


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("placement") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    def extra(client: Client, settings: Any, registry: Any) -> list[Any]:
        return [ModelDeployments(client, registry, settings)]

    async with running_stack(devcluster, "topology-8", namespaces=(TEAM,), extra=extra) as stack:
        run = Running(stack)
        await eventually(lambda: run.queue_ready(L4_TYPE))
        await eventually(lambda: run.queue_ready(CPU_TYPE))
        yield run


def _store(node: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.NODE_MODEL_STORE.api_version,
        "kind": kinds.NODE_MODEL_STORE.kind,
        "metadata": {"name": node},
        "spec": {},
    }


def _store_status(state: str) -> dict[str, Any]:
    return {
        "status": {
            "models": [{"digest": DIGEST, "state": state, "sizeBytes": 1 << 30}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Serving",
                    "message": "store mounted",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ],
        }
    }


def _csinode(node: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.CSI_NODE.api_version,
        "kind": kinds.CSI_NODE.kind,
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": keys.MODEL_CSI_DRIVER, "nodeID": node}]},
    }


def _store_values(pod: dict[str, Any]) -> list[list[str]]:
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    return [
        list(expr["values"])
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        for expr in term["preference"]["matchExpressions"]
        if expr["key"] == keys.HOSTNAME
    ]


async def test_node_delivered_pods_prefer_the_nodes_holding_the_digest(running: Running) -> None:
    admin = running.admin
    for node, state in ((HOT, "Ready"), (LATER, "Downloading")):
        await admin.create(kinds.NODE_MODEL_STORE, _store(node))
        await admin.patch(kinds.NODE_MODEL_STORE, node, _store_status(state), subresource="status")
        await admin.create(kinds.CSI_NODE, _csinode(node))

    # wait until the controller's caches hold the stores and CSINodes (they are read at creation only)
    ctl = running.deployments

    async def cached() -> bool:
        return len(ctl.stores.store) >= 2 and len(ctl.csinodes.store) >= 2

    await eventually(cached)
    role = _role("serve", L4_TYPE, replicas=1, size=2, resources={"accelerator": "1"})
    model = {"artifacts": [{"digest": DIGEST}], "delivery": "Node"}
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("hot", role, model=model), namespace=TEAM)

    async def bound(count: int) -> list[dict[str, Any]] | None:
        pods = await running.pods("hot")
        done = len(pods) == count and all(p["spec"].get("nodeName") for p in pods)
        return pods if done else None

    first = await eventually(lambda: bound(2))
    print("hot replica 0:", {p["metadata"]["name"]: p["spec"]["nodeName"] for p in first})
    for pod in first:
        assert _store_values(pod) == [[HOT]]
        assert pod["spec"]["nodeName"] == HOT
    before = {p["metadata"]["uid"]: _store_values(p) for p in first}

    # The download on LATER finishes: nothing existing changes, even after a forced resync.
    await admin.patch(kinds.NODE_MODEL_STORE, LATER, _store_status("Ready"), subresource="status")

    async def later_ready() -> bool:
        found = ctl.stores.store.get(LATER)
        models = ((found or {}).get("status") or {}).get("models") or ()
        return any(m.get("state") == "Ready" for m in models)

    await eventually(later_ready)
    ctl.resync()
    await eventually(lambda: _idle(running))
    after = {p["metadata"]["uid"]: _store_values(p) for p in await running.pods("hot")}
    assert after == before

    # A replica added now prefers both holders; the first is full (its two L4s are taken), so TAS skips it.
    live = await admin.get(kinds.MODEL_DEPLOYMENT, "hot", TEAM)
    assert live is not None
    live["spec"]["roles"][0]["replicas"] = 2
    await admin.replace(kinds.MODEL_DEPLOYMENT, live)
    pods = await eventually(lambda: bound(4))
    new = [p for p in pods if p["metadata"]["uid"] not in before]
    print("hot replica 1:", {p["metadata"]["name"]: p["spec"]["nodeName"] for p in new})
    assert {p["metadata"]["uid"] for p in pods} >= set(before)
    for pod in new:
        assert _labels(pod)[keys.POD_ORDINAL] == "1"
        assert _store_values(pod) == [[HOT, LATER]]
        assert pod["spec"]["nodeName"] == LATER


async def _idle(run: Running) -> bool:
    return run.stack.idle()


async def test_a_3x8_role_is_three_workloads_each_placed_on_its_own(running: Running) -> None:
    admin = running.admin
    role = _role("decode", CPU_TYPE, replicas=3, size=8)
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("wide", role), namespace=TEAM)

    async def all_bound() -> list[dict[str, Any]] | None:
        pods = await running.pods("wide")
        return pods if len(pods) == 24 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await eventually(all_bound)
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        groups.setdefault(_labels(pod)[keys.POD_GROUP_NAME], []).append(pod)
    assert sorted(len(g) for g in groups.values()) == [8, 8, 8]
    assert sorted(_labels(g[0])[keys.POD_ORDINAL] for g in groups.values()) == ["0", "1", "2"]
    for group, members in groups.items():
        workload = await admin.get(kinds.WORKLOAD, group, TEAM)
        assert workload is not None, f"no Workload named after group {group}"
        assert [(ps["name"], ps["count"]) for ps in workload["spec"]["podSets"]] == [("decode", 8)]
        assert _cond(workload, "Admitted").get("status") == "True"
        (assignment,) = workload["status"]["admission"]["podSetAssignments"]
        levels, domains = decode_topology_assignment(assignment["topologyAssignment"])
        assigned = Counter({dict(zip(levels, d.values, strict=True))[keys.HOSTNAME]: d.pods for d in domains})
        placed = Counter(p["spec"]["nodeName"] for p in members)
        print(f"group {group}: assigned {dict(assigned)}, bound {dict(placed)}")
        assert placed == assigned

    async def status() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "wide", TEAM)
        roles = {r["name"]: r for r in ((md or {}).get("status") or {}).get("roles") or ()}
        got = roles.get("decode") or {}
        return md if got.get("admittedReplicas") == 3 else None

    md = await eventually(status)
    (entry,) = md["status"]["roles"]
    assert entry == {"name": "decode", "replicas": 3, "admittedReplicas": 3, "readyReplicas": 0}
    assert _cond(md, "Admitted")["status"] == "True"
    assert _cond(md, "Rendered")["status"] == "True"


async def test_a_pending_role_carries_kueues_message_verbatim(running: Running) -> None:
    admin = running.admin
    # Eight Pods of two L4s each: 16 cards, more than the pool has left.
    role = _role("big", L4_TYPE, replicas=1, size=8, resources={"accelerator": "2"})
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("toobig", role), namespace=TEAM)

    async def waiting() -> tuple[str, str] | None:
        pods = await running.pods("toobig")
        if len(pods) != 8:
            return None
        group = _labels(pods[0])[keys.POD_GROUP_NAME]
        workload = await admin.get(kinds.WORKLOAD, group, TEAM)
        reserved = _cond(workload, "QuotaReserved")
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "toobig", TEAM)
        roles: list[dict[str, Any]] = list(((md or {}).get("status") or {}).get("roles") or ())
        message = roles[0].get("message") if roles else None
        if reserved.get("status") != "False" or not reserved.get("message") or not message:
            return None
        expected = f"role big replica 0: {reserved['message']}"
        return (message, expected) if message == expected else None

    message, _ = await eventually(waiting)
    print(f"pending role status: {message}")
    assert all(not p["spec"].get("nodeName") for p in await running.pods("toobig"))


async def test_an_unknown_level_is_a_condition_and_creates_no_pod(running: Running) -> None:
    admin = running.admin
    role = _role("zoned", L4_TYPE, replicas=1, size=2, topology={"requiredLevel": keys.PRIVATE_RACK})
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("zoned", role), namespace=TEAM)

    async def rendered() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "zoned", TEAM)
        return md if _cond(md, "Rendered").get("status") == "False" else None

    md = await eventually(rendered)
    cond = _cond(md, "Rendered")
    assert cond["reason"] == "UnknownLevel"
    assert keys.PRIVATE_RACK in cond["message"] and keys.HOSTNAME in cond["message"]
    assert await running.pods("zoned") == []


async def test_a_template_with_kueue_metadata_is_refused_and_creates_no_pod(running: Running) -> None:
    """A template's own podset-preferred-topology would reach Kueue and drop the node-store terms: the
    render refuses it (``Rendered=False/ReservedTemplateMetadata``) and makes no Pod."""
    admin = running.admin
    role = _role("smuggled", CPU_TYPE, replicas=1, size=1)
    role["template"]["metadata"] = {"annotations": {keys.PODSET_PREFERRED_TOPOLOGY: keys.HOSTNAME}}
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("smuggled", role), namespace=TEAM)

    async def rendered() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "smuggled", TEAM)
        return md if _cond(md, "Rendered").get("status") == "False" else None

    cond = _cond(await eventually(rendered), "Rendered")
    assert cond["reason"] == "ReservedTemplateMetadata"
    assert keys.PODSET_PREFERRED_TOPOLOGY in cond["message"]
    assert await running.pods("smuggled") == []


async def test_a_missing_instance_type_gets_one_warning_event_per_generation_and_a_column(
    running: Running,
) -> None:
    """A role naming an InstanceType that does not exist: ``Rendered=False/InstanceTypeNotFound``, one
    Warning Event with that reason — not one per reconcile (two more reconciles post nothing) — a new one
    when the spec changes (a new generation), and the CRD's ``Rendered`` printer column shows the reason."""
    admin = running.admin
    controller = running.deployments
    missing = "gpustack--nvidia-b200-linux-amd64"
    await admin.create(
        kinds.MODEL_DEPLOYMENT,
        _deployment("typo", _role("main", missing, replicas=1, size=1)),
        namespace=TEAM,
    )

    async def rendered() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "typo", TEAM)
        return md if _cond(md, "Rendered").get("reason") == "InstanceTypeNotFound" else None

    md = await eventually(rendered)
    assert md["status"]["observedGeneration"] == md["metadata"]["generation"] == 1

    async def warnings() -> list[dict[str, Any]]:
        events, _ = await admin.list(kinds.EVENT, namespace=TEAM)
        return [
            e
            for e in events
            if e.get("regarding", {}).get("name") == "typo" and e.get("reason") == "InstanceTypeNotFound"
        ]

    (first,) = await eventually(warnings)
    assert first["type"] == "Warning" and first["reportingController"] == keys.MODEL_DEPLOYMENT_CONTROLLER
    assert first["note"].startswith("generation 1: role main:") and missing in first["note"]
    for _ in range(2):  # reconciles with the condition already reported: nothing more
        await controller.reconcile(f"{TEAM}/typo")
    await controller.events.flush()
    assert [e["note"] for e in await warnings()] == [first["note"]]

    roles = [_role("main", missing, replicas=2, size=1)]
    await admin.patch(kinds.MODEL_DEPLOYMENT, "typo", {"spec": {"roles": roles}}, namespace=TEAM)

    async def two() -> list[dict[str, Any]] | None:
        found = await warnings()
        return found if len(found) == 2 else None

    notes = sorted(e["note"] for e in await eventually(two))
    assert notes[1].startswith("generation 2: role main:")

    crd = await admin.get(kinds.CRD, f"{kinds.MODEL_DEPLOYMENT.plural}.{kinds.MODEL_DEPLOYMENT.group}")
    assert crd is not None
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Rendered"]["jsonPath"] == '.status.conditions[?(@.type=="Rendered")].reason'
