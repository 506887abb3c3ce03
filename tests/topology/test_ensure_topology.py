"""A profile's generated Topology is created once however many Node reconciles ask for it at once, and
created again when it went away."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gpustack_worker.api import keys
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.prune import stamp
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.topology import levels as lv
from gpustack_worker.topology import managers, profiles
from gpustack_worker.topology.controller import Topology

LEVELS = ("example.com/rack", keys.HOSTNAME)


class ApplyingClient:
    """Records server-side applies; each takes a few loop turns, as a request does."""

    def __init__(self) -> None:
        self.applied: list[str] = []

    async def apply(self, resource: Any, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        for _ in range(3):
            await asyncio.sleep(0)
        self.applied.append(body["metadata"]["name"])
        meta = {**body["metadata"], "uid": "u-1", "resourceVersion": str(len(self.applied))}
        return {**body, "metadata": meta}


def _topology(client: ApplyingClient) -> tuple[Topology, list[float]]:
    api = cast("Any", client)
    settings = SettingsSource(api, model=WorkerSettings, env={}, post_events=False)
    topology = Topology(api, settings, InformerRegistry(api))
    now = [100.0]
    topology.steps.monotonic = lambda: now[0]
    topology.topologies.last_resource_version = "0"  # synced, before any create
    return topology, now


async def test_eight_reconciles_at_once_create_the_topology_once() -> None:
    client = ApplyingClient()
    topology, _now = _topology(client)
    await asyncio.gather(*(topology.steps._ensure_topology(LEVELS) for _ in range(8)))
    assert client.applied == [keys.topology_name(lv.profile_of(LEVELS))]


async def test_created_again_when_the_informer_passed_it_without_it_and_quiet_once_it_holds_it() -> None:
    client = ApplyingClient()
    topology, _now = _topology(client)
    await topology.steps._ensure_topology(LEVELS)
    await topology.steps._ensure_topology(LEVELS)
    assert len(client.applied) == 1  # our create (rv 1) is on its way to the cache
    topology.topologies.last_resource_version = "5"  # the watch passed it: deleted meanwhile
    await topology.steps._ensure_topology(LEVELS)
    assert len(client.applied) == 2  # created again (rv 2)
    name = client.applied[0]
    body = stamp(profiles.topology_body(LEVELS), managers.OWNER_TOPOLOGIES)
    meta = {**body["metadata"], "uid": "u-1", "resourceVersion": "9"}
    meta["managedFields"] = [
        {
            "manager": managers.NODE_TOPOLOGY,
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {f"f:{k}": {} for k in meta["labels"]}},
                "f:spec": {"f:levels": {}},
            },
        }
    ]
    topology.topologies._apply({"type": "ADDED", "object": {**body, "metadata": meta}})
    assert topology.topologies.store.get(name) is not None
    await topology.steps._ensure_topology(LEVELS)
    assert len(client.applied) == 2
