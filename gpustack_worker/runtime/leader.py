"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go ``leaderelection`` semantics).

Only one controller process may write at a time; standbys keep their informers running so a
failover starts from warm caches. The algorithm is client-go's: a candidate takes the Lease when it
is free or when the holder's record has not changed for a full lease duration *as observed on the
candidate's own clock* (so clock skew between machines does not matter); the leader renews every retry
period and gives up leadership when it could not renew within the renew deadline. Because the
renew deadline (10 s) is shorter than the lease duration (15 s), a leader always stops before anyone
else may start: never two leaders. Writes use the Lease's resourceVersion (optimistic concurrency).
On graceful shutdown the leader releases the Lease (empty holder), so a standby takes over at its next
retry instead of waiting out the lease.

Handover after a crash: a standby that sees the Lease held by someone else looks again every quarter of
the retry period (a GET of one small object), so it notices each renewal within 0.5 s and takes over
within lease + retry/4 ≈ 15.5 s of the crashed leader's last renewal — inside the 17 s (lease + retry)
that client-go's two-second polling can take.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_worker.runtime.client import ApiError, Conflict
from gpustack_worker.runtime.clock import Clock, MonotonicClock
from gpustack_worker.runtime.metrics import LEADER_SLOWPATH, LEADER_STATUS
from gpustack_worker.runtime.resources import LEASE

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client

__all__ = ("LEASE", "LeaderElector")

_log = structlog.get_logger("gpustack_worker.runtime.leader")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for, holds and releases one Lease."""

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
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock or MonotonicClock()
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._leading = False
        self._held_by_other = False
        self._gauge = LEADER_STATUS.labels(name=name)
        self._gauge.set(0)
        self._log = _log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        return self._leading

    async def campaign(self) -> None:
        """Return once this process holds the Lease."""
        self._log.info("campaigning for leadership")
        while not await self._try_acquire_or_renew():
            # Held by a live leader: look often, so the moment it expires is seen promptly. Otherwise
            # (API errors, conflicts) back off by the full retry period.
            await self._clock.sleep(self.retry_period / 4 if self._held_by_other else self.retry_period)
        self._set_leading(True)
        self._last_renew = self._clock.now()
        self._log.info("became leader")

    async def hold(self) -> None:
        """Renew every retry period; return when leadership is lost (renew deadline passed)."""
        while self._leading:
            await self._clock.sleep(self.retry_period)
            remaining = self.renew_deadline - (self._clock.now() - self._last_renew)
            ok = False
            if remaining > 0:
                try:
                    async with asyncio.timeout(remaining):
                        ok = await self._try_acquire_or_renew()
                except TimeoutError:
                    ok = False
            if ok:
                self._last_renew = self._clock.now()
            elif self._clock.now() - self._last_renew >= self.renew_deadline:
                LEADER_SLOWPATH.labels(name=self.name).inc()
                self._set_leading(False)
                self._log.error("leadership lost: could not renew within the renew deadline")
                return

    async def release(self) -> None:
        """Give the Lease up (empty holder) if we hold it; errors are logged, not raised."""
        if not self._leading:
            return
        self._set_leading(False)
        try:
            lease = await self.client.get(LEASE, self.name, self.namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {
                **lease["spec"],
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": _micro_now(),
            }
            await self.client.replace(LEASE, lease)
            self._log.info("released leadership")
        except Exception as exc:
            self._log.warning("could not release the lease", error=repr(exc))

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._gauge.set(1 if leading else 0)

    async def _try_acquire_or_renew(self) -> bool:
        try:
            return await self._attempt()
        except Conflict:
            return False
        except (ApiError, OSError, TimeoutError) as exc:
            self._log.warning("lease attempt failed", error=repr(exc))
            return False
        except Exception as exc:  # connection-level errors from the HTTP stack
            self._log.warning("lease attempt failed", error=repr(exc))
            return False

    async def _attempt(self) -> bool:
        self._held_by_other = False
        now = _micro_now()
        lease = await self.client.get(LEASE, self.name, self.namespace)
        if lease is None:
            body = {
                "apiVersion": LEASE.api_version,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": int(self.lease_duration),
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            created = await self.client.create(LEASE, body, namespace=self.namespace)
            self._observe(created.get("spec") or {})
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > self._clock.now():
            self._held_by_other = True
            return False  # held by someone else and not expired
        mine = holder == self.identity
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "renewTime": now,
            "acquireTime": spec.get("acquireTime") if mine else now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        }
        updated = await self.client.replace(LEASE, lease)
        self._observe(updated.get("spec") or {})
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.now()
