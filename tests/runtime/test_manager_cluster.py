"""The Manager's operations endpoint on a real API server: liveness at once, readiness only after every cache
synced, Prometheus metrics under the conventional names, and a graceful stop (exit 0)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import WorkQueue

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster

CONVENTIONAL = (
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds",
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_retries_total",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "rest_client_requests_total",
)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()


class _Gate(Informer):
    """An informer whose first LIST waits for the test, so 'not ready yet' can be observed."""

    def __init__(self, *args: Any, gate: asyncio.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gate = gate

    async def _list(self, reason: str) -> None:
        await self._gate.wait()
        await super()._list(reason)


async def test_health_readiness_metrics_and_graceful_stop(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    gate = asyncio.Event()
    informer = _Gate(
        client, kinds.CONFIG_MAP, namespace=kinds.SYSTEM_NAMESPACE, label_selector=f"run={run}", gate=gate
    )
    reconciled: list[str] = []

    async def reconcile(key: str) -> Result:
        reconciled.append(key)
        return Result.done()

    controller = Controller(f"manager-test-{run}", reconcile, WorkQueue(f"manager-test-{run}"))
    controller.watch(informer)
    manager = Manager(health_bind="127.0.0.1:0")
    manager.add_informer(informer)
    manager.add_controller(controller)
    stop = asyncio.Event()
    await client.create(
        kinds.CONFIG_MAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{run}", "labels": {"run": run}}},
        namespace=kinds.SYSTEM_NAMESPACE,
    )
    task = asyncio.create_task(manager.run(stop))
    try:
        assert manager.health is not None
        await eventually(lambda: manager.health is not None and manager.health.port != 0)
        base = f"http://127.0.0.1:{manager.health.port}"
        status, _ = await asyncio.to_thread(_get, f"{base}/healthz")
        assert status == 200
        status, _ = await asyncio.to_thread(_get, f"{base}/readyz")
        assert status == 503, "ready before the cache synced"

        gate.set()
        await eventually(lambda: reconciled == [f"{kinds.SYSTEM_NAMESPACE}/cm-{run}"])
        status, _ = await asyncio.to_thread(_get, f"{base}/readyz")
        assert status == 200
        status, text = await asyncio.to_thread(_get, f"{base}/metrics")
        assert status == 200
        names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
        missing = [n for n in CONVENTIONAL if not any(name.startswith(n) for name in names)]
        assert not missing, f"metrics missing from /metrics: {missing}"
        assert (
            f'controller_runtime_reconcile_total{{controller="manager-test-{run}",result="success"}}' in text
        )
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
        await client.delete(kinds.CONFIG_MAP, f"cm-{run}", kinds.SYSTEM_NAMESPACE)
        await client.close()
