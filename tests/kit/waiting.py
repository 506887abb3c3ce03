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
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ("eventually", "eventually_sync")

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
