"""Finalizers: add one, hold the object while cleanup runs, release it — and tell a reconcile which.

Writes. ``metadata.finalizers`` is shared by every controller that guards an object (Kueue puts its
``resource-in-use`` finalizer on the same ClusterQueues and ResourceFlavors), so a write must never
lose another writer's entry. Server-side apply would merge by value, but an apply PATCH creates the
object when it has just been deleted (an apply of ``metadata`` only would resurrect a ConfigMap-like
kind), and an apply cannot remove a finalizer that was added by another operation. So the write is a
JSON patch that is a compare-and-swap of that one field:

    test /metadata/uid         = <uid we decided on>
    test /metadata/finalizers  = <the list we read>   (null when absent)
    add  /metadata/finalizers  = <the list with ours added / removed>   (remove when it becomes empty)

It never creates (404 on a missing object), never touches another object of the same name (uid), and
a concurrent change to the list (another controller's finalizer) fails the test with 422; we then read
the object once more from the server and retry (a few times, then the reconcile is retried through the
rate limiter). Status churn does not conflict, unlike a resourceVersion precondition. Adding is
skipped for an object that is already being deleted (the API server forbids new finalizers then).
A reconcile that runs again before the watch has delivered our own write (the cache still shows the
list we changed) writes nothing: the finalizer remembers the resourceVersion its write produced and
treats an older cached object of the same UID as already done, as :class:`~gpustack_worker.runtime.
apply.Applier` does for applies — otherwise the stale ``test`` fails with 422 and costs a re-read.

Reconciling. :func:`lifecycle` is the pure decision a reconcile starts with; :meth:`Finalizer.handle`
runs it: a live object gets the finalizer (then the normal reconcile continues); an object being
deleted that carries ours runs ``cleanup`` and, once cleanup reports done, releases the finalizer;
cleanup that is not done yet keeps holding (the reconcile is woken again by the events of what it
waits for, or polls with ``hold_requeue_s``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.apply import resource_version_number
from gpustack_worker.runtime.client import ApiError, NotFound
from gpustack_worker.runtime.controller import Result

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = ("Finalizer", "Lifecycle", "finalizer_patch", "has_finalizer", "is_deleting", "lifecycle")

_log = structlog.get_logger("gpustack_worker.runtime.finalizers")
#: A failed JSON-patch ``test`` (someone changed the list since we read it).
_TEST_FAILED: Final = 422
#: Own writes remembered at most (the oldest forgotten first: that only costs a redundant write).
_RECENT_MAX: Final = 4096


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def finalizers_of(obj: Mapping[str, Any] | None) -> list[str]:
    """The object's finalizers (empty when none)."""
    return [str(f) for f in _meta(obj).get("finalizers") or ()]


def has_finalizer(obj: Mapping[str, Any] | None, finalizer: str) -> bool:
    """True when ``finalizer`` is on the object."""
    return finalizer in finalizers_of(obj)


def is_deleting(obj: Mapping[str, Any] | None) -> bool:
    """True once the API server accepted a delete (``metadata.deletionTimestamp`` is set)."""
    return bool(_meta(obj).get("deletionTimestamp"))


class Lifecycle(enum.Enum):
    """Where an object stands with respect to one finalizer."""

    #: Not in the cache (deleted and released, or never existed): nothing to do.
    ABSENT = "absent"
    #: Live, our finalizer missing: add it before creating anything that needs cleanup.
    ADD = "add"
    #: Live and guarded: reconcile normally.
    LIVE = "live"
    #: Being deleted and still held by us: clean up, then release.
    CLEANUP = "cleanup"
    #: Being deleted, ours already released (other finalizers may still hold it): nothing to do.
    RELEASED = "released"


def lifecycle(obj: Mapping[str, Any] | None, finalizer: str) -> Lifecycle:
    """The pure decision a reconcile starts with."""
    if obj is None:
        return Lifecycle.ABSENT
    held = has_finalizer(obj, finalizer)
    if is_deleting(obj):
        return Lifecycle.CLEANUP if held else Lifecycle.RELEASED
    return Lifecycle.LIVE if held else Lifecycle.ADD


def finalizer_patch(obj: Mapping[str, Any], finalizer: str, *, present: bool) -> list[dict[str, Any]] | None:
    """The compare-and-swap JSON patch making ``finalizer`` present/absent; None when already so."""
    current = finalizers_of(obj)
    if (finalizer in current) == present:
        return None
    wanted = [*current, finalizer] if present else [f for f in current if f != finalizer]
    raw = _meta(obj).get("finalizers")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": str(_meta(obj).get("uid") or "")},
        {"op": "test", "path": "/metadata/finalizers", "value": list(raw) if raw is not None else None},
    ]
    if wanted:
        ops.append({"op": "add", "path": "/metadata/finalizers", "value": wanted})
    else:
        ops.append({"op": "remove", "path": "/metadata/finalizers"})
    return ops


