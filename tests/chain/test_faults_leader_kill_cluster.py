"""Fault: the leader killed (SIGKILL) in the middle of a HoldAndDrain migration (issue 17).

Two real ``gpustack-worker controller`` processes, each its own ServiceAccount (two users in the audit
log) and identity (two User-Agents), with short Lease timings; the node agent in-process. The scenario is
``topology-migration`` (four single-T4 Nodes) described by a configMap TopologySource.

1. Undisturbed: the source describes region → zone → rack; the chain converges; its objects are the
   baseline.
2. The source drops to region → zone (no Workload: the idle flavor is replaced in place); a Workload is
   admitted on that flavor; the source goes back to racks, so the queue must drop a flavor in use:
   ``HoldAndDrain``, phase ``draining`` recorded on the queue, Kueue evicts the Workload but it keeps its
   reservation (Kueue 0.19 leaves releasing it to the job integration; it has no job).
3. With the reservation still held, the leader is SIGKILLed. The standby takes the Lease once it expired,
   then the test releases the reservation (deletes the Workload, as its owner would).

Asserted: the chain's objects equal the baseline; the queue's recorded phases only move forward
(draining → switched → none) with the saved stop policy ``None`` throughout; the standby wrote nothing to
the queue while the reservation was held (the recorded ``draining`` was already its desired state: it
resumed, it did not start over) and then exactly the switch and the restore; and from the audit log, the
two identities' writes never overlap: the old leader's last write precedes the new leader's acquiring
Lease write, which precedes the new leader's first write. No duration is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.controller_cmd import USER_AGENT
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from tests.chain.controller_procs import (
    ControllerProcs,
    audited_cluster,
    controller_account,
    lease_acquired,
    lease_holder,
    writer_spans,
)
from tests.chain.fault_kit import Snapshot, assert_same, kueue_current, snapshot
from tests.stack import condition, eventually
from tests.topology import test_migration_cluster as mig
from tests.topology.cluster_helpers import workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

QUEUE, TEAM = mig.QUEUE, mig.TEAM
ZONES, RACKS = mig.ZONES, mig.RACKS
STEP_S = 120.0
TAKEOVER_S = 180.0
@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone: the pool must hold exactly the scenario's Nodes."""
    with audited_cluster("faults-leader-kill") as cluster:
        yield cluster


@dataclass
class World:
    cluster: DevCluster
    admin: Client
    audit: AuditLog
    procs: ControllerProcs
    kubeconfigs: dict[str, Path]
    users: dict[str, str]


@pytest.fixture(scope="module")
async def world(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent="faults-test")
    await apply_scenario(admin, mig.SCENARIO)
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    agent_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.AGENT.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    agent_task = asyncio.create_task(agent.run(stop))
    logs = tmp_path_factory.mktemp("controllers")
    print(f"[leader-kill] controller logs in {logs}")
    kubeconfigs, users = {}, {}
    for identity in ("ctl-a", "ctl-b"):
        kubeconfigs[identity], users[identity] = await controller_account(devcluster, admin, identity)
    procs = ControllerProcs(logs)
    assert devcluster.audit_log is not None
    try:
        yield World(devcluster, admin, AuditLog(devcluster.audit_log), procs, kubeconfigs, users)
    finally:
        procs.stop_all()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent_task, 30)
        for client in (agent_client, admin):
            await client.close()


# --- reads -------------------------------------------------------------------------------------------


