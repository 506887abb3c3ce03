"""The domain metrics the chart's PrometheusRule alerts on: each one's classifier (table), the cache
count's arithmetic (property), the informer health gauge read from a real Informer, and Gate 3's verdict
counter moved by the controller step that writes a verdict."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.chain import queues
from gpustack_worker.placement import joint
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.metrics import (
    INFORMER_HEALTHY,
    PARKED_SETS,
    QUEUES_HELD_IN_MIGRATION,
    TOPOLOGY_SOURCES_LAPSED,
    CacheCount,
)
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.runtime.store import Store
from gpustack_worker.topology import sources
from tests.kit.properties import examples
from tests.placement.test_node_devices import pending
from tests.placement.test_node_devices import setup as gate3_setup

if TYPE_CHECKING:
    from collections.abc import Iterator


def _store(objs: list[dict[str, Any]]) -> Store:
    store = Store()
    for i, obj in enumerate(objs):
        obj.setdefault("metadata", {}).setdefault("name", f"o{i}")
        store.upsert(obj)
    return store


def _ready(status: str, reason: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": ""}]}}


def test_topology_source_lapsed_state() -> None:
    assert sources.lapsed_state(_ready("False", "Stale")) == ("Stale",)
    assert sources.lapsed_state(_ready("False", "Expired")) == ("Expired",)
    assert sources.lapsed_state(_ready("True", "Ready")) is None
    assert sources.lapsed_state(_ready("False", "FetchFailed")) is None
    assert sources.lapsed_state(_ready("Unknown", "Stale")) is None
    assert sources.lapsed_state({}) is None
    assert set(sources.LAPSED_STATES) == {("Stale",), ("Expired",)}


def _queue(phase: str | None, policy: str | None) -> dict[str, Any]:
    annotations = {} if phase is None else {keys.MIGRATION_PHASE: phase}
    spec = {} if policy is None else {"stopPolicy": policy}
    return {"metadata": {"annotations": annotations}, "spec": spec}


def test_queue_held_in_migration() -> None:
    assert queues.held_in_migration(_queue("draining", "HoldAndDrain")) == ("draining",)
    assert queues.held_in_migration(_queue("switched", "HoldAndDrain")) == ("switched",)
    # someone else's Hold (no migration), a phase without the hold, an unknown phase: not counted
    assert queues.held_in_migration(_queue(None, "HoldAndDrain")) is None
    assert queues.held_in_migration(_queue("draining", None)) is None
    assert queues.held_in_migration(_queue("draining", "Hold")) is None
    assert queues.held_in_migration(_queue("sideways", "HoldAndDrain")) is None
    assert set(queues.MIGRATION_HOLD_STATES) == {("draining",), ("switched",)}


def test_parked_set() -> None:
    parked = {"status": {"hold": {"since": "2026-12-02T19:00:00Z", "parkedAt": "2026-12-02T19:30:00Z"}}}
    waiting = {"status": {"hold": {"since": "2026-12-02T19:00:00Z"}}}
    assert joint.parked_set(parked) == ()
    assert joint.parked_set(waiting) is None
    assert joint.parked_set({"status": {"hold": {"parkedAt": "not a time"}}}) is None
    assert joint.parked_set({}) is None


def _classify(obj: Any) -> tuple[str] | None:
    state = obj.get("state")
    return None if state is None else (state,)


@settings(max_examples=examples(60))
@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=8), min_size=1, max_size=3),
)
def test_cache_count_is_the_largest_count_per_state_over_live_stores(states: list[list[str | None]]) -> None:
    """Each state's count is the largest over the stores (caches of the same cluster agree; two
    controllers in one process must not double it); known states are there at zero; a store that is
    gone no longer counts."""
    gauge = CacheCount("test_cache_count", "test", ("state",))
    stores = [_store([{"state": s} for s in per_store]) for per_store in states]
    for store in stores:
        gauge.watch(store, _classify, known=(("a",), ("z",)))
    expected = {("a",): 0, ("z",): 0}
    for per_store in states:
        for state in {s for s in per_store if s is not None}:
            expected[(state,)] = max(expected.get((state,), 0), per_store.count(state))
    assert gauge.counts() == expected
    del stores, store
    gc.collect()
    assert gauge.counts() == {}


@pytest.fixture
def registered_counts_alone() -> Iterator[None]:
    """The registered cache counts see only this test's stores: any other test's caches still alive in
    this process (an in-process controller's, or one a reference cycle keeps until the next collection)
    are set aside and put back afterwards."""
    counts = (TOPOLOGY_SOURCES_LAPSED, QUEUES_HELD_IN_MIGRATION, PARKED_SETS)
    kept = [count._sources for count in counts]
    for count in counts:
        count._sources = []
    try:
        yield
    finally:
        for count, sources_kept in zip(counts, kept, strict=True):
            count._sources = sources_kept


@pytest.mark.usefixtures("registered_counts_alone")
def test_registered_cache_counts_export_their_states() -> None:
    """The three cache counts are in the default registry and export what a watched store holds."""
    topology = _store([_ready("False", "Stale"), _ready("False", "Stale"), _ready("True", "Ready")])
    held = _store([_queue("draining", "HoldAndDrain"), _queue(None, "Hold")])
    deployments = _store([{"status": {"hold": {"parkedAt": "2026-12-02T19:30:00Z"}}}])
    TOPOLOGY_SOURCES_LAPSED.watch(topology, sources.lapsed_state, known=sources.LAPSED_STATES)
    QUEUES_HELD_IN_MIGRATION.watch(held, queues.held_in_migration, known=queues.MIGRATION_HOLD_STATES)
    PARKED_SETS.watch(deployments, joint.parked_set)
    value = REGISTRY.get_sample_value
    assert value("gpustack_topologysources_stale_or_expired", {"state": "Stale"}) == 2
    assert value("gpustack_topologysources_stale_or_expired", {"state": "Expired"}) == 0
    assert value("gpustack_clusterqueues_held_in_migration", {"phase": "draining"}) == 1
    assert value("gpustack_clusterqueues_held_in_migration", {"phase": "switched"}) == 0
    assert value("gpustack_joint_parked_sets") == 1


def test_informer_health_gauge_reads_the_informers() -> None:
    """0 while an informer of the resource is unhealthy (failures in a row, no watch open since), back to
    1 once it succeeds; an informer nobody holds is dropped."""
    resource = Resource("test.gpustack.ai", "v1", "Probe", "probes", namespaced=False)  # no other informer
    informer = Informer(None, resource)  # type: ignore[arg-type]  # the constructor sends nothing
    other = Informer(None, resource)  # type: ignore[arg-type]
    value = REGISTRY.get_sample_value
    assert value("gpustack_informer_healthy", {"resource": resource.plural}) == 1
    informer.consecutive_failures = informer.options.unhealthy_after_failures
    assert not informer.healthy
    assert value("gpustack_informer_healthy", {"resource": resource.plural}) == 0
    assert INFORMER_HEALTHY.values()[resource.plural] == 0
    informer._succeeded()
    assert value("gpustack_informer_healthy", {"resource": resource.plural}) == 1
    del informer, other
    gc.collect()
    assert resource.plural not in INFORMER_HEALTHY.values()


async def test_gate3_counts_the_verdicts_it_writes() -> None:
    def count(state: str) -> float:
        return REGISTRY.get_sample_value("gpustack_gate3_verdicts_total", {"state": state}) or 0.0

    check, client = gate3_setup([int(AllocationMode.EXCLUSIVE), 0])
    before = {state: count(state) for state in ("Ready", "Retry")}
    assert REGISTRY.get_sample_value("gpustack_gate3_verdicts_total", {"state": "Retry"}) is not None
    check.workloads.store.upsert(pending("wl", 2))
    await check.reconcile_workload("team/wl")
    assert client.applies[0][2]["status"]["admissionChecks"][0]["state"] == "Retry"
    assert (count("Ready") - before["Ready"], count("Retry") - before["Retry"]) == (0, 1)
    # not judged again until our write is cached: no second count
    await check.reconcile_workload("team/wl")
    assert count("Retry") - before["Retry"] == 1
