"""The joint check end to end on the real control plane (reference §5.6): real Kueue, its Pod integration
and kube-scheduler, the chain's queues, and the joint check's controllers.

A two-role ModelDeployment (prefill on the T4 pool, decode on the single-A10G pool of the chain-4 scenario)
whose A10G is taken by a foreign Workload: Kueue reserves the prefill group only; the check answers
``Pending`` "1 of 2 groups reserved; waiting: <A10G type>" (never ``Retry``), nothing is admitted and no
Pod is ungated or bound; the deployment reads ``QuotaReserved=False/Waiting`` and, once the injected
clock has moved 30 minutes on, ``Parked``: both Workloads are deactivated, Kueue frees the T4 queue (so
foreign Workloads take every T4), one Warning Event says so, and a resync changes nothing. A new value of
the retry annotation reactivates the set with a fresh clock; parked again 30 minutes later (a second
Event), a spec change retries it too. Freeing the A10G lets decode reserve: both groups are ``Ready`` and
admitted, the deployment reads ``Reserved``.

The role Pods are created here the way the deployments controller renders them (a controller reference to
the deployment, its uid and role labels, a Kueue pod group of one with the role as role hash); Kueue
builds each group's Workload from them, owned by the Pods — the grouping the check follows. The chain and
topology controllers and the joint check run as the controller's ServiceAccount (the generated RBAC),
the agent as its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.chain.controller import Chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.placement import joint
from gpustack_worker.placement.joint_controller import JointCheck
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from gpustack_worker.topology.controller import Topology
from tests import stack as support
from tests.kit import kueue, models
from tests.kit.resync import idle, resynced
from tests.stack import condition, module_cluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

TEAM = "team-joint"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
KUEUE_GATE = "kueue.x-k8s.io/admission"
DEPLOYMENT = "llm"


#: Poll up to 90 s (a generous bound, never a measurement).
eventually = functools.partial(support.eventually, within=90.0)


class Wall:
    """The injected wall clock: real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