async def settled(w: World, hierarchy: mig.Hierarchy, leader: str) -> Snapshot | None:
    """The chain converged on ``hierarchy``: the queue on its flavor, TopologyReady for its generation,
    no migration, no flavor or Topology of another profile left; Kueue's report on every queue current
    (:func:`~tests.chain.fault_kit.kueue_current`: it has nothing left to write); the leader's work
    queues empty with no reconcile running, before and after the snapshot is read; the chain's objects
    (the fault kit's normalized snapshot)."""
    admin = w.admin
    if not await mig.converged_on(admin, hierarchy.profile):
        return None
    if set((await mig.profiles(admin)).values()) != {hierarchy.profile}:
        return None
    flavors = [f["metadata"]["name"] for f in (await admin.list(kinds.RESOURCE_FLAVOR))[0]]
    topologies = [t["metadata"]["name"] for t in (await admin.list(kinds.TOPOLOGY))[0]]
    if any(not f.endswith(hierarchy.profile) for f in flavors):
        return None
    if topologies != [keys.topology_name(hierarchy.profile)]:
        return None
    cq = await mig.queue(admin)
    if condition(cq, keys.TOPOLOGY_READY).get("observedGeneration") != cq["metadata"].get("generation"):
        return None
    if not await kueue_current(admin) or not await idle(w, leader):
        return None
    found = await snapshot(admin)
    return found if await idle(w, leader) else None


async def back_to(w: World, baseline: Snapshot, leader: str) -> Snapshot:
    """Wait until the chain is :func:`settled` on racks with the objects of ``baseline``; on timeout,
    fail with the diff against the last settled snapshot. (Settled alone can be read a moment before
    the leader has taken in Kueue's last report — an InstanceType's CPU in use — and the snapshot
    compared would then differ from the baseline for no fault of the chain.)"""
    last: Snapshot = {}

    async def same() -> Snapshot | None:
        nonlocal last
        found = await settled(w, RACKS, leader)
        if found is not None:
            last = found
        return found if found is not None and found == baseline else None

    try:
        return await eventually(same, within=TAKEOVER_S)
    except AssertionError:
        assert_same(baseline, last)
        raise


async def idle(w: World, identity: str) -> bool:
    """The controller process has no key queued and no reconcile running."""
    depth = await w.procs.metric(identity, "workqueue_depth")
    return depth == 0 and await w.procs.metric(identity, "controller_runtime_active_workers") == 0


@dataclass(frozen=True)
class QueueState:
    """What the migration state machine records on the queue."""

    phase: str | None
    saved: str | None
    policy: str | None
    flavors: tuple[str, ...]


