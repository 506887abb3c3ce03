"""One bad object never stalls the chain, on the real control plane with real Kueue (issue 16 follow-up).

An admin's ResourceFlavor holds the generated name of the A10G pool's only flavor before the controllers
start (no ``resource.gpustack.ai/type`` label, a ``topologyName`` of its own, so the chain's apply
conflicts). Every other flavor and queue of the chain-4 fleet converges, the taken name is reported (one
Warning Event naming what to delete, the A10G queue's ``TopologyReady`` says which node no flavor
selects), the foreign flavor is never modified or deleted, and once the admin deletes it the chain
converges fully (the rate-limited retry, no event needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import managers
from gpustack_worker.chain.steps import REASON_NAME_TAKEN
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.events import CLUSTER_EVENT_NAMESPACE
from tests.chain.test_chain_cluster import A10G, FLAVORS, GENERIC, T4, P
from tests.kit import kueue
from tests.stack import Stack, condition, eventually, module_cluster, running_stack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

TAKEN = f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}"
FOREIGN_TOPOLOGY = "example-foreign"
#: The rate-limited retry doubles its delay per failure: after a minute of refusals the next try may be
#: about a minute away.
STEP_S = 240.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("bad-object") as cluster:
        yield cluster


def _foreign() -> dict[str, Any]:
    spec = {"nodeLabels": {"example.com/pool": "admin"}, "topologyName": FOREIGN_TOPOLOGY}
    return kueue.resource_flavor(TAKEN, spec, labels={"example.com/owner": "admin"})


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Stack]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    try:
        await admin.create(kinds.RESOURCE_FLAVOR, _foreign())  # before the controllers start
    finally:
        await admin.close()
    async with running_stack(devcluster, "chain-4") as stack:
        yield stack


def _ours(flavor: dict[str, Any] | None) -> bool:
    labels = ((flavor or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(keys.OWNER_LABEL) == managers.OWNER_FLAVORS


async def _ready(admin: Client, name: str) -> dict[str, Any] | None:
    cq = await admin.get(kinds.CLUSTER_QUEUE, name)
    return cq if condition(cq, keys.TOPOLOGY_READY).get("status") == "True" else None


async def _taken_events(admin: Client) -> list[dict[str, Any]]:
    events, _rv = await admin.list(kinds.EVENT, namespace=CLUSTER_EVENT_NAMESPACE)
    return [e for e in events if e.get("reason") == REASON_NAME_TAKEN and TAKEN in str(e.get("note"))]


async def test_a_foreign_flavor_stalls_only_its_pool_and_clears_when_deleted(running: Stack) -> None:
    admin = running.admin
    others = FLAVORS - {TAKEN}
    assert TAKEN in FLAVORS

    async def others_written() -> bool:
        for name in others:
            if not _ours(await admin.get(kinds.RESOURCE_FLAVOR, name)):
                return False
        return True

    await eventually(others_written, within=STEP_S)
    # The unaffected pools converge while the name stays taken.
    for name in (T4, GENERIC):
        await eventually(lambda name=name: _ready(admin, name), within=STEP_S)

    # The A10G pool's queue says why: its node is selected by no flavor.
    async def refused() -> dict[str, Any] | None:
        cond = condition(await admin.get(kinds.CLUSTER_QUEUE, A10G), keys.TOPOLOGY_READY)
        return cond if cond.get("status") == "False" and "a10g-a" in str(cond.get("message")) else None

    await eventually(refused, within=STEP_S)
    # Reported once, on what the flavor belongs to, naming the object to delete or rename.
    events = await eventually(lambda: _taken_events(admin), within=STEP_S)
    assert len(events) == 1, events
    event = events[0]
    assert event["type"] == "Warning"
    assert event["regarding"]["kind"] in {"InstanceType", "Node"}
    assert f"Delete or rename ResourceFlavor {TAKEN}" in event["note"]
    # The foreign flavor is never overwritten or deleted.
    held = await admin.get(kinds.RESOURCE_FLAVOR, TAKEN)
    assert held is not None and not _ours(held)
    assert held["spec"]["topologyName"] == FOREIGN_TOPOLOGY
    assert held["spec"]["nodeLabels"] == {"example.com/pool": "admin"}

    # The admin deletes it: the chain's own flavor is created and the A10G queue becomes ready.
    await admin.delete(kinds.RESOURCE_FLAVOR, TAKEN)

    async def taken_back() -> dict[str, Any] | None:
        flavor = await admin.get(kinds.RESOURCE_FLAVOR, TAKEN)
        return flavor if _ours(flavor) else None

    flavor = await eventually(taken_back, within=STEP_S)
    assert flavor["spec"]["topologyName"] == f"gpustack-{P}"
    await eventually(lambda: _ready(admin, A10G), within=STEP_S)
    # Still one report: the refusal ended, nothing new was posted.
    assert len(await _taken_events(admin)) == 1
