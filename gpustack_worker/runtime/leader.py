"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go ``leaderelection``), plus a write fence.

Only one controller process may write at a time; standbys keep their informers running so a
failover starts from warm caches.

Election is client-go's: a candidate takes the Lease when it is free or when the holder's record has not
changed for a full lease duration *as observed on the candidate's own clock*, counted from the moment
the candidate saw the record change (clock skew between machines does not matter); every Lease write
carries the resourceVersion the decision was made on (optimistic concurrency). A standby that sees the
Lease held looks again every quarter of the retry period (one GET of one small object), so it notices
each renewal promptly.

Fencing (what client-go leaves to the user): the Lease is *provably ours* from the start of a successful
acquire/renew attempt for ``renew_deadline`` seconds on this process's monotonic clock. Any other
candidate observes that record no earlier than the attempt started, so it cannot take the Lease before
``start + lease_duration``; ``renew_deadline < lease_duration`` leaves the difference (5 s by default)
as the margin for a request already on the wire. The elector therefore

* installs a :class:`~gpustack_worker.runtime.client.WriteFence` on the client it is given
  (:attr:`LeaderElector.fence`): writes pass only while this process leads *and* the Lease is provably
  ours. The client asks the fence at the moment each write's bytes go to the socket, in the same
  synchronous step (``runtime/wire.py``), so a write held up behind a stalled loop is refused there
  instead of being sent late; the wait for the answer is bounded by the time the fence has left;
  controllers, Events and everything else written through that client are fenced;
* renews and releases the Lease through a view of the client fenced by the provable window alone (so
  the release still goes out after the controllers' fence closed, but never once the Lease may be
  someone else's), and acquires through an unfenced view (a candidate leads nothing yet; the
  resourceVersion protects the Lease);
* renews every retry period and gives up leadership exactly when the window ends without a renewal;
  like client-go, a renewal first updates the Lease it last wrote without reading it (one PUT; the
  resourceVersion makes it fail if anyone else wrote since) and only on failure re-reads it and retries
  (the *slow path*, counted in ``leader_election_slowpath_total`` exactly where client-go counts it);
* writes ``leaseDurationSeconds`` rounded *up* to whole seconds, never below what it assumes.

On graceful shutdown the leader keeps renewing while the Manager drains, then :meth:`step_down`
closes the fence and :meth:`release` empties the holder, so a standby takes over at its next look.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.client import ApiError, Conflict, Fenced
from gpustack_worker.runtime.clock import Clock, MonotonicClock
from gpustack_worker.runtime.metrics import LEADER_SLOWPATH, LEADER_STATUS
from gpustack_worker.runtime.resources import LEASE

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from gpustack_worker.runtime.client import Client

__all__ = ("JITTER_FACTOR", "LEASE", "LeaderElector", "lease_seconds")

_log = structlog.get_logger("gpustack_worker.runtime.leader")
#: client-go's rule: the renew deadline must exceed 1.2 retry periods (one jittered retry fits in it).
JITTER_FACTOR: Final = 1.2
#: ``leaseDurationSeconds`` is an int32 in the API.
_MAX_LEASE_SECONDS: Final = 2**31 - 1


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_seconds(lease_duration: float) -> int:
    """The ``leaseDurationSeconds`` written for ``lease_duration``: rounded up, never below it."""
    return math.ceil(lease_duration)


class _Window:
    """A write fence over the elector's provable-ownership window (optionally only while leading)."""

    __slots__ = ("_elector", "_leading_only")

    def __init__(self, elector: LeaderElector, *, leading_only: bool) -> None:
        self._elector = elector
        self._leading_only = leading_only

    def remaining(self) -> float:
        return self._elector.window_left(leading_only=self._leading_only)

    def __repr__(self) -> str:
        kind = "leader" if self._leading_only else "lease"
        return f"<{kind} fence of {self._elector.identity}: {self.remaining():.3f}s left>"


