"""A pool fed by one node with exactly one sliceable card (issue 27): its flavor counts one card, its
queue's quota is one card's credits, and its InstanceType's four views read that one card (reference
§5.4, Appendix A.2, A.5) — free, and with one slice of half the card taken."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys, manufacturers
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate.scenario import Scenario
from tests.chain.fleets import PRODUCTS, Grouping

M = keys.UNITS_PER_ACCELERATOR
SLICING = sorted(n for n, m in manufacturers.MANUFACTURERS.items() if m.logical_slices)


def plan_one_card(mfr: str, allocations: list[dict[str, Any]]) -> Any:
    accelerator = {
        "manufacturer": mfr,
        "product": PRODUCTS[mfr][0],
        "memoryMiB": 65536,
        "count": 1,
        "allocations": allocations,
    }
    node = {
        "name": "n0",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 8},
        "memory": "64Gi",
        "accelerators": [accelerator],
    }
    scenario = Scenario.model_validate({"nodes": [node]})
    return plan_chain(scenario, Grouping(aware=False, mixed=False, manual=False).settings())


@pytest.mark.parametrize("mfr", SLICING)
@pytest.mark.parametrize(
    ("allocations", "summary"),
    [
        pytest.param([], "1/1 1/10 100/100 0/0", id="free"),
        pytest.param(
            [{"card": 0, "mode": "sliced", "units": M // 2, "slices": 1}],
            "0/0 0/0 50/50 0/0",
            id="half-sliced",
        ),
    ],
)
def test_one_sliceable_card_makes_a_one_card_pool(
    mfr: str, allocations: list[dict[str, Any]], summary: str
) -> None:
    plan = plan_one_card(mfr, allocations)
    (flavor,) = plan.flavors.values()
    node_labels = flavor["spec"]["nodeLabels"]
    count_keys = [k for k in node_labels if k.startswith(keys.ACCELERATABLE_PREFIX) and k.endswith(".count")]
    assert [node_labels[k] for k in count_keys] == ["1"]
    assert flavor["metadata"]["name"].split("-linux-amd64-")[1].startswith("1d-")
    (queue,) = plan.cluster_queues.values()
    ((entry,),) = [g["flavors"] for g in queue["spec"]["resourceGroups"]]
    assert entry["name"] == flavor["metadata"]["name"]
    assert [parse(r["nominalQuota"]) for r in entry["resources"]] == [M]
    (it,) = plan.instance_types.values()
    assert it["status"]["acceleratorSummary"] == summary
    assert it["status"]["acceleratorSliced"]["capacity"] == "100"
