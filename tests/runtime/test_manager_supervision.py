"""The Manager supervises its runners (issue 17, defects 4 and 8).

Any runner that ends on its own — an informer, the registry, a controller's worker pool, the elector —
whether it raised or returned, makes :meth:`Manager.run` return 1 with an error line naming it, and
readiness false: a replica that keeps running (and leading) while reconciling nothing must not look
healthy. A cache that does not sync in time raises :class:`CacheSyncTimeout` itself (not wrapped in an
``ExceptionGroup``), naming what did not sync, and leaves no task behind.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.runtime import manager as manager_module
from gpustack_worker.runtime import registry as registry_module
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import CacheSyncTimeout, Manager
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE, Resource
from tests.kit.properties import examples
from tests.kit.waiting import eventually
from tests.runtime.fake_api import FakeApi, FakeServer

if TYPE_CHECKING:
    from gpustack_worker.runtime.informer import Informer

NODE = Resource("", "v1", "Node", "nodes", namespaced=False)


class StandInInformer:
    """What the Manager and the registry use of an Informer; the test decides when (and how) it ends."""

    def __init__(
        self,
        client: Any = None,
        resource: Resource = CONFIG_MAP,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        syncs: bool = True,
        **_: Any,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.syncs = syncs
        self.healthy = True
        self._synced = asyncio.Event()
        self._end: asyncio.Future[None] | None = None
        self.running = asyncio.Event()

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def run(self) -> None:
        self._end = asyncio.get_running_loop().create_future()
        if self.syncs:
            self._synced.set()
        self.running.set()
        await self._end

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def add_indexers(self, indexers: Any) -> None:
        del indexers

    def stop(self, how: str) -> None:
        """End :meth:`run` on its own: ``"returned"`` or ``"raised"``."""
        assert self._end is not None, "not running"
        if how == "returned":
            self._end.set_result(None)
        else:
            self._end.set_exception(RuntimeError("informer bug"))


def informer(resource: Resource = CONFIG_MAP, **kwargs: Any) -> Informer:
    return cast("Informer", StandInInformer(None, resource, **kwargs))


class LogRecorder:
    """Stands in for a module's structlog logger: records (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            self.lines.append((level, event, fields))

        return log

    def stopped(self) -> list[str]:
        stopped = ("error", "runner stopped, exiting")
        return [fields["runner"] for level, event, fields in self.lines if (level, event) == stopped]


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> LogRecorder:
    recorder = LogRecorder()
    monkeypatch.setattr(manager_module, "_log", recorder)
    return recorder


async def idle_reconcile(key: str) -> Result:
    return Result.done()


def controller(name: str) -> Controller:
    return Controller(name, idle_reconcile, WorkQueue(name), workers=2)


def kill_workers(ctl: Controller, how: str) -> None:
    """End a controller's worker pool from outside its reconciles."""
    if how == "returned":
        ctl.queue.shutdown()  # someone else shut the queue: every worker returns
        return

    async def broken_get() -> str | None:
        raise RuntimeError("queue bug")

    ctl.queue.get = broken_get  # type: ignore[method-assign]
    ctl.queue.add("k")  # wakes a worker blocked in the old get(); its next get() raises


def only_this_task_left() -> bool:
    return asyncio.all_tasks() == {asyncio.current_task()}


# -- defect 8: CacheSyncTimeout -------------------------------------------------------------------------


async def test_cache_sync_timeout_reaches_the_caller_as_itself_naming_what_did_not_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "Informer", StandInInformer)
    registry = InformerRegistry(cast("Client", None))
    registry.informer(NODE, label_selector="gpu=yes")  # synced
    late = cast("StandInInformer", registry.informer(CONFIG_MAP, namespace="ns", label_selector="app=x"))
    late.syncs = False
    manager = Manager(cache_sync_timeout=0.05)
    manager.add_informer(informer(CONFIG_MAP, namespace="ns"))
    manager.add_informer(informer(NODE, field_selector="metadata.name=n1", syncs=False))
    manager.add_registry(registry)
    manager.add_controller(controller("sync-timeout"))
    with pytest.raises(CacheSyncTimeout) as raised:
        await manager.run(asyncio.Event())
    assert type(raised.value) is CacheSyncTimeout
    message = str(raised.value)
    assert "nodes fieldSelector=metadata.name=n1" in message
    assert "configmaps in ns labelSelector=app=x" in message
    assert "gpu=yes" not in message and "configmaps in ns," not in message, message
    assert only_this_task_left(), asyncio.all_tasks()
    assert not manager.ready()


async def test_a_stop_before_the_caches_sync_returns_0_and_leaves_no_task() -> None:
    manager = Manager(cache_sync_timeout=60)
    never_syncs = StandInInformer(syncs=False)
    manager.add_informer(cast("Informer", never_syncs))
    stop = asyncio.Event()
    run = asyncio.ensure_future(manager.run(stop))
    await asyncio.wait_for(never_syncs.running.wait(), 5)  # started: the manager waits for its cache
    stop.set()
    assert await asyncio.wait_for(run, 5) == 0
    assert only_this_task_left(), asyncio.all_tasks()


