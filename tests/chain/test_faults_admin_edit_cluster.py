"""Fault: an admin editing a field the chain owns — repaired and reported, once (issue 17).

The real ``gpustack-worker controller`` (one process, its own ServiceAccount and User-Agent) and the node
agent run the ``topology-migration`` scenario (four single-T4 Nodes) until the chain has converged. Then:

- an admin takes a field the chain owns on the pool's ClusterQueue (``spec.preemption.withinClusterQueue``,
  a kubectl-style forced server-side apply under another field manager) and one on its ResourceFlavor (a
  ``note.gpustack.ai/`` annotation, a plain merge patch like ``kubectl annotate --overwrite``): the chain
  writes each back exactly once (audit log), posts exactly one ``FieldsRepaired`` Warning Event and one
  log line per object, and the following reconciles of both objects write nothing;
- an admin adds labels of their own to both objects (fields the chain does not own): left alone, no
  write, although both objects are reconciled again.

"The following reconciles" are counted from the process's ``controller_runtime_reconcile_total``, never
waited for by time. No duration is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.chain.steps import REASON_FIELDS_REPAIRED
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.chain.controller_procs import ControllerProcs, audited_cluster, controller_account, lease_holder
from tests.chain.fault_kit import accepted_writes, kueue_current, refused_writes
from tests.kit import kueue
from tests.stack import condition, eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

P0 = keys.topology_profile([keys.HOSTNAME])
QUEUE = "gpustack--nvidia-tesla-t4-linux-amd64"
FLAVOR = f"gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d-{P0}"
NOTE = f"{keys.NOTE_PREFIX}product"
ADMIN_MANAGER = "kubectl"
ADMIN_LABEL = "example.com/team"
IDENTITY = "ctl-a"
STEP_S = 120.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone (the pool must hold exactly the scenario's Nodes)."""
    with audited_cluster("faults-admin-edit") as cluster:
        yield cluster


@dataclass
class World:
    admin: Client
    audit: AuditLog
    procs: ControllerProcs
    #: The controller's user (its own ServiceAccount).
    user: str


@pytest.fixture(scope="module")
async def world(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent="faults-admin")
    await apply_scenario(admin, packaged_scenario("topology-migration"))
    agent_client = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.AGENT.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    agent_task = asyncio.create_task(agent.run(stop))
    logs = tmp_path_factory.mktemp("controller")
    print(f"[admin-edit] controller log in {logs}")
    kubeconfig, user = await controller_account(devcluster, admin, IDENTITY)
    procs = ControllerProcs(logs)
    procs.start(IDENTITY, kubeconfig)
    assert devcluster.audit_log is not None
    try:
        yield World(admin, AuditLog(devcluster.audit_log), procs, user)
    finally:
        procs.stop_all()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent_task, 30)
        for client in (agent_client, admin):
            await client.close()


# --- reads -------------------------------------------------------------------------------------------


def _flavors(cq: dict[str, Any] | None) -> list[str]:
    groups = ((cq or {}).get("spec") or {}).get("resourceGroups") or ()
    return [f["name"] for g in groups for f in g.get("flavors") or ()]


async def converged(w: World) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The queue on the pool's one flavor, TopologyReady and Active for its generation, Kueue's report on
    every queue current (:func:`~tests.chain.fault_kit.kueue_current`: it has nothing left to write), and
    the controller's work queues empty with no reconcile running, before and after the queue and the
    flavor are read again; the queue and the flavor."""
    admin = w.admin
    cq = await admin.get(kinds.CLUSTER_QUEUE, QUEUE)
    rf = await admin.get(kinds.RESOURCE_FLAVOR, FLAVOR)
    if cq is None or rf is None:
        return None
    generation = cq["metadata"].get("generation")
    ready = condition(cq, keys.TOPOLOGY_READY)
    ok = (
        _flavors(cq) == [FLAVOR]
        and ready.get("status") == "True"
        and ready.get("observedGeneration") == generation
        and condition(cq, "Active").get("observedGeneration") == generation
        and NOTE in (rf["metadata"].get("annotations") or {})
    )
    if not ok or not await kueue_current(admin) or not await idle(w):
        return None
    cq, rf = await admin.get(kinds.CLUSTER_QUEUE, QUEUE), await admin.get(kinds.RESOURCE_FLAVOR, FLAVOR)
    return (cq, rf) if cq is not None and rf is not None and await idle(w) else None


async def idle(w: World) -> bool:
    """The controller process has no key queued and no reconcile running."""
    depth = await w.procs.metric(IDENTITY, "workqueue_depth")
    return depth == 0 and await w.procs.metric(IDENTITY, "controller_runtime_active_workers") == 0


def spec_writes(w: World, since: datetime.datetime, *, accepted: bool = True) -> dict[str, int]:
    """The controller's writes of chain objects since ``since`` (the fault kit's count per object; status
    subresources apart), by ``<resource path>/<name>``: accepted (2xx) or refused."""
    count = accepted_writes if accepted else refused_writes
    return {
        f"{path}/{name}": n
        for (_user, path, _ns, name), n in count(w.audit, [w.user], since).items()
        if "/" not in path
    }


async def repaired_events(admin: Client, kind: str, name: str) -> list[dict[str, Any]]:
    """The chain's ``FieldsRepaired`` Events about one cluster-scoped object."""
    events, _ = await admin.list(kinds.EVENT, namespace="default")
    return [
        e
        for e in events
        if e.get("reason") == REASON_FIELDS_REPAIRED
        and (e.get("regarding") or {}).get("kind") == kind
        and (e.get("regarding") or {}).get("name") == name
    ]


