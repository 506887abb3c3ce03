"""The key-based, de-duplicating, "stingy" workqueue every controller pulls from.

It carries keys, never events (level-triggered reconciles), with client-go's guarantees:

* **fair**: FIFO among ready keys;
* **stingy**: a key added many times before it is processed is processed once, and a key is never
  handed to two workers at once;
* **re-add while processing**: a key added while a worker holds it is processed once more after
  :meth:`done`;
* **retries**: :meth:`add_rate_limited` delays by the rate limiter (per-key exponential + global token
  bucket), :meth:`forget` resets the key's backoff, :meth:`add_after` schedules a plain delay;
* **shutdown**: :meth:`shutdown` stops intake, lets workers take what is already queued (or, with
  ``discard``, hands out nothing more), and :meth:`drain` waits until nothing is queued or in flight.
  Like client-go's ``ShutDownWithDrain``, a key re-added while a worker held it (before the shutdown) is
  still handed out once more after :meth:`done`: the add was accepted, so it is kept, not lost.

Metrics are client-go's, labelled as controller-runtime labels them (``name`` and ``controller`` both the
queue's name). ``workqueue_unfinished_work_seconds`` (the summed age of every in-flight key) and
``workqueue_longest_running_processor_seconds`` (the oldest one's age) are computed from the processing
start times when scraped, so a stuck reconcile shows as a growing number, not as silence.

Time comes from an injectable :class:`~gpustack_worker.runtime.clock.Clock`, so tests use a fake one.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from typing import TYPE_CHECKING

from gpustack_worker.runtime import ratelimit
from gpustack_worker.runtime.clock import Clock, MonotonicClock
from gpustack_worker.runtime.metrics import (
    QUEUE_ADDS,
    QUEUE_DEPTH,
    QUEUE_LATENCY,
    QUEUE_LONGEST,
    QUEUE_RETRIES,
    QUEUE_UNFINISHED,
    QUEUE_WORK,
)

if TYPE_CHECKING:
    from gpustack_worker.runtime.ratelimit import RateLimiter
    from gpustack_worker.runtime.settings import RuntimeSettings

__all__ = ("WorkQueue", "settings_queue")


class WorkQueue:
    """An asyncio workqueue of string keys."""

    def __init__(
        self,
        name: str,
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock or MonotonicClock()
        self._limiter: RateLimiter = rate_limiter or ratelimit.default(self._clock)
        self._queue: collections.deque[str] = collections.deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._delayed_at: dict[str, float] = {}
        self._seq = itertools.count()
        self._added_at: dict[str, float] = {}
        self._started_at: dict[str, float] = {}
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shutting_down = False
        self._depth = QUEUE_DEPTH.labels(name=name, controller=name)
        self._adds = QUEUE_ADDS.labels(name=name, controller=name)
        #: Keys accepted for processing so far (what ``workqueue_adds_total`` counts), for tests.
        self.adds = 0
        self._retries = QUEUE_RETRIES.labels(name=name, controller=name)
        self._latency = QUEUE_LATENCY.labels(name=name, controller=name)
        self._work = QUEUE_WORK.labels(name=name, controller=name)
        QUEUE_UNFINISHED.labels(name=name, controller=name).set_function(self.unfinished_work_seconds)
        QUEUE_LONGEST.labels(name=name, controller=name).set_function(self.longest_running_processor_seconds)
        self._depth.set(0)

    # -- introspection -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be handed out (not counting delayed or in-flight keys)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing(self) -> frozenset[str]:
        """Keys currently held by workers."""
        return frozenset(self._processing)

    @property
    def delayed(self) -> int:
        """Keys waiting for an ``add_after`` deadline."""
        return len(self._delayed_at)

    def unfinished_work_seconds(self) -> float:
        """Summed age of every in-flight key (client-go's ``updateUnfinishedWork`` total)."""
        now = self._clock.now()
        return sum(max(0.0, now - started) for started in self._started_at.values())

    def longest_running_processor_seconds(self) -> float:
        """Age of the oldest in-flight key, 0 when none (client-go's ``updateUnfinishedWork`` oldest)."""
        now = self._clock.now()
        return max((max(0.0, now - started) for started in self._started_at.values()), default=0.0)

    def num_requeues(self, key: str) -> int:
        """Rate-limited retries of ``key`` since it was last forgotten."""
        return self._limiter.num_requeues(key)

    # -- producers -----------------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Mark ``key`` for processing (collapses with pending adds of the same key)."""
        if self._shutting_down or key in self._dirty:
            return
        self._adds.inc()
        self.adds += 1
        self._dirty.add(key)
        self._added_at.setdefault(key, self._clock.now())
        if key in self._processing:
            return  # done() re-queues it
        self._queue.append(key)
        self._depth.set(len(self._queue))
        self._idle.clear()
        self._wakeup.set()

    def add_after(self, key: str, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; an earlier pending deadline for the key wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        ready = self._clock.now() + delay
        current = self._delayed_at.get(key)
        if current is not None and current <= ready:
            return
        self._delayed_at[key] = ready
        heapq.heappush(self._delayed, (ready, next(self._seq), key))
        self._wakeup.set()  # a getter may need a shorter sleep

    def add_rate_limited(self, key: str) -> None:
        """Retry ``key`` after the rate limiter's delay (counts a retry)."""
        self._retries.inc()
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: str) -> None:
        """Reset ``key``'s backoff (call after a successful reconcile)."""
        self._limiter.forget(key)

    # -- consumers -----------------------------------------------------------------------------------

    async def get(self) -> str | None:
        """The next ready key, or ``None`` once shut down and empty. Call :meth:`done` afterwards."""
        while True:
            self._promote_due()
            if self._queue:
                key = self._queue.popleft()
                self._depth.set(len(self._queue))
                self._dirty.discard(key)
                self._processing.add(key)
                now = self._clock.now()
                added = self._added_at.pop(key, now)
                self._latency.observe(max(0.0, now - added))
                self._started_at[key] = now
                return key
            if self._shutting_down:
                return None
            self._wakeup.clear()
            if not self._delayed:
                await self._wakeup.wait()
                continue
            await self._wait_until(self._delayed[0][0])

    def done(self, key: str) -> None:
        """Release ``key``; if it was re-added meanwhile it becomes ready again now.

        Also while shutting down (client-go's ``Done``): the re-add was accepted before the shutdown, so
        the key is handed out once more and :meth:`drain` waits for it. Only ``shutdown(discard=True)``
        forgets such keys.
        """
        self._processing.discard(key)
        started = self._started_at.pop(key, None)
        if started is not None:
            self._work.observe(max(0.0, self._clock.now() - started))
        if key in self._dirty:
            self._queue.append(key)
            self._depth.set(len(self._queue))
            self._wakeup.set()
        self._update_idle()

    # -- shutdown ------------------------------------------------------------------------------------

    def shutdown(self, *, discard: bool = False) -> None:
        """Stop accepting keys and drop delayed ones; queued keys are still handed out unless ``discard``
        (then :meth:`get` returns ``None`` at once: nothing more is handed out, e.g. leadership lost)."""
        self._shutting_down = True
        self._delayed.clear()
        self._delayed_at.clear()
        if discard:
            self._queue.clear()
            self._dirty.clear()
            self._added_at.clear()
            self._depth.set(0)
        self._wakeup.set()
        self._update_idle()

    async def drain(self) -> None:
        """Wait until no key is queued or being processed (call after :meth:`shutdown`; the workers must
        keep running to take what is still queued, including keys re-added while they were in flight)."""
        await self._idle.wait()

    # -- internals -----------------------------------------------------------------------------------

    def _update_idle(self) -> None:
        """``_idle`` is set exactly when nothing is queued or in flight."""
        if self._queue or self._processing:
            self._idle.clear()
        else:
            self._idle.set()

    def _promote_due(self) -> None:
        now = self._clock.now()
        while self._delayed and self._delayed[0][0] <= now:
            ready, _, key = heapq.heappop(self._delayed)
            if self._delayed_at.get(key) != ready:
                continue  # superseded by an earlier deadline
            del self._delayed_at[key]
            self.add(key)

    async def _wait_until(self, deadline: float) -> None:
        """Wait for an add/shutdown or for ``deadline``, whichever comes first."""
        if deadline <= self._clock.now():
            return
        waiter = asyncio.ensure_future(self._wakeup.wait())
        sleeper = asyncio.ensure_future(self._clock.sleep_until(deadline))
        try:
            await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()


def settings_queue(name: str, settings: RuntimeSettings, clock: Clock | None = None) -> WorkQueue:
    """A controller's queue with the retry limits of the settings (``requeue-*``, read at start-up)."""
    clock = clock or MonotonicClock()
    limiter = ratelimit.default(
        clock,
        base=settings.requeue_base_delay_seconds,
        cap=settings.requeue_max_delay_seconds,
        qps=settings.requeue_qps,
        burst=settings.requeue_burst,
    )
    return WorkQueue(name, clock=clock, rate_limiter=limiter)
