"""On the real API server: the finalizer compare-and-swap patch (absent list, another writer's entry, a
stale cache), and a controller that adds its finalizer, holds a deleted object while its cleanup (delete a
child, wait until it is gone) runs, then releases it — another writer's finalizer untouched throughout."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.finalizers import Finalizer, Lifecycle
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.registry import InformerRegistry

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE
RUN = "test.gpustack.ai/run"
OURS = "test.gpustack.ai/controlled"
OTHER = "example.com/other-writer"
MANAGER = "finalizer-test"


def _cm(name: str, run: str, *finalizers: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {RUN: run}}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


async def _finalizers(client: Client, name: str) -> list[str] | None:
    got = await client.get(kinds.CONFIG_MAP, name, NS)
    return None if got is None else list(got["metadata"].get("finalizers") or [])


async def test_compare_and_swap_patch_on_the_real_server(devcluster: Any) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    name = f"fin-cas-{run}"
    fin = Finalizer(client, kinds.CONFIG_MAP, OURS, field_manager=MANAGER)
    try:
        created = await client.create(kinds.CONFIG_MAP, _cm(name, run))
        assert await fin.add(created)  # no finalizers at all: the "test null" path
        assert await _finalizers(client, name) == [OURS]
        # another writer appends its own; our stale copy (without it) must not drop it on removal
        await client.patch(
            kinds.CONFIG_MAP, name, [{"op": "add", "path": "/metadata/finalizers/-", "value": OTHER}],
            namespace=NS, patch_type="json",
        )  # fmt: skip
        stale = {**created, "metadata": {**created["metadata"], "finalizers": [OURS]}}
        assert await fin.remove(stale)  # 422 on the test op, re-read, retried
        assert await _finalizers(client, name) == [OTHER]
        assert fin.writes == 2
        # the server recorded our write under our field manager
        got = await client.get(kinds.CONFIG_MAP, name, NS)
        assert got is not None
        assert MANAGER in {e["manager"] for e in got["metadata"]["managedFields"]}
        # a newer object of the same name is never touched through a stale copy
        await client.patch(kinds.CONFIG_MAP, name, {"metadata": {"finalizers": None}}, namespace=NS)
        await client.delete(kinds.CONFIG_MAP, name, NS)
        await client.create(kinds.CONFIG_MAP, _cm(name, run))
        assert not await fin.add(created)
        assert await _finalizers(client, name) == []
        # a deleted object that no longer exists: no write, no error
        await client.delete(kinds.CONFIG_MAP, name, NS)
        assert not await fin.add({**created, "metadata": {**created["metadata"], "uid": None}})
    finally:
        with contextlib.suppress(Exception):
            await client.patch(kinds.CONFIG_MAP, name, {"metadata": {"finalizers": None}}, namespace=NS)
        await client.delete(kinds.CONFIG_MAP, name, NS)
        await client.close()


async def test_add_hold_while_cleanup_runs_then_release(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    parent, child = f"fin-parent-{run}", f"fin-child-{run}"
    registry = InformerRegistry(client)
    objects = registry.informer(kinds.CONFIG_MAP, namespace=NS, label_selector=f"{RUN}={run}")
    fin = Finalizer(client, kinds.CONFIG_MAP, OURS, field_manager=MANAGER)
    states: list[Lifecycle] = []
    child_deletes = 0

    async def cleanup(obj: Any) -> bool:
        """Delete-then-wait: delete the child once, report done only when it has left the cache."""
        nonlocal child_deletes
        cached_child = objects.store.get(f"{NS}/{child}")
        if cached_child is None:
            return True
        if not cached_child["metadata"].get("deletionTimestamp"):
            await client.delete(kinds.CONFIG_MAP, child, NS, uid=cached_child["metadata"]["uid"])
            child_deletes += 1
        return False

    async def reconcile(key: str) -> Result:
        if key != f"{NS}/{parent}":
            return Result.done()
        obj = objects.store.get(key)
        states.append(fin.lifecycle(obj))
        held = await fin.handle(obj, cleanup)
        if held is not None:
            return held
        return Result.done()  # the live reconcile would go here

    controller = Controller(f"fin-test-{run}", reconcile, WorkQueue(f"fin-test-{run}"))
    # the child's events wake the parent (the cleanup waits for the child to go)
    controller.watch(objects, mapper=lambda o: [f"{NS}/{parent}"])
    task = asyncio.create_task(registry.run())
    runner: asyncio.Task[None] | None = None
    try:
        await client.create(kinds.CONFIG_MAP, _cm(child, run, OTHER))  # the child is held by another writer
        await client.create(kinds.CONFIG_MAP, _cm(parent, run, OTHER))
        await asyncio.wait_for(registry.wait_synced(), 30)
        runner = asyncio.create_task(controller.run())

        await eventually(lambda: (o := objects.store.get(f"{NS}/{parent}")) is not None
                         and OURS in o["metadata"].get("finalizers", ()))  # fmt: skip
        assert await _finalizers(client, parent) == [OTHER, OURS]
        assert Lifecycle.ADD in states

        await client.delete(kinds.CONFIG_MAP, parent, NS)
        await eventually(lambda: child_deletes == 1)
        # held: the child is being deleted but still exists (OTHER holds it), so is the parent, with ours
        await eventually(lambda: Lifecycle.CLEANUP in states)
        assert await _finalizers(client, parent) == [OTHER, OURS]
        child_obj = await client.get(kinds.CONFIG_MAP, child, NS)
        assert child_obj is not None and child_obj["metadata"].get("deletionTimestamp")

        # the child's other writer lets go: the child disappears, cleanup is done, ours is released
        await client.patch(kinds.CONFIG_MAP, child, {"metadata": {"finalizers": None}}, namespace=NS)
        await eventually(lambda: (o := objects.store.get(f"{NS}/{parent}")) is not None
                         and OURS not in o["metadata"].get("finalizers", ()))  # fmt: skip
        assert await _finalizers(client, parent) == [OTHER]  # the other writer's entry is untouched
        assert child_deletes == 1
        assert fin.writes == 2  # one add, one remove
        await eventually(lambda: Lifecycle.RELEASED in states)

        await client.patch(kinds.CONFIG_MAP, parent, {"metadata": {"finalizers": None}}, namespace=NS)
        await eventually(lambda: objects.store.get(f"{NS}/{parent}") is None)
        assert await client.get(kinds.CONFIG_MAP, parent, NS) is None
    finally:
        controller.queue.shutdown()
        if runner is not None:
            await asyncio.wait_for(runner, 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for name in (parent, child):
            with contextlib.suppress(Exception):
                await client.patch(kinds.CONFIG_MAP, name, {"metadata": {"finalizers": None}}, namespace=NS)
            await client.delete(kinds.CONFIG_MAP, name, NS)
        await client.close()
