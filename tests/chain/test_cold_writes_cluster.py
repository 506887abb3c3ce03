"""A cold fleet on the real control plane writes each chain object once (issue 18).

200 Nodes from the chain benchmark's fleet generator (``bench/chain_bench.py``: every shape of the
5,000-Node fleet, what stages 1-3 leave on each Node, ``Devices`` with ledgers), none carrying its
topology profile yet, as at a first install. The real ``gpustack-worker controller`` starts cold as the
controller ServiceAccount and labels every Node's profile while the chain waits for them
(``chain-settle-seconds``, default). Once the chain has converged (every object as the chain's own pure
functions plan it for the profiled fleet) and the controller is idle, the API server's audit log must
show, for the controller's User-Agent:

- one profile label write per Node;
- per chain kind, exactly one write per object desired: ResourceFlavors, ClusterQueues, their
  ``TopologyReady`` status, InstanceType status, the Topology, the LocalQueues, the two AdmissionChecks
  and the InstanceTypes' create and finalizer (an object created a moment ago and not yet in the cache is
  not written again: the Applier's own-create memory).

Counts, not durations: they do not depend on the machine's speed. Before the settle gate the same fleet
rewrote its flavors, queue status and InstanceType status with every second of labelling.
"""

from __future__ import annotations

import collections
import datetime as dt
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest

from bench import chain_bench
from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.devcluster.cluster import DevCluster
from gpustack_worker.runtime.client import Client
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster

N_NODES = 200
#: How long convergence may take before the test gives up (a wait, never asserted as a duration).
CONVERGE_LIMIT_S = 600.0


@pytest.fixture(scope="module")
def cold_cluster() -> Iterator[DevCluster]:
    """A control plane of its own, audited, without nfd-master (the Nodes are created labelled, as the
    benchmark creates them)."""
    directory = Path(tempfile.mkdtemp(prefix="gpustack-cold-writes-"))
    cluster = DevCluster(
        directory,
        with_nfd=False,
        audit_log=directory / "audit.log",
        # The bodies of the chain's writes, so a repeated write shows what changed between the two.
        audit_request_bodies=(kinds.CLUSTER_QUEUE.group, kinds.INSTANCE_TYPE.group),
        log=lambda msg: print(f"[cold-writes devcluster] {msg}"),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class ColdRun:
    expected: chain_bench.Expected
    #: Audit-log writes by the controller (Lease renewals left out), by resource path.
    by_path: collections.Counter[str]
    by_verb: collections.Counter[tuple[str, str]]
    #: Every counted write, for a failure's message.
    writes: tuple[AuditEvent, ...] = ()

    def repeated(self, resource_path: str) -> list[str]:
        """The writes of ``resource_path``'s objects written more than once, in order."""
        seen = collections.Counter(
            (e.namespace, e.name) for e in self.writes if e.resource_path == resource_path
        )
        return [
            f"{e.received.time()} {e.verb} {e.namespace}/{e.name} code={e.code} "
            f"body={_compact(e.request_object)}"
            for e in self.writes
            if e.resource_path == resource_path and seen[e.namespace, e.name] > 1
        ]


def _compact(body: object) -> str:
    """A request body in one line, without the parts every write of an object shares verbatim."""
    if not isinstance(body, dict):
        return repr(body)
    shown = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    return orjson.dumps(shown, option=orjson.OPT_SORT_KEYS).decode()


@pytest.fixture(scope="module")
async def cold_run(cold_cluster: DevCluster) -> ColdRun:
    cluster = cold_cluster
    objs = [chain_bench.stage3(spec) for spec in chain_bench.fleet(N_NODES, seed=0)]
    exp = chain_bench.expected_chain(objs, WorkerSettings())
    assert exp.unprofiled == N_NODES  # every Node waits for its profile: a first install
    admin = await Client.connect(str(cluster.kubeconfig))
    proc = None
    try:
        for ns in chain_bench.TEAM_NAMESPACES:
            await admin.create(
                kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
        await chain_bench.create_fleet(admin, objs)
        exp.namespaces = chain_bench.local_queue_namespaces((await admin.list(kinds.NAMESPACE))[0])
        started = dt.datetime.now(dt.UTC)
        proc = chain_bench.start_controller(cluster, cluster.service_account_kubeconfig(rbac.CONTROLLER.name))
        assert proc.pid is not None
        left: dict[str, int] = {}

        async def converged() -> bool:
            nonlocal left
            if not proc.alive():
                pytest.fail(f"the controller exited:\n{proc.log_tail()}")
            left = await chain_bench.missing(admin, exp)
            return not left

        try:
            await eventually(converged, within=CONVERGE_LIMIT_S, every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"not converged: {left}") from exc
        await chain_bench.wait_idle(proc.pid)
    finally:
        if proc is not None:
            proc.stop()
        await admin.close()
    writes = [
        e
        for e in AuditLog(cluster.audit_log).writes(chain_bench.CONTROLLER_UA, started)
        if not chain_bench.is_lease(e)
    ]
    run = ColdRun(
        exp,
        collections.Counter(e.resource_path for e in writes),
        collections.Counter((e.resource_path, e.verb) for e in writes),
        tuple(writes),
    )
    print(f"writes by the controller: {dict(sorted(run.by_verb.items()))}")
    print(f"objects desired: {exp.desired_writes()}")
    return run


def test_one_write_per_node_profile_flavor_queue_and_status(cold_run: ColdRun) -> None:
    exp, by_path = cold_run.expected, cold_run.by_path
    types = len(exp.types)
    assert by_path["nodes"] == N_NODES  # one profile label per Node
    wanted = {
        "resourceflavors": len(exp.flavors),
        "clusterqueues": types,
        "clusterqueues/status": types,
        "instancetypes/status": types,
    }
    assert {path: by_path[path] for path in wanted} == wanted, "\n".join(
        line for p in wanted for line in cold_run.repeated(p)
    )


def test_one_write_per_topology(cold_run: ColdRun) -> None:
    # node-profile-workers reconciles ask for the Topology at once: one creates it (topology.steps).
    assert cold_run.by_path["topologies"] == 1


def test_one_write_per_local_queue_check_and_authored_type(cold_run: ColdRun) -> None:
    exp, by_path = cold_run.expected, cold_run.by_path
    types = len(exp.types)
    assert by_path["localqueues"] == len(exp.local_queues), "\n".join(cold_run.repeated("localqueues"))
    assert by_path["admissionchecks"] == 2, "\n".join(cold_run.repeated("admissionchecks"))
    # Each InstanceType once created by the author and once given its finalizer; nothing else.
    assert cold_run.by_verb["instancetypes", "create"] == types
    assert by_path["instancetypes"] == 2 * types
