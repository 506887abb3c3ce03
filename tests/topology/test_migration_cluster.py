"""A live hierarchy change end to end (reference §6.8; topology-aware-scheduling "Capacity and lifecycle
limits"), on the real control plane with the controller as two leader-elected processes.

Four identical single-T4 Nodes (scenario ``topology-migration``) are described by a configMap
TopologySource, first as region → zone, then as region → zone → rack. The pool's ClusterQueue holds an
admitted Workload on the first hierarchy's flavor, so the change goes through ``HoldAndDrain``: the queue
saves its stop policy, Kueue evicts the Workload, and while the queue is draining the leading controller
process is killed (SIGKILL: no Lease release). The other process must take the Lease and finish from the
queue object alone: switch the flavor plan, restore the stop policy, drop the migration annotations,
keep the queue's name and UID, retire the old flavor and Topology, and admit new work on the new flavor.

The node agent runs in-process (it reports the Nodes' capacity); the controllers are real
``gpustack-worker controller`` subprocesses, each with the controller ServiceAccount's token and its own
identity, with short Lease timings (start-up-only ``GPUSTACK_LEADER_*`` settings) so the successor takes
over promptly. Phase durations are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.controller_cmd import LEASE_NAME, USER_AGENT
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.devcluster.cluster import DevCluster
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.topology.cluster_helpers import (
    apply_object,
    condition,
    eventually,
    snapshot_config_map,
    topology_assignments,
    topology_source,
    workload,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SCENARIO = packaged_scenario("topology-migration")
NODES = tuple(n.name for n in SCENARIO.nodes)
INVENTORY = {"example.com/inventory": "racks"}
REGION, ZONE, RACK = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
P1 = keys.topology_profile([REGION, ZONE, keys.HOSTNAME])
P2 = keys.topology_profile([REGION, ZONE, RACK, keys.HOSTNAME])
QUEUE = "gpustack--nvidia-tesla-t4-linux-amd64"
INTEL = "intel-xeon-platinum-8259cl"


def flavor(profile: str) -> str:
    """The pool's one flavor for a profile (the four Nodes are identical)."""
    return f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{profile}"


SOURCE = "racks"
SNAPSHOT_CM = "rack-inventory"
TEAM = "team-migration"
#: Takeover steps: a fresh CI machine is slower (a Lease expiry, informer lists, Kueue's status).
TAKEOVER_S = 180.0
STEP_S = 120.0
#: Short Lease timings for the two controller processes (start-up-only settings, from the environment).
LEASE_ENV = {
    "GPUSTACK_LEADER_LEASE_SECONDS": "6",
    "GPUSTACK_LEADER_RENEW_DEADLINE_SECONDS": "4",
    "GPUSTACK_LEADER_RETRY_PERIOD_SECONDS": "1",
}


def zones_snapshot() -> dict[str, dict[str, str]]:
    """Region r1; zone za holds gpu-za-*, zone zb holds gpu-zb-*."""
    return {node: {REGION: "r1", ZONE: "za" if "-za-" in node else "zb"} for node in NODES}


