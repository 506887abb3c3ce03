"""Controller.watch(hold=): an event the hold keeps back is enqueued only when it is released — then
exactly as it would have been at once (its mapped keys, after the watch's delay) — and never when the
hold drops it. The hold is asked only for events every predicate passed."""

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
    from collections.abc import Callable

    from gpustack_worker.runtime.informer import Informer


class _Hold:
    """Holds every event whose new object carries ``hold=yes``; keeps their release functions."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.held: list[Callable[[], None]] = []

    def __call__(self, event: str, old: Any | None, new: Any | None, release: Callable[[], None]) -> bool:
        obj = new if new is not None else old
        self.asked.append((event, obj["metadata"]["name"]))
        if (obj["metadata"].get("labels") or {}).get("hold") == "yes":
            self.held.append(release)
            return True
        return False


def _obj(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


async def _noop(key: str) -> Result:
    return Result.done()


def _controller(clock: FakeClock, **kwargs: Any) -> tuple[Controller, HandlerSource]:
    queue = WorkQueue("hold-test", clock=clock, rate_limiter=ratelimit.default(clock))
    ctl = Controller("hold-test", _noop, queue)
    source = HandlerSource()
    ctl.watch(cast("Informer", source), **kwargs)
    return ctl, source


async def test_a_held_event_is_enqueued_on_release_and_a_dropped_one_never() -> None:
    clock = FakeClock()
    hold = _Hold()
    ctl, source = _controller(clock, hold=hold)
    source.emit("MODIFIED", _obj("n1"), _obj("n1", hold="yes"))
    source.emit("MODIFIED", _obj("n2"), _obj("n2", hold="yes"))
    source.emit("ADDED", None, _obj("n3"))
    assert len(ctl.queue) == 1, "only the event the hold passed is queued"
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n3"
    ctl.queue.done("n3")
    first, _second = hold.held
    first()  # released: n1 as the event would have queued it
    assert len(ctl.queue) == 1
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n1"
    ctl.queue.done("n1")
    assert len(ctl.queue) == 0, "n2's hold dropped it: never queued"


async def test_a_release_while_the_key_is_reconciled_runs_it_once_more_after() -> None:
    """The agent's case: the write's answer (and so the release) comes inside the reconcile of the key."""
    clock = FakeClock()
    hold = _Hold()
    ctl, source = _controller(clock, hold=hold)
    source.emit("ADDED", None, _obj("n1"))
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n1"
    source.emit("MODIFIED", _obj("n1"), _obj("n1", hold="yes"))
    hold.held[0]()
    assert len(ctl.queue) == 0, "in progress: queued again only once it is done"
    ctl.queue.done("n1")
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n1"


async def test_a_released_event_of_a_delayed_watch_waits_the_window_from_its_release() -> None:
    clock = FakeClock()
    hold = _Hold()
    ctl, source = _controller(clock, hold=hold, delay=lambda: 3.0)
    source.emit("MODIFIED", _obj("n1"), _obj("n1", hold="yes"))
    await clock.advance(5.0)
    assert ctl.queue.delayed == 0 and len(ctl.queue) == 0, "held: no window started"
    hold.held[0]()
    assert ctl.queue.delayed == 1
    getter = asyncio.ensure_future(ctl.queue.get())
    await clock.advance(2.9)
    await asleep_or_done(getter, clock)  # it asked at 2.9 s after the release
    assert not getter.done()
    await clock.advance(0.2)
    assert await asyncio.wait_for(getter, 1) == "n1"


async def test_the_hold_is_asked_only_for_events_the_predicates_pass_and_maps_like_the_watch() -> None:
    clock = FakeClock()
    hold = _Hold()
    ctl, source = _controller(
        clock, hold=hold, predicates=[labels_changed], mapper=lambda obj: [obj["metadata"]["name"] + "-owner"]
    )
    source.emit("MODIFIED", _obj("n1", hold="yes"), _obj("n1", hold="yes"))  # no label change
    assert hold.asked == [], "a predicate dropped it first"
    source.emit("MODIFIED", _obj("n1"), _obj("n1", hold="yes"))
    assert hold.asked == [("MODIFIED", "n1")]
    hold.held[0]()
    assert await asyncio.wait_for(ctl.queue.get(), 1) == "n1-owner"
