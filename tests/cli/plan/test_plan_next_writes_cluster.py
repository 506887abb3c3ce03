"""``plan --from-cluster`` predicts the controller's next writes, on the real control plane (issue 27).

Four single-T4 Nodes (scenario ``topology-migration``) under a configMap TopologySource; two Workloads
admitted on the zones hierarchy; the hierarchy changes to racks, so the pool's queue is held
``HoldAndDrain`` (phase ``draining``) while Kueue still reports the evicted Workloads' reservations, and
the old flavor is finalizing (Kueue keeps it while the queue lists it). Then, each time with the
controller **stopped** (a real ``gpustack-worker controller`` process):

1. **mid-migration**: one Workload is deleted, so Kueue reports one reservation instead of two;
2. **a refusal during the drain**: an admin's ResourceFlavor, labelled as the chain's type (so it is in
   the chain's flavor cache) and selecting the same Nodes as the chain's new flavor — the queue refuses
   its plan (``OverlappingSelectors``).

``plan --from-cluster -o json`` (the command, as a subprocess) then says what the controllers write next
(step 1); a new controller process is started, and its first writes — read back from kube-apiserver's
audit log with their request bodies — must be exactly those: per ClusterQueue the applied labels,
annotations and spec (stop policy, groups) and the ``TopologyReady`` condition; per InstanceType the
whole applied ``status``. Once the controller is idle, it has written no chain object the plan did not
name.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from bench.chain_bench import wait_idle
from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.controller_cmd import USER_AGENT
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.prune import OWNER_LABEL
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from tests.chain.controller_procs import ControllerProcs, audited_cluster
from tests.cli.plan.test_plan_from_cluster_cluster import _plan
from tests.kit import kueue
from tests.topology.cluster_helpers import condition, eventually, workload
from tests.topology.test_migration_cluster import (
    QUEUE,
    RACKS,
    SCENARIO,
    TEAM,
    ZONES,
    admitted,
    annotations_of,
    converged_on,
    flavor,
    publish,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

#: A step on a loaded machine: Kueue's status, a controller's start and its informers' lists.
STEP_S = 300.0
#: The chain's kinds as the audit log names them (what the plan's changes are compared with).
CHAIN: dict[str, str] = {
    "ClusterQueue": "clusterqueues",
    "InstanceType": "instancetypes",
    "ResourceFlavor": "resourceflavors",
    "Topology": "topologies",
    "LocalQueue": "localqueues",
    "AdmissionCheck": "admissionchecks",
}
ADMIN_FLAVOR = "an-admins-t4-flavor"


@dataclass
class Cluster:
    dev: DevCluster
    admin: Client
    controllers: ControllerProcs
    audit: AuditLog


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane of this module's own: its audit log holds the request bodies of the writes to
    Kueue's and our API groups (the session's records none), which are compared with the plan's. The pool
    holds exactly the scenario's Nodes there; the writes are read from each process's start (``since``)."""
    why = "request bodies of Kueue- and worker-group writes in the audit log: compared with the plan's"
    bodies = (kinds.CLUSTER_QUEUE.group, kinds.INSTANCE_TYPE.group)
    with audited_cluster("next-writes", why=why, request_bodies=bodies) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def cluster(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, SCENARIO)
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    agent_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.AGENT.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    agent_task = asyncio.create_task(agent.run(stop))
    logs = tmp_path_factory.mktemp("controllers")
    kubeconfig = devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)
    controllers = ControllerProcs(logs, kubeconfig=kubeconfig)
    assert devcluster.audit_log is not None
    try:
        yield Cluster(devcluster, admin, controllers, AuditLog(devcluster.audit_log))
    finally:
        controllers.stop_all()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent_task, 30)
        for client in (agent_client, admin):
            await client.close()


# --- what the plan predicts and what the controller wrote --------------------------------------------


def _predicted(report: dict[str, Any], step: int = 1) -> dict[tuple[str, str], dict[str, Any]]:
    """The chain objects the plan writes at ``step``: (kind, [namespace/]name) → the change."""
    out = {}
    for c in report["changes"]:
        if c["kind"] in CHAIN and c["step"] == step:
            where = f"{c['namespace']}/{c['name']}" if c.get("namespace") else c["name"]
            out[c["kind"], where] = c
    return out


def _fields(change: dict[str, Any], section: str) -> list[dict[str, Any]]:
    return [f for f in change.get("fields") or () if f["path"].split(".")[0].split("[")[0] == section]


def _where(e: AuditEvent) -> str:
    return f"{e.namespace}/{e.name}" if e.namespace else e.name


