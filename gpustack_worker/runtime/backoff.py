"""Exponential backoff with jitter that forgets after a healthy stretch (client-go's reflector policy).

0.8 s doubling to 30 s, each delay stretched by up to 100 % random jitter, and reset once no backoff
was needed for 2 minutes: client-go notes this yields ~0.22 QPS per informer against an unhealthy API
server instead of hammering it.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpustack_worker.runtime.clock import Clock

__all__ = ("Backoff",)


class Backoff:
    """Stateful delay generator."""

    def __init__(
        self,
        clock: Clock,
        *,
        initial: float = 0.8,
        factor: float = 2.0,
        cap: float = 30.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()
        self._current = initial
        self._last: float | None = None

    def next(self) -> float:
        """The delay before the next attempt."""
        now = self._clock.now()
        if self._last is not None and now - self._last > self.reset_after:
            self._current = self.initial
        self._last = now
        delay = self._current
        self._current = min(self.cap, self._current * self.factor)
        return delay + self._rng.random() * self.jitter * delay
