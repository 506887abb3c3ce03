"""Time as an injectable dependency.

The workqueue, rate limiters and leader elector ask a :class:`Clock` for "now" and for sleeps instead of
calling :mod:`time`/:mod:`asyncio` directly, so unit tests drive them with :class:`FakeClock` and
assert exact backoff delays without waiting (client-go does the same with ``clock.Clock``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

__all__ = ("Clock", "FakeClock", "MonotonicClock")


class Clock(Protocol):
    """A source of monotonic time and sleeps."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend for ``seconds`` of this clock's time."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Suspend until :meth:`now` reaches ``deadline`` (fixed when called, not when first run)."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))


class FakeClock:
    """A clock that only moves when :meth:`advance` is called; sleepers wake in deadline order."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """Number of pending sleeps (lets tests wait until a task has gone to sleep)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
        for _ in range(5):  # let woken tasks run
            await asyncio.sleep(0)