class LeaderElector:
    """Campaigns for, holds and releases one Lease; fences the client's writes to the time it leads."""

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        fence_client: bool = True,
    ) -> None:
        """``fence_client`` (default) installs :attr:`fence` on ``client``: from then on its writes pass
        only while this process leads. The elector's own Lease requests go through views of the client
        (same session and counters) with their own fences."""
        for label, value in (
            ("lease_duration", lease_duration),
            ("renew_deadline", renew_deadline),
            ("retry_period", retry_period),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        if not lease_duration > renew_deadline:
            raise ValueError(
                f"lease_duration ({lease_duration}s) must be greater than renew_deadline ({renew_deadline}s):"
                " a leader must stop before a standby may take over"
            )
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError(
                f"renew_deadline ({renew_deadline}s) must be greater than {JITTER_FACTOR} x retry_period"
                f" ({retry_period}s), so a failed renewal can be retried within it"
            )
        if lease_seconds(lease_duration) > _MAX_LEASE_SECONDS:
            raise ValueError(f"lease_duration ({lease_duration}s) does not fit leaseDurationSeconds")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock or MonotonicClock()
        #: The fence of everything this process writes besides the Lease: open while leading and provable.
        self.fence = _Window(self, leading_only=True)
        self._acquire_client = client.with_fence(None)
        self._lease_client = client.with_fence(_Window(self, leading_only=False))
        if fence_client:
            client.fence = self.fence
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        #: Clock time at which the last successful acquire/renew attempt *started* (None: not ours).
        self._renewed_at: float | None = None
        self._leading = False
        self._lost = False
        self._stepped_down = asyncio.Event()
        self._held_by_other = False
        #: The Lease as this process last wrote it (the optimistic renewal updates it without a GET).
        self._last: dict[str, Any] | None = None
        self._gauge = LEADER_STATUS.labels(name=name)
        self._gauge.set(0)
        self._log = _log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def lost(self) -> bool:
        """True once leadership ended because the Lease could not be renewed in time."""
        return self._lost

    def window_left(self, *, leading_only: bool = True) -> float:
        """Seconds the Lease stays provably ours (≤ 0: not, or no longer); with ``leading_only`` also 0
        once this process stopped leading."""
        if self._renewed_at is None or (leading_only and not self._leading):
            return 0.0
        return self._renewed_at + self.renew_deadline - self._clock.now()

    async def campaign(self) -> None:
        """Return once this process holds the Lease."""
        self._log.info("campaigning for leadership")
        self._lost = False
        self._stepped_down.clear()
        while True:
            started = self._clock.now()
            if await self._try_acquire_or_renew(self._acquire_client):
                break
            # Held by a live leader: look often, so the moment it expires is seen promptly. Otherwise
            # (API errors, conflicts) back off by the full retry period.
            await self._clock.sleep(self.retry_period / 4 if self._held_by_other else self.retry_period)
        self._renewed_at = started
        self._set_leading(True)
        self._log.info("became leader")

    async def hold(self) -> None:
        """Renew every retry period while leading; return when leadership ends.

        Leadership ends when the renew deadline passes without a successful renewal (:attr:`lost`
        becomes True; the fence closed at that very moment, whether or not this loop ran) or when
        :meth:`step_down` is called (an in-flight renewal finishes first, so a release that follows is
        not raced by it).
        """
        while self._leading:
            left = self.window_left(leading_only=False)
            if left <= 0:
                self._lose()
                return
            if await self._sleep_or_step_down(min(self.retry_period, left)):
                return
            left = self.window_left(leading_only=False)
            if left <= 0:
                continue
            started = self._clock.now()
            if await self._within(left, self._try_acquire_or_renew(self._lease_client)):
                self._renewed_at = started

    def step_down(self) -> None:
        """Stop leading now: the fence closes and :meth:`hold` returns (no write is made)."""
        if self._leading:
            self._log.info("stepping down")
        self._set_leading(False)
        self._stepped_down.set()

    async def release(self) -> None:
        """Step down and give the Lease up (empty holder) while it is still provably ours.

        Errors are logged, not raised; a Lease that may already be someone else's is left alone.
        """
        self.step_down()
        if self._renewed_at is None or self._lost:
            return
        try:
            if self.window_left(leading_only=False) <= 0:
                self._log.warning("lease not released: it is no longer provably ours")
                return
            lease = await self._lease_client.get(LEASE, self.name, self.namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            now = _micro_now()
            lease["spec"] = {
                **lease["spec"],
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
            }
            await self._lease_client.replace(LEASE, lease)
            self._log.info("released leadership")
        except Exception as exc:
            self._log.warning("could not release the lease", error=repr(exc))
        finally:
            self._renewed_at = None

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._gauge.set(1 if leading else 0)

    def _lose(self) -> None:
        self._lost = True
        self._set_leading(False)
        self._log.error("leadership lost: could not renew within the renew deadline")

    async def _sleep_or_step_down(self, seconds: float) -> bool:
        """Sleep ``seconds`` on the clock; True if :meth:`step_down` was called meanwhile."""
        if self._stepped_down.is_set():
            return True
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        waiter = asyncio.ensure_future(self._stepped_down.wait())
        try:
            await asyncio.wait((sleeper, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()
        return self._stepped_down.is_set()

    async def _within(self, seconds: float, attempt: Awaitable[bool]) -> bool:
        """``attempt``'s result, or False when it has not finished after ``seconds`` on the clock."""
        task = asyncio.ensure_future(attempt)
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return task.result() if not task.cancelled() else False

    async def _try_acquire_or_renew(self, writer: Client) -> bool:
        try:
            return await self._attempt(writer)
        except Conflict:
            return False
        except Fenced as exc:
            self._log.warning("lease write refused: the lease is no longer provably ours", error=repr(exc))
            return False
        except (ApiError, OSError, TimeoutError) as exc:
            self._log.warning("lease attempt failed", error=repr(exc))
            return False
        except Exception as exc:  # connection-level errors from the HTTP stack
            self._log.warning("lease attempt failed", error=repr(exc))
            return False

    async def _attempt(self, writer: Client) -> bool:
        self._held_by_other = False
        now = _micro_now()
        if self._leading and self._last is not None and await self._renew_optimistically(writer, now):
            return True
        lease = await writer.get(LEASE, self.name, self.namespace)
        if lease is None:
            body = {
                "apiVersion": LEASE.api_version,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": lease_seconds(self.lease_duration),
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            created = await writer.create(LEASE, body, namespace=self.namespace)
            self._observe(created.get("spec") or {})
            self._last = created
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > self._clock.now():
            self._held_by_other = True
            return False  # held by someone else and not expired
        mine = holder == self.identity
        if mine:
            # client-go counts here: the holder renews by re-reading the Lease (the slow path), because it
            # was not leading yet or the optimistic update of the Lease it last wrote failed.
            LEADER_SLOWPATH.labels(name=self.name).inc()
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": lease_seconds(self.lease_duration),
            "renewTime": now,
            "acquireTime": spec.get("acquireTime") if mine else now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        }
        updated = await writer.replace(LEASE, lease)
        self._observe(updated.get("spec") or {})
        self._last = updated
        return True

    async def _renew_optimistically(self, writer: Client, now: str) -> bool:
        """client-go's fast path: update the Lease this leader last wrote (its resourceVersion) without
        reading it first. False on any failure (a conflict: someone else wrote it), so the caller falls
        back to the slow path, which re-reads it."""
        assert self._last is not None
        spec = self._last.get("spec") or {}
        lease = {
            **self._last,
            "spec": {
                **spec,
                "holderIdentity": self.identity,
                "leaseDurationSeconds": lease_seconds(self.lease_duration),
                "renewTime": now,
            },
        }
        try:
            updated = await writer.replace(LEASE, lease)
        except Exception as exc:
            self._log.debug("optimistic lease renewal failed, falling back to the slow path", error=repr(exc))
            return False
        self._observe(updated.get("spec") or {})
        self._last = updated
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.now()
