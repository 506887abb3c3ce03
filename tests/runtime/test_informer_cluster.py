"""One informer against a real kube-apiserver, kept running across two API server restarts: it resumes
its watch after the first, and after the second — during which its resourceVersion is compacted away —
takes the 410 path exactly once (one relist with reason ``gone``). No add, update or delete is lost."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any, cast

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.informer import DELETED, Informer, InformerOptions

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    from gpustack_worker.runtime.resources import Resource
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


class GatedWatches:
    """The real client, except that a new watch waits while :attr:`gate` is closed: the test decides
    when the informer may come back, so the writes it makes meanwhile reach it only through the 410
    path (not by a race between the test and the informer's reconnect)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    def list_pages(self, resource: Resource, **kwargs: Any) -> AsyncGenerator[tuple[Any, str], None]:
        return self.client.list_pages(resource, **kwargs)

    async def reauthenticate(self) -> None:
        await self.client.reauthenticate()

    async def watch(self, resource: Resource, **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        async with contextlib.aclosing(self.client.watch(resource, **kwargs)) as stream:
            async for event in stream:
                yield event


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


def gone_relists() -> float:
    labels = {"resource": kinds.CONFIG_MAP.plural, "reason": "gone"}
    return REGISTRY.get_sample_value("gpustack_informer_relists_total", labels) or 0.0


async def test_one_informer_survives_restarts_and_takes_the_410_path_once(
    devcluster: Any, eventually: Poll
) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    gated = GatedWatches(client)
    run = uuid.uuid4().hex[:8]
    selector = f"test.gpustack.ai/run={run}"
    informer = Informer(
        cast("Client", gated),
        kinds.CONFIG_MAP,
        namespace=NS,
        label_selector=selector,
        options=InformerOptions(backoff_initial_s=0.2, backoff_max_s=2.0, inactivity_timeout_s=60.0),
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

    async def converged(expected: dict[str, str]) -> None:
        assert await server_state(client, selector) == expected
        await eventually(lambda: cached() == expected and mirror == expected)

    try:
        for name in ("a", "b"):
            await client.create(kinds.CONFIG_MAP, configmap(f"{run}-{name}", run, "1"))
        async with running(informer):
            await asyncio.wait_for(informer.wait_synced(), 30)
            assert mirror == {f"{run}-a": "1", f"{run}-b": "1"}
            assert informer.relists_by_reason == {"initial": 1}

            # 1. kube-apiserver restart: the watch breaks and resumes from the last RV.
            await asyncio.to_thread(devcluster.restart_apiserver)
            await client.create(kinds.CONFIG_MAP, configmap(f"{run}-c", run, "1"))
            await client.patch(kinds.CONFIG_MAP, f"{run}-a", {"data": {"v": "2"}}, namespace=NS)
            await client.delete(kinds.CONFIG_MAP, f"{run}-b", NS)
            await converged({f"{run}-a": "2", f"{run}-c": "1"})

            # The watch that the next restart breaks has delivered an event, so its end is not a
            # "very short watch" (which would relist for another reason).
            relists = informer.relists
            await client.patch(kinds.CONFIG_MAP, f"{run}-c", {"data": {"v": "2"}}, namespace=NS)
            await eventually(lambda: mirror.get(f"{run}-c") == "2" and informer.watching)
            assert informer.relists == relists
            by_reason, gone_before = dict(informer.relists_by_reason), gone_relists()

            # 2. the informer is kept away (its re-watch waits at the gate) across a restart while its
            #    objects change and etcd is compacted past its RV: ConfigMaps bypass the watch cache, so
            #    the resumed watch is answered 410, and only a relist can bring back what happened.
            gated.gate.clear()
            await asyncio.to_thread(devcluster.restart_apiserver)
            await eventually(lambda: gated.waiting == 1)  # it noticed, and wants to watch again
            await client.create(kinds.CONFIG_MAP, configmap(f"{run}-d", run, "1"))
            await client.patch(kinds.CONFIG_MAP, f"{run}-c", {"data": {"v": "3"}}, namespace=NS)
            await client.delete(kinds.CONFIG_MAP, f"{run}-a", NS)
            await asyncio.to_thread(devcluster.compact_etcd)
            assert mirror == {f"{run}-a": "2", f"{run}-c": "2"}  # nothing reached it yet
            gated.gate.set()
            await converged({f"{run}-c": "3", f"{run}-d": "1"})  # incl. the delete of a, from the relist
            gone = {k: v - by_reason.get(k, 0) for k, v in informer.relists_by_reason.items()}
            assert {k: v for k, v in gone.items() if v} == {"gone": 1}
            assert gone_relists() - gone_before == 1
            assert informer.healthy

            # and the watch after the relist keeps flowing
            await client.patch(kinds.CONFIG_MAP, f"{run}-d", {"data": {"v": "4"}}, namespace=NS)
            await eventually(lambda: mirror.get(f"{run}-d") == "4")
    finally:
        items, _ = await client.list(kinds.CONFIG_MAP, namespace=NS, label_selector=selector)
        for item in items:
            await client.delete(kinds.CONFIG_MAP, item["metadata"]["name"], NS)
        await client.close()
