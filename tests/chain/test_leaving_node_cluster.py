"""A node leaving evicts only what ran on it (issue 27, class 1), on the real control plane.

The chain-4 scenario: the T4 pool has a 1-card flavor (t4-a) and a 4-card flavor (t4-b). Real Kueue admits a
Workload on each, so its status reports reservations on both flavors. Then t4-b leaves (its Node is
deleted): the flavor controller deletes the 4-card flavor, Kueue keeps it (``resource-in-use``) while the
queue references it, and the queue must drop it in place. Shown from the server's side:

- the queue is never written ``HoldAndDrain`` (every write to it is in kube-apiserver's audit log with its
  body) and never carries a migration phase;
- the 4-card flavor leaves the groups and Kueue then deletes it;
- the Workload on the 1-card flavor stays admitted with the same admission, no ``Evicted`` condition and no
  eviction Event;
- the Workload on the 4-card flavor is evicted by Kueue (TAS node failure handling: ``NodeFailures``).

The second test repeats it while the plan is refused (a new node whose flavor's name a foreign flavor
holds): the refusal keeps the last complete plan, minus the flavor whose node left.

Every wait is for a condition with a generous deadline; negative claims are checked after the positive
signals that the system had its chance (the flavor deleted, the eviction recorded, Kueue's status caught
up with the queue's last generation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import parse_text
from tests.chain.controller_procs import audited_cluster
from tests.chain.test_queue_edges_cluster import (
    EXTRA,
    EXTRA_NODE,
    LARGE,
    SMALL,
    STEP_S,
    T4,
    TEAM,
    P,
    _admitted,
    _annotations,
    _assigned,
    _diagnose,
    _eviction_events,
    _flavors,
    _ready,
)
from tests.kit import kueue
from tests.stack import Stack, condition, eventually, running_stack
from tests.topology.cluster_helpers import workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

LEAVING_NODE = "t4-b"
#: A node whose flavor cannot be written (a foreign flavor holds its name): the T4 plan is refused.
BLOCKED_NODE = EXTRA_NODE.replace("t4-c", "t4-d").replace("count: 2", "count: 3")
BLOCKED = EXTRA.replace("-2d-", "-3d-")
assert BLOCKED != EXTRA and BLOCKED.endswith(P)


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane of this module's own: its audit log holds the request bodies of Kueue-group writes
    (the session's records none), so every write to the queue can be read back for its stop policy. Read
    from its start, the log holds this module's writes only (and the T4 pool exactly the scenario's
    nodes)."""
    why = "request bodies of Kueue-group writes in the audit log: every write to the T4 queue is read back"
    with audited_cluster("leaving-node", why=why, request_bodies=(kinds.CLUSTER_QUEUE.group,)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Stack]:
    async with running_stack(devcluster, "chain-4", namespaces=(TEAM,)) as stack:
        yield stack


def _reserved(cq: dict[str, Any] | None, flavor: str) -> bool:
    """Kueue reports a non-zero reservation and usage on ``flavor``."""
    status = (cq or {}).get("status") or {}
    return all(
        any(
            f.get("name") == flavor
            and any(str(r.get("total", "0")) not in ("0", "") for r in f.get("resources") or ())
            for f in status.get(field) or ()
        )
        for field in ("flavorsReservation", "flavorsUsage")
    )