def racks_snapshot() -> dict[str, dict[str, str]]:
    """The same tree with one rack per Node (``<zone>-<n>``)."""
    out = {}
    for node, labels in zones_snapshot().items():
        out[node] = {**labels, RACK: f"{labels[ZONE]}-rack{node.rsplit('-', 1)[1]}"}
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Controllers:
    """``gpustack-worker controller`` subprocesses by identity; every one is killed at teardown."""

    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self.kubeconfig = kubeconfig
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, identity: str) -> None:
        cmd = [
            sys.executable, "-m", "gpustack_worker", "controller",
            f"--kubeconfig={self.kubeconfig}", f"--identity={identity}",
            f"--metrics-bind=127.0.0.1:{free_port()}",
            "--webhook-bind=",  # no admission webhook server: two processes would collide on :9443
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
        env.update(LEASE_ENV)
        env["PYTHONPATH"] = str(REPO)
        with (self.logs / f"{identity}.log").open("ab") as err:
            self.procs[identity] = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err
            )

    def kill(self, identity: str) -> None:
        """SIGKILL: the process cannot release its Lease or finish any write."""
        proc = self.procs[identity]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def alive(self, identity: str) -> bool:
        return self.procs[identity].poll() is None

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def tail(self, identity: str, lines: int = 40) -> str:
        path = self.logs / f"{identity}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Harness:
    def __init__(self, cluster: DevCluster, admin: Client, controllers: Controllers) -> None:
        self.cluster = cluster
        self.admin = admin
        self.controllers = controllers
        assert cluster.audit_log is not None
        self.audit = AuditLog(cluster.audit_log)


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone (shadows the session fixture): the pool must hold exactly
    the scenario's Nodes, and other modules' scenarios would add to it. Audited, so the writes of each
    controller process can be told apart."""
    directory = Path(tempfile.mkdtemp(prefix="gpustack-migration-"))
    cluster = DevCluster(
        directory, log=lambda msg: print(f"[migration devcluster] {msg}"), audit_log=directory / "audit.log"
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
async def harness(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, SCENARIO)
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    agent_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.AGENT.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    agent_task = asyncio.create_task(agent.run(stop))
    logs = tmp_path_factory.mktemp("controllers")
    controllers = Controllers(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name), logs)
    print(f"[migration] controller logs in {logs}")
    try:
        yield Harness(devcluster, admin, controllers)
    finally:
        controllers.stop_all()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent_task, 30)
        for client in (agent_client, admin):
            await client.close()


# --- reads -------------------------------------------------------------------------------------------


async def holder(admin: Client) -> str:
    lease = await admin.get(kinds.LEASE, LEASE_NAME, kinds.SYSTEM_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def queue(admin: Client) -> dict[str, Any]:
    cq = await admin.get(kinds.CLUSTER_QUEUE, QUEUE)
    return cq or {}


def queue_flavors(cq: dict[str, Any]) -> list[str]:
    return [
        f["name"] for g in (cq.get("spec") or {}).get("resourceGroups") or () for f in g.get("flavors") or ()
    ]


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


async def profiles(admin: Client) -> dict[str, str]:
    out = {}
    for name in NODES:
        node = await admin.get(kinds.NODE, name)
        out[name] = ((node or {}).get("metadata") or {}).get("labels", {}).get(keys.TOPOLOGY_PROFILE, "")
    return out


async def admitted(admin: Client, name: str) -> dict[str, Any] | None:
    wl = await admin.get(kinds.WORKLOAD, name, TEAM)
    return wl if condition(wl, "Admitted").get("status") == "True" else None


def assigned_flavor(wl: dict[str, Any]) -> set[str]:
    return {
        f
        for psa in wl["status"]["admission"]["podSetAssignments"]
        for f in (psa.get("flavors") or {}).values()
    }


class Clock:
    """Prints how long each phase took (information only)."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()

    def phase(self, what: str) -> None:
        now = time.monotonic()
        print(f"[migration] {what}: {now - self.last:.1f}s (total {now - self.start:.1f}s)")
        self.last = now


async def diagnose(harness: Harness) -> None:
    """Print what a failed step needs to be understood: Node topology labels, the source, NodeFeatures,
    Topologies, flavors, the queue, the Lease and each controller's log tail."""
    admin = harness.admin
    for name in NODES:
        node = await admin.get(kinds.NODE, name)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        print(f"[diag] node {name}: { {k: v for k, v in labels.items() if k.startswith('topology.')} }")
    src = await admin.get(kinds.TOPOLOGY_SOURCE, SOURCE)
    print(f"[diag] source spec={(src or {}).get('spec')} status={(src or {}).get('status')}")
    features, _ = await admin.list(kinds.NODE_FEATURE, namespace=kinds.SYSTEM_NAMESPACE)
    for nf in features:
        print(f"[diag] nodefeature {nf['metadata']['name']}: {nf['metadata'].get('labels')} {nf.get('spec')}")
    topologies, _ = await admin.list(kinds.TOPOLOGY)
    print(f"[diag] topologies: {[t['metadata']['name'] for t in topologies]}")
    flavors, _ = await admin.list(kinds.RESOURCE_FLAVOR)
    print(f"[diag] flavors: {[f['metadata']['name'] for f in flavors]}")
    cq = await queue(admin)
    print(f"[diag] queue meta={cq.get('metadata')}\n spec={cq.get('spec')}\n status={cq.get('status')}")
    workloads, _ = await admin.list(kinds.WORKLOAD, namespace=TEAM)
    for wl in workloads:
        print(f"[diag] workload {wl['metadata']['name']}: {(wl.get('status') or {}).get('conditions')}")
    print(f"[diag] lease holder: {await holder(admin)!r}")
    for identity, proc in harness.controllers.procs.items():
        print(f"[diag] {identity} rc={proc.poll()} log tail:\n{harness.controllers.tail(identity)}")


