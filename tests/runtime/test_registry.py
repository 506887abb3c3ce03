"""InformerRegistry: one informer per (kind, scope, selectors), shared field managers and indexes, and
informers added after start are started and synced before anyone gets them from ``synced()``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime import registry as registry_module
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.indexers import by_label, namespace_of
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.registry import InformerKey, InformerRegistry, RegistryError
from gpustack_worker.runtime.resources import Resource
from tests.runtime.test_manager_supervision import StandInInformer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.conftest import Poll

NODE = Resource("", "v1", "Node", "nodes", namespaced=False)
CQ = Resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
CM = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
RUN = "test.gpustack.ai/run"


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
        #: Plurals whose LIST was asked for (it waits at the gate while the gate is shut).
        self.asked: list[str] = []
        self.lists: list[tuple[str, str | None]] = []

    async def list(self, resource: Resource, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        self.asked.append(resource.plural)
        await self.gate.wait()
        self.lists.append((resource.plural, kwargs.get("label_selector")))
        return [dict(o, metadata=dict(o["metadata"])) for o in self.objects.get(resource.plural, [])], "10"

    async def list_pages(self, resource: Resource, *, convert: Any, **kwargs: Any) -> AsyncIterator[Any]:
        items, rv = await self.list(resource, **kwargs)
        yield convert(items), rv

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


async def test_an_informer_added_after_start_is_started_and_synced_before_synced_returns(
    eventually: Poll,
) -> None:
    client = FakeClient({"nodes": [_obj(NODE, "n1")], "clusterqueues": [_obj(CQ, "q1"), _obj(CQ, "q2")]})
    reg = _registry(client)
    nodes = reg.informer(NODE)
    async with running(reg):
        await reg.wait_synced()
        assert nodes.has_synced
        assert reg.started
        client.gate.clear()  # hold the next LIST so "not yet synced" is observable

        async def synced_cq() -> tuple[Any, bool]:
            got = await reg.synced(CQ, field_manager="chain-queues")
            return got, got.has_synced  # as it was the moment synced() returned

        waiter = asyncio.create_task(synced_cq())
        # synced() creates and starts the late informer in its first step; then its LIST waits at the gate
        await eventually(lambda: "clusterqueues" in client.asked, within=5.0)
        assert not waiter.done(), "synced() returned before the late informer listed"
        late = reg.informer(CQ)
        assert not late.has_synced
        all_synced = asyncio.create_task(reg.wait_synced())
        # A wait for the informers that had synced, asked after it, returns after the same steps: once it
        # has, a wait_synced() that left the late informer out would have returned too.
        await asyncio.wait_for(reg.wait_synced(nodes), 5)
        assert not all_synced.done(), "wait_synced() must include informers added after start"
        client.gate.set()
        got, listed = await asyncio.wait_for(waiter, 5)
        assert listed, "synced() returned before the late informer listed"
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


# -- on the real API server ----------------------------------------------------------------------------


@pytest.mark.cluster
async def test_manager_syncs_registry_informers_and_a_late_informer_syncs_before_its_controller_runs(
    devcluster: Any, eventually: Poll
) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    ns = kinds.SYSTEM_NAMESPACE
    early_sel, late_sel = f"{RUN}=early-{run}", f"{RUN}=late-{run}"
    manager_a, manager_b = f"reg-a-{run}", f"reg-b-{run}"

    def cm(name: str, selector: str) -> dict[str, Any]:
        label = selector.split("=", 1)
        meta = {"name": name, "namespace": ns, "labels": {label[0]: label[1]}}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}

    for i in range(3):
        await client.create(kinds.CONFIG_MAP, cm(f"early-{run}-{i}", early_sel))
    for i in range(20):
        await client.create(kinds.CONFIG_MAP, cm(f"late-{run}-{i}", late_sel))
    # two field managers write the early objects, plus one the registry never hears of
    for mgr in (manager_a, manager_b, f"stranger-{run}"):
        meta = {"name": f"early-{run}-0", "namespace": ns}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {mgr: "x"}}
        await client.apply(kinds.CONFIG_MAP, body, field_manager=mgr)

    registry = InformerRegistry(client)
    early = registry.informer(
        kinds.CONFIG_MAP, namespace=ns, label_selector=early_sel, field_manager=manager_a
    )
    assert registry.informer(
        kinds.CONFIG_MAP, namespace=ns, label_selector=early_sel, field_manager=manager_b
    ) is early  # fmt: skip
    first_seen: dict[str, int] = {}

    async def early_reconcile(key: str) -> Result:
        first_seen.setdefault("early", len(early.store))
        return Result.done()

    early_ctl = Controller(f"reg-early-{run}", early_reconcile, WorkQueue(f"reg-early-{run}"))
    early_ctl.watch(early)
    manager = Manager()
    manager.add_registry(registry)
    manager.add_controller(early_ctl)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    late_runner: asyncio.Task[None] | None = None
    late_ctl: Controller | None = None
    try:
        await asyncio.wait_for(manager.leading.wait(), 60)
        assert early.has_synced
        await eventually(lambda: "early" in first_seen)
        assert first_seen["early"] == 3  # the first reconcile saw the whole cache
        cached = early.store.get(f"{ns}/early-{run}-0")
        assert cached is not None
        kept = {e["manager"] for e in cached["metadata"].get("managedFields", ())}
        assert kept == {manager_a, manager_b}
        assert early.field_managers == {manager_a, manager_b}
        with pytest.raises(RegistryError):
            registry.informer(kinds.CONFIG_MAP, label_selector=early_sel, field_manager=f"late-{run}")

        # after start: a new informer is started by the running registry and handed out synced
        late = await asyncio.wait_for(
            registry.synced(kinds.CONFIG_MAP, namespace=ns, label_selector=late_sel, field_manager=manager_a),
            30,
        )
        assert late.has_synced and len(late.store) == 20
        assert registry.informer(kinds.CONFIG_MAP, namespace=ns, label_selector=late_sel) is late
        seen_at_first: list[int] = []

        async def late_reconcile(key: str) -> Result:
            seen_at_first.append(len(late.store))
            return Result.done()

        late_ctl = Controller(f"reg-late-{run}", late_reconcile, WorkQueue(f"reg-late-{run}"))
        late_ctl.watch(late)
        late_runner = asyncio.create_task(late_ctl.run())
        await eventually(lambda: len(seen_at_first) == 20)
        assert min(seen_at_first) == 20
        # and it keeps watching
        await client.create(kinds.CONFIG_MAP, cm(f"late-{run}-new", late_sel))
        await eventually(lambda: len(late.store) == 21)
    finally:
        if late_ctl is not None and late_runner is not None:
            late_ctl.queue.shutdown()
            await asyncio.wait_for(late_runner, 30)
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
        items, _ = await client.list(
            kinds.CONFIG_MAP, namespace=ns, label_selector=f"{RUN} in (early-{run},late-{run})"
        )
        for item in items:
            await client.delete(kinds.CONFIG_MAP, item["metadata"]["name"], ns)
        await client.close()


@pytest.mark.parametrize("how", ["returned", "raised"])
@pytest.mark.parametrize("late", [False, True])
async def test_an_informer_that_ends_stops_the_registry_with_an_error_naming_it(
    how: str, late: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "Informer", StandInInformer)
    registry = InformerRegistry(cast("Client", None))
    keeps = cast("StandInInformer", registry.informer(CM, namespace="ns"))
    run = asyncio.ensure_future(registry.run())
    await asyncio.wait_for(keeps.running.wait(), 5)
    dying = cast("StandInInformer", registry.informer(NODE, label_selector="gpu=yes"))  # started at once
    if not late:
        dying, keeps = keeps, dying
    await asyncio.wait_for(dying.running.wait(), 5)
    dying.stop(how)
    with pytest.raises(RegistryError) as raised:
        await asyncio.wait_for(run, 5)
    described = "nodes labelSelector=gpu=yes" if late else "configmaps in ns"
    assert str(raised.value).startswith(f"informer {described} stopped: {how}")
    assert (raised.value.__cause__ is not None) == (how == "raised")
    assert asyncio.all_tasks() == {asyncio.current_task()}, "an informer was left running"
    assert not registry.started


async def test_cancelling_the_registry_is_not_an_informer_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "Informer", StandInInformer)
    registry = InformerRegistry(cast("Client", None))
    only = cast("StandInInformer", registry.informer(CM))
    run = asyncio.ensure_future(registry.run())
    await asyncio.wait_for(only.running.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
