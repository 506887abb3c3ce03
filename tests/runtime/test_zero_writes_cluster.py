"""After convergence, re-reconciling every key issues zero writes and leaves resourceVersions unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
MANAGER = "gpustack-worker/zero-writes-test"
RUN_LABEL = "test.gpustack.ai/run"


def desired_labels(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"test.gpustack.ai/derived": f"d-{name[-1]}"}},
        "spec": {"taints": [{"key": "test.gpustack.ai/owned", "value": "yes", "effect": "NoSchedule"}]},
    }


def desired_status(name: str) -> dict[str, Any]:
    # spelled differently from how the server stores them ("64", "1Gi"): compared by value
    capacity = {"cpu": "64000m", "memory": "1024Mi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


async def settle(controller: Controller, quiet_s: float = 1.0) -> None:
    """Wait until the queue has been empty and idle for ``quiet_s``."""
    idle_since: float | None = None
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(60):
        while True:
            busy = len(controller.queue) or controller.queue.processing or controller.queue.delayed
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = loop.time()
            elif loop.time() - idle_since >= quiet_s:
                return
            await asyncio.sleep(0.05)


async def test_converged_controller_issues_zero_writes(devcluster: Any, eventually: Poll) -> None:
    setup = await Client.connect(str(devcluster.kubeconfig))
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    names = [f"zw-{run}-{i}" for i in range(5)]
    for name in names:
        await setup.create(
            kinds.NODE,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {RUN_LABEL: run}}},
        )
    informer = Informer(
        client, kinds.NODE, label_selector=f"{RUN_LABEL}={run}", transform=make_transform([MANAGER])
    )
    applier = Applier(client, MANAGER, cache=informer)
    reconciles = 0

    async def reconcile(key: str) -> Result:
        nonlocal reconciles
        reconciles += 1
        cached = informer.store.get(key)
        if cached is None:
            return Result.done()
        await applier.apply(kinds.NODE, desired_labels(key), cached, force=True)
        await applier.apply_status(kinds.NODE, desired_status(key), informer.store.get(key))
        return Result.done()

    controller = Controller("zero-writes-test", reconcile, WorkQueue("zero-writes-test"), workers=3)
    controller.watch(informer)  # no predicates on purpose: our own writes echo back and must be no-ops
    manager = Manager()
    manager.add_informer(informer)
    manager.add_controller(controller)
    stop = asyncio.Event()
    task = asyncio.ensure_future(manager.run(stop))

    def converged() -> bool:
        objs = [informer.store.get(n) for n in names]
        return all(
            o is not None
            and o["metadata"]["labels"].get("test.gpustack.ai/derived")
            and o["status"].get("capacity", {}).get("cpu") == "64"
            for o in objs
        )

    try:
        await eventually(converged)
        await settle(controller)
        writes_after_convergence = client.writes
        assert writes_after_convergence >= 2 * len(names)  # labels + status for every node
        items, _ = await setup.list(kinds.NODE, label_selector=f"{RUN_LABEL}={run}")
        rvs = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}

        for _ in range(3):  # full resyncs: every key reconciled again
            before = reconciles
            controller.enqueue_all(informer.store.keys())
            await settle(controller)
            assert reconciles >= before + len(names)

        assert client.writes == writes_after_convergence, dict(client.requests_by_method)
        items, _ = await setup.list(kinds.NODE, label_selector=f"{RUN_LABEL}={run}")
        assert {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items} == rvs
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        for name in names:
            await setup.delete(kinds.NODE, name)
        await client.close()
        await setup.close()