def _chain_writes(audit: AuditLog, identity: str, since: dt.datetime) -> list[AuditEvent]:
    """The writes of one controller process to chain objects, successful, in the order the server took
    them (its Lease, Events and the topology and placement controllers' objects left out)."""
    return [
        e
        for e in audit.writes(f"{USER_AGENT}/{identity}", since=since)
        if e.resource in CHAIN.values() and e.code is not None and e.code < 300
    ]


def _first(writes: list[AuditEvent], resource: str, subresource: str, where: str) -> AuditEvent | None:
    return next(
        (e for e in writes if (e.resource, e.subresource, _where(e)) == (resource, subresource, where)), None
    )


def _ready(status: dict[str, Any] | None) -> dict[str, Any]:
    cond = condition({"status": status or {}}, keys.TOPOLOGY_READY)
    return {k: cond.get(k) for k in ("status", "reason", "message")}


def _expected_requests(predicted: dict[tuple[str, str], dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(resource, subresource, where) of every request the predicted writes make: a queue's spec and its
    status are two requests, an InstanceType's status one."""
    out = set()
    for (kind, where), change in predicted.items():
        resource = CHAIN[kind]
        if change["action"] == "create":
            out.add((resource, "", where))
            continue
        if _fields(change, "metadata") or _fields(change, "spec"):
            out.add((resource, "", where))
        if _fields(change, "status"):
            out.add((resource, "status", where))
    return out


async def _plan_then_run(c: Cluster, identity: str) -> tuple[dict[str, Any], list[AuditEvent]]:
    """With no controller running: the plan; then a controller process ``identity`` started, its first
    writes awaited, and the process left running until it is idle."""
    assert not any(c.controllers.alive(i) for i in c.controllers.procs)
    report, _text = await _plan(str(c.dev.kubeconfig))
    predicted = _predicted(report)
    assert predicted, "the plan predicts no write: the state gives the controller nothing to do"
    wanted = _expected_requests(predicted)
    since = dt.datetime.now(dt.UTC)
    c.controllers.start(identity)

    async def all_written() -> list[AuditEvent] | None:
        assert c.controllers.alive(identity), c.controllers.tail(identity)
        writes = _chain_writes(c.audit, identity, since)
        seen = {(e.resource, e.subresource, _where(e)) for e in writes}
        return writes if wanted <= seen else None

    await eventually(all_written, within=STEP_S, every=1.0)
    pid = c.controllers.procs[identity].pid
    await wait_idle(pid)
    return report, _chain_writes(c.audit, identity, since)


def assert_first_writes_are_the_plans(report: dict[str, Any], writes: list[AuditEvent]) -> None:
    """Each predicted write is the controller's first write of that object (the fields the plan says it
    sets), and the controller wrote no chain object the plan did not name (at either step)."""
    predicted = _predicted(report)
    for (kind, where), change in predicted.items():
        body = change["write"]
        resource = CHAIN[kind]
        if kind == "ClusterQueue":
            if _fields(change, "metadata") or _fields(change, "spec"):
                spec_write = _first(writes, resource, "", where)
                assert spec_write is not None and spec_write.request_object is not None, where
                sent = spec_write.request_object
                assert sent["spec"] == body["spec"], where
                for part in ("labels", "annotations"):
                    have, want = sent["metadata"].get(part) or {}, body["metadata"].get(part) or {}
                    assert have == want, (where, part)
            if _fields(change, "status"):
                status_write = _first(writes, resource, "status", where)
                assert status_write is not None and status_write.request_object is not None, where
                assert _ready(status_write.request_object.get("status")) == _ready(body["status"]), where
        elif kind == "InstanceType" and _fields(change, "status"):
            status_write = _first(writes, resource, "status", where)
            assert status_write is not None and status_write.request_object is not None, where
            assert status_write.request_object["status"] == body["status"], where
        else:
            assert _first(writes, resource, "", where) is not None, (kind, where)
    named = _expected_requests(predicted) | _expected_requests(_predicted(report, step=2))
    unplanned = sorted({(e.resource, e.subresource, _where(e)) for e in writes} - named)
    bodies = [e.request_object for e in writes if (e.resource, e.subresource, _where(e)) in unplanned]
    assert not unplanned, f"the controller wrote what the plan did not name: {unplanned}: {bodies}"


# --- the state: mid-migration ------------------------------------------------------------------------


async def _queue(admin: Client) -> dict[str, Any]:
    return await admin.get(kinds.CLUSTER_QUEUE, QUEUE) or {}


async def _draining(admin: Client, reserving: int) -> dict[str, Any] | None:
    """The queue held HoldAndDrain in phase draining, its TopologyReady written for its generation, and
    Kueue reporting ``reserving`` Workloads on it; the InstanceType's phase ``Draining``."""
    cq = await _queue(admin)
    ready = condition(cq, keys.TOPOLOGY_READY)
    generation = (cq.get("metadata") or {}).get("generation")
    it = await admin.get(kinds.INSTANCE_TYPE, QUEUE)
    ok = (
        annotations_of(cq).get(keys.MIGRATION_PHASE) == "draining"
        and (cq.get("spec") or {}).get("stopPolicy") == "HoldAndDrain"
        and ready.get("observedGeneration") == generation
        and ready.get("reason") == "Migrating"
        and (cq.get("status") or {}).get("reservingWorkloads") == reserving
        and ((it or {}).get("status") or {}).get("phase") == "Draining"
    )
    return cq if ok else None


async def _finalizing(admin: Client, name: str) -> bool:
    rf = await admin.get(kinds.RESOURCE_FLAVOR, name)
    return bool(((rf or {}).get("metadata") or {}).get("deletionTimestamp"))


async def test_mid_migration_the_plan_is_the_controllers_next_writes(cluster: Cluster) -> None:
    admin, ctl = cluster.admin, cluster.controllers
    await publish(admin, ZONES, "zones-next-writes")
    ctl.start("c1")
    await eventually(lambda: converged_on(admin, ZONES.profile), within=STEP_S)

    async def local_queue() -> bool:
        return await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(QUEUE), TEAM) is not None

    await eventually(local_queue, within=STEP_S)
    names = ("next-a", "next-b")
    for name in names:
        await admin.create(kinds.WORKLOAD, workload(name, TEAM, QUEUE, required_level=ZONES.finest), TEAM)
    for name in names:
        await eventually(lambda name=name: admitted(admin, name), within=STEP_S)

    # The hierarchy changes under both Workloads: the queue drains, Kueue evicts them, and (observed on
    # Kueue 0.19.2) a Workload without a job owner keeps its reservation, so the drain holds.
    await publish(admin, RACKS, "racks-next-writes")
    await eventually(lambda: _draining(admin, 2), within=STEP_S)
    await eventually(lambda: _finalizing(admin, flavor(ZONES.profile)), within=STEP_S)
    await wait_idle(ctl.procs["c1"].pid)
    assert await _draining(admin, 2) is not None
    ctl.stop_all()

    # Controller stopped: one Workload goes, Kueue reports one reservation.
    await admin.delete(kinds.WORKLOAD, names[0], TEAM)

    async def one_left() -> bool:
        return (await _queue(admin)).get("status", {}).get("reservingWorkloads") == 1

    await eventually(one_left, within=STEP_S)
    report, writes = await _plan_then_run(cluster, "c2")
    predicted = _predicted(report)
    assert {k for k, _ in predicted} >= {"ClusterQueue", "InstanceType"}, predicted
    queue_write = predicted["ClusterQueue", QUEUE]["write"]
    assert queue_write["spec"]["stopPolicy"] == "HoldAndDrain"  # still draining: one reservation left
    assert "1 workload(s)" in queue_write["status"]["conditions"][0]["message"]
    assert_first_writes_are_the_plans(report, writes)
    ctl.stop_all()


async def test_a_refusal_during_the_drain_the_plan_is_the_controllers_next_writes(cluster: Cluster) -> None:
    admin = cluster.admin
    assert await _draining(admin, 1) is not None, "the previous test leaves the queue draining"
    ours = await admin.get(kinds.RESOURCE_FLAVOR, flavor(RACKS.profile))
    assert ours is not None
    labels = {k: v for k, v in ours["metadata"]["labels"].items() if k != OWNER_LABEL}
    # the chain's type label and the pool's labels, but no owner label and no descriptors
    spec = {k: ours["spec"][k] for k in ("nodeLabels", "topologyName") if k in ours["spec"]}
    await admin.create(kinds.RESOURCE_FLAVOR, kueue.resource_flavor(ADMIN_FLAVOR, spec, labels=labels))
    report, writes = await _plan_then_run(cluster, "c3")
    predicted = _predicted(report)
    queue_write = predicted["ClusterQueue", QUEUE]["write"]
    assert queue_write["status"]["conditions"][0]["reason"] == "OverlappingSelectors"
    assert_first_writes_are_the_plans(report, writes)