class Finalizer:
    """One finalizer of one kind, written by one controller."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        finalizer: str,
        *,
        field_manager: str,
        attempts: int = 3,
    ) -> None:
        self.client = client
        self.resource = resource
        self.finalizer = finalizer
        self.field_manager = field_manager
        self.attempts = max(1, attempts)
        #: Finalizer writes issued (adds + removes) — tests assert "no write at steady state" with it.
        self.writes = 0
        #: (namespace, name) → (uid, resourceVersion, present) of our last accepted write.
        self._recent: dict[tuple[str, str], tuple[str, int, bool]] = {}

    def lifecycle(self, obj: Mapping[str, Any] | None) -> Lifecycle:
        """See :func:`lifecycle`."""
        return lifecycle(obj, self.finalizer)

    async def add(self, obj: Mapping[str, Any]) -> bool:
        """Add the finalizer unless present or the object is being deleted; True if written."""
        return await self._set(obj, present=True)

    async def remove(self, obj: Mapping[str, Any]) -> bool:
        """Remove the finalizer if present; True if written."""
        return await self._set(obj, present=False)

    def _written_already(self, obj: Mapping[str, Any], *, present: bool) -> bool:
        """Is ``obj`` older than our own accepted write that made the finalizer ``present`` (its watch
        event not delivered yet)? Forgets the write once the cache has caught up or holds another
        object."""
        meta = _meta(obj)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        entry = self._recent.get(key)
        if entry is None:
            return False
        uid, version, wrote_present = entry
        seen = resource_version_number(meta.get("resourceVersion"))
        if seen is None or meta.get("uid") != uid or seen >= version:
            del self._recent[key]
            return False
        return wrote_present == present

    def _remember(self, written: Any, *, present: bool) -> None:
        meta = _meta(written if isinstance(written, Mapping) else None)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        version, uid = resource_version_number(meta.get("resourceVersion")), meta.get("uid")
        if version is None or not uid:
            self._recent.pop(key, None)
            return
        self._recent[key] = (str(uid), version, present)
        while len(self._recent) > _RECENT_MAX:
            del self._recent[next(iter(self._recent))]

    async def _set(self, obj: Mapping[str, Any], *, present: bool) -> bool:
        current: Mapping[str, Any] | None = obj
        meta = _meta(obj)
        uid = meta.get("uid")
        if self._written_already(obj, present=present):
            return False
        for attempt in range(self.attempts):
            if current is None or (uid and _meta(current).get("uid") != uid):
                return False  # gone, or replaced by another object of the same name
            if present and is_deleting(current):
                return False
            ops = finalizer_patch(current, self.finalizer, present=present)
            if ops is None:
                return False
            name, namespace = str(_meta(current)["name"]), _meta(current).get("namespace")
            try:
                written = await self.client.patch(
                    self.resource,
                    name,
                    ops,
                    namespace=namespace,
                    patch_type="json",
                    field_manager=self.field_manager,
                )
            except NotFound:
                return False
            except ApiError as exc:
                if exc.status != _TEST_FAILED or attempt + 1 == self.attempts:
                    raise
                _log.debug(
                    "finalizer list changed underneath, re-reading", kind=self.resource.kind, name=name
                )
                current = await self.client.get(self.resource, name, namespace)
                continue
            self.writes += 1
            self._remember(written, present=present)
            _log.info(
                "finalizer added" if present else "finalizer removed",
                kind=self.resource.kind,
                name=name,
                namespace=namespace,
                finalizer=self.finalizer,
            )
            return True
        return False  # pragma: no cover - the loop returns or raises

    async def handle(
        self,
        obj: Mapping[str, Any] | None,
        cleanup: Callable[[Mapping[str, Any]], Awaitable[bool]],
        *,
        hold_requeue_s: float | None = None,
    ) -> Result | None:
        """Run the finalizer part of a reconcile.

        Returns None when the object is live (our finalizer is on it now) and the reconcile should
        continue; otherwise the :class:`Result` the reconcile should return: done when the object is
        absent or released, or when ``cleanup(obj)`` reported done and the finalizer was removed; while
        cleanup reports not done, ``Result.after(hold_requeue_s)`` (or done, relying on the events of
        what cleanup waits for, when ``hold_requeue_s`` is None).
        """
        state = self.lifecycle(obj)
        if state is Lifecycle.ADD:
            assert obj is not None
            await self.add(obj)
            return None
        if state is Lifecycle.LIVE:
            return None
        if state is Lifecycle.CLEANUP:
            assert obj is not None
            if not await cleanup(obj):
                return Result.after(hold_requeue_s) if hold_requeue_s else Result.done()
            await self.remove(obj)
        return Result.done()
