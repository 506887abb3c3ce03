from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.agent.facts import CardLedger, devices_facts, node_facts
from gpustack_worker.runtime.frozen import freeze

DEVICES: dict[str, Any] = {
    "metadata": {"name": "n1"},
    "spec": {
        "groups": [
            {
                "id": "a100-sxm4-80gb",
                "manufacturer": "NVIDIA",
                "memory": 81920,
                "accelerators": [
                    {
                        "id": "GPU-0",
                        "index": 0,
                        "status": {
                            "logicalSliced": {"count": 0},
                            "physicalSliced": {
                                "profiles": [{"name": "7g.80gb", "count": 1, "memoryMib": 80384}]
                            },
                        },
                    },
                    {"id": "GPU-1", "index": 1},
                ],
            }
        ],
        "interfaces": [{"name": "ib0", "rdma": True, "state": "Active", "numaAffinity": 1}],
    },
    "status": {
        "groups": [
            {
                "id": "a100-sxm4-80gb",
                "manufacturer": "nvidia",
                "accelerators": [
                    {"id": "GPU-0", "mode": 4, "allocatedProfiles": [{"name": "7g.80gb", "count": 1}]},
                ],
            }
        ]
    },
}


@pytest.mark.parametrize(
    "obj", [pytest.param(DEVICES, id="api-dict"), pytest.param(freeze(DEVICES), id="frozen-cache-object")]
)
def test_devices_adapter(obj: Any) -> None:
    facts = devices_facts(obj)
    (group,) = facts.groups
    assert group.manufacturer == "nvidia"
    assert [c.partitioned for c in group.cards] == [True, False]
    assert group.cards[1].logical_count == 0  # omitted fields read as zero
    assert facts.interfaces[0].numa == "1"
    assert facts.card_ledgers() == {
        "GPU-0": CardLedger("GPU-0", mode=4, allocated_profiles={"7g.80gb": 1}, remaining_profiles={})
    }


@pytest.mark.parametrize(
    ("status", "has_ledger"),
    [pytest.param({}, False, id="no-status"), pytest.param({"groups": []}, True, id="empty-ledger")],
)
def test_ledger_presence(status: dict[str, Any], has_ledger: bool) -> None:
    assert (devices_facts({"metadata": {"name": "n"}, "status": status}).ledger is not None) is has_ledger


def test_node_adapter_from_frozen_object() -> None:
    node = node_facts(
        freeze(
            {
                "metadata": {"name": "n", "uid": "u", "labels": {"a": "b"}},
                "status": {"capacity": {"cpu": "4"}},
            }
        )
    )
    assert (node.name, node.uid, dict(node.labels), dict(node.capacity), dict(node.annotations)) == (
        "n",
        "u",
        {"a": "b"},
        {"cpu": "4"},
        {},
    )
