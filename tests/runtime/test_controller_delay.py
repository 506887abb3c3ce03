"""Controller.watch(delay=): an event burst coalesces into one reconcile after the window."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from handler_source import HandlerSource

from gpustack_worker.runtime import ratelimit
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.controller import Controller, Result, labels_changed
from gpustack_worker.runtime.queue import WorkQueue
from tests.kit.waiting import asleep_or_done

if TYPE_CHECKING:
    from gpustack_worker.runtime.informer import Informer


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


async def _noop(key: str) -> Result:
    return Result.done()


def _controller(clock: FakeClock, delay: list[float], **kwargs: Any) -> tuple[Controller, HandlerSource]:
    queue = WorkQueue("agent-support-test", clock=clock, rate_limiter=ratelimit.default(clock))
    ctl = Controller("agent-support-test", _noop, queue)
    source = HandlerSource()
    ctl.watch(cast("Informer", source), delay=lambda: delay[0], **kwargs)
    return ctl, source


async def test_delayed_watch_collapses_a_burst_into_one_key_after_the_first_window() -> None:
    clock = FakeClock()
    ctl, source = _controller(clock, [3.0])
    for i in range(50):
        source.emit("MODIFIED", _node("n1", v=str(i)), _node("n1", v=str(i + 1)))
        await clock.advance(0.02)  # the whole burst spans one second
    assert len(ctl.queue) == 0
    assert ctl.queue.delayed == 1
    getter = asyncio.ensure_future(ctl.queue.get())
    await clock.advance(3.0 - 50 * 0.02 - 0.01)  # just before the FIRST event's deadline
    await asleep_or_done(getter, clock)
    assert not getter.done()
    await clock.advance(0.02)  # later events did not push the deadline back
    assert await asyncio.wait_for(getter, 1) == "n1"
    ctl.queue.done("n1")
    assert len(ctl.queue) == 0
    assert ctl.queue.delayed == 0


async def test_delay_is_read_per_event_and_predicates_still_filter() -> None:
    clock = FakeClock()
    delay = [3.0]
    ctl, source = _controller(clock, delay, predicates=[labels_changed])
    source.emit("MODIFIED", _node("n1", a="1"), _node("n1", a="1"))  # no label change: dropped
    assert ctl.queue.delayed == 0
    delay[0] = 0.5
    source.emit("MODIFIED", _node("n1", a="1"), _node("n1", a="2"))
    await clock.advance(0.5)
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n1"
    ctl.queue.done("n1")
    delay[0] = 0.0  # no window: enqueued at once
    source.emit("ADDED", None, _node("n2"))
    assert len(ctl.queue) == 1
    assert ctl.queue.delayed == 0


async def test_watch_without_delay_still_adds_immediately() -> None:
    clock = FakeClock()
    queue = WorkQueue("agent-support-plain", clock=clock, rate_limiter=ratelimit.default(clock))
    ctl = Controller("agent-support-plain", _noop, queue)
    source = HandlerSource()
    ctl.watch(cast("Informer", source))
    source.emit("ADDED", None, _node("n1"))
    assert len(queue) == 1
    assert queue.delayed == 0