class Running:
    def __init__(self, admin: Client, check: JointCheck, check_client: Client, wall: Wall) -> None:
        self.admin = admin
        self.check = check
        self.check_client = check_client
        self.wall = wall
        #: Every state this check's entry was seen in, on any Workload.
        self.states_seen: set[str] = set()


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone: the chain reads every Node (other modules add their own)."""
    with module_cluster("joint") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, packaged_scenario("chain-4"))
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    agent_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.AGENT.name)))
    chain_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    settings = SettingsSource(chain_client, model=WorkerSettings, env={})
    manager = Manager(settings=settings)
    registry = manager.add_registry(InformerRegistry(chain_client))
    chain = Chain(chain_client, settings, registry)
    topology = Topology(chain_client, settings, registry)
    wall = Wall()
    # Its own client (same ServiceAccount) so that its writes are counted apart; the informers are shared.
    check_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)))
    check = JointCheck(check_client, registry, settings, clock=wall)
    for controller in (*topology.controllers, *chain.controllers, *check.controllers):
        manager.add_controller(controller)
    chain.start_keys()
    topology.start_keys()
    check.start_keys()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(agent.run(stop)), asyncio.create_task(manager.run(stop))]
    try:
        yield Running(admin, check, check_client, wall)
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
        for client in (agent_client, chain_client, check_client, admin):
            await client.close()


def _gpu_spec(gpus: int) -> dict[str, Any]:
    return kueue.pod_spec(kueue.gpu_container(gpus))


def _foreign_workload(name: str, queue: str, *, count: int = 1) -> dict[str, Any]:
    pods = kueue.pod_set(_gpu_spec(1), count=count)
    return kueue.workload(name, TEAM, keys.local_queue_name(queue), pods)


def _deployment() -> dict[str, Any]:
    template = {"spec": _gpu_spec(1)}
    prefill = models.role("prefill", kind="Prefill", instanceType=T4, template=template)
    decode = models.role("decode", kind="Decode", instanceType=A10G, template=template)
    return models.model_deployment(DEPLOYMENT, TEAM, prefill, decode)


def _group(role: str) -> str:
    return f"{DEPLOYMENT}-{role}-0"


def _role_pod(deployment: dict[str, Any], role: str, instance_type: str) -> dict[str, Any]:
    """One member of a role replica's pod group, as the deployments controller renders it."""
    meta = deployment["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{_group(role)}-0",
            "namespace": TEAM,
            "labels": {
                keys.QUEUE_NAME: keys.local_queue_name(instance_type),
                keys.POD_GROUP_NAME: _group(role),
                keys.MODEL_DEPLOYMENT_UID: meta["uid"],
                keys.MODEL_DEPLOYMENT_ROLE: role,
            },
            "annotations": {keys.POD_GROUP_TOTAL_COUNT: "1", keys.ROLE_HASH: role},
            "ownerReferences": [
                {
                    "apiVersion": deployment["apiVersion"],
                    "kind": deployment["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": _gpu_spec(1),
    }


async def _workload(running: Running, name: str) -> dict[str, Any] | None:
    wl = await running.admin.get(kinds.WORKLOAD, name, TEAM)
    entry = joint.check_entry(wl) if wl else None
    if entry is not None:
        running.states_seen.add(str(entry.get("state")))
    return wl


def _entry(wl: dict[str, Any] | None) -> dict[str, Any]:
    entry = joint.check_entry(wl) if wl else None
    return dict(entry) if entry else {}


async def _pods(admin: Client) -> list[dict[str, Any]]:
    items, _ = await admin.list(kinds.POD, namespace=TEAM)
    return items


def _idle(running: Running) -> bool:
    """No key queued or in flight in the check's controllers (a delayed key — the moment a waiting set
    parks — may wait: that is the injected clock's business)."""
    return idle(running.check.controllers)


async def _resynced(running: Running) -> None:
    """Every key of the check's controllers reconciled again (tests/kit/resync.py), none queued or in
    flight: every decision has been taken again from the state as it stands."""
    await resynced(running.check.controllers, running.check.resync)


async def _no_writes_on_resync(running: Running) -> None:
    """Resync every key of the check's controllers; once each key was reconciled again, nothing was
    written."""
    await eventually(lambda: _idle(running))
    before = running.check_client.writes
    await _resynced(running)
    assert running.check_client.writes == before


async def _kueue_tried_a_later_workload(running: Running, queue: str) -> None:
    """Kueue's scheduler has taken a turn on ``queue`` since now: a Workload submitted now, which cannot
    fit either, is evaluated and marked ``QuotaReserved=False`` (then deleted again)."""
    name = "later-probe"
    await running.admin.create(kinds.WORKLOAD, _foreign_workload(name, queue), namespace=TEAM)
    try:

        async def evaluated() -> dict[str, Any] | None:
            wl = await running.admin.get(kinds.WORKLOAD, name, TEAM)
            cond = condition(wl, "QuotaReserved")
            return wl if cond.get("status") == "False" and cond.get("message") else None

        await eventually(evaluated)
    finally:
        await running.admin.delete(kinds.WORKLOAD, name, TEAM)


async def _admitted(running: Running, name: str) -> dict[str, Any] | None:
    wl = await _workload(running, name)
    return wl if condition(wl, "Admitted").get("status") == "True" else None


async def _parked(running: Running) -> dict[str, Any] | None:
    dep = await running.admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
    return dep if condition(dep, joint.QUOTA_RESERVED).get("reason") == "Parked" else None


async def _queue_idle(admin: Client, queue: str) -> dict[str, Any] | None:
    """The ClusterQueue as Kueue reports it once nothing reserves quota in it."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, queue)
    status = (cq or {}).get("status") or {}
    flavors = status.get("flavorsReservation") or ()
    totals = [str(r.get("total") or "0") for f in flavors for r in f.get("resources") or ()]
    return cq if status.get("reservingWorkloads") == 0 and set(totals) <= {"0"} else None


async def _released(running: Running) -> None:
    """Every Workload of the set is deactivated, holds no reservation, and both queues are idle."""

    async def released() -> bool:
        for role in ("prefill", "decode"):
            wl = await _workload(running, _group(role))
            if wl is None or wl["spec"].get("active") is not False:
                return False
            if condition(wl, "QuotaReserved").get("status") == "True":
                return False
        return True

    await eventually(released)
    await eventually(functools.partial(_queue_idle, running.admin, T4))
    # The Pods were never ungated and are kept (Kueue's Pod integration deletes no gated Pod).
    pods = await _pods(running.admin)
    assert len(pods) == 2
    for pod in pods:
        assert KUEUE_GATE in {g["name"] for g in pod["spec"].get("schedulingGates") or ()}, pod["metadata"]


async def _park_events(admin: Client) -> list[dict[str, Any]]:
    items, _ = await admin.list(kinds.EVENT, namespace=TEAM)
    return [
        e
        for e in items
        if e.get("regarding", {}).get("name") == DEPLOYMENT
        and (e.get("type"), e.get("reason"), e.get("reportingController"))
        == ("Warning", "Parked", keys.JOINT_CONTROLLER)
    ]


async def _waits_again(running: Running) -> dict[str, Any]:
    """After a retry: the set is reactivated, prefill reserves and is held Pending, the deployment waits
    (not parked, though its entry's old transition time is more than 30 minutes back on the clock)."""
    admin = running.admin

    async def waiting() -> dict[str, Any] | None:
        dep = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        cond = condition(dep, joint.QUOTA_RESERVED)
        return dep if cond.get("reason") == "Waiting" and "retried at" in cond.get("message", "") else None

    dep = await eventually(waiting)
    assert "parkedAt" not in dep["status"]["hold"]
    for role in ("prefill", "decode"):
        assert (await _workload(running, _group(role)) or {})["spec"].get("active") is True

    async def prefill_pending() -> dict[str, Any] | None:
        wl = await _workload(running, _group("prefill"))
        ok = condition(wl, "QuotaReserved").get("status") == "True" and _entry(wl).get("state") == "Pending"
        return wl if ok and _entry(wl).get("message", "").startswith("1 of 2") else None

    await eventually(prefill_pending)
    # Decided again from the state as it stands (the entry's transition time is the old one): still waiting.
    await _resynced(running)
    dep = await waiting()
    assert dep is not None, condition(
        await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM), joint.QUOTA_RESERVED
    )
    message = condition(dep, joint.QUOTA_RESERVED)["message"]
    assert message.startswith(f"1 of 2 groups reserved; waiting: {A10G}; retried at ")
    return dep


async def test_check_is_active_and_every_queue_references_it(running: Running) -> None:
    admin = running.admin

    async def active() -> dict[str, Any] | None:
        check = await admin.get(kinds.ADMISSION_CHECK, keys.JOINT_CHECK)
        return check if condition(check, "Active").get("status") == "True" else None

    check = await eventually(active)
    assert condition(check, "Active")["reason"] == "Ready"
    assert check["spec"]["controllerName"] == keys.JOINT_CONTROLLER

    for queue in (T4, A10G):

        async def references(queue: str = queue) -> bool:
            cq = await admin.get(kinds.CLUSTER_QUEUE, queue)
            strategy = ((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
            return keys.JOINT_CHECK in {c.get("name") for c in strategy.get("admissionChecks") or ()}

        await eventually(references)


async def test_set_waits_pending_parks_then_admits_together(running: Running) -> None:
    admin = running.admin
    await test_check_is_active_and_every_queue_references_it(running)

    # A foreign Workload takes the only A10G: Ready at once, admitted.
    await admin.create(kinds.WORKLOAD, _foreign_workload("blocker", A10G), namespace=TEAM)

    async def blocker_admitted() -> dict[str, Any] | None:
        wl = await _workload(running, "blocker")
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    blocker = await eventually(blocker_admitted)
    assert _entry(blocker)["state"] == "Ready"
    assert _entry(blocker)["message"] == joint.FOREIGN_MESSAGE

    deployment = await admin.create(kinds.MODEL_DEPLOYMENT, _deployment(), namespace=TEAM)
    for role, instance_type in (("prefill", T4), ("decode", A10G)):
        await admin.create(kinds.POD, _role_pod(deployment, role, instance_type), namespace=TEAM)

    # Prefill reserves and is held Pending "1 of 2"; decode cannot reserve (the A10G is taken).
    async def prefill_pending() -> dict[str, Any] | None:
        wl = await _workload(running, _group("prefill"))
        return wl if _entry(wl).get("message", "").startswith("1 of 2") else None

    prefill = await eventually(prefill_pending)
    assert _entry(prefill)["state"] == "Pending"
    assert _entry(prefill)["message"] == f"1 of 2 groups reserved; waiting: {A10G}"
    assert condition(prefill, "QuotaReserved").get("status") == "True"
    assigned = prefill["status"]["admission"]["podSetAssignments"][0]
    assert assigned["name"] == "prefill"  # the group's one PodSet is named after the role
    assert "topologyAssignment" in assigned  # the group that fits keeps its domain while it waits

    async def deployment_waiting() -> dict[str, Any] | None:
        dep = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        return dep if condition(dep, joint.QUOTA_RESERVED).get("reason") == "Waiting" else None

    dep = await eventually(deployment_waiting)
    assert condition(dep, joint.QUOTA_RESERVED)["status"] == "False"

    # Held and converged: a full resync of the check's controllers writes nothing (Kueue re-applies the
    # entries it co-owns; the no-op check still sees ours unchanged).
    await _no_writes_on_resync(running)
    # Held, not admitted, and not moving, once both sides have had their chance: the check has decided
    # every key again (above) and Kueue's scheduler has taken a later turn on the A10G queue. No Pod is
    # ungated or bound.
    await _kueue_tried_a_later_workload(running, A10G)
    prefill = await _workload(running, _group("prefill"))
    decode = await _workload(running, _group("decode"))
    assert _entry(prefill)["state"] == "Pending"
    assert condition(prefill, "Admitted").get("status") != "True"
    assert decode is not None and condition(decode, "QuotaReserved").get("status") != "True"
    for pod in await _pods(admin):
        assert KUEUE_GATE in {g["name"] for g in pod["spec"].get("schedulingGates") or ()}, pod["metadata"]
        assert not pod["spec"].get("nodeName"), pod["metadata"]["name"]

    # 30 minutes (the injected clock) after prefill started waiting, the set is parked: the park is
    # recorded, every Workload of the set is deactivated and Kueue releases what prefill held.
    running.wall.offset = joint.PARK_AFTER + dt.timedelta(minutes=1)
    running.check.resync()
    dep = await eventually(functools.partial(_parked, running))
    message = condition(dep, joint.QUOTA_RESERVED)["message"]
    assert "its Workloads are deactivated and the quota they held is released" in message
    assert joint.retry_command(dep) in message
    assert dep["status"]["hold"]["parkedGeneration"] == dep["metadata"]["generation"]
    await _released(running)
    assert len(await _park_events(admin)) == 1

    # The quota and the domain prefill held are free: foreign Workloads taking every T4 of the pool (four
    # cards on t4-b, the one on t4-a: each PodSet fits one node's flavor) are both admitted, whichever
    # card prefill held.
    for name, count in (("all-of-t4-b", 4), ("all-of-t4-a", 1)):
        await admin.create(kinds.WORKLOAD, _foreign_workload(name, T4, count=count), namespace=TEAM)
        await eventually(functools.partial(_admitted, running, name))
    for name in ("all-of-t4-b", "all-of-t4-a"):
        await admin.delete(kinds.WORKLOAD, name, TEAM)
    await eventually(functools.partial(_queue_idle, admin, T4))

    # Parked is stable: a full resync (our own status writes included) reactivates nothing.
    await _no_writes_on_resync(running)
    for role in ("prefill", "decode"):
        assert (await _workload(running, _group(role)) or {})["spec"].get("active") is False

    # An admin retries: a new value of the retry annotation reactivates the set, the clock restarts
    # (the 31 minutes already on the injected clock do not park it again) and prefill waits again.
    retry = {"metadata": {"annotations": {keys.JOINT_RETRY: "1"}}}
    await admin.patch(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, retry, namespace=TEAM)
    dep = await _waits_again(running)
    assert dep["status"]["hold"]["retry"] == "1"

    # Parked again 30 minutes after the retry: a second Event, everything released again.
    running.wall.offset += joint.PARK_AFTER + dt.timedelta(minutes=1)
    running.check.resync()
    await eventually(functools.partial(_parked, running))
    await _released(running)
    assert len(await _park_events(admin)) == 2

    # A spec change retries as well.
    changed = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
    assert changed is not None
    changed["spec"]["roles"][1]["template"].setdefault("metadata", {})["labels"] = {"example.com/try": "2"}
    await admin.replace(kinds.MODEL_DEPLOYMENT, changed)
    dep = await _waits_again(running)
    assert dep["status"]["hold"]["retry"] == "1"  # consumed once: the spec change retried this time

    # Free the A10G: decode reserves, both groups are Ready and admitted together.
    await admin.delete(kinds.WORKLOAD, "blocker", TEAM)

    async def both_admitted() -> list[dict[str, Any]] | None:
        wls = [await _workload(running, _group(role)) for role in ("prefill", "decode")]
        ok = all(condition(wl, "Admitted").get("status") == "True" for wl in wls)
        return [w for w in wls if w] if ok else None

    for wl in await eventually(both_admitted):
        assert _entry(wl)["state"] == "Ready"
        assert _entry(wl)["message"] == "2 of 2 groups reserved"

    async def deployment_reserved() -> dict[str, Any] | None:
        dep = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        return dep if condition(dep, joint.QUOTA_RESERVED).get("status") == "True" else None

    dep = await eventually(deployment_reserved)
    assert condition(dep, joint.QUOTA_RESERVED)["reason"] == "Reserved"

    # Admitted: Kueue ungates the role Pods.
    async def ungated() -> bool:
        pods = await _pods(admin)
        return len(pods) == 2 and all(
            KUEUE_GATE not in {g["name"] for g in p["spec"].get("schedulingGates") or ()} for p in pods
        )

    await eventually(ungated)

    # kube-scheduler binds each to a node of its own pool (the node TAS assigned; nothing runs them).
    async def bound() -> dict[str, str] | None:
        nodes = {
            p["metadata"]["labels"][keys.MODEL_DEPLOYMENT_ROLE]: p["spec"].get("nodeName")
            for p in await _pods(admin)
        }
        return nodes if all(nodes.values()) else None

    nodes = await eventually(bound)
    assert nodes["decode"] == "a10g-a"
    assert nodes["prefill"] in {"t4-a", "t4-b"}
    assert running.states_seen <= {"Pending", "Ready"}, running.states_seen
    assert "Retry" not in running.states_seen

    # Converged again: nothing more to write.
    await _no_writes_on_resync(running)