async def _reserved_on_both(admin: Client) -> dict[str, Any] | None:
    """Kueue's status of the queue's current generation: two reserving Workloads, one on each flavor."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    generation = ((cq or {}).get("metadata") or {}).get("generation")
    ok = (
        cq is not None
        and condition(cq, "Active").get("observedGeneration") == generation
        and int(cq["status"].get("reservingWorkloads") or 0) == 2
        and _reserved(cq, SMALL)
        and _reserved(cq, LARGE)
    )
    return cq if ok else None


def _queue_writes(cluster: DevCluster) -> list[tuple[str, str, Any]]:
    """Every write to the T4 queue (any user, any verb, status included): (user, verb/subresource, body)."""
    assert cluster.audit_log is not None
    return [
        (e.username, f"{e.verb}/{e.subresource}" if e.subresource else e.verb, e.request_object)
        for e in AuditLog(cluster.audit_log).writes()
        if e.resource == "clusterqueues" and e.name == T4
    ]


def _stop_policy(body: Any) -> str | None:
    spec = body.get("spec") if isinstance(body, dict) else None
    return spec.get("stopPolicy") if isinstance(spec, dict) else None


async def test_a_leaving_node_evicts_only_what_ran_on_it(running: Stack, devcluster: DevCluster) -> None:
    admin = running.admin
    small, large = "on-small", "on-large"
    try:
        await eventually(lambda: _ready(admin, [SMALL, LARGE]), within=STEP_S)
        # Kueue packs the smallest flavor first: one card lands on t4-a, two cards only fit t4-b.
        await admin.create(kinds.WORKLOAD, workload(small, TEAM, T4, gpus=1), TEAM)
        on_small = await eventually(lambda: _admitted(admin, small), within=STEP_S)
        assert _assigned(on_small) == {SMALL}
        await admin.create(kinds.WORKLOAD, workload(large, TEAM, T4, gpus=2), TEAM)
        on_large = await eventually(lambda: _admitted(admin, large), within=STEP_S)
        assert _assigned(on_large) == {LARGE}
        admission = on_small["status"]["admission"]
        await eventually(lambda: _reserved_on_both(admin), within=STEP_S)

        # The 4-card node leaves.
        await admin.delete(kinds.NODE, LEAVING_NODE)

        # The queue drops its flavor in place, and Kueue, no longer held by a reference, deletes it.
        async def dropped_and_deleted() -> dict[str, Any] | None:
            cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
            gone = await admin.get(kinds.RESOURCE_FLAVOR, LARGE) is None
            return cq if gone and _flavors(cq) == [SMALL] else None

        await eventually(dropped_and_deleted, within=STEP_S)

        # Kueue evicts the Workload that ran on the node: its node failed and has no replacement.
        async def evicted() -> dict[str, Any] | None:
            wl = await admin.get(kinds.WORKLOAD, large, TEAM)
            return wl if condition(wl, "Evicted").get("status") == "True" else None

        gone = await eventually(evicted, within=STEP_S)
        print(f"[leaving-node] evicted: {condition(gone, 'Evicted')}")
        assert condition(gone, "Evicted").get("reason") == "NodeFailures", condition(gone, "Evicted")

        # Kueue has reported the queue's last generation: admitting on the surviving flavor, unheld.
        settled = await eventually(lambda: _ready(admin, [SMALL]), within=STEP_S)
        assert keys.MIGRATION_PHASE not in _annotations(settled)

        # The Workload on the surviving flavor was never touched.
        now = await admin.get(kinds.WORKLOAD, small, TEAM)
        assert now is not None and condition(now, "Admitted").get("status") == "True"
        assert now["status"]["admission"] == admission, "the Workload on the surviving flavor was re-admitted"
        assert not condition(now, "Evicted"), f"evicted: {condition(now, 'Evicted')}"
        assert not await _eviction_events(admin, small)

        # Never written HoldAndDrain, by anyone; the write that dropped the flavor is in the log.
        writes = _queue_writes(devcluster)
        held = [(user, verb) for user, verb, body in writes if _stop_policy(body) == "HoldAndDrain"]
        assert not held, f"the queue was written HoldAndDrain: {held}"
        drops = [
            body
            for _, verb, body in writes
            if verb == "patch" and isinstance(body, dict) and _flavors(body) == [SMALL]
        ]
        assert drops, f"no write dropped {LARGE}: {[(u, v) for u, v, _ in writes]}"
        assert all(_stop_policy(body) == "None" for body in drops), drops
        print(f"[leaving-node] {len(writes)} writes to the queue, {len(drops)} with the flavor dropped")
    except BaseException:
        await _diagnose(admin, large)
        raise
    finally:
        for name in (small, large):
            await admin.delete(kinds.WORKLOAD, name, TEAM)


async def _refused_with(admin: Client, flavors: list[str]) -> dict[str, Any] | None:
    """The T4 queue refused (NonConservedQuota) on exactly ``flavors``, unheld, Kueue caught up."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    generation = ((cq or {}).get("metadata") or {}).get("generation")
    ready = condition(cq, keys.TOPOLOGY_READY)
    ok = (
        cq is not None
        and _flavors(cq) == flavors
        and cq["spec"].get("stopPolicy") == "None"
        and ready.get("reason") == "NonConservedQuota"
        and ready.get("observedGeneration") == generation
        and condition(cq, "Active").get("observedGeneration") == generation
        and keys.MIGRATION_PHASE not in _annotations(cq)
    )
    return cq if ok else None


