"""Finalizers: the pure lifecycle decision, the compare-and-swap JSON patch, retry after a concurrent
writer changed the list, and ``handle`` (add on a live object, cleanup then release on deletion)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.runtime.client import ApiError, NotFound
from gpustack_worker.runtime.controller import Result
from gpustack_worker.runtime.finalizers import (
    Finalizer,
    Lifecycle,
    finalizer_patch,
    has_finalizer,
    is_deleting,
    lifecycle,
)
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.resources import Resource

IT = Resource("worker.gpustack.ai", "v1alpha1", "InstanceType", "instancetypes", namespaced=False)
OURS = "gpustack.ai/controlled"
KUEUE = "kueue.x-k8s.io/resource-in-use"
STAMP = "2025-01-01T00:00:00Z"


def obj(*finalizers: str, deleting: bool = False, uid: str = "u1", name: str = "it") -> Any:
    meta: dict[str, Any] = {"name": name, "uid": uid, "resourceVersion": "5"}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    if deleting:
        meta["deletionTimestamp"] = STAMP
    return freeze({"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType", "metadata": meta})


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (None, Lifecycle.ABSENT),
        (obj(), Lifecycle.ADD),
        (obj(KUEUE), Lifecycle.ADD),
        (obj(OURS), Lifecycle.LIVE),
        (obj(KUEUE, OURS), Lifecycle.LIVE),
        (obj(OURS, deleting=True), Lifecycle.CLEANUP),
        (obj(KUEUE, OURS, deleting=True), Lifecycle.CLEANUP),
        (obj(KUEUE, deleting=True), Lifecycle.RELEASED),
        (obj(deleting=True), Lifecycle.RELEASED),
    ],
)
def test_lifecycle(item: Any, expected: Lifecycle) -> None:
    assert lifecycle(item, OURS) is expected


def test_predicates() -> None:
    assert has_finalizer(obj(KUEUE, OURS), OURS)
    assert not has_finalizer(obj(KUEUE), OURS)
    assert not has_finalizer(None, OURS)
    assert is_deleting(obj(deleting=True))
    assert not is_deleting(obj())
    assert not is_deleting(None)


@pytest.mark.parametrize(
    ("item", "present", "expected"),
    [
        (obj(), True, [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/metadata/finalizers", "value": None},
            {"op": "add", "path": "/metadata/finalizers", "value": [OURS]},
        ]),
        (obj(KUEUE), True, [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/metadata/finalizers", "value": [KUEUE]},
            {"op": "add", "path": "/metadata/finalizers", "value": [KUEUE, OURS]},
        ]),
        (obj(OURS, KUEUE), False, [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/metadata/finalizers", "value": [OURS, KUEUE]},
            {"op": "add", "path": "/metadata/finalizers", "value": [KUEUE]},
        ]),
        (obj(OURS), False, [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/metadata/finalizers", "value": [OURS]},
            {"op": "remove", "path": "/metadata/finalizers"},
        ]),
        (obj(OURS), True, None),
        (obj(KUEUE), False, None),
    ],
)  # fmt: skip
def test_finalizer_patch(item: Any, present: bool, expected: list[dict[str, Any]] | None) -> None:
    assert finalizer_patch(item, OURS, present=present) == expected


class PatchServer:
    """One object and the JSON-patch semantics the API server applies (test / add / remove)."""

    def __init__(self, stored: dict[str, Any] | None, *, bump: bool = False) -> None:
        self.stored = stored
        #: Each accepted patch gives the object a new resourceVersion, as the API server does.
        self.bump = bump
        self.patches: list[list[dict[str, Any]]] = []
        self.gets = 0
        #: Run before a patch is applied (simulates another writer racing us).
        self.before_patch: list[dict[str, Any] | None] = []

    async def patch(self, resource: Resource, name: str, ops: Any, **kw: Any) -> dict[str, Any]:
        assert kw["patch_type"] == "json"
        assert kw["field_manager"] == "chain-instancetypes"
        self.patches.append(ops)
        if self.before_patch:
            self.stored = self.before_patch.pop(0)
        if self.stored is None:
            raise NotFound(404, "NotFound", {})
        doc = copy.deepcopy(self.stored)
        meta = doc["metadata"]
        for op in ops:
            field = op["path"].removeprefix("/metadata/")
            if op["op"] == "test" and meta.get(field) != op["value"]:
                raise ApiError(422, "", {}, f"testing value {op['path']} failed")
            if op["op"] == "add":
                meta[field] = op["value"]
            if op["op"] == "remove":
                del meta[field]
        if self.bump:
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.stored = doc
        return doc

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self.gets += 1
        return copy.deepcopy(self.stored)


def _thaw(item: Any) -> dict[str, Any]:
    return {"metadata": {k: list(v) if isinstance(v, tuple) else v for k, v in item["metadata"].items()}}


def _finalizer(server: PatchServer) -> Finalizer:
    return Finalizer(server, IT, OURS, field_manager="chain-instancetypes")  # type: ignore[arg-type]


async def test_add_and_remove_keep_other_writers_entries() -> None:
    cached = obj(KUEUE)
    server = PatchServer(_thaw(cached))
    fin = _finalizer(server)
    assert await fin.add(cached)
    assert server.stored is not None and server.stored["metadata"]["finalizers"] == [KUEUE, OURS]
    assert not await fin.add(obj(KUEUE, OURS))  # present: no write
    assert await fin.remove(obj(KUEUE, OURS))
    assert server.stored["metadata"]["finalizers"] == [KUEUE]
    assert not await fin.remove(obj(KUEUE))  # absent: no write
    assert fin.writes == 2
    assert len(server.patches) == 2


async def test_a_concurrent_change_to_the_list_is_retried_on_the_fresh_object_and_loses_nothing() -> None:
    cached = obj()  # our cache: no finalizers yet
    server = PatchServer(_thaw(cached))
    # meanwhile Kueue added its finalizer: our test op fails, we re-read and retry
    server.before_patch = [_thaw(obj(KUEUE))]
    fin = _finalizer(server)
    assert await fin.add(cached)
    assert server.gets == 1
    assert len(server.patches) == 2
    assert server.stored is not None and server.stored["metadata"]["finalizers"] == [KUEUE, OURS]


async def test_a_reconcile_before_our_own_write_reached_the_cache_writes_nothing() -> None:
    stale = obj()  # the cache, before the watch delivers our write (resourceVersion 5)
    server = PatchServer(_thaw(stale), bump=True)
    fin = _finalizer(server)
    assert await fin.add(stale)
    assert not await fin.add(stale)  # our write (resourceVersion 6) is on its way: no 422, no re-read
    assert (len(server.patches), server.gets, fin.writes) == (1, 0, 1)
    assert server.stored is not None
    caught_up = freeze(server.stored)
    assert not await fin.add(caught_up)  # present in the cache now
    assert await fin.remove(caught_up)  # the other direction is a decision of its own
    assert "finalizers" not in server.stored["metadata"]
    assert len(server.patches) == 2


async def test_the_own_write_memory_never_hides_another_object_or_a_newer_one() -> None:
    server = PatchServer(_thaw(obj(uid="u1")), bump=True)
    fin = _finalizer(server)
    assert await fin.add(obj(uid="u1"))
    # recreated under the same name (another UID, an older resourceVersion): decided on its own
    server.stored = _thaw(obj(uid="u2"))
    assert await fin.add(obj(uid="u2"))
    # a newer object of the same UID without our finalizer (someone removed it): written again
    server = PatchServer(_thaw(obj()), bump=True)
    fin = _finalizer(server)
    assert await fin.add(obj())
    newer = copy.deepcopy(_thaw(obj()))
    newer["metadata"]["resourceVersion"] = "9"
    server.stored = copy.deepcopy(newer)
    assert await fin.add(freeze(newer))
    assert len(server.patches) == 2


async def test_persistent_conflicts_raise_after_the_attempts() -> None:
    server = PatchServer(_thaw(obj()))
    server.before_patch = [_thaw(obj("a")), _thaw(obj("b")), _thaw(obj("c"))]
    fin = _finalizer(server)
    with pytest.raises(ApiError) as err:
        await fin.add(obj())
    assert err.value.status == 422
    assert len(server.patches) == 3


async def test_no_write_for_a_gone_object_a_replaced_object_or_an_add_while_deleting() -> None:
    fin = _finalizer(PatchServer(None))
    assert not await fin.add(obj())  # 404: gone
    server = PatchServer(_thaw(obj(uid="u1")))
    server.before_patch = [_thaw(obj(uid="u2"))]  # recreated under the same name
    fin = _finalizer(server)
    assert not await fin.add(obj(uid="u1"))
    assert server.stored is not None and "finalizers" not in server.stored["metadata"]
    server = PatchServer(_thaw(obj(deleting=True)))
    assert not await _finalizer(server).add(obj(deleting=True))
    assert server.patches == []


async def test_handle_adds_on_a_live_object_and_lets_the_reconcile_continue() -> None:
    server = PatchServer(_thaw(obj()))
    fin = _finalizer(server)
    calls: list[Any] = []

    async def cleanup(o: Any) -> bool:
        calls.append(o)
        return True

    assert await fin.handle(obj(), cleanup) is None
    assert server.stored is not None and server.stored["metadata"]["finalizers"] == [OURS]
    assert await fin.handle(obj(OURS), cleanup) is None
    assert fin.writes == 1
    assert calls == []


async def test_handle_holds_while_cleanup_is_not_done_then_releases() -> None:
    deleting = obj(KUEUE, OURS, deleting=True)
    server = PatchServer(_thaw(deleting))
    fin = _finalizer(server)
    done = [False]
    seen: list[Any] = []

    async def cleanup(o: Any) -> bool:
        seen.append(o)
        return done[0]

    assert await fin.handle(deleting, cleanup) == Result.done()  # wait for the events of what we wait on
    assert await fin.handle(deleting, cleanup, hold_requeue_s=5.0) == Result.after(5.0)
    assert server.patches == []  # held: nothing written
    done[0] = True
    assert await fin.handle(deleting, cleanup) == Result.done()
    assert server.stored is not None and server.stored["metadata"]["finalizers"] == [KUEUE]
    assert seen == [deleting, deleting, deleting]
    # released (another finalizer still holds it) or absent: nothing to do, cleanup not called again
    assert await fin.handle(obj(KUEUE, deleting=True), cleanup) == Result.done()
    assert await fin.handle(None, cleanup) == Result.done()
    assert len(seen) == 3
