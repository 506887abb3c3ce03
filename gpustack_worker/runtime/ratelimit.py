"""Retry rate limiters for the workqueue, shaped like client-go's ``DefaultControllerRateLimiter``.

A failing key is retried after ``max(per-key exponential, global token bucket)``: the per-key part
(5 ms doubling to 1000 s) stops one broken object from spinning, the bucket (10 qps, burst 100) stops a
mass failure (API server down, bad settings) from turning into a retry storm. The numbers come from the
settings ConfigMap. Each limiter answers ``when(key)`` (the delay for this retry), ``forget(key)``
(reset after success) and ``num_requeues(key)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpustack_worker.runtime.clock import Clock

__all__ = ("BucketRateLimiter", "ItemExponentialRateLimiter", "MaxOfRateLimiter", "RateLimiter", "default")


class RateLimiter(Protocol):
    """The per-key retry delay policy."""

    def when(self, key: str) -> float:
        """Delay before ``key`` may be retried (and record one more failure)."""
        ...

    def forget(self, key: str) -> None:
        """Stop tracking ``key`` (it succeeded)."""
        ...

    def num_requeues(self, key: str) -> int:
        """Failures recorded for ``key`` since the last forget."""
        ...


class ItemExponentialRateLimiter:
    """``base * 2**failures``, capped at ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n >= 64:  # 2**64 * base overflows any sane cap
            return self.cap
        return float(min(self.cap, self.base * (2**n)))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """A global token bucket (``qps`` refill, ``burst`` size); reservations queue like Go's rate.Limiter."""

    def __init__(self, clock: Clock, qps: float = 10.0, burst: int = 100) -> None:
        self._clock = clock
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = clock.now()

    def when(self, key: str) -> float:
        now = self._clock.now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= -1e-9:  # float residue of a refill is not a debt
            return 0.0
        return -self._tokens / self.qps

    def forget(self, key: str) -> None:
        return None

    def num_requeues(self, key: str) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters; every limiter records every failure."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, key: str) -> float:
        return max(lim.when(key) for lim in self._limiters)

    def forget(self, key: str) -> None:
        for lim in self._limiters:
            lim.forget(key)

    def num_requeues(self, key: str) -> int:
        return max(lim.num_requeues(key) for lim in self._limiters)


def default(
    clock: Clock, *, base: float = 0.005, cap: float = 1000.0, qps: float = 10.0, burst: int = 100
) -> MaxOfRateLimiter:
    """client-go's default controller limiter with the given numbers."""
    return MaxOfRateLimiter(ItemExponentialRateLimiter(base, cap), BucketRateLimiter(clock, qps, burst))
