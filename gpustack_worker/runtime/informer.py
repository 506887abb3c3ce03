"""List-then-watch informer: keeps a :class:`Store` equal to the server's objects of one kind.

kr8s' watch ends silently, cannot resume from a list resourceVersion and loops on 410, so this is our
own reflector (client-go ``tools/cache/reflector.go`` is the model):

1. paginated LIST, objects pushed through the ingest transform, ``Store.replace`` (emitting deletes
   for objects that vanished while we were not watching);
2. WATCH from the list's resourceVersion with bookmarks, a random 5-10 min ``timeoutSeconds`` (spreads
   reconnects) and an inactivity watchdog (a silently dropped TCP stream is noticed);
3. a watch that ends normally or stalls is resumed from the last seen resourceVersion; 410 Gone means a
   relist; other errors back off (0.8 s x2 -> 30 s, jitter, reset after 2 min healthy); 429 backs off
   without relisting.

Handlers receive ``(event, old, new)`` with ``event`` in ADDED/MODIFIED/DELETED; they must be quick
and non-blocking (controllers only enqueue keys). Label and field selectors are per informer: a node
agent watches only its own Node with ``field_selector="metadata.name=<node>"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.backoff import Backoff
from gpustack_worker.runtime.client import ApiError, Gone
from gpustack_worker.runtime.clock import Clock, MonotonicClock
from gpustack_worker.runtime.metrics import INFORMER_OBJECTS, INFORMER_RELISTS
from gpustack_worker.runtime.store import Store, object_key, resource_version
from gpustack_worker.runtime.transform import Transform, make_transform

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.indexers import IndexFunc
    from gpustack_worker.runtime.resources import Resource

__all__ = ("ADDED", "DELETED", "MODIFIED", "Handler", "Informer", "InformerOptions")

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
Handler = Callable[[str, Any | None, Any | None], None]
_log = structlog.get_logger("gpustack_worker.runtime.informer")


@dataclass(frozen=True, slots=True)
class InformerOptions:
    """Reflector tunables (defaults are client-go's; overridable from the settings ConfigMap)."""

    watch_timeout_min_s: float = 300.0
    watch_timeout_max_s: float = 600.0
    inactivity_timeout_s: float = 120.0
    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    backoff_reset_s: float = 120.0
    page_size: int = 500


class Informer:
    """One kind (optionally one namespace / selector) mirrored into a :class:`Store`."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
        options: InformerOptions | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store = Store(indexers)
        self.options = options or InformerOptions()
        self._transform = transform or make_transform()
        self._clock = clock or MonotonicClock()
        self._rng = rng or random.Random()
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self.last_resource_version = ""
        self.relists = 0
        self._gauge = INFORMER_OBJECTS.labels(resource=resource.plural)
        self._log = _log.bind(resource=resource.plural, namespace=namespace, selector=label_selector)

    # -- consumers -----------------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been stored and dispatched."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait for the first complete LIST."""
        await self._synced.wait()

    def add_handler(self, handler: Handler) -> None:
        """Register ``handler``; objects already cached are replayed to it as ADDED."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler, ADDED, None, obj)

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add named indexes (allowed after start)."""
        self.store.add_indexers(indexers)

    # -- the reflector loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled."""
        opts = self.options
        backoff = Backoff(
            self._clock,
            initial=opts.backoff_initial_s,
            cap=opts.backoff_max_s,
            reset_after=opts.backoff_reset_s,
            rng=self._rng,
        )
        need_list = True
        reason = "initial"
        while True:
            try:
                if need_list:
                    await self._list(reason)
                    need_list = False
                await self._watch()
            except Gone:
                self._log.info("watch expired, relisting", resource_version=self.last_resource_version)
                need_list, reason = True, "gone"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection errors, 5xx, 429, decode errors: back off
                delay = backoff.next()
                status = exc.status if isinstance(exc, ApiError) else None
                self._log.warning(
                    "list/watch failed, backing off",
                    error=repr(exc),
                    status=status,
                    delay_s=round(delay, 3),
                    relist=need_list,
                )
                if need_list:
                    reason = "error"
                await self._clock.sleep(delay)

    async def _list(self, reason: str) -> None:
        items, rv = await self.client.list(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.options.page_size,
        )
        objs = [self._transform(item) for item in items]
        added, updated, deleted = self.store.replace(objs)
        self.last_resource_version = rv
        self.relists += 1
        INFORMER_RELISTS.labels(resource=self.resource.plural, reason=reason).inc()
        self._gauge.set(len(self.store))
        for obj in deleted:
            self._dispatch(DELETED, obj, None)
        for obj in added:
            self._dispatch(ADDED, None, obj)
        for old, new in updated:
            self._dispatch(MODIFIED, old, new)
        self._log.info(
            "listed",
            reason=reason,
            objects=len(objs),
            added=len(added),
            updated=len(updated),
            deleted=len(deleted),
            resource_version=rv,
        )
        self._synced.set()

    async def _watch(self) -> None:
        opts = self.options
        timeout = int(self._rng.uniform(opts.watch_timeout_min_s, opts.watch_timeout_max_s))
        stream = self.client.watch(
            self.resource,
            resource_version=self.last_resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=max(1, timeout),
        )
        loop = asyncio.get_running_loop()
        try:
            async with contextlib.aclosing(stream), asyncio.timeout(opts.inactivity_timeout_s) as deadline:
                async for event in stream:
                    deadline.reschedule(loop.time() + opts.inactivity_timeout_s)
                    self._apply(event)
        except TimeoutError:
            self._log.warning("watch inactive, reconnecting", inactivity_s=opts.inactivity_timeout_s)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("object") or {}
        rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            if rv:
                self.last_resource_version = rv
            return
        raw.setdefault("apiVersion", self.resource.api_version)
        raw.setdefault("kind", self.resource.kind)
        obj = self._transform(raw)
        if kind in (ADDED, MODIFIED):
            old = self.store.upsert(obj)
            if old is None:
                self._dispatch(ADDED, None, obj)
            elif resource_version(old) != resource_version(obj):
                self._dispatch(MODIFIED, old, obj)
        elif kind == DELETED:
            old = self.store.delete(object_key(obj))
            self._dispatch(DELETED, old if old is not None else obj, None)
        if rv:
            self.last_resource_version = rv
        self._gauge.set(len(self.store))

    def _dispatch(self, event: str, old: Any | None, new: Any | None) -> None:
        for handler in self._handlers:
            self._call(handler, event, old, new)

    def _call(self, handler: Handler, event: str, old: Any | None, new: Any | None) -> None:
        try:
            handler(event, old, new)
        except Exception:
            self._log.exception("event handler failed", event=event)