@dataclass
class QueueSampler:
    """Reads the queue every 0.1 s and keeps each distinct state once, in the order seen."""

    admin: Client
    states: list[tuple[datetime.datetime, QueueState]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            cq = await self.admin.get(kinds.CLUSTER_QUEUE, QUEUE)
            if cq is not None:
                ann = mig.annotations_of(cq)
                state = QueueState(
                    ann.get(keys.MIGRATION_PHASE),
                    ann.get(keys.MIGRATION_STOP_POLICY),
                    cq["spec"].get("stopPolicy"),
                    tuple(mig.queue_flavors(cq)),
                )
                if not self.states or self.states[-1][1] != state:
                    self.states.append((datetime.datetime.now(datetime.UTC), state))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


@contextlib.asynccontextmanager
async def sampling(admin: Client) -> AsyncIterator[QueueSampler]:
    sampler = QueueSampler(admin)
    stop = asyncio.Event()
    task = asyncio.create_task(sampler.run(stop))
    try:
        yield sampler
    finally:
        stop.set()
        await task


def log_events(procs: ControllerProcs, identity: str) -> list[str]:
    """The ``event`` of every JSON log line of one controller process."""
    path = procs.logs / f"{identity}.log"
    out = []
    for line in path.read_bytes().splitlines() if path.exists() else ():
        with contextlib.suppress(orjson.JSONDecodeError):
            record = orjson.loads(line)
            if isinstance(record, dict) and record.get("queue") == QUEUE:
                out.append(str(record.get("event")))
    return out


async def diagnose(w: World) -> None:
    cq = await mig.queue(w.admin)
    print(f"[diag] queue meta={cq.get('metadata')}\n spec={cq.get('spec')}\n status={cq.get('status')}")
    workloads, _ = await w.admin.list(kinds.WORKLOAD, namespace=TEAM)
    for wl in workloads:
        print(f"[diag] workload {wl['metadata']['name']}: {(wl.get('status') or {}).get('conditions')}")
    flavors, _ = await w.admin.list(kinds.RESOURCE_FLAVOR)
    print(f"[diag] flavors: {[f['metadata']['name'] for f in flavors]}")
    print(f"[diag] lease holder: {await lease_holder(w.admin)!r}")
    for identity, proc in w.procs.procs.items():
        print(f"[diag] {identity} rc={proc.poll()} log tail:\n{w.procs.tail(identity)}")


# --- the test ----------------------------------------------------------------------------------------


async def test_the_standby_resumes_a_killed_leaders_drain_from_the_recorded_phase(world: World) -> None:
    w = world
    admin, procs, audit = w.admin, w.procs, w.audit
    try:
        # 1. the undisturbed run: racks, converged, with one controller leading (ctl-a) and a standby
        await mig.publish(admin, RACKS, "racks")
        procs.start("ctl-a", w.kubeconfigs["ctl-a"])

        async def a_leads() -> bool:
            return await lease_holder(admin) == "ctl-a"

        await eventually(a_leads, within=TAKEOVER_S)
        procs.start("ctl-b", w.kubeconfigs["ctl-b"])
        baseline = await eventually(lambda: settled(w, RACKS, "ctl-a"), within=STEP_S)
        print(f"[leader-kill] baseline: {len(baseline)} chain objects")

        # 2. zones (idle: in place), a Workload admitted on its flavor, then racks again under it
        await mig.publish(admin, ZONES, "zones")
        await eventually(lambda: settled(w, ZONES, "ctl-a"), within=STEP_S)

        async def local_queue() -> bool:
            return await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(QUEUE), TEAM) is not None

        await eventually(local_queue, within=STEP_S)
        name = "drained"
        await admin.create(kinds.WORKLOAD, workload(name, TEAM, QUEUE), TEAM)
        wl = await eventually(lambda: mig.admitted(admin, name), within=STEP_S)
        assert mig.assigned_flavor(wl) == {mig.flavor(ZONES.profile)}
        async with sampling(admin) as sampler:
            await mig.publish(admin, RACKS, "racks")  # the same snapshot as the baseline's

            async def draining_evicted() -> dict[str, Any] | None:
                """Phase draining recorded, Kueue has evicted the Workload, which still reserves quota."""
                cq = await mig.queue(admin)
                wl = await admin.get(kinds.WORKLOAD, name, TEAM)
                ready = condition(cq, keys.TOPOLOGY_READY)
                ok = (
                    mig.annotations_of(cq).get(keys.MIGRATION_PHASE) == "draining"
                    and cq["spec"].get("stopPolicy") == "HoldAndDrain"
                    and condition(wl, "Evicted").get("status") == "True"
                    and condition(wl, "QuotaReserved").get("status") == "True"
                    # The leader has caught up with Kueue's report (stopped, one reservation): killed
                    # earlier, its standby would rightly reword this condition from the newer report.
                    and "switching once Kueue reports none" in ready.get("message", "")
                    and ready.get("observedGeneration") == cq["metadata"].get("generation")
                )
                # ... and with the report Kueue has now, not an earlier one: Kueue has nothing left to
                # write on the queues and the leader has nothing queued or running. (CI once killed it
                # a moment before Kueue's last report; the standby then rightly rewrote the condition.)
                current = ok and await kueue_current(admin) and await idle(w, "ctl-a")
                return cq if current else None

            cq = await eventually(draining_evicted, within=STEP_S)
            assert mig.annotations_of(cq).get(keys.MIGRATION_STOP_POLICY) == "None"
            assert mig.queue_flavors(cq) == [mig.flavor(ZONES.profile)], "the old plan is kept while draining"

            # 3. SIGKILL the leader while the reservation is held
            assert await lease_holder(admin) == "ctl-a" and procs.alive("ctl-a")
            killed_at = datetime.datetime.now(datetime.UTC)
            procs.kill("ctl-a")

            async def b_leads() -> bool:
                return await lease_holder(admin) == "ctl-b"

            await eventually(b_leads, within=TAKEOVER_S)
            acquired = lease_acquired(audit, "ctl-b", killed_at)
            assert acquired is not None, "no successful Lease write by ctl-b after the kill"
            # The reservation is still held: the standby keeps draining, from the queue object alone.
            still = await mig.queue(admin)
            assert mig.annotations_of(still).get(keys.MIGRATION_PHASE) == "draining"
            reserved = condition(await admin.get(kinds.WORKLOAD, name, TEAM), "QuotaReserved")
            assert reserved.get("status") == "True"
            # Let the new leader reconcile the draining queue (it polls a draining queue) before release.
            await eventually(lambda: _reconciled(w, "ctl-b"), within=STEP_S)
            released_at = datetime.datetime.now(datetime.UTC)
            await admin.delete(kinds.WORKLOAD, name, TEAM)
            # --- the chain converges to the undisturbed run's objects
            await back_to(w, baseline, "ctl-b")

        # --- the recorded phases only moved forward, the saved policy never changed
        states = [s for _, s in sampler.states]
        print(f"[leader-kill] queue states: {states}")
        phases = [s.phase for s in states]
        collapsed = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
        assert collapsed in ([None, "draining", "switched", None], [None, "draining", None]), collapsed
        assert {s.saved for s in states if s.phase is not None} == {"None"}
        after_kill = [s for t, s in sampler.states if t >= killed_at]
        assert all(s.phase != "draining" or s.flavors == (mig.flavor(ZONES.profile),) for s in after_kill)

        # --- the standby resumed: nothing written to the queue while the reservation was held, then the
        #     switch and the restore exactly once
        def queue_writes(since: datetime.datetime, until: datetime.datetime | None = None) -> list[str]:
            return [
                f"{e.verb} {e.resource_path} code={e.code}"
                for e in audit.writes(f"{USER_AGENT}/ctl-b", since=since)
                if e.resource == "clusterqueues" and e.name == QUEUE and (until is None or e.received < until)
            ]

        held = queue_writes(acquired, released_at)
        assert not held, f"the new leader rewrote the draining queue: {held}"
        after = queue_writes(released_at)
        print(f"[leader-kill] ctl-b queue writes after the release: {after}")
        spec_writes = [x for x in after if "/status" not in x]
        assert len(spec_writes) == 2, f"expected the switch and the restore, got {spec_writes}"
        notes_b = log_events(procs, "ctl-b")
        notes_a = log_events(procs, "ctl-a")
        switched = "switched the flavor plan after the queue drained"
        assert sum(n.startswith(switched) for n in notes_b) == 1, notes_b
        assert not any(n.startswith(switched) for n in notes_a), notes_a
        assert sum(n.startswith("restored the stop policy") for n in notes_b) == 1, notes_b
        # Nobody edited a field of ours: no repair reported (Kueue's own writes are not mistaken for one).
        for identity in ("ctl-a", "ctl-b"):
            log = (procs.logs / f"{identity}.log").read_text(errors="replace")
            assert "repaired fields another field manager changed" not in log, identity

        # --- never two writers: the spans of the two identities' writes do not overlap
        spans = writer_spans(audit, ["ctl-a", "ctl-b"])
        a, b = spans["ctl-a"], spans["ctl-b"]
        print(
            f"[leader-kill] ctl-a wrote {len(a.writes)}x until {a.last.isoformat()}; killed "
            f"{killed_at.isoformat()}; ctl-b acquired {acquired.isoformat()}, wrote {len(b.writes)}x from "
            f"{b.first.isoformat()}"
        )
        assert a.last < acquired <= b.first, "two identities wrote chain objects at once"
        assert all(e.username == w.users["ctl-a"] for e in a.writes)
        assert all(e.username == w.users["ctl-b"] for e in b.writes)
        assert not audit.writes(username=w.users["ctl-a"], since=killed_at)
        assert procs.alive("ctl-b")
    except BaseException:
        await diagnose(w)
        raise


async def _reconciled(w: World, identity: str) -> bool:
    """Has ``identity`` (a standby until it acquired, so its reconciles all came after) run the queue
    controller a few times: every queue once at the takeover, then the draining queue's poll?"""
    done = await w.procs.metric(identity, "controller_runtime_reconcile_total", controller="chain-queues")
    return done >= 4
