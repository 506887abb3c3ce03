"""On the real API server: pruning deletes only the objects this controller stamped and no longer desires —
never an unstamped object, another controller's, or a newer object that reused a stale one's name."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.prune import OWNER_LABEL, Pruner, owner_selector, stamp
from gpustack_worker.runtime.registry import InformerRegistry

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE
RUN = "test.gpustack.ai/run"


def _cm(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {RUN: run}},
        "data": {"k": "v"},
    }


async def _names(client: Client, run: str) -> set[str]:
    items, _ = await client.list(kinds.CONFIG_MAP, namespace=NS, label_selector=f"{RUN}={run}")
    return {i["metadata"]["name"] for i in items}


async def test_pruning_deletes_only_stamped_undesired_objects(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    me, other = f"prune-test-{run}", f"other-{run}"
    names = {n: f"{n}-{run}" for n in ("wanted", "stale", "reused", "admins", "others")}
    await client.create(kinds.CONFIG_MAP, stamp(_cm(names["wanted"], run), me))
    await client.create(kinds.CONFIG_MAP, stamp(_cm(names["stale"], run), me))
    await client.create(kinds.CONFIG_MAP, stamp(_cm(names["reused"], run), me))
    await client.create(kinds.CONFIG_MAP, _cm(names["admins"], run))  # unstamped
    await client.create(kinds.CONFIG_MAP, stamp(_cm(names["others"], run), other))

    registry = InformerRegistry(client)
    # the controller's informer sees everything of the run (a wider cache than it needs, on purpose:
    # pruning must not rely on the selector to stay away from objects that are not its own)
    informer = registry.informer(kinds.CONFIG_MAP, namespace=NS, label_selector=f"{RUN}={run}")
    task = asyncio.create_task(registry.run())
    try:
        await asyncio.wait_for(registry.wait_synced(), 30)
        assert len(informer.store) == 5
        # "reused" is deleted and recreated under the same name while our cache still has the old one
        stale_copy = informer.store.get(f"{NS}/{names['reused']}")
        assert stale_copy is not None
        await client.delete(kinds.CONFIG_MAP, names["reused"], NS)
        await client.create(kinds.CONFIG_MAP, stamp(_cm(names["reused"], run), me))
        cached = [o for o in informer.store.list() if o["metadata"]["name"] != names["reused"]]
        cached.append(stale_copy)

        pruner = Pruner(client, kinds.CONFIG_MAP, controller=me)
        deleted = await pruner.prune(cached, {f"{NS}/{names['wanted']}"})
        assert deleted == [f"{NS}/{names['stale']}"]  # "reused": UID precondition failed, skipped
        assert await _names(client, run) == {names[n] for n in ("wanted", "reused", "admins", "others")}

        # the recreated object is ours and undesired: the next reconcile (fresh cache) prunes it
        await eventually(lambda: (o := informer.store.get(f"{NS}/{names['reused']}")) is not None
                         and o["metadata"]["uid"] != stale_copy["metadata"]["uid"])  # fmt: skip
        deleted = await pruner.prune(informer.store.list(), {f"{NS}/{names['wanted']}"})
        assert deleted == [f"{NS}/{names['reused']}"]
        assert await _names(client, run) == {names[n] for n in ("wanted", "admins", "others")}
        assert pruner.deleted == 2

        # converged: nothing left to prune, no request
        await eventually(lambda: len(informer.store) == 3)
        before = client.writes
        assert await pruner.prune(informer.store.list(), {f"{NS}/{names['wanted']}"}) == []
        assert client.writes == before

        # the selector a controller's own informer would use picks exactly its stamped objects
        items, _ = await client.list(kinds.CONFIG_MAP, namespace=NS, label_selector=owner_selector(me))
        assert [i["metadata"]["name"] for i in items] == [names["wanted"]]
        assert items[0]["metadata"]["labels"][OWNER_LABEL] == me
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for name in names.values():
            await client.delete(kinds.CONFIG_MAP, name, NS)
        await client.close()
