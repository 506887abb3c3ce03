"""WorkQueue semantics (client-go queue_test.go shapes) driven by a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.runtime import ratelimit
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.metrics import QUEUE_BUCKETS
from gpustack_worker.runtime.queue import WorkQueue
from tests.kit.properties import examples
from tests.kit.waiting import asleep_or_done, eventually, has_run


def make(clock: FakeClock, name: str = "test") -> WorkQueue:
    return WorkQueue(name, clock=clock, rate_limiter=ratelimit.default(clock))


async def test_dedup_collapses_adds_before_processing() -> None:
    q = make(FakeClock())
    for key in ("a", "b", "a", "a", "b", "c"):
        q.add(key)
    assert len(q) == 3
    got = [await q.get() for _ in range(3)]
    assert got == ["a", "b", "c"]  # FIFO, each once


async def test_key_never_handed_to_two_workers() -> None:
    q = make(FakeClock())
    q.add("a")
    first = await q.get()
    q.add("a")  # re-added while processing: must not become ready
    assert len(q) == 0
    second = asyncio.ensure_future(q.get())
    await has_run(second)  # the second worker asked and found nothing ready: it waits
    assert not second.done()
    assert first is not None
    q.done(first)
    assert await asyncio.wait_for(second, 1) == "a"


async def test_re_add_while_processing_runs_exactly_once_more() -> None:
    q = make(FakeClock())
    q.add("a")
    key = await q.get()
    assert key == "a"
    q.add("a")
    q.add("a")
    q.done(key)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_concurrent_workers_never_overlap_on_a_key() -> None:
    q = make(FakeClock())
    active: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []
    enough = asyncio.Event()

    async def worker() -> None:
        while (key := await q.get()) is not None:
            if key in active:
                overlaps.append(key)
            active.add(key)
            await asyncio.sleep(0)
            q.add(key if len(processed) < 50 else "other")  # hammer re-adds while processing
            await asyncio.sleep(0)
            active.discard(key)
            processed.append(key)
            if len(processed) >= 60:
                enough.set()
            q.done(key)

    for k in ("a", "b", "a"):
        q.add(k)
    tasks = [asyncio.ensure_future(worker()) for _ in range(4)]
    await asyncio.wait_for(enough.wait(), 2)
    q.shutdown()
    await asyncio.wait_for(asyncio.gather(*tasks), 2)
    assert overlaps == []


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, 0.005), (2, 0.01), (3, 0.02), (10, 0.005 * 2**9), (20, 1000.0), (80, 1000.0)],
    ids=["first", "second", "third", "tenth", "capped", "overflow-safe"],
)
def test_item_exponential_backoff_growth(failures: int, expected: float) -> None:
    lim = ratelimit.ItemExponentialRateLimiter(0.005, 1000.0)
    delays = [lim.when("k") for _ in range(failures)]
    assert delays[-1] == pytest.approx(expected)
    assert lim.num_requeues("k") == failures
    lim.forget("k")
    assert lim.num_requeues("k") == 0
    assert lim.when("k") == pytest.approx(0.005)


def test_token_bucket_allows_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = ratelimit.BucketRateLimiter(clock, qps=10.0, burst=100)
    assert [bucket.when(f"k{i}") for i in range(100)] == [0.0] * 100
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("y") == pytest.approx(0.2)


async def test_token_bucket_refills_with_time() -> None:
    clock = FakeClock()
    bucket = ratelimit.BucketRateLimiter(clock, qps=10.0, burst=5)
    for i in range(5):
        bucket.when(str(i))
    await clock.advance(0.3)  # three tokens back
    assert [bucket.when(str(i)) for i in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when("z") == pytest.approx(0.1)


async def test_rate_limited_retry_waits_for_backoff_and_forget_resets() -> None:
    clock = FakeClock()
    q = make(clock)
    for expected_delay in (0.005, 0.01, 0.02):
        q.add_rate_limited("a")
        assert len(q) == 0 and q.delayed == 1
        await clock.advance(expected_delay / 2)
        q._promote_due()
        assert len(q) == 0
        await clock.advance(expected_delay / 2)
        assert await asyncio.wait_for(q.get(), 1) == "a"
        q.done("a")
    assert q.num_requeues("a") == 3
    q.forget("a")
    assert q.num_requeues("a") == 0


async def test_add_after_wakes_a_blocked_getter_at_the_deadline() -> None:
    clock = FakeClock()
    q = make(clock)
    getter = asyncio.ensure_future(q.get())
    q.add_after("a", 5.0)
    await eventually(lambda: clock.sleepers == 1, within=5.0, every=0)  # blocked until the deadline
    await clock.advance(4.9)
    await asleep_or_done(getter, clock)
    assert not getter.done()
    await clock.advance(0.2)
    assert await asyncio.wait_for(getter, 1) == "a"


async def test_add_after_keeps_earliest_deadline_and_immediate_add_wins() -> None:
    clock = FakeClock()
    q = make(clock)
    q.add_after("a", 10.0)
    q.add_after("a", 2.0)
    q.add_after("a", 30.0)
    assert q.delayed == 1
    await clock.advance(2.0)
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    await clock.advance(30.0)
    q._promote_due()
    assert len(q) == 0  # the superseded deadlines do not fire again
    q.add_after("b", 0)
    assert len(q) == 1


async def test_shutdown_hands_out_queued_keys_then_none_and_drains() -> None:
    q = make(FakeClock())
    q.add("a")
    q.add("b")
    held = await q.get()
    q.shutdown()
    q.add("c")  # ignored after shutdown
    assert await q.get() == "b"
    assert await q.get() is None
    drained = asyncio.ensure_future(q.drain())
    await has_run(drained)
    assert not drained.done()  # "a" and "b" are still in flight
    assert held is not None
    q.done(held)
    q.done("b")
    await asyncio.wait_for(drained, 1)


async def test_shutdown_releases_blocked_getters() -> None:
    q = make(FakeClock())
    getters = [asyncio.ensure_future(q.get()) for _ in range(3)]
    for getter in getters:
        await has_run(getter)  # blocked on the empty queue
    q.shutdown()
    assert await asyncio.wait_for(asyncio.gather(*getters), 1) == [None, None, None]


async def test_drain_hands_out_a_key_re_added_while_in_flight_once_more() -> None:
    # client-go's ShutDownWithDrain: the add was accepted before the shutdown, so it is not lost.
    q = make(FakeClock())
    q.add("a")
    held = await q.get()
    assert held == "a"
    q.add("a")  # re-added while in flight
    q.shutdown()
    drained = asyncio.ensure_future(q.drain())
    q.done(held)
    await has_run(drained)  # it first ran after the done(): it saw the re-added key queued
    assert not drained.done(), "drain returned with the re-added key still queued"
    assert await q.get() == "a"
    q.done("a")
    assert await q.get() is None
    await asyncio.wait_for(drained, 1)


async def test_discarding_shutdown_forgets_a_key_re_added_while_in_flight() -> None:
    q = make(FakeClock())
    q.add("a")
    held = await q.get()
    assert held == "a"
    q.add("a")
    q.shutdown(discard=True)
    q.done(held)
    assert await q.get() is None
    await asyncio.wait_for(q.drain(), 1)


async def test_unfinished_work_and_longest_running_processor_follow_in_flight_keys() -> None:
    clock = FakeClock(100.0)
    q = make(clock, name="unfinished-test")
    labels = {"name": "unfinished-test", "controller": "unfinished-test"}
    assert REGISTRY.get_sample_value("workqueue_unfinished_work_seconds", labels) == 0.0
    q.add("a")
    q.add("b")
    a = await q.get()
    await clock.advance(3)
    b = await q.get()
    await clock.advance(2)
    assert a == "a" and b == "b"
    assert REGISTRY.get_sample_value("workqueue_unfinished_work_seconds", labels) == 7.0  # 5 + 2
    assert REGISTRY.get_sample_value("workqueue_longest_running_processor_seconds", labels) == 5.0
    q.done(a)
    assert q.unfinished_work_seconds() == 2.0
    assert q.longest_running_processor_seconds() == 2.0
    q.done(b)
    assert REGISTRY.get_sample_value("workqueue_unfinished_work_seconds", labels) == 0.0
    assert REGISTRY.get_sample_value("workqueue_longest_running_processor_seconds", labels) == 0.0


def test_work_duration_buckets_are_controller_runtimes() -> None:
    # prometheus.ExponentialBuckets(10e-9, 10, 12)
    assert pytest.approx([10e-9 * 10**i for i in range(12)]) == list(QUEUE_BUCKETS)


class ClientGoQueue:
    """client-go's util/workqueue Typed queue (queue.go), reduced to what the operations below touch."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.shutting_down = False

    def add(self, key: str) -> None:
        if self.shutting_down or key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.queue.append(key)

    def get(self) -> str | None:
        if not self.queue:
            return None
        key = self.queue.pop(0)
        self.processing.add(key)
        self.dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self.processing.discard(key)
        if key in self.dirty:
            self.queue.append(key)