def repair_lines(w: World, name: str) -> list[dict[str, Any]]:
    path = w.procs.logs / f"{IDENTITY}.log"
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            record = orjson.loads(line)
            if (
                isinstance(record, dict)
                and record.get("event") == "repaired fields another field manager changed"
                and record.get("name") == name
            ):
                out.append(record)
    return out


async def reconciles(w: World, controller: str) -> float:
    return await w.procs.metric(IDENTITY, "controller_runtime_reconcile_total", controller=controller)


async def reconciled_again(w: World, controller: str, before: float, times: int = 1) -> None:
    """Wait until ``controller`` has finished ``times`` more reconciles than ``before``."""

    async def more() -> bool:
        return await reconciles(w, controller) >= before + times

    await eventually(more, within=STEP_S)


async def diagnose(w: World) -> None:
    for resource, name in ((kinds.CLUSTER_QUEUE, QUEUE), (kinds.RESOURCE_FLAVOR, FLAVOR)):
        obj = await w.admin.get(resource, name) or {}
        print(f"[diag] {resource.kind} {name}: meta={obj.get('metadata')} spec={obj.get('spec')}")
    print(f"[diag] lease holder {await lease_holder(w.admin)!r}; log tail:\n{w.procs.tail(IDENTITY)}")


# --- the test ----------------------------------------------------------------------------------------


async def test_an_admin_edit_of_a_chain_field_is_repaired_and_reported_once(world: World) -> None:
    w, admin = world, world.admin
    try:
        cq, rf = await eventually(lambda: converged(w), within=STEP_S)
        assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
        note = rf["metadata"]["annotations"][NOTE]
        queue_runs = await reconciles(w, "chain-queues")
        flavor_runs = await reconciles(w, "chain-flavors")
        edited_at = datetime.datetime.now(datetime.UTC)

        # 1. the admin takes a chain field on each object
        await admin.apply(
            kinds.CLUSTER_QUEUE,
            kueue.cluster_queue(QUEUE, {"preemption": {"withinClusterQueue": "LowerPriority"}}),
            field_manager=ADMIN_MANAGER,
            force=True,
        )
        await admin.patch(
            kinds.RESOURCE_FLAVOR, FLAVOR, {"metadata": {"annotations": {NOTE: "edited by an admin"}}}
        )

        async def repaired() -> bool:
            cq = await admin.get(kinds.CLUSTER_QUEUE, QUEUE)
            rf = await admin.get(kinds.RESOURCE_FLAVOR, FLAVOR)
            return (
                cq is not None
                and rf is not None
                and cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
                and rf["metadata"]["annotations"].get(NOTE) == note
            )

        await eventually(repaired, within=STEP_S)

        async def reported() -> bool:
            return bool(await repaired_events(admin, "ClusterQueue", QUEUE)) and bool(
                await repaired_events(admin, "ResourceFlavor", FLAVOR)
            )

        await eventually(reported, within=STEP_S)

        # 2. the admin's own labels on both objects: not the chain's, left alone
        labelled_at = datetime.datetime.now(datetime.UTC)
        queue_runs_2 = await reconciles(w, "chain-queues")
        flavor_runs_2 = await reconciles(w, "chain-flavors")
        for resource, name in ((kinds.CLUSTER_QUEUE, QUEUE), (kinds.RESOURCE_FLAVOR, FLAVOR)):
            await admin.patch(resource, name, {"metadata": {"labels": {ADMIN_LABEL: "ml"}}})
        # Both objects are reconciled again after the labels (and after the repairs before them).
        await reconciled_again(w, "chain-queues", queue_runs_2)
        await reconciled_again(w, "chain-flavors", flavor_runs_2)
        assert await reconciles(w, "chain-queues") >= queue_runs + 2
        assert await reconciles(w, "chain-flavors") >= flavor_runs + 2

        # --- the audit log: one repair write per object, none refused, nothing for the admin's labels
        writes = spec_writes(w, edited_at)
        print(f"[admin-edit] chain writes since the edit: {writes}")
        assert writes == {f"clusterqueues/{QUEUE}": 1, f"resourceflavors/{FLAVOR}": 1}, writes
        assert spec_writes(w, edited_at, accepted=False) == {}, "a refused write: the repair looped"
        assert spec_writes(w, labelled_at) == {}
        cq = await admin.get(kinds.CLUSTER_QUEUE, QUEUE)
        rf = await admin.get(kinds.RESOURCE_FLAVOR, FLAVOR)
        assert cq is not None and cq["metadata"]["labels"].get(ADMIN_LABEL) == "ml"
        assert rf is not None and rf["metadata"]["labels"].get(ADMIN_LABEL) == "ml"
        assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"

        # --- reported once: one Event (no repeat in its series) and one log line per object
        for kind, name, field in (
            ("ClusterQueue", QUEUE, "spec.preemption.withinClusterQueue"),
            ("ResourceFlavor", FLAVOR, f"metadata.annotations.{NOTE}"),
        ):
            events = await repaired_events(admin, kind, name)
            assert len(events) == 1, events
            assert events[0]["type"] == "Warning" and not events[0].get("series"), events[0]
            assert field in events[0]["note"], events[0]["note"]
            lines = repair_lines(w, name)
            assert [r.get("fields") for r in lines] == [[field]], lines
    except BaseException:
        await diagnose(w)
        raise
