"""InformerRegistry: one informer per (kind, scope, selectors), shared field managers and indexes, and
informers added after start are started and synced before anyone gets them from ``synced()``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.runtime.indexers import by_label, namespace_of
from gpustack_worker.runtime.registry import InformerKey, InformerRegistry, RegistryError
from gpustack_worker.runtime.resources import Resource

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

NODE = Resource("", "v1", "Node", "nodes", namespaced=False)
CQ = Resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
CM = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)


def _managed(*managers: str) -> list[dict[str, Any]]:
    return [
        {"manager": m, "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {f"f:{m}": {}}}}}
        for m in managers
    ]


def _obj(resource: Resource, name: str, *managers: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1", "labels": dict(labels)}
    if resource.namespaced:
        meta["namespace"] = "ns"
    meta["managedFields"] = _managed(*managers)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}


class FakeClient:
    """Serves LIST from ``objects`` (after ``gate`` opens) and a watch that stays open without events."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects
        self.gate = asyncio.Event()
        self.gate.set()
        self.lists: list[tuple[str, str | None]] = []

    async def list(self, resource: Resource, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        await self.gate.wait()
        self.lists.append((resource.plural, kwargs.get("label_selector")))
        return [dict(o, metadata=dict(o["metadata"])) for o in self.objects.get(resource.plural, [])], "10"

    async def watch(self, resource: Resource, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - never reached


@contextlib.asynccontextmanager
async def running(registry: InformerRegistry) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(registry.run())
    await asyncio.sleep(0)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _registry(client: FakeClient) -> InformerRegistry:
    return InformerRegistry(client)  # type: ignore[arg-type]


def test_same_kind_scope_and_selectors_share_one_informer() -> None:
    reg = _registry(FakeClient({}))
    a = reg.informer(NODE, label_selector="gpustack.ai/managed=true")
    b = reg.informer(NODE, label_selector="gpustack.ai/managed=true")
    c = reg.informer(NODE)
    d = reg.informer(NODE, field_selector="metadata.name=n1")
    e = reg.informer(CM, namespace="ns")
    f = reg.informer(CM)
    assert a is b
    assert len({id(x) for x in (a, c, d, e, f)}) == 5
    assert len(reg) == 5
    assert reg.get(InformerKey(NODE, label_selector="gpustack.ai/managed=true")) is a
    # empty strings mean "no selector", the same informer as None
    assert reg.informer(NODE, label_selector="", namespace="") is c


async def test_every_registered_field_manager_is_kept_by_every_informer_of_the_kind() -> None:
    queue = _obj(CQ, "q1", "chain-queues", "chain-drain", "kueue", "kubectl")
    client = FakeClient({"clusterqueues": [queue]})
    reg = _registry(client)
    queues = reg.informer(CQ, field_manager="chain-queues")
    held = reg.informer(CQ, label_selector="x=y", field_manager=["chain-drain"])
    reg.register_field_manager(CQ, "chain-queues")  # again: harmless
    assert reg.field_managers(CQ) == {"chain-queues", "chain-drain"}
    assert reg.field_managers(NODE) == frozenset()
    async with running(reg):
        await reg.wait_synced()
    cached = queues.store.get("q1")
    assert cached is not None
    kept = sorted(e["manager"] for e in cached["metadata"]["managedFields"])
    assert kept == ["chain-drain", "chain-queues"]  # not kueue's, not kubectl's
    assert held.store.get("q1") is not None
    # the shared transform says what it keeps (the Applier's start-up check reads this)
    assert getattr(queues._transform, "field_managers", None) == {"chain-drain", "chain-queues"}


async def test_a_new_field_manager_after_start_is_an_error_but_a_known_one_or_a_new_kind_is_not() -> None:
    reg = _registry(FakeClient({}))
    reg.informer(CQ, field_manager="chain-queues")
    async with running(reg):
        await reg.wait_synced()
        with pytest.raises(RegistryError, match="after its informers started"):
            reg.informer(CQ, field_manager="chain-latecomer")
        with pytest.raises(RegistryError):
            reg.register_field_manager(CQ, "chain-latecomer")
        assert reg.field_managers(CQ) == {"chain-queues"}
        reg.informer(CQ, label_selector="a=b", field_manager="chain-queues")  # known manager: fine
        reg.informer(NODE, field_manager="chain-flavors")  # kind with no running informer: fine
        assert reg.field_managers(NODE) == {"chain-flavors"}


async def test_indexes_are_added_to_the_shared_store_and_a_conflicting_definition_is_refused() -> None:
    client = FakeClient({"nodes": [_obj(NODE, "n1", pool="a"), _obj(NODE, "n2", pool="b")]})
    reg = _registry(client)
    pool = by_label("pool")
    first = reg.informer(NODE, indexers={"pool": pool})
    second = reg.informer(NODE, indexers={"pool": pool, "ns": namespace_of})  # same fn: fine
    assert first is second
    with pytest.raises(RegistryError, match="already defined"):
        reg.informer(NODE, indexers={"pool": by_label("other")})
    async with running(reg):
        await reg.wait_synced()
        assert [o["metadata"]["name"] for o in first.store.by_index("pool", "a")] == ["n1"]
        # an index asked for after start indexes what is already cached
        reg.informer(NODE, indexers={"late": by_label("pool")})
        assert first.store.index_keys("late", "b") == {"n2"}


async def test_an_informer_added_after_start_is_started_and_synced_before_synced_returns() -> None:
    client = FakeClient({"nodes": [_obj(NODE, "n1")], "clusterqueues": [_obj(CQ, "q1"), _obj(CQ, "q2")]})
    reg = _registry(client)
    nodes = reg.informer(NODE)
    async with running(reg):
        await reg.wait_synced()
        assert nodes.has_synced
        assert reg.started
        client.gate.clear()  # hold the next LIST so "not yet synced" is observable
        waiter = asyncio.create_task(reg.synced(CQ, field_manager="chain-queues"))
        await asyncio.sleep(0.05)
        assert not waiter.done(), "synced() returned before the late informer listed"
        late = reg.informer(CQ)
        assert not late.has_synced
        all_synced = asyncio.create_task(reg.wait_synced())
        await asyncio.sleep(0.05)
        assert not all_synced.done(), "wait_synced() must include informers added after start"
        client.gate.set()
        got = await asyncio.wait_for(waiter, 5)
        await asyncio.wait_for(all_synced, 5)
        assert got is late
        assert sorted(got.store.keys()) == ["q1", "q2"]
    assert not reg.started
    assert ("clusterqueues", None) in client.lists


async def test_run_twice_is_refused() -> None:
    reg = _registry(FakeClient({}))
    async with running(reg):
        with pytest.raises(RegistryError, match="already running"):
            await reg.run()
