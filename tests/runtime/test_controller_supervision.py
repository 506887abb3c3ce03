"""Controller workers survive everything but their own cancellation (issue 17, defect 4).

A ``CancelledError`` that comes out of something the reconcile awaited (a future or task another party
cancelled) is an error like any other: counted, logged, retried through the rate limiter; the worker
goes on. Only a cancellation of the worker task itself (``Task.cancelling()``) ends it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.runtime import ratelimit
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.metrics import RECONCILE_ERRORS
from gpustack_worker.runtime.queue import WorkQueue
from tests.kit.properties import examples


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def errors(name: str) -> float:
    value: float = RECONCILE_ERRORS.labels(controller=name)._value.get()
    return value


async def foreign_cancelled_future() -> None:
    """Await a future someone else cancelled (e.g. a shared request the caller gave up on)."""
    shared = asyncio.get_running_loop().create_future()
    shared.cancel()
    await shared


async def foreign_cancelled_task() -> None:
    """Await a task someone else cancelled."""
    other = asyncio.ensure_future(asyncio.Event().wait())
    await asyncio.sleep(0)
    other.cancel()
    await other


@pytest.mark.parametrize("awaited", [foreign_cancelled_future, foreign_cancelled_task])
async def test_a_cancelled_error_the_worker_did_not_get_is_retried_and_the_worker_lives(awaited: Any) -> None:
    clock = FakeClock()
    name = f"supervision-{awaited.__name__}"
    queue = WorkQueue(name, clock=clock, rate_limiter=ratelimit.default(clock))
    seen: list[str] = []

    async def reconcile(key: str) -> Result:
        seen.append(key)
        if key == "bad" and seen.count("bad") == 1:
            await awaited()
        return Result.done()

    ctl = Controller(name, reconcile, queue, workers=1)
    before = errors(name)
    run = asyncio.ensure_future(ctl.run())
    queue.add("bad")
    queue.add("good")
    await settle()
    assert seen == ["bad", "good"], "the only worker died with the first key"
    assert not run.done()
    assert errors(name) == before + 1
    assert queue.delayed == 1, "the failed key is retried through the rate limiter"
    assert queue.num_requeues("bad") == 1
    await clock.advance(1.0)
    await settle()
    assert seen == ["bad", "good", "bad"]
    assert queue.num_requeues("bad") == 0, "the successful retry forgot the backoff"
    queue.shutdown()
    await asyncio.wait_for(run, 1)


async def test_cancelling_the_worker_itself_still_ends_it() -> None:
    clock = FakeClock()
    name = "supervision-own-cancel"
    queue = WorkQueue(name, clock=clock, rate_limiter=ratelimit.default(clock))
    entered = asyncio.Event()

    async def reconcile(key: str) -> Result:
        entered.set()
        await asyncio.Event().wait()
        return Result.done()

    ctl = Controller(name, reconcile, queue, workers=2)
    before = errors(name)
    run = asyncio.ensure_future(ctl.run())
    queue.add("a")
    await asyncio.wait_for(entered.wait(), 1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert errors(name) == before, "our own cancellation is not a reconcile error"
    assert queue.delayed == 0


OUTCOMES = st.lists(st.sampled_from(["ok", "error", "foreign-future", "foreign-task", "after"]), max_size=12)


@settings(max_examples=examples(60))
@given(OUTCOMES, st.integers(1, 3))
def test_no_reconcile_outcome_ends_a_worker(outcomes: list[str], workers: int) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        name = "supervision-property"
        queue = WorkQueue(name, clock=clock, rate_limiter=ratelimit.default(clock))
        script = {f"k{i}": outcome for i, outcome in enumerate(outcomes)}
        calls: list[str] = []

        async def reconcile(key: str) -> Result:
            calls.append(key)
            outcome = script[key]
            if outcome == "error":
                raise RuntimeError("boom")
            if outcome == "foreign-future":
                await foreign_cancelled_future()
            if outcome == "foreign-task":
                await foreign_cancelled_task()
            return Result.after(60.0) if outcome == "after" else Result.done()

        ctl = Controller(name, reconcile, queue, workers=workers)
        before = errors(name)
        run = asyncio.ensure_future(ctl.run())
        for key in script:
            queue.add(key)
        await settle(20 + 5 * len(script))
        assert sorted(calls) == sorted(script), "a key was never reconciled: a worker died"
        assert not run.done()
        failed = sum(1 for o in outcomes if o not in ("ok", "after"))
        assert errors(name) == before + failed
        assert queue.delayed == sum(1 for o in outcomes if o != "ok")
        # Every worker is still alive: one more key per worker is taken at once, concurrently.
        gate = asyncio.Event()
        started: list[str] = []

        async def hold(key: str) -> Result:
            started.append(key)
            await gate.wait()
            return Result.done()

        ctl.reconcile = hold
        for i in range(workers):
            queue.add(f"extra{i}")
        await settle()
        assert len(started) == workers
        gate.set()
        queue.shutdown()
        await asyncio.wait_for(run, 1)

    asyncio.run(scenario())
