"""The informer against a real kube-apiserver: restarts and forced 410s lose no add, update or delete."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.informer import DELETED, Informer, InformerOptions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE


def configmap(name: str, label: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"test.gpustack.ai/run": label}},
        "data": {"v": value},
    }


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def server_state(client: Client, selector: str) -> dict[str, str]:
    items, _ = await client.list(kinds.CONFIG_MAP, namespace=NS, label_selector=selector)
    return {i["metadata"]["name"]: i["data"]["v"] for i in items}


async def test_watch_survives_restart_and_forced_410(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    selector = f"test.gpustack.ai/run={run}"
    informer = Informer(
        client,
        kinds.CONFIG_MAP,
        namespace=NS,
        label_selector=selector,
        options=InformerOptions(backoff_initial_s=0.2, backoff_max_s=2.0, inactivity_timeout_s=30.0),
    )
    mirror: dict[str, str] = {}  # rebuilt purely from handler events

    def on_event(event: str, old: Any, new: Any) -> None:
        if event == DELETED:
            mirror.pop(old["metadata"]["name"], None)
        else:
            mirror[new["metadata"]["name"]] = new["data"]["v"]

    informer.add_handler(on_event)

    def cached() -> dict[str, str]:
        return {o["metadata"]["name"]: o["data"]["v"] for o in informer.store.list()}

    try:
        for name in ("a", "b"):
            await client.create(kinds.CONFIG_MAP, configmap(f"{run}-{name}", run, "1"))
        async with running(informer):
            await asyncio.wait_for(informer.wait_synced(), 30)
            assert set(mirror) == {f"{run}-a", f"{run}-b"}

            # 1. kube-apiserver restart: the watch breaks, the informer reconnects from its last RV.
            await asyncio.to_thread(devcluster.restart_apiserver)
            await client.create(kinds.CONFIG_MAP, configmap(f"{run}-c", run, "1"))
            await client.patch(kinds.CONFIG_MAP, f"{run}-a", {"data": {"v": "2"}}, namespace=NS)
            await client.delete(kinds.CONFIG_MAP, f"{run}-b", NS)
            expected = await server_state(client, selector)
            assert expected == {f"{run}-a": "2", f"{run}-c": "1"}
            await eventually(lambda: cached() == expected and mirror == expected)

        # 2. forced 410: while the informer is away its RV gets compacted and the apiserver's watch
        #    cache restarts, so resuming from the old RV must relist and emit the vanished delete.
        relists_before = informer.relists
        await client.create(kinds.CONFIG_MAP, configmap(f"{run}-d", run, "1"))
        await client.patch(kinds.CONFIG_MAP, f"{run}-c", {"data": {"v": "3"}}, namespace=NS)
        await client.delete(kinds.CONFIG_MAP, f"{run}-a", NS)
        await asyncio.to_thread(devcluster.compact_etcd)
        await asyncio.to_thread(devcluster.restart_apiserver)
        async with running(informer):
            expected = await server_state(client, selector)
            assert expected == {f"{run}-c": "3", f"{run}-d": "1"}
            await eventually(lambda: cached() == expected and mirror == expected)
            assert informer.relists == relists_before + 1
            # and the resumed watch keeps flowing after the relist
            await client.patch(kinds.CONFIG_MAP, f"{run}-d", {"data": {"v": "4"}}, namespace=NS)
            await eventually(lambda: mirror.get(f"{run}-d") == "4")
    finally:
        items, _ = await client.list(kinds.CONFIG_MAP, namespace=NS, label_selector=selector)
        for item in items:
            await client.delete(kinds.CONFIG_MAP, item["metadata"]["name"], NS)
        await client.close()
