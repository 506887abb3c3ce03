"""EventRecorder: one Event per series, repeats inside the window write nothing, the first repeat after it
updates the series count, an expired Event is re-created, failures never raise."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpustack_worker.runtime.client import ApiError, NotFound
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.events import EventRecorder, micro_time
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.resources import EVENT, Resource
from tests.kit import kueue
from tests.kit.waiting import has_run

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def cq(name: str = "gpustack--nvidia-linux-amd64", uid: str = "u1", rv: str = "7") -> Any:
    return freeze(kueue.cluster_queue(name, {"huge": "x" * 100}, uid=uid, resourceVersion=rv))


def lq(name: str = "lq", namespace: str = "team-a") -> Any:
    return freeze(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "uid": "u9"},
        }
    )


class EventSink:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str | None, dict[str, Any]]] = []
        self.fail_create: BaseException | None = None
        self.fail_patch: BaseException | None = None

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        assert resource is EVENT
        assert namespace == body["metadata"]["namespace"]
        if self.fail_create is not None:
            raise self.fail_create
        self.created.append(body)
        return body

    async def patch(self, resource: Resource, name: str, patch: Any, **kw: Any) -> Any:
        assert resource is EVENT and kw["patch_type"] == "merge"
        if self.fail_patch is not None:
            raise self.fail_patch
        self.patched.append((name, kw.get("namespace"), patch))
        return patch


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def recorder(sink: EventSink, clock: FakeClock, wall: Wall, window: float = 600.0) -> EventRecorder:
    return EventRecorder(
        sink,  # type: ignore[arg-type]
        controller="gpustack.ai/chain",
        instance="controller-0",
        clock=clock,
        dedup_window_s=window,
        wall=wall,
    )


async def test_a_warning_posts_one_well_formed_event() -> None:
    sink, clock, wall = EventSink(), FakeClock(), Wall()
    rec = recorder(sink, clock, wall)
    rec.warning(cq(), reason="NoFlavors", action="Reconcile", note="no live flavor")
    await rec.flush()
    assert rec.posted == 1
    (event,) = sink.created
    name = event["metadata"]["name"]
    assert name.startswith("gpustack--nvidia-linux-amd64.") and len(name.split(".")[-1]) == 16
    assert event == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},  # cluster-scoped object: default namespace
        "eventTime": "2025-03-01T12:00:00.123456Z",
        "reportingController": "gpustack.ai/chain",
        "reportingInstance": "controller-0",
        "action": "Reconcile",
        "reason": "NoFlavors",
        "type": "Warning",
        "note": "no live flavor",
        "regarding": {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "name": "gpustack--nvidia-linux-amd64",
            "uid": "u1",
            "resourceVersion": "7",
        },
    }


async def test_namespaced_objects_get_events_in_their_namespace_and_normal_type() -> None:
    sink = EventSink()
    rec = recorder(sink, FakeClock(), Wall())
    rec.normal(lq(), reason="Created", action="Apply", note="created")
    await rec.flush()
    assert sink.created[0]["metadata"]["namespace"] == "team-a"
    assert sink.created[0]["type"] == "Normal"
    assert sink.created[0]["regarding"]["namespace"] == "team-a"


async def test_repeats_inside_the_window_write_nothing_and_the_next_one_after_it_updates_the_series() -> None:
    sink, clock, wall = EventSink(), FakeClock(), Wall()
    rec = recorder(sink, clock, wall)
    for i in range(10):
        # a new resourceVersion of the same object is the same series
        rec.warning(cq(rv=str(i)), reason="NoFlavors", action="Reconcile", note="no live flavor")
        await clock.advance(30)
    await rec.flush()
    assert (rec.posted, rec.created, rec.updated, rec.suppressed) == (1, 1, 0, 9)
    assert sink.patched == []
    await clock.advance(600)  # the window since the create has passed
    wall.now = T0 + timedelta(minutes=20)
    rec.warning(cq(), reason="NoFlavors", action="Reconcile", note="no live flavor")
    await rec.flush()
    assert (rec.posted, rec.created, rec.updated) == (2, 1, 1)
    name = sink.created[0]["metadata"]["name"]
    assert sink.patched == [
        (name, "default", {"series": {"count": 11, "lastObservedTime": micro_time(wall.now)}})
    ]
    rec.warning(cq(), reason="NoFlavors", action="Reconcile", note="no live flavor")  # window restarted
    await rec.flush()
    assert rec.posted == 2


async def test_a_different_note_reason_type_action_or_object_is_another_series() -> None:
    sink = EventSink()
    rec = recorder(sink, FakeClock(), Wall())
    base = {"reason": "NoFlavors", "action": "Reconcile", "note": "a"}
    rec.warning(cq(), **base)
    rec.warning(cq(), **{**base, "note": "b"})
    rec.warning(cq(), **{**base, "reason": "Other"})
    rec.warning(cq(), **{**base, "action": "Delete"})
    rec.normal(cq(), **base)
    rec.warning(cq(uid="u2"), **base)  # recreated object
    rec.warning(cq(name="other"), **base)
    rec.warning(cq(), **base)  # a repeat
    await rec.flush()
    assert rec.created == 7
    assert rec.suppressed == 1


async def test_repeats_before_the_first_post_went_out_are_written_with_it() -> None:
    sink = EventSink()
    rec = recorder(sink, FakeClock(), Wall())
    for _ in range(3):
        rec.warning(cq(), reason="R", action="A", note="n")
    await rec.flush()
    assert [e["series"]["count"] for e in sink.created] == [3]
    await rec.close()
    assert sink.patched == []


async def test_close_writes_the_counts_held_in_memory() -> None:
    sink, clock, wall = EventSink(), FakeClock(), Wall()
    rec = recorder(sink, clock, wall)
    for _ in range(3):
        rec.warning(cq(), reason="R", action="A", note="n")
        await rec.flush()
    assert sink.patched == []
    assert "series" not in sink.created[0]
    await rec.close()
    assert [p[2]["series"]["count"] for p in sink.patched] == [3]
    await rec.close()  # nothing new: no second write
    assert len(sink.patched) == 1


async def test_an_expired_event_is_recreated_with_the_series_so_far() -> None:
    sink, clock, wall = EventSink(), FakeClock(), Wall()
    rec = recorder(sink, clock, wall, window=10)
    rec.warning(cq(), reason="R", action="A", note="n")
    await rec.flush()
    await clock.advance(11)
    sink.fail_patch = NotFound(404, "NotFound", {})
    rec.warning(cq(), reason="R", action="A", note="n")
    await rec.flush()
    assert len(sink.created) == 2
    second = sink.created[1]
    assert second["metadata"]["name"] != sink.created[0]["metadata"]["name"]
    assert second["series"]["count"] == 2
    assert rec.created == 2 and rec.updated == 0


async def test_failures_never_raise_and_a_failed_create_is_retried_by_the_next_occurrence() -> None:
    sink = EventSink()
    sink.fail_create = ApiError(403, "Forbidden", {})
    rec = recorder(sink, FakeClock(), Wall())
    rec.warning(cq(), reason="R", action="A", note="n")
    await rec.flush()
    assert (rec.posted, rec.failed) == (0, 1)
    sink.fail_create = None
    rec.warning(cq(), reason="R", action="A", note="n")  # within the window, but nothing was written
    await rec.flush()
    assert rec.posted == 1
    # no name: dropped, counted, no exception
    rec.warning({"metadata": {}}, reason="R", action="A", note="n")
    rec.warning({}, reason="R", action="A", note="n")
    await rec.flush()
    assert rec.failed == 3


def test_without_a_running_loop_the_event_is_dropped_not_raised() -> None:
    sink = EventSink()
    rec = recorder(sink, FakeClock(), Wall())
    rec.warning(cq(), reason="R", action="A", note="n")
    assert rec.failed == 1 and rec.posted == 0


async def test_limits_are_enforced_by_clipping() -> None:
    sink = EventSink()
    rec = EventRecorder(sink, controller="c", instance="i" * 300, clock=FakeClock(), wall=Wall())  # type: ignore[arg-type]
    rec.warning(cq(name="A_Very.Long-Name" * 30), reason="R" * 200, action="A" * 200, note="n" * 2000)
    await rec.flush()
    (event,) = sink.created
    assert len(event["reportingInstance"]) == 128
    assert len(event["reason"]) == 128 and len(event["action"]) == 128
    assert len(event["note"]) == 1024 and event["note"].endswith("...")
    assert len(event["metadata"]["name"]) <= 253
    assert event["metadata"]["name"] == event["metadata"]["name"].lower()


async def test_flush_waits_for_slow_posts() -> None:
    gate = asyncio.Event()
    arrived = asyncio.Event()

    class Slow(EventSink):
        async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
            arrived.set()
            await gate.wait()
            return await super().create(resource, body, namespace)

    sink = Slow()
    rec = recorder(sink, FakeClock(), Wall())
    rec.warning(cq(), reason="R", action="A", note="n")

    async def flush_then_posted() -> int:
        await rec.flush()
        return rec.posted  # as it was the moment flush() returned

    flushed = asyncio.create_task(flush_then_posted())
    await asyncio.wait_for(arrived.wait(), 5)  # the post is in flight, held at the gate
    await has_run(flushed)  # and the flush has looked at it
    assert not flushed.done()
    gate.set()
    assert await asyncio.wait_for(flushed, 5) == 1


def test_an_empty_controller_is_refused() -> None:
    with pytest.raises(ValueError, match="reportingController"):
        EventRecorder(EventSink(), controller="", instance="x")  # type: ignore[arg-type]