KEYS = st.sampled_from(["a", "b", "c"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), KEYS),
        st.tuples(st.just("get"), st.just("")),
        st.tuples(st.just("done"), st.integers(0, 2)),
        st.tuples(st.just("shutdown"), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=examples(300))
@given(OPS)
def test_queue_matches_client_go_through_a_draining_shutdown(ops: list[tuple[str, Any]]) -> None:
    async def scenario() -> None:
        q = make(FakeClock())
        model = ClientGoQueue()
        held: list[str] = []
        for op, arg in ops:
            if op == "add":
                q.add(arg)
                model.add(arg)
            elif op == "get" and model.queue:
                key = await q.get()
                assert key == model.get()
                assert key is not None
                held.append(key)
            elif op == "done" and held:
                key = held.pop(arg % len(held))
                q.done(key)
                model.done(key)
            elif op == "shutdown":
                q.shutdown()
                model.shutting_down = True
            assert len(q) == len(model.queue)
            assert q.processing == frozenset(model.processing)
        # ShutDownWithDrain, with the workers still taking keys until get() says stop.
        q.shutdown()
        model.shutting_down = True
        drained = asyncio.ensure_future(q.drain())

        async def drains_exactly_when_idle() -> None:
            # A drain asked now decides in its first step on the queue as it is. Anything that woke the
            # drain waiting since the shutdown happened before this probe was scheduled, so that wake-up
            # has run by the time the probe has.
            probe = asyncio.ensure_future(q.drain())
            await has_run(probe)
            idle = not model.queue and not model.processing
            assert probe.done() == idle
            assert drained.done() == idle
            probe.cancel()

        await drains_exactly_when_idle()  # keys still in flight: the shutdown alone drains nothing
        while held or model.queue:
            for key in held:
                q.done(key)
                model.done(key)
            held = []
            await drains_exactly_when_idle()
            while model.queue:
                expected = model.get()
                assert await q.get() == expected
                assert expected is not None
                held.append(expected)
        assert await q.get() is None
        await asyncio.wait_for(drained, 1)

    asyncio.run(scenario())
