"""After convergence, re-reconciling every key issues zero writes and leaves resourceVersions unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
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


def idle(controller: Controller) -> bool:
    """Nothing queued, in flight or waiting for a retry: every key handed to the controller was reconciled."""
    queue = controller.queue
    return not (len(queue) or queue.processing or queue.delayed)


async def server_versions(setup: Client, run: str) -> dict[str, str]:
    """The run's Nodes' resourceVersions as the server has them."""
    items, _ = await setup.list(kinds.NODE, label_selector=f"{RUN_LABEL}={run}")
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


async def caught_up(
    setup: Client, informer: Informer, controller: Controller, run: str
) -> dict[str, str] | None:
    """The server's resourceVersions of the run's Nodes once the informer holds exactly these and the
    controller is idle, else None. The informer hands each event to the controller in the step that stores
    it, so then every change up to the server's state, our own writes' echoes included, was reconciled."""
    server = await server_versions(setup, run)
    cached = {name: (informer.store.get(name) or {}).get("metadata", {}) for name in server}
    in_cache = {name: meta.get("resourceVersion") for name, meta in cached.items()}
    return server if server == in_cache and idle(controller) else None


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
        rvs = cast("dict[str, str]", await eventually(lambda: caught_up(setup, informer, controller, run)))
        assert sorted(rvs) == sorted(names)
        audit = AuditLog.from_now(devcluster.audit_log)  # the window: from convergence to the end
        writes_after_convergence = client.writes
        assert writes_after_convergence >= 2 * len(names)  # labels + status for every node

        for _ in range(3):  # full resyncs: every key reconciled again
            before = reconciles
            controller.enqueue_all(informer.store.keys())
            await eventually(lambda before=before: reconciles >= before + len(names) and idle(controller))

        assert client.writes == writes_after_convergence, dict(client.requests_by_method)
        node_writes = [(e.verb, e.resource_path, e.name) for e in audit.writes() if e.resource == "nodes"]
        assert [w for w in node_writes if w[2] in rvs] == [], "the server saw writes to the converged Nodes"
        assert await server_versions(setup, run) == rvs
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        for name in names:
            await setup.delete(kinds.NODE, name)
        await client.close()
        await setup.close()
