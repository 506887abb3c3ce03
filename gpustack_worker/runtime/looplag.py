"""Event-loop lag: how late the loop runs a task that asked to wake up, the first thing to graph.

Everything this process does (lease renewals, webhook answers, health probes, watches, reconciles) runs on
one asyncio loop, so one long synchronous stretch (a relist decoded on the loop, a full garbage collection
of a large heap) delays all of it at once: a leader that cannot renew within the renew deadline steps
down, an admission webhook times out, a liveness probe fails. :class:`LoopLagMonitor` is a task that
sleeps ``interval`` and records how much later than asked it woke up: in
``event_loop_lag_seconds`` (a histogram) and ``event_loop_lag_max_seconds`` (the longest lag within the
last :data:`MAX_WINDOW_S`, so a single stall between two scrapes is not lost). A healthy loop lags a
millisecond or two; a lag near the renew deadline is an outage in the making.

The monitor asks an injectable :class:`~gpustack_worker.runtime.clock.Clock` for time and sleeps, so tests
drive it without waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from gpustack_worker.runtime.clock import MonotonicClock
from gpustack_worker.runtime.metrics import EVENT_LOOP_LAG, EVENT_LOOP_LAG_MAX

if TYPE_CHECKING:
    from gpustack_worker.runtime.clock import Clock

__all__ = ("MAX_WINDOW_S", "LagWindow", "LoopLagMonitor")

#: How far back ``event_loop_lag_max_seconds`` looks: longer than any usual scrape interval (15-60 s),
#: so every scrape sees the worst stall since the one before.
MAX_WINDOW_S: Final = 120.0


class LagWindow:
    """The largest lag observed within the last ``window`` seconds (at least; at most twice that).

    Two buckets of ``window`` seconds: the current one and the one before it; the maximum is taken over
    both, so a stall stays visible for at least ``window`` seconds after it ended.
    """

    __slots__ = ("_current", "_previous", "_started", "window")

    def __init__(self, window: float, now: float) -> None:
        self.window = window
        self._started = now
        self._current = 0.0
        self._previous = 0.0

    def observe(self, lag: float, now: float) -> float:
        """Record ``lag`` seen at ``now``; returns the largest lag within the window."""
        elapsed = now - self._started
        if elapsed >= 2 * self.window:  # nothing left of either bucket
            self._previous, self._current, self._started = 0.0, 0.0, now
        elif elapsed >= self.window:
            self._previous, self._current, self._started = self._current, 0.0, self._started + self.window
        self._current = max(self._current, lag)
        return max(self._current, self._previous)


class LoopLagMonitor:
    """Sleeps ``interval_s`` over and over and records how late each wake-up came."""

    def __init__(self, interval_s: float, *, clock: Clock | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"the loop lag interval must be positive, not {interval_s!r}")
        self.interval_s = interval_s
        self._clock = clock or MonotonicClock()
        self._window = LagWindow(MAX_WINDOW_S, self._clock.now())
        #: The largest lag seen since start (for logs and tests).
        self.worst = 0.0

    def observe(self, lag: float) -> None:
        """Record one wake-up ``lag`` seconds late."""
        lag = max(0.0, lag)
        self.worst = max(self.worst, lag)
        EVENT_LOOP_LAG.observe(lag)
        EVENT_LOOP_LAG_MAX.set(self._window.observe(lag, self._clock.now()))

    async def run(self) -> None:
        """Measure until cancelled."""
        clock = self._clock
        while True:
            due = clock.now() + self.interval_s
            await clock.sleep_until(due)
            self.observe(clock.now() - due)
