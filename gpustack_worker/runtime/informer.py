"""List-then-watch informer: keeps a :class:`Store` equal to the server's objects of one kind.

kr8s' watch ends silently, cannot resume from a list resourceVersion and loops on 410, so this is our
own reflector with client-go's semantics (``tools/cache/reflector.go``):

1. paginated LIST, objects pushed through the ingest transform, ``Store.replace`` (emitting deletes
   for objects that vanished while we were not watching). Each page is decoded and transformed in a
   worker thread (:meth:`Client.list_pages`) and dropped before the next is fetched, so a relist of
   thousands of Nodes neither holds the event loop (lease renewals, webhooks, probes) for seconds nor
   holds every page decoded at once; only the swap into the store happens on the loop, in one step.
   Lists are served from the API server's watch cache, never as a quorum read from etcd unless they
   have to be: the first with ``resourceVersion=0`` (``""`` where the process lists whole
   collections: the cache ignores ``limit``, :attr:`InformerOptions.paged_first_list`), a relist from
   the last seen RV with ``resourceVersionMatch=NotOlderThan``; only after that RV was answered 410
   (or "too large") does the next list ask for ``RV=""`` (a consistent read). A DaemonSet restarting
   on every node thus costs no etcd range read per pod;
2. WATCH from the list's resourceVersion with bookmarks, a random 5-10 min ``timeoutSeconds`` (spreads
   reconnects) and an inactivity watchdog (a silently dropped TCP stream is noticed);
3. a watch that ends normally, stalls or breaks mid-stream is resumed at once from the last seen RV.
   Everything else backs off (0.8 s x2 -> 30 s, jitter, reset after 2 min without failures) before the
   next attempt: a watch that ends within a second without a single event (client-go's "very short
   watch": the server is refusing us quietly), 410 Gone (then relist), any other error on the watch
   stream (relist), a watch that got no response headers within the inactivity timeout (relist: a proxy
   that accepts and never answers must not pass for a quiet watch), a LIST that fails (410 on LIST:
   relist consistently); a watch refused with 429 or a connection error is retried without relisting,
   and one refused with 401 first reloads the credentials (:meth:`Client.reauthenticate`), since the
   informer only watches at steady state and would otherwise keep a stale cache on an expired token.

:attr:`Informer.healthy` turns false once ``unhealthy_after_failures`` list/watch attempts in a row
failed and no watch has been open for a second since; readiness reports it, so a cache that has gone
stale is visible. Time (backoff sleeps, "very short" watches) comes from the injectable clock.

Handlers receive ``(event, old, new)`` with ``event`` in ADDED/MODIFIED/DELETED; they must be quick
and non-blocking (controllers only enqueue keys). A watch event's ``old`` is the version right before
``new``; a list's update (:attr:`Informer.dispatching_list`) may skip versions the watch never
delivered. Label and field selectors are per informer: a node agent watches only its own Node with
``field_selector="metadata.name=<node>"``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.backoff import Backoff
from gpustack_worker.runtime.client import TRANSPORT_ERRORS, ApiError, Gone, Unauthorized
from gpustack_worker.runtime.clock import Clock, MonotonicClock
from gpustack_worker.runtime.heap import release_free_memory
from gpustack_worker.runtime.metrics import (
    INFORMER_FAILURES,
    INFORMER_HEALTHY,
    INFORMER_OBJECTS,
    INFORMER_RELISTS,
    INFORMER_WATCH_INACTIVE,
)
from gpustack_worker.runtime.store import Store, object_key, resource_version
from gpustack_worker.runtime.transform import Transform, make_transform

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.indexers import IndexFunc
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "ADDED",
    "DELETED",
    "MODIFIED",
    "Handler",
    "Informer",
    "InformerOptions",
    "ShortWatchError",
    "WatchNeverOpenedError",
)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
#: ``resourceVersionMatch`` for a relist from a seen RV (served by the watch cache, never older).
NOT_OLDER_THAN: Final = "NotOlderThan"
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
    #: Items per LIST page. client-go's pager asks for 500; each page is decoded whole before its items
    #: are transformed, and a page of 500 bench-shaped Nodes is ~25 MiB of Python objects at once: pages
    #: of 100 took the peak RSS of a 5,000-Node start-up list from 148 to 109 MiB for 40 requests more
    #: (bench/relist_bench.py).
    page_size: int = 100
    #: The first LIST asks for ``resourceVersion=""`` (paged) instead of ``0``. The API server answers
    #: ``resourceVersion=0`` from its watch cache and ignores ``limit`` there (kube-apiserver 1.35: a
    #: 5,000-Node list came as one 17 MiB body, 105 MiB of decoded objects at once); ``""`` is paged.
    #: For a process that lists whole collections (the controller, the ``--all-nodes`` agent) that is
    #: the difference between a bounded and an unbounded start-up peak; a per-node DaemonSet pod, whose
    #: lists hold its own objects, keeps ``0`` and costs etcd no read per pod.
    paged_first_list: bool = False
    #: A watch that ends sooner than this without one event is a failure (client-go: 1 s), so a server
    #: that closes every watch at once is not hammered with immediate reconnects.
    short_watch_s: float = 1.0
    #: Failed list/watch attempts in a row after which :attr:`Informer.healthy` is false: with the
    #: default backoff the fifth failure comes ~20-50 s into an outage, long enough to ride out an API
    #: server restart, short enough for readiness to show a cache that stopped following the server.
    unhealthy_after_failures: int = 5


class ShortWatchError(Exception):
    """The watch ended within ``short_watch_s`` without delivering a single event."""


class WatchNeverOpenedError(Exception):
    """The watch got no response headers within ``inactivity_timeout_s``: the server never answered."""


def failure_reason(exc: BaseException) -> str:
    """The ``reason`` label of ``gpustack_informer_failures_total`` for a failed list/watch attempt."""
    if isinstance(exc, WatchNeverOpenedError):
        return "watch_never_opened"
    if isinstance(exc, ShortWatchError):
        return "short_watch"
    if isinstance(exc, Gone):
        return "gone"
    if isinstance(exc, Unauthorized):
        return "unauthorized"
    if isinstance(exc, ApiError):
        if exc.status == 429:
            return "throttled"
        if exc.status >= 500:
            return "server_error"
        return "error"
    if isinstance(exc, TRANSPORT_ERRORS):
        return "connection"
    return "error"


class _Relist(Exception):
    """Internal: a failure after which the next attempt must list again (``reason`` for the metric)."""


def _too_large_rv(exc: BaseException) -> bool:
    """The server has not caught up with the requested RV (504 with cause ``ResourceVersionTooLarge``)."""
    if not isinstance(exc, ApiError):
        return False
    causes = (exc.body.get("details") or {}).get("causes") or ()
    return any(isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes)


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
        #: The newest resourceVersion seen (list, event or bookmark); watches and relists resume here.
        self.last_resource_version = ""
        #: Set when the server answered 410 / "too large" for :attr:`last_resource_version` on a LIST:
        #: the next list is a consistent read (``RV=""``) instead of one from the watch cache.
        self.rv_unavailable = False
        #: Successful lists, in total and by reason (``initial``, ``gone``, ``error``).
        self.relists = 0
        #: True while the diffs of a LIST are handed to the handlers: an update then compares the cached
        #: object with the listed one, not two consecutive versions (a handler may need to tell).
        self.dispatching_list = False
        self.relists_by_reason: collections.Counter[str] = collections.Counter()
        #: Failed list/watch attempts since the last success, and the last failure (for diagnostics).
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self._watch_open_since: float | None = None
        self._gauge = INFORMER_OBJECTS.labels(resource=resource.plural)
        INFORMER_HEALTHY.add(self)
        self._log = _log.bind(resource=resource.plural, namespace=namespace, selector=label_selector)

    # -- consumers -----------------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been stored and dispatched."""
        return self._synced.is_set()

    @property
    def healthy(self) -> bool:
        """False once ``unhealthy_after_failures`` attempts in a row failed, until a watch delivers an
        event or has stayed open for ``short_watch_s`` (a successful list alone does not reset it)."""
        if self.consecutive_failures < self.options.unhealthy_after_failures:
            return True
        opened = self._watch_open_since
        return opened is not None and self._clock.now() - opened >= self.options.short_watch_s

    @property
    def watching(self) -> bool:
        """True while a watch accepted by the server is open."""
        return self._watch_open_since is not None

    @property
    def field_managers(self) -> frozenset[str]:
        """Whose managedFields entries the cached objects keep (an Applier bound here checks its own)."""
        return frozenset(getattr(self._transform, "field_managers", ()))

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
                continue
            except asyncio.CancelledError:
                raise
            except _Relist as exc:  # the watch failed: list again (from the last RV) after the backoff
                need_list, reason = True, str(exc)
                cause = exc.__cause__ or exc
            except Exception as exc:  # a failed LIST, or a watch refused without needing a relist
                cause = exc
                if need_list and (isinstance(exc, Gone) or _too_large_rv(exc)):
                    self.rv_unavailable = True  # client-go: the next list is a consistent read
                    reason = "gone"
                elif isinstance(exc, Unauthorized):
                    await self._reauthenticate()
            delay = backoff.next()
            self._failed(cause, delay, relist=need_list)
            await self._clock.sleep(delay)

    def _failed(self, exc: BaseException, delay: float, *, relist: bool) -> None:
        self.consecutive_failures += 1
        INFORMER_FAILURES.labels(resource=self.resource.plural, reason=failure_reason(exc)).inc()
        self.last_error = repr(exc)
        status = exc.status if isinstance(exc, ApiError) else None
        log = self._log.warning if self.healthy else self._log.error
        log(
            "list/watch failed, backing off",
            error=self.last_error,
            status=status,
            delay_s=round(delay, 3),
            relist=relist,
            consecutive_failures=self.consecutive_failures,
            healthy=self.healthy,
            resource_version=self.last_resource_version,
        )

    def _succeeded(self) -> None:
        self.consecutive_failures = 0

    async def _reauthenticate(self) -> None:
        try:
            await self.client.reauthenticate()
        except Exception as exc:  # no credentials to reload: the backoff and the next 401 repeat this
            self._log.warning("re-authentication failed", error=repr(exc))
        else:
            self._log.info("credentials reloaded after 401 on watch")

    def _list_version(self) -> tuple[str, str | None]:
        """``(resourceVersion, resourceVersionMatch)`` of the next LIST, as client-go picks them."""
        if self.rv_unavailable:
            return "", None  # the RV we know is compacted: consistent read (quorum, or cache + progress)
        if not self.last_resource_version:
            # first list: whatever the watch cache holds, unless it must come in pages (options)
            return ("", None) if self.options.paged_first_list else ("0", None)
        return self.last_resource_version, NOT_OLDER_THAN

    async def _list(self, reason: str) -> None:
        rv, match = self._list_version()
        objs: list[Any] = []
        list_rv = ""
        pages = self.client.list_pages(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.options.page_size,
            resource_version=rv,
            resource_version_match=match,
            convert=self._transform_page,
        )
        async with contextlib.aclosing(pages):
            async for page, page_rv in pages:
                objs.extend(page)
                list_rv = page_rv
        added, updated, deleted = self.store.replace(objs)  # one atomic swap, on the loop, as before
        self.last_resource_version = list_rv
        self.rv_unavailable = False
        self.relists += 1
        self.relists_by_reason[reason] += 1
        # A list proves the server answers, not that the cache will stay fresh: only a watch that
        # delivers or stays open resets the failures, so watches that never open (every relist in
        # between succeeding) still turn ``healthy`` false instead of hiding behind the lists.
        INFORMER_RELISTS.labels(resource=self.resource.plural, reason=reason).inc()
        self._gauge.set(len(self.store))
        self.dispatching_list = True
        try:
            for obj in deleted:
                self._dispatch(DELETED, obj, None)
            for obj in added:
                self._dispatch(ADDED, None, obj)
            for old, new in updated:
                self._dispatch(MODIFIED, old, new)
        finally:
            self.dispatching_list = False
        self._log.info(
            "listed",
            reason=reason,
            objects=len(objs),
            added=len(added),
            updated=len(updated),
            deleted=len(deleted),
            requested_resource_version=rv,
            resource_version=list_rv,
        )
        self._synced.set()
        if len(objs) >= self.options.page_size:
            # A list of more than one page: its decoded pages' arenas back to the OS (runtime.heap).
            del objs, added, updated, deleted
            await asyncio.to_thread(release_free_memory)

    def _transform_page(self, items: list[dict[str, Any]]) -> list[Any]:
        """One LIST page through the ingest transform; runs in :meth:`Client.list_pages`' worker thread,
        so the decoded page is dropped as soon as its frozen projections exist.

        Every item is transformed, also one whose resourceVersion equals the cached object's: reusing the
        cached projection instead was measured (bench/relist_bench.py) to cut a relist's time by a
        quarter but to raise its peak RSS (5,000 Nodes: 208 MiB instead of 160 MiB; 20,000: 300 instead
        of 240), and the peak is what the memory limit must cover.
        """
        return [self._transform(item) for item in items]

    def _opened(self) -> None:
        self._watch_open_since = self._clock.now()

    async def _watch(self) -> None:
        """One watch: returns when it ended in a way that allows resuming at once from the last RV.

        Raises :class:`_Relist` (caused by the error) when the next attempt must list first; lets a
        refusal that needs no relist (429, 401, connection errors) propagate.
        """
        opts = self.options
        timeout = int(self._rng.uniform(opts.watch_timeout_min_s, opts.watch_timeout_max_s))
        started = self._clock.now()  # before the request, as client-go: proxies may hold headers back
        self._watch_open_since = None
        stream = self.client.watch(
            self.resource,
            resource_version=self.last_resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=max(1, timeout),
            on_open=self._opened,
        )
        events = 0
        loop = asyncio.get_running_loop()
        try:
            async with contextlib.aclosing(stream), asyncio.timeout(opts.inactivity_timeout_s) as deadline:
                async for event in stream:
                    deadline.reschedule(loop.time() + opts.inactivity_timeout_s)
                    events += 1
                    if events == 1:
                        self._succeeded()
                    self._apply(event)
        except TimeoutError:
            if self._watch_open_since is None:
                # No response headers within the inactivity timeout: nothing has been heard from the
                # server (a proxy that accepts and never answers). A failure like a broken watch: back
                # off, relist, and count it towards ``healthy``, or the cache stays frozen while it looks
                # fresh.
                self._log.warning("watch never opened, relisting", inactivity_s=opts.inactivity_timeout_s)
                raise _Relist("error") from WatchNeverOpenedError(
                    f"no response headers for the watch within {opts.inactivity_timeout_s} s"
                )
            # Opened, then silent (a dropped TCP stream): resumed at once from the last RV, as an end.
            self._log.warning("watch inactive, reconnecting", inactivity_s=opts.inactivity_timeout_s)
            INFORMER_WATCH_INACTIVE.labels(resource=self.resource.plural).inc()
        except Gone as exc:
            self._log.info("watch expired, relisting", resource_version=self.last_resource_version)
            raise _Relist("gone") from exc
        except ApiError as exc:
            if self._watch_open_since is not None or exc.status not in (401, 429):
                raise _Relist("error") from exc  # an ERROR event, or a refusal other than 401/429
            raise  # refused with 401 / 429: retry the watch itself after the backoff
        except TRANSPORT_ERRORS as exc:
            if self._watch_open_since is None:
                raise  # could not connect (API server down): retry the watch after the backoff
            # broke mid-stream (the server went away): an end like any other, judged below
            self._log.info("watch stream broke", error=repr(exc))
        except Exception as exc:  # an undecodable event: start over from a list
            raise _Relist("error") from exc
        finally:
            self._watch_open_since = None
        if events == 0 and self._clock.now() - started < opts.short_watch_s:
            raise _Relist("error") from ShortWatchError(
                f"watch ended within {opts.short_watch_s} s without an event"
            )
        self._succeeded()

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
            self._log.exception("event handler failed", watch_event=event)