async def test_a_leaving_node_during_a_refusal_evicts_only_what_ran_on_it(
    running: Stack, devcluster: DevCluster
) -> None:
    admin = running.admin
    small, extra = "refused-on-small", "refused-on-extra"
    foreign = kueue.resource_flavor(
        BLOCKED,
        {"nodeLabels": {"example.com/foreign": "true"}, "topologyName": "gpustack-foreign"},
        labels={keys.RESOURCE_TYPE: keys.TYPE_NODES},
    )
    try:
        # The pool after the first test (t4-a), plus t4-c: a 1-card and a 2-card flavor, both reserved.
        await apply_scenario(admin, parse_text(EXTRA_NODE, "t4-c"))
        await eventually(lambda: _ready(admin, [SMALL, EXTRA]), within=STEP_S)
        await admin.create(kinds.WORKLOAD, workload(small, TEAM, T4, gpus=1), TEAM)
        on_small = await eventually(lambda: _admitted(admin, small), within=STEP_S)
        assert _assigned(on_small) == {SMALL}
        await admin.create(kinds.WORKLOAD, workload(extra, TEAM, T4, gpus=2), TEAM)
        on_extra = await eventually(lambda: _admitted(admin, extra), within=STEP_S)
        assert _assigned(on_extra) == {EXTRA}
        admission = on_small["status"]["admission"]

        # The plan is refused: t4-d joins, its flavor's name held by a foreign flavor.
        await admin.create(kinds.RESOURCE_FLAVOR, foreign)
        await apply_scenario(admin, parse_text(BLOCKED_NODE, "t4-d"))
        await eventually(lambda: _refused_with(admin, [SMALL, EXTRA]), within=STEP_S)

        # t4-c leaves while the plan stays refused.
        await admin.delete(kinds.NODE, "t4-c")

        async def dropped_and_deleted() -> dict[str, Any] | None:
            gone = await admin.get(kinds.RESOURCE_FLAVOR, EXTRA) is None
            return await _refused_with(admin, [SMALL]) if gone else None

        await eventually(dropped_and_deleted, within=STEP_S)

        async def evicted() -> dict[str, Any] | None:
            wl = await admin.get(kinds.WORKLOAD, extra, TEAM)
            return wl if condition(wl, "Evicted").get("status") == "True" else None

        gone = await eventually(evicted, within=STEP_S)
        assert condition(gone, "Evicted").get("reason") == "NodeFailures", condition(gone, "Evicted")

        now = await admin.get(kinds.WORKLOAD, small, TEAM)
        assert now is not None and condition(now, "Admitted").get("status") == "True"
        assert now["status"]["admission"] == admission, "the Workload on the surviving flavor was re-admitted"
        assert not condition(now, "Evicted"), f"evicted: {condition(now, 'Evicted')}"
        assert not await _eviction_events(admin, small)
        writes = _queue_writes(devcluster)
        held = [(user, verb) for user, verb, body in writes if _stop_policy(body) == "HoldAndDrain"]
        assert not held, f"the queue was written HoldAndDrain: {held}"
    except BaseException:
        await _diagnose(admin, extra)
        raise
    finally:
        for name in (small, extra):
            await admin.delete(kinds.WORKLOAD, name, TEAM)
        await admin.delete(kinds.RESOURCE_FLAVOR, BLOCKED)
