"""WorkQueue semantics (client-go queue_test.go shapes) driven by a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from gpustack_worker.runtime import ratelimit
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.queue import WorkQueue


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
    await asyncio.sleep(0.01)
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
    await asyncio.sleep(0)
    await clock.advance(4.9)
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
    await asyncio.sleep(0.01)
    assert not drained.done()  # "a" and "b" are still in flight
    assert held is not None
    q.done(held)
    q.done("b")
    await asyncio.wait_for(drained, 1)


async def test_shutdown_releases_blocked_getters() -> None:
    q = make(FakeClock())
    getters = [asyncio.ensure_future(q.get()) for _ in range(3)]
    await asyncio.sleep(0)
    q.shutdown()
    assert await asyncio.wait_for(asyncio.gather(*getters), 1) == [None, None, None]
