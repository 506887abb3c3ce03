"""A controller: N workers pulling keys from one workqueue and calling ``reconcile(key)``.

The reconcile contract (controller-runtime's): the function gets a key, not an event, reads the
current cache and settings snapshot, computes a pure ``desired(...)`` and applies the difference. It
returns :class:`Result` — done, or requeue after a delay (polling without rate limiting) — or raises,
which is logged with the key and a reconcile id, counted, and retried through the rate limiter. No
exception in a reconcile ever stops a worker — a ``CancelledError`` included, unless the worker task
itself is being cancelled (``Task.cancelling()``): one that merely came out of an awaited future or task
someone else cancelled is an error like any other. A worker pool that ends anyway is the Manager's to
notice (it exits non-zero). Event sources are informers, wired with
:meth:`Controller.watch`: a mapper turns an object into the keys to enqueue (directly, or through a
cache index for secondary objects) and a predicate drops events that cannot matter — in particular
the echo of our own writes (status-only or managedFields-only changes). A hold (:data:`Hold`) may keep
an event back until something it waits for is known — the answer to our own write whose watch event
came first — and then drop it or let it through as if it had just arrived.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import trace

from gpustack_worker.runtime.client import ApiError, Fenced
from gpustack_worker.runtime.metrics import (
    ACTIVE_WORKERS,
    MAX_CONCURRENT,
    RECONCILE_ERRORS,
    RECONCILE_PANICS,
    RECONCILE_TIME,
    RECONCILE_TOTAL,
)
from gpustack_worker.runtime.store import object_key

if TYPE_CHECKING:
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.queue import WorkQueue

__all__ = (
    "Controller",
    "Hold",
    "Predicate",
    "Result",
    "generation_changed",
    "labels_changed",
    "semantic_changed",
)

_TRACER = trace.get_tracer(__name__)
_log = structlog.get_logger("gpustack_worker.runtime.controller")

Predicate = Callable[[str, Any | None, Any | None], bool]
#: ``hold(event, old, new, release)`` → True: the event is held — dropped, unless the hold calls
#: ``release()`` later (at most once), which enqueues it then exactly as it would have been now.
Hold = Callable[[str, Any | None, Any | None, Callable[[], None]], bool]
Mapper = Callable[[Any], Iterable[str]]
Reconcile = Callable[[str], Awaitable["Result"]]
#: Errors that are "the world said no" rather than a bug; any other exception also counts as a panic.
#: ``Fenced``: the write fence closed under the reconcile (leadership ended); the Manager stops us next.
_EXPECTED: tuple[type[BaseException], ...] = (ApiError, Fenced, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Result:
    """Outcome of one reconcile: done (``requeue_after`` None) or poll again after a delay."""

    requeue_after: float | None = None

    @classmethod
    def done(cls) -> Result:
        return cls()

    @classmethod
    def after(cls, seconds: float) -> Result:
        return cls(requeue_after=seconds)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def generation_changed(event: str, old: Any | None, new: Any | None) -> bool:
    """Pass creates, deletes and spec changes (``metadata.generation`` moved); drop status echoes."""
    if old is None or new is None:
        return True
    return _meta(old).get("generation") != _meta(new).get("generation")


def labels_changed(event: str, old: Any | None, new: Any | None) -> bool:
    """Pass creates, deletes and label changes."""
    if old is None or new is None:
        return True
    return _meta(old).get("labels") != _meta(new).get("labels")


def labels_changed_except(prefixes: tuple[str, ...]) -> Predicate:
    """Pass creates, deletes and changes of the labels whose keys start with none of ``prefixes`` (the
    labels a reconciler never reads, and that change often, wake nothing)."""

    def kept(obj: Any) -> dict[str, Any]:
        labels = _meta(obj).get("labels") or {}
        return {k: v for k, v in labels.items() if not k.startswith(prefixes)}

    def predicate(event: str, old: Any | None, new: Any | None) -> bool:
        if old is None or new is None:
            return True
        if _meta(old).get("labels") == _meta(new).get("labels"):
            return False
        return kept(old) != kept(new)

    return predicate


def semantic_changed(view: Callable[[Any], Any]) -> Predicate:
    """Pass creates, deletes and updates where ``view(obj)`` differs (the fields a reconciler reads)."""

    def predicate(event: str, old: Any | None, new: Any | None) -> bool:
        if old is None or new is None:
            return True
        return bool(view(old) != view(new))

    return predicate


def _being_cancelled() -> bool:
    """True when the running task itself has a cancellation pending (``Task.cancel()`` was called on it and
    not withdrawn), as opposed to a ``CancelledError`` that merely came out of an awaited task someone
    else cancelled. Only the former may end a worker."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _own_key(obj: Any) -> Iterable[str]:
    return (object_key(obj),)