# -- defect 4: supervision ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["returned", "raised"])
async def test_a_worker_pool_that_ends_while_leading_exits_non_zero_and_drops_readiness(
    how: str, log: LogRecorder
) -> None:
    ctl = controller(f"dies-{how}")
    other = controller(f"lives-{how}")
    manager = Manager()
    manager.add_informer(informer())
    manager.add_controller(ctl)
    manager.add_controller(other)
    run = asyncio.ensure_future(manager.run(asyncio.Event()))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    assert manager.ready()
    kill_workers(ctl, how)
    assert await asyncio.wait_for(run, 5) == 1
    assert manager.failed == f"controller dies-{how}"
    assert log.stopped() == [f"controller dies-{how}"]
    assert not manager.ready()
    assert not manager.leading.is_set()
    assert only_this_task_left(), asyncio.all_tasks()


async def test_a_leader_whose_worker_pool_ends_steps_down_releases_and_exits_non_zero(
    log: LogRecorder,
) -> None:
    clock = FakeClock(1000.0)
    server = FakeServer(clock)
    client = Client(FakeApi(server, "a"), max_attempts=1)
    elector = LeaderElector(client, name="lease", namespace="ns", identity="a", clock=clock)
    ctl = controller("leader-dies")
    manager = Manager(elector=elector)
    manager.add_controller(ctl)
    run = asyncio.ensure_future(manager.run(asyncio.Event()))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    kill_workers(ctl, "raised")
    assert await asyncio.wait_for(run, 5) == 1
    assert log.stopped() == ["controller leader-dies"]
    assert not elector.is_leader and elector.fence.remaining() <= 0
    lease = await client.get(LEASE, "lease", "ns")
    assert lease is not None and lease["spec"]["holderIdentity"] == "", "the Lease was kept by a dead leader"


@pytest.mark.parametrize("how", ["returned", "raised"])
async def test_an_informer_that_ends_exits_non_zero_naming_it(how: str, log: LogRecorder) -> None:
    dying = informer(NODE, label_selector="gpu=yes")
    manager = Manager()
    manager.add_informer(informer())
    manager.add_informer(dying)
    manager.add_controller(controller(f"informer-{how}"))
    run = asyncio.ensure_future(manager.run(asyncio.Event()))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    cast("StandInInformer", dying).stop(how)
    assert await asyncio.wait_for(run, 5) == 1
    assert log.stopped() == ["informer nodes labelSelector=gpu=yes"]
    assert not manager.ready()
    assert only_this_task_left(), asyncio.all_tasks()


RUNNERS = st.sampled_from(["informer0", "informer1", "registry", "controller0", "controller1"])


@settings(max_examples=examples(40))
@given(RUNNERS, st.sampled_from(["returned", "raised"]), st.booleans())
def test_whichever_runner_ends_the_manager_exits_1_naming_it(runner: str, how: str, leading: bool) -> None:
    async def scenario() -> None:
        recorder = LogRecorder()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(registry_module, "Informer", StandInInformer)
            patch.setattr(manager_module, "_log", recorder)
            informers = [informer(), informer(NODE)]
            registry = InformerRegistry(cast("Client", None))
            in_registry = cast("StandInInformer", registry.informer(CONFIG_MAP, namespace="reg"))
            controllers = [controller("prop-0"), controller("prop-1")]
            manager = Manager(cache_sync_timeout=60)
            for inf in informers:
                manager.add_informer(inf)
            manager.add_registry(registry)
            for ctl in controllers:
                manager.add_controller(ctl)
            if not leading:
                in_registry.syncs = False  # still syncing: no controller runs yet
            run = asyncio.ensure_future(manager.run(asyncio.Event()))
            await eventually(in_registry.running.is_set, within=10, every=0.001)
            if leading:
                await eventually(manager.leading.is_set, within=10, every=0.001)
            expected = {
                "informer0": "informer configmaps",
                "informer1": "informer nodes",
                "registry": "informer registry",
                "controller0": "controller prop-0",
                "controller1": "controller prop-1",
            }[runner]
            if runner.startswith("informer"):
                cast("StandInInformer", informers[int(runner[-1])]).stop(how)
            elif runner == "registry":
                in_registry.stop(how)
            elif leading:
                kill_workers(controllers[int(runner[-1])], how)
            else:
                run.cancel()  # controllers do not run before the caches sync: nothing to kill
                await asyncio.gather(run, return_exceptions=True)
                return
            assert await asyncio.wait_for(run, 5) == 1
            assert manager.failed == expected
            assert recorder.stopped() == [expected]
            assert not manager.ready()
            assert only_this_task_left(), asyncio.all_tasks()

    asyncio.run(scenario())