# --- the test ----------------------------------------------------------------------------------------


async def converged_on(admin: Client, profile: str) -> dict[str, Any] | None:
    """The queue on ``profile``'s flavor alone, Ready, with no migration in progress."""
    cq = await queue(admin)
    ann = annotations(cq)
    ok = (
        queue_flavors(cq) == [flavor(profile)]
        and condition(cq, keys.TOPOLOGY_READY).get("status") == "True"
        and condition(cq, "Active").get("status") == "True"
        and keys.MIGRATION_PHASE not in ann
        and keys.MIGRATION_STOP_POLICY not in ann
    )
    return cq if ok else None


async def test_region_zone_rack_change_drains_and_survives_a_killed_leader(harness: Harness) -> None:
    admin, ctl = harness.admin, harness.controllers
    clock = Clock()
    ids = ("c1", "c2")
    try:
        # 1. region → zone, two controller processes, one of them leads.
        await admin.create(
            kinds.CONFIG_MAP,
            snapshot_config_map(SNAPSHOT_CM, "zones-1", zones_snapshot()),
            kinds.SYSTEM_NAMESPACE,
        )
        await admin.create(
            kinds.TOPOLOGY_SOURCE,
            topology_source(SOURCE, [REGION, ZONE], config_map=SNAPSHOT_CM, match_labels=INVENTORY),
        )
        for identity in ids:
            ctl.start(identity)

        async def leader() -> str:
            return h if (h := await holder(admin)) in ids else ""

        first = await eventually(leader, within=TAKEOVER_S)
        clock.phase(f"leader elected ({first})")

        async def source_ready() -> bool:
            src = await admin.get(kinds.TOPOLOGY_SOURCE, SOURCE)
            return condition(src, "Ready").get("status") == "True"

        await eventually(source_ready, within=STEP_S)

        async def on_p1() -> bool:
            return set((await profiles(admin)).values()) == {P1}

        await eventually(on_p1, within=STEP_S)
        assert await admin.get(kinds.TOPOLOGY, keys.topology_name(P1)) is not None
        cq = await eventually(lambda: converged_on(admin, P1), within=STEP_S)
        uid, policy_before = cq["metadata"]["uid"], cq["spec"].get("stopPolicy")
        assert policy_before == "None"
        clock.phase("hierarchy P1 (region, zone) converged")

        async def local_queue() -> bool:
            return await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(QUEUE), TEAM) is not None

        await eventually(local_queue, within=STEP_S)
        await admin.create(kinds.WORKLOAD, workload("before", TEAM, QUEUE, required_level=ZONE), TEAM)
        wl = await eventually(lambda: admitted(admin, "before"), within=STEP_S)
        assert assigned_flavor(wl) == {flavor(P1)}
        levels, domains = topology_assignments(wl)["main"]
        assert sum(d.pods for d in domains) == 1
        assert levels[-1] == keys.HOSTNAME and domains[0].values[-1] in NODES
        clock.phase("Workload admitted on P1")

        # 2. region → zone → rack: the source first (the racks snapshot declares a level the old source
        # does not), then the snapshot.
        src = await admin.get(kinds.TOPOLOGY_SOURCE, SOURCE)
        assert src is not None
        src["spec"]["levels"] = [REGION, ZONE, RACK]
        await admin.replace(kinds.TOPOLOGY_SOURCE, src)
        await apply_object(
            admin, kinds.CONFIG_MAP, snapshot_config_map(SNAPSHOT_CM, "racks-1", racks_snapshot())
        )

        async def on_p2() -> bool:
            return set((await profiles(admin)).values()) == {P2}

        await eventually(on_p2, within=STEP_S)
        assert await admin.get(kinds.TOPOLOGY, keys.topology_name(P2)) is not None
        assert await admin.get(kinds.RESOURCE_FLAVOR, flavor(P2)) is not None
        clock.phase("Nodes on P2, its Topology and flavor exist")

        async def draining() -> dict[str, Any] | None:
            cq = await queue(admin)
            ready = condition(cq, keys.TOPOLOGY_READY)
            ok = (
                annotations(cq).get(keys.MIGRATION_PHASE) == "draining"
                and cq["spec"].get("stopPolicy") == "HoldAndDrain"
                and (ready.get("status"), ready.get("reason")) == ("False", "Migrating")
            )
            return cq if ok else None

        cq = await eventually(draining, within=STEP_S)
        assert cq["metadata"]["uid"] == uid
        assert annotations(cq).get(keys.MIGRATION_STOP_POLICY) == "None"
        clock.phase("queue draining")

        async def evicted() -> dict[str, Any] | None:
            wl = await admin.get(kinds.WORKLOAD, "before", TEAM)
            return wl if condition(wl, "Evicted").get("status") == "True" else None

        wl = await eventually(evicted, within=STEP_S)
        print(f"[migration] eviction: {condition(wl, 'Evicted')}")
        clock.phase("Workload evicted by Kueue")

        # 3. Kill the leader while the queue drains.
        cq = await draining()
        assert cq is not None, "the queue left draining before the leader could be killed"
        old = await holder(admin)
        assert old in ids
        new = next(i for i in ids if i != old)
        killed_at = datetime.datetime.now(datetime.UTC)
        ctl.kill(old)
        clock.phase(f"leader {old} killed")

        # A standalone Workload has no job owner to stop, so Kueue leaves its reservation in place
        # after the eviction (observed: QuotaReserved stays True); act as the owner would and delete it.
        wl = await admin.get(kinds.WORKLOAD, "before", TEAM)
        print(f"[migration] evicted Workload's QuotaReserved: {condition(wl, 'QuotaReserved')}")
        await admin.delete(kinds.WORKLOAD, "before", TEAM)

        # 4. The other process takes over and finishes the migration.
        async def successor() -> bool:
            return await holder(admin) == new

        await eventually(successor, within=TAKEOVER_S)
        clock.phase(f"{new} holds the Lease")
        cq = await eventually(lambda: converged_on(admin, P2), within=TAKEOVER_S)
        clock.phase("queue switched to P2 and restored")
        assert cq["metadata"]["name"] == QUEUE and cq["metadata"]["uid"] == uid
        assert cq["spec"].get("stopPolicy") == policy_before
        queue_writes = [
            e
            for e in harness.audit.writes(f"{USER_AGENT}/{new}", since=killed_at)
            if e.resource == "clusterqueues" and e.name == QUEUE
        ]
        assert queue_writes, "the successor finished the migration without writing the queue"

        async def retired() -> bool:
            gone_flavor = await admin.get(kinds.RESOURCE_FLAVOR, flavor(P1)) is None
            gone_topology = await admin.get(kinds.TOPOLOGY, keys.topology_name(P1)) is None
            return gone_flavor and gone_topology

        await eventually(retired, within=TAKEOVER_S)
        clock.phase("P1 flavor and Topology retired")

        await admin.create(kinds.WORKLOAD, workload("after", TEAM, QUEUE, required_level=RACK), TEAM)
        wl = await eventually(lambda: admitted(admin, "after"), within=STEP_S)
        assert assigned_flavor(wl) == {flavor(P2)}
        levels, domains = topology_assignments(wl)["main"]
        assert sum(d.pods for d in domains) == 1 and domains[0].values[-1] in NODES
        clock.phase("new Workload admitted on P2")
        assert ctl.alive(new)
    except BaseException:
        await diagnose(harness)
        raise
    finally:
        for identity in ids:
            if identity in ctl.procs and not ctl.alive(identity):
                print(f"[migration] {identity} exited {ctl.procs[identity].returncode}")
