"""A ledger burst yields one fit-label patch, by construction: the agent's fit coalescing window runs on a
fake clock, so all 50 Devices status patches land inside it however slowly this machine applies them;
the window closes only when the test advances the clock, after the agent has seen the last patch.

Its own module with its own agent (the DaemonSet mode, one node): a second agent running on the real
clock — the --all-nodes one of ``test_agent_cluster.py`` — would close its own window mid-burst and
write the same labels.
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import fit
from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.controller import Controller

pytestmark = pytest.mark.cluster

M = keys.UNITS_PER_ACCELERATOR
NODE = "gpu-hygon"
A_KEY = "hygon-k100_ai"
SLICED = keys.sliced_max_free_units_key(A_KEY)
SHARED = keys.shared_free_cards_key(A_KEY)
BURST = 50


def idle(*controllers: Controller) -> bool:
    """No key queued, waiting for a window, or being reconciled."""
    return all(not len(c.queue) and not c.queue.delayed and not c.queue.processing for c in controllers)


async def test_ledger_burst_yields_one_fit_patch(devcluster: DevCluster) -> None:
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, packaged_scenario("mixed-4"))  # card 0 full, card 1 one slice, 2-3 free
    client = await Client.connect(str(devcluster.kubeconfig))
    clock = FakeClock()
    agent = Agent(
        client, SettingsSource(client, model=WorkerSettings, env={}), node_name=NODE, fit_clock=clock
    )
    window = agent.settings.current.fit_label_coalesce_seconds
    controllers = (agent.nodefeature, agent.capacity, agent.fit)

    def labelled() -> dict[str, str]:
        node: Any = agent.nodes.store.get(NODE) or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        return {k: v for k, v in labels.items() if fit.is_fit_label(k)}

    async def settle(done: Callable[[], bool]) -> None:
        """Close every fit window until ``done`` holds and nothing is left to reconcile."""

        async def settled() -> bool:
            if done() and idle(*controllers):
                return True
            await clock.advance(window)  # closes the open window; the next poll sees what it wrote
            return False

        await eventually(settled, within=60, every=0.05)

    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.ready.wait(), 60)
        await settle(lambda: labelled() == {SLICED: str(M), SHARED: "2"})

        devices = await admin.get(kinds.DEVICES, NODE)
        assert devices is not None
        groups = copy.deepcopy(devices["status"]["groups"])
        cards = sorted(groups[0]["accelerators"], key=lambda c: c["index"])
        fit_before = agent.steps.writes[fit.FIELD_MANAGER]
        writes_before = client.writes
        last_rv = ""
        for i in range(1, BURST + 1):
            # Cards 1 and 2 taken exclusively; card 3 gets one growing slice: 50 distinct ledgers.
            for card in cards[1:3]:
                card.update(mode=1, allocated=M, remaining=0, allocatedSlices=0)
            cards[3].update(mode=3, allocated=16_000 * i, remaining=M - 16_000 * i, allocatedSlices=1)
            patched = await admin.patch(
                kinds.DEVICES, NODE, {"status": {"groups": groups}}, subresource="status"
            )
            last_rv = patched["metadata"]["resourceVersion"]

        def seen_last() -> bool:
            cached: Any = agent.devices.store.get(NODE) or {}
            return bool((cached.get("metadata") or {}).get("resourceVersion") == last_rv)

        await eventually(seen_last, within=30, every=0.05)
        # The whole burst is inside the first event's window: one key waiting, nothing written yet.
        assert agent.fit.queue.delayed == 1
        assert agent.steps.writes[fit.FIELD_MANAGER] == fit_before

        await clock.advance(window)
        final = {SLICED: str(M - 16_000 * BURST), SHARED: "0"}
        await settle(lambda: labelled() == final)  # closes the window our own write re-opened, too
        assert agent.steps.writes[fit.FIELD_MANAGER] - fit_before == 1
        assert client.writes - writes_before == 1
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
        await apply_scenario(admin, packaged_scenario("mixed-4"))  # the ledger as other modules expect it
        await client.close()
        await admin.close()
