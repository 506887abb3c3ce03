"""Waiting until an in-process task has decided (a queue getter, a drain, a flush), so a claim that it did
*not* return — still blocked, still waiting — is checked after a positive signal, never after a pause.

In-process and on a :class:`~gpustack_worker.runtime.clock.FakeClock`, these states need no real time:
the polls spin on event-loop turns (``every=0``), bounded by a generous ``within`` that means "never".
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from tests.kit.waiting import eventually

if TYPE_CHECKING:
    import asyncio

    from gpustack_worker.runtime.clock import FakeClock

__all__ = ("asleep_or_done", "has_run")


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
