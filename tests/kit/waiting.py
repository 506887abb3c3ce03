"""Waiting for a condition: the one way a test waits (no outcome is ever decided after a fixed pause).

- :func:`eventually` (async): poll ``check`` — a function returning a value or an awaitable of one —
  until the value is truthy, and return it. After ``within`` seconds it fails with the last value seen.
- :func:`eventually_sync`: the same for a blocking test; ``accept`` decides on what ``fetch`` returns.

``within`` is a generous bound for a slow machine, never a measurement: a test asserts the condition, not
how long it took. ``every`` is the pause between polls (nfd-master and Kueue batch about once a second,
so most cluster checks poll every quarter second).

A negative claim ("no write happened", "still Pending") is never a wait that times out: wait first for the
positive signal that the system had its chance (a metric, a log line, an observed generation), then
assert the claim once.

For an in-process task (a queue getter, a drain, a flush) that signal is that the task has decided:
:func:`has_run` and :func:`asleep_or_done`. On a :class:`~gpustack_worker.runtime.clock.FakeClock` these
states need no real time: the polls spin on event-loop turns (``every=0``), bounded by a generous
``within`` that means "never".
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gpustack_worker.runtime.clock import FakeClock

__all__ = ("asleep_or_done", "eventually", "eventually_sync", "has_run")

_T = TypeVar("_T")


async def eventually(
    check: Callable[[], Awaitable[_T]] | Callable[[], _T], *, within: float = 60.0, every: float = 0.25
) -> _T:
    """Poll ``check`` until it returns a truthy value (awaited when it is awaitable); return the value.
    AssertionError naming the last value after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {within}s; last value: {last!r}")
        await asyncio.sleep(every)


def eventually_sync(
    fetch: Callable[[], _T],
    accept: Callable[[_T], object] = bool,
    *,
    within: float = 60.0,
    every: float = 0.25,
) -> _T:
    """Call ``fetch`` until ``accept`` holds for what it returned; return that. AssertionError naming the
    last value after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        last = fetch()
        if accept(last):
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {within}s; last value: {last!r}")
        time.sleep(every)


async def has_run(task: asyncio.Task[Any]) -> None:
    """Wait until ``task`` has taken its first step: returned, or suspended on what it waits for.

    A getter, a drain or a flush decides in that first step whether it can return now; a task that is only
    scheduled has decided nothing. Sound for a task whose only suspension is the wait for its answer
    (``WorkQueue.get`` on an empty queue, ``WorkQueue.drain``, a flush of writes held back) and when
    nothing else can answer it meanwhile."""
    coro = task.get_coro()
    assert inspect.iscoroutine(coro), f"{task!r} runs no coroutine"
    await eventually(lambda: inspect.getcoroutinestate(coro) != inspect.CORO_CREATED, within=5.0, every=0)


async def asleep_or_done(task: asyncio.Task[Any], clock: FakeClock) -> None:
    """Wait until ``task`` has returned or sleeps on ``clock`` towards a deadline still ahead.

    :meth:`FakeClock.advance` wakes every sleeper whose deadline it passed, so a sleeper still pending
    after it has a deadline later than now: a getter asleep on the clock has seen the new time and was not
    due. One that was woken is polled until it has returned. ``task`` must be the clock's only sleeper."""
    await eventually(lambda: task.done() or clock.sleepers > 0, within=5.0, every=0)
