"""Kubernetes Events (``events.k8s.io/v1``) with client-go-style de-duplication.

A controller that finds something wrong says so on the object (``kubectl describe`` shows it) — but a
reconcile runs again and again on the same bad input, and one Event per reconcile would flood etcd. So
occurrences are grouped, as client-go's ``tools/events`` broadcaster does, into an Event *series*:

* the series key is (regarding object — apiVersion, kind, namespace, name, uid; reason; action; type;
  note). Unlike client-go the note is part of the key (two different problems on one object stay two
  Events) and the regarding resourceVersion is not (every status write would start a new series);
* the first occurrence creates an Event;
* repeats within ``dedup_window_s`` of the last write are counted in memory and written nothing;
* the first repeat after the window PATCHes the existing Event's ``series`` (``count`` = every
  occurrence so far, ``lastObservedTime``) — at most one write per series per window. If that Event
  expired on the server (Events live an hour by default), a new one is created;
* :meth:`EventRecorder.close` writes the counts still held in memory (graceful stop).

Posting is fire-and-forget: :meth:`EventRecorder.warning` / :meth:`~EventRecorder.normal` schedule the
write on the running loop and return at once; they never raise (a failed write is logged, and the
series is forgotten so a later occurrence tries again). An Event for a cluster-scoped object goes to
the ``default`` namespace, as the API server requires. The window is measured on the injectable
:class:`~.clock.Clock`; ``eventTime``/``lastObservedTime`` come from the wall clock (``wall``).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.client import NotFound
from gpustack_worker.runtime.clock import MonotonicClock
from gpustack_worker.runtime.resources import EVENT

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.clock import Clock

__all__ = ("NORMAL", "WARNING", "EventRecorder", "micro_time")

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
#: Namespace for Events about cluster-scoped objects (the API server accepts ``default`` or ``kube-system``).
CLUSTER_EVENT_NAMESPACE: Final = "default"
#: API limits (k8s ``pkg/apis/core/validation/events.go``).
_REASON_MAX: Final = 128
_ACTION_MAX: Final = 128
_INSTANCE_MAX: Final = 128
_NOTE_MAX: Final = 1024
#: Series remembered at most (oldest forgotten first; client-go's LRU is 4096 as well).
_CACHE_MAX: Final = 4096
#: Posts in flight at most; beyond that new series are dropped (logged) rather than queued without bound.
_IN_FLIGHT_MAX: Final = 256
_NAME_SAFE: Final = re.compile(r"[^a-z0-9.-]")
_log = structlog.get_logger("gpustack_worker.runtime.events")


def micro_time(now: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wall() -> datetime:
    return datetime.now(UTC)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(slots=True)
class _Series:
    """What the recorder remembers about one series."""

    name: str
    namespace: str
    body: dict[str, Any]
    count: int = 1
    written_count: int = 1
    last_write: float = 0.0
    last_observed: str = ""
    exists: bool = False
    pending: asyncio.Task[None] | None = field(default=None, repr=False)


class EventRecorder:
    """Posts de-duplicated Events for one controller (``reportingController``) and instance."""

    def __init__(
        self,
        client: Client,
        *,
        controller: str,
        instance: str,
        clock: Clock | None = None,
        dedup_window_s: float = 600.0,
        wall: Callable[[], datetime] | None = None,
    ) -> None:
        if not controller:
            raise ValueError("reportingController must not be empty")
        self.client = client
        self.controller = controller
        self.instance = _clip(instance, _INSTANCE_MAX)
        self.dedup_window_s = dedup_window_s
        self._clock = clock or MonotonicClock()
        self._wall = wall or _wall
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Writes issued (Event creates + series updates) that succeeded.
        self.posted = 0
        #: Of those, creates and series PATCHes.
        self.created = 0
        self.updated = 0
        #: Occurrences recorded without a write (inside a window).
        self.suppressed = 0
        #: Writes that failed or were dropped.
        self.failed = 0

    # -- the interface controllers call -----------------------------------------------------------

    def warning(self, regarding: Mapping[str, Any], *, reason: str, action: str, note: str) -> None:
        """Record a Warning about ``regarding`` (the cached object). Never raises."""
        self._record(WARNING, regarding, reason=reason, action=action, note=note)

    def normal(self, regarding: Mapping[str, Any], *, reason: str, action: str, note: str) -> None:
        """Record a Normal event about ``regarding``. Never raises."""
        self._record(NORMAL, regarding, reason=reason, action=action, note=note)

    async def flush(self) -> None:
        """Wait for every write in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Write the series counts still only in memory, then wait for everything in flight."""
        await self.flush()
        for series in list(self._series.values()):
            if series.count > series.written_count:
                self._spawn(self._update(series))
        await self.flush()

    # -- internals -----------------------------------------------------------------------------------

    def _record(
        self, type_: str, regarding: Mapping[str, Any], *, reason: str, action: str, note: str
    ) -> None:
        try:
            self._record_unsafe(type_, regarding, reason=reason, action=action, note=note)
        except Exception:
            self.failed += 1
            _log.exception("could not record event", reason=reason)

    def _record_unsafe(
        self, type_: str, regarding: Mapping[str, Any], *, reason: str, action: str, note: str
    ) -> None:
        ref = self._reference(regarding)
        if ref is None:
            self.failed += 1
            _log.warning("event dropped: the regarding object has no name", reason=reason, note=note)
            return
        reason, action, note = _clip(reason, _REASON_MAX), _clip(action, _ACTION_MAX), _clip(note, _NOTE_MAX)
        key = (
            ref.get("apiVersion", ""),
            ref.get("kind", ""),
            ref.get("namespace", ""),
            ref["name"],
            ref.get("uid", ""),
            reason,
            action,
            type_,
            note,
        )
        now = self._clock.now()
        observed = micro_time(self._wall())
        series = self._series.get(key)
        if series is not None:
            self._series.move_to_end(key)
            series.count += 1
            series.last_observed = observed
            if now - series.last_write < self.dedup_window_s:
                self.suppressed += 1
                return
            series.last_write = now
            self._spawn(self._update(series))
            return
        if len(self._tasks) >= _IN_FLIGHT_MAX:
            self.failed += 1
            _log.warning("event dropped: too many posts in flight", reason=reason, note=note)
            return
        namespace = ref.get("namespace") or CLUSTER_EVENT_NAMESPACE
        name = self._event_name(ref["name"])
        body: dict[str, Any] = {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": observed,
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "type": type_,
            "note": note,
            "regarding": ref,
        }
        series = _Series(name=name, namespace=namespace, body=body, last_write=now, last_observed=observed)
        self._series[key] = series
        while len(self._series) > _CACHE_MAX:
            self._series.popitem(last=False)
        series.pending = self._spawn(self._create(key, series))

    @staticmethod
    def _reference(obj: Mapping[str, Any]) -> dict[str, str] | None:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = meta.get("name")
        if not name:
            return None
        ref = {
            "apiVersion": str(obj.get("apiVersion") or ""),
            "kind": str(obj.get("kind") or ""),
            "name": str(name),
            "namespace": str(meta.get("namespace") or ""),
            "uid": str(meta.get("uid") or ""),
            "resourceVersion": str(meta.get("resourceVersion") or ""),
        }
        return {k: v for k, v in ref.items() if v}

    @staticmethod
    def _event_name(regarding_name: str) -> str:
        # client-go names Events "<regarding>.<unique hex>"; keep it a valid DNS subdomain (≤ 253).
        base = _NAME_SAFE.sub("-", regarding_name.lower()).strip(".-")[:200] or "object"
        return f"{base}.{uuid.uuid4().hex[:16]}"

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            self.failed += 1
            _log.warning("event dropped: no running event loop")
            return None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _create(self, key: tuple[str, ...], series: _Series) -> None:
        if not await self._post_new(series) and self._series.get(key) is series:
            del self._series[key]  # forget it: the next occurrence tries again

    async def _post_new(self, series: _Series) -> bool:
        """POST a new Event for ``series`` (with the series so far when there were repeats)."""
        body = dict(series.body)
        count = series.count
        if count > 1:
            body["series"] = {"count": count, "lastObservedTime": series.last_observed}
        try:
            await self.client.create(EVENT, body, namespace=series.namespace)
        except Exception as exc:
            self.failed += 1
            _log.warning(
                "could not post event",
                error=repr(exc),
                reason=body.get("reason"),
                regarding=body["regarding"].get("name"),
            )
            return False
        series.written_count = count
        series.exists = True
        self.posted += 1
        self.created += 1
        return True

    async def _update(self, series: _Series) -> None:
        if series.pending is not None and not series.pending.done():
            await asyncio.wait((series.pending,))
        if not series.exists:
            return  # its create failed; the series was forgotten
        count, observed = series.count, series.last_observed
        patch = {"series": {"count": count, "lastObservedTime": observed}}
        try:
            await self.client.patch(EVENT, series.name, patch, namespace=series.namespace, patch_type="merge")
        except NotFound:
            # The Event expired on the server (default TTL 1 h): a new one carries the series so far.
            series.name = self._event_name(str(series.body["regarding"]["name"]))
            series.body = {
                **series.body,
                "metadata": {"name": series.name, "namespace": series.namespace},
                "eventTime": observed,
            }
            series.exists = False
            await self._post_new(series)
            return
        except Exception as exc:
            self.failed += 1
            _log.warning("could not update event series", error=repr(exc), series=series.name)
            return
        series.written_count = max(series.written_count, count)
        self.posted += 1
        self.updated += 1