class Controller:
    """Runs ``reconcile`` for queued keys with ``workers`` concurrent workers."""

    def __init__(self, name: str, reconcile: Reconcile, queue: WorkQueue, *, workers: int = 1) -> None:
        self.name = name
        self.reconcile = reconcile
        self.queue = queue
        self.workers = max(1, workers)
        self._log = _log.bind(controller=name)
        MAX_CONCURRENT.labels(controller=name).set(self.workers)
        # The per-reconcile metric children, looked up once (a labels() lookup per reconcile was a
        # measurable share of a no-op reconcile's cost).
        self._active = ACTIVE_WORKERS.labels(controller=name)
        self._active.set(0)
        self._time = RECONCILE_TIME.labels(controller=name)
        self._totals = {
            result: RECONCILE_TOTAL.labels(controller=name, result=result)
            for result in ("success", "error", "requeue_after")
        }
        RECONCILE_ERRORS.labels(controller=name)
        RECONCILE_PANICS.labels(controller=name)

    def watch(
        self,
        informer: Informer,
        *,
        mapper: Mapper | None = None,
        predicates: Iterable[Predicate] = (),
        delay: Callable[[], float] | None = None,
        hold: Hold | None = None,
    ) -> None:
        """Enqueue ``mapper(obj)`` (default: the object's own key) for events passing all predicates.

        ``hold`` is asked last, for an event every predicate passed: when it holds the event, the keys are
        enqueued only if and when it calls ``release`` (see :data:`Hold`).

        With ``delay``, keys are added with ``queue.add_after(key, delay())`` instead (``delay`` is read
        per event, so a settings change applies from the next event on). A pending deadline is never
        pushed back by a later add, so a burst of events collapses into one reconcile that runs once the
        first event's window has passed and reads the state at that moment (write coalescing).
        """
        to_keys = mapper or _own_key
        preds = tuple(predicates)

        def enqueue(old: Any | None, new: Any | None) -> None:
            for obj in (new, old) if new is not None and old is not None else (new or old,):
                for key in to_keys(obj):
                    if delay is None:
                        self.queue.add(key)
                    else:
                        self.queue.add_after(key, delay())

        def handler(event: str, old: Any | None, new: Any | None) -> None:
            if not all(p(event, old, new) for p in preds):
                return
            if hold is not None and hold(event, old, new, lambda: enqueue(old, new)):
                return
            enqueue(old, new)

        informer.add_handler(handler)

    def enqueue_all(self, keys: Iterable[str]) -> None:
        """Add every key (a resync)."""
        for key in keys:
            self.queue.add(key)

    async def run(self) -> None:
        """Run the workers until the queue is shut down and drained."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self.workers):
                group.create_task(self._worker())

    async def shutdown(self) -> None:
        """Stop intake and wait until the queued and in-flight keys are done (with :meth:`run` running; the
        Manager cancels them instead when leadership is lost: :meth:`WorkQueue.shutdown` with ``discard``
        and a cancel of :meth:`run`)."""
        self.queue.shutdown()
        await self.queue.drain()

    async def _worker(self) -> None:
        while (key := await self.queue.get()) is not None:
            try:
                await self.process(key)
            finally:
                self.queue.done(key)

    def _failed(self, key: str, exc: BaseException, span: trace.Span) -> None:
        """Count, log and retry (rate-limited) a reconcile that raised."""
        self._totals["error"].inc()
        RECONCILE_ERRORS.labels(controller=self.name).inc()
        if not isinstance(exc, _EXPECTED):
            RECONCILE_PANICS.labels(controller=self.name).inc()
        span.record_exception(exc)
        self._log.error("reconcile failed", retries=self.queue.num_requeues(key), exc_info=exc)
        self.queue.add_rate_limited(key)

    async def process(self, key: str) -> None:
        """Reconcile one key and schedule its follow-up. Never raises (except cancellation)."""
        reconcile_id = uuid.uuid4().hex
        active = self._active
        active.inc()
        started = time.perf_counter()
        with (
            structlog.contextvars.bound_contextvars(controller=self.name, key=key, reconcileID=reconcile_id),
            _TRACER.start_as_current_span(f"reconcile {self.name}") as span,
        ):
            span.set_attribute("controller", self.name)
            span.set_attribute("key", key)
            span.set_attribute("reconcileID", reconcile_id)
            try:
                result = await self.reconcile(key)
            except asyncio.CancelledError as exc:
                if _being_cancelled():
                    # The Manager cancels in-flight reconciles when leadership ends; nothing more is written.
                    self._log.warning("reconcile cancelled")
                    raise
                # Not ours: the reconcile awaited something another task cancelled. An error like any
                # other (the key is retried), never the end of this worker.
                self._failed(key, exc, span)
            except Exception as exc:
                self._failed(key, exc, span)
            else:
                if result.requeue_after is not None and result.requeue_after > 0:
                    self._totals["requeue_after"].inc()
                    self.queue.forget(key)
                    self.queue.add_after(key, result.requeue_after)
                else:
                    self._totals["success"].inc()
                    self.queue.forget(key)
            finally:
                self._time.observe(time.perf_counter() - started)
                active.dec()
