"""A plan and a live cluster never disagree, on generated fleets too: for a few fixed seeds, a fleet of 4-10
nodes drawn by :func:`tests.chain.fleets.fleets` (every manufacturer, odd product and CPU names, mixed
nodes, unhealthy and partitioned cards, unpublished ledgers, admin ``managed`` labels) under its drawn
grouping settings (and, for even seeds, a rack TopologySource) is applied with the simulator on a control
plane of its own, the agent and the controllers run until idle, and the chain they built is compared with
``gpustack-worker plan``'s — with the views and the machinery of :mod:`tests.cli.plan.test_plan_cluster`.

The fleets are ones the simulator can write (no product name past the key budget: what such names do is
:mod:`tests.chain.test_fleet_invariants`' business) and that give a chain (at least one flavor)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest
from hypothesis import Phase, find, settings

from gpustack_worker.api import kinds
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.checks import check_scenario
from tests.chain.fleets import Fleet, fleets
from tests.cli.plan.test_plan_cluster import CONVERGE_S, TEAM, _converged, _idle, live_view, plan_view
from tests.kit.properties import examples
from tests.stack import eventually, module_cluster, running_stack, write_settings

if TYPE_CHECKING:
    from gpustack_worker.cli.plan.planning import PlannedChain

pytestmark = pytest.mark.cluster

SEEDS = (1, 2, 3, 4)
#: Rich fleets passed over before the one a seed gives.
SKIP = 10


def _plan(fleet: Fleet) -> PlannedChain:
    racks = fleet.racks
    return plan_chain(
        fleet.scenario,
        fleet.grouping.settings(),
        topology_source=racks.source() if racks is not None else None,
        snapshot=racks.snapshot() if racks is not None else None,
        # The in-process stack runs no placement controller: no check is marked Active.
        checks_active=False,
    )


def _rich(fleet: Fleet, *, racks: bool) -> bool:
    """A CPU-only node, two accelerated ones, some card partitioned or a node with two models, and a rack
    TopologySource or none as asked."""
    nodes = fleet.scenario.nodes
    accelerated = [n for n in nodes if n.accelerators]
    return (
        (fleet.racks is not None) is racks
        and len(accelerated) >= 2
        and len(accelerated) < len(nodes)
        and any(len(n.accelerators) > 1 or any(a.partitioning for a in n.accelerators) for n in nodes)
    )


def fleet_of(seed: int) -> Fleet:
    """The :data:`SKIP`-th rich fleet hypothesis draws from ``seed`` that the simulator can write and that
    gives a chain, with a rack TopologySource for even seeds (generation only, no shrinking: the same fleet
    every run; hypothesis starts from the simplest fleets, hence the skip)."""
    seen = 0

    def wanted(fleet: Fleet) -> bool:
        nonlocal seen
        if not _rich(fleet, racks=seed % 2 == 0) or check_scenario(fleet.scenario):
            return False
        if not _plan(fleet).cluster_queues:
            return False
        seen += 1
        return seen > SKIP

    return find(
        fleets(min_nodes=4, max_nodes=10, long_names=False),
        wanted,
        settings=settings(database=None, max_examples=examples(2000), phases=[Phase.generate]),
        random=random.Random(seed),
    )


@pytest.mark.parametrize("seed", SEEDS)
async def test_plan_equals_the_live_chain_on_a_generated_fleet(seed: int) -> None:
    fleet = fleet_of(seed)
    expected = plan_view(_plan(fleet))
    assert expected["flavors"] and expected["queues"] and expected["localQueues"]
    nodes = [n.name for n in fleet.scenario.nodes]
    with module_cluster(f"plan-fleet-{seed}") as cluster:
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            await write_settings(admin, fleet.grouping.as_data())
            if fleet.racks is not None:
                await admin.create(kinds.CONFIG_MAP, fleet.racks.config_map())
                await admin.create(kinds.TOPOLOGY_SOURCE, fleet.racks.source())
        finally:
            await admin.close()
        async with running_stack(cluster, fleet.scenario, namespaces=(TEAM,)) as stack:
            try:
                await _converged(stack, nodes, expected)
            except AssertionError:
                live = await live_view(stack.admin, nodes)
                # One section at a time, so pytest shows the difference where it is.
                for section in expected:
                    assert live[section] == expected[section], (section, fleet)
                raise
            await eventually(lambda: _idle(stack), within=CONVERGE_S)
            assert await live_view(stack.admin, nodes) == expected
