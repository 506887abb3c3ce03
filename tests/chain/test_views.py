"""Four-view status of an InstanceType (reference §5.4), from Devices ledgers."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api.devices_view import devices_facts
from gpustack_worker.chain.views import accelerator_views, column, cpu_view, pool_cards

M = 1_600_000


def _devices(
    name: str,
    cards: int,
    *,
    ledger: list[dict[str, Any]] | None = None,
    profiles: list[dict[str, Any]] | None = None,
    logical: int = 128,
    mfr: str = "nvidia",
    gid: str = "tesla-t4",
) -> dict[str, Any]:
    accelerators = []
    for i in range(cards):
        status: dict[str, Any] = {}
        if profiles is not None:
            status["physicalSliced"] = {"profiles": profiles}
        else:
            status["logicalSliced"] = {"count": logical, "coresPercentageOvercommit": True}
        accelerators.append({"id": f"{name}-{i}", "index": i, "status": status})
    obj: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "groups": [
                {"id": gid, "manufacturer": mfr, "name": "x", "memory": 15360, "accelerators": accelerators}
            ]
        },
    }
    if ledger is not None:
        obj["status"] = {"groups": [{"id": gid, "manufacturer": mfr, "accelerators": ledger}]}
    return obj


def test_walkthrough_t4_pool_all_free() -> None:
    devs = [devices_facts(_devices("node-t4-a", 1)), devices_facts(_devices("node-t4-b", 4))]
    views = accelerator_views(pool_cards("nvidia-tesla-t4", devs))
    assert views["accelerator"] == {"onceMaxRequest": "4", "remaining": "5", "capacity": "5"}
    assert views["acceleratorShared"] == {"onceMaxRequest": "4", "remaining": "50", "capacity": "50"}
    assert views["acceleratorSliced"] == {"onceMaxRequest": "100", "remaining": "500", "capacity": "500"}
    assert views["acceleratorPartitioned"] == {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"}
    assert column(views) == "4/5 4/50 100/500 0/0"


def test_allocations_reduce_each_family_view() -> None:
    ledger = [
        {"id": "n-0", "index": 0, "mode": 1, "allocated": M, "remaining": 0},  # exclusive
        {
            "id": "n-1",
            "index": 1,
            "mode": 2,
            "allocated": 3 * 160_000,
            "remaining": M - 3 * 160_000,
        },  # 3 shares
        {
            "id": "n-2",
            "index": 2,
            "mode": 3,
            "allocated": 480_000,
            "remaining": M - 480_000,
            "allocatedSlices": 1,
        },
        {"id": "n-3", "index": 3, "mode": 0, "allocated": 0, "remaining": M},
    ]
    views = accelerator_views(pool_cards("nvidia-tesla-t4", [devices_facts(_devices("n", 4, ledger=ledger))]))
    assert views["accelerator"] == {"onceMaxRequest": "1", "remaining": "1", "capacity": "4"}
    assert views["acceleratorShared"] == {"onceMaxRequest": "2", "remaining": "17", "capacity": "40"}
    assert views["acceleratorSliced"] == {"onceMaxRequest": "100", "remaining": "170", "capacity": "400"}


def test_a_card_at_its_slice_count_is_full_for_slices() -> None:
    ledger = [
        {"id": "h-0", "index": 0, "mode": 3, "allocated": 800_000, "remaining": 800_000, "allocatedSlices": 4}
    ]
    devs = [devices_facts(_devices("h", 1, ledger=ledger, logical=4, mfr="hygon", gid="k100_ai"))]
    views = accelerator_views(pool_cards("hygon-k100_ai", devs))
    assert views["acceleratorSliced"] == {"onceMaxRequest": "0", "remaining": "0", "capacity": "100"}


def test_partition_only_pool_reads_zero_in_the_first_three_views() -> None:
    profiles = [{"name": "3g.40gb", "count": 2}, {"name": "7g.80gb", "count": 1}]
    ledger = [
        {
            "id": "p-0",
            "index": 0,
            "mode": 4,
            "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
            "remainingProfiles": [{"name": "3g.40gb", "count": 1}, {"name": "7g.80gb", "count": 0}],
        },
    ]
    devs = [devices_facts(_devices("p", 2, ledger=ledger, profiles=profiles, gid="a100-sxm4-80gb"))]
    views = accelerator_views(pool_cards("nvidia-a100-sxm4-80gb", devs))
    assert column(views) == "0/0 0/0 0/0 1/3"
    assert views["acceleratorPartitioned"]["capacity"] == "4"
    assert views["acceleratorPartitioned"]["remainingProfiles"] == [
        {"name": "3g.40gb", "count": 3},
        {"name": "7g.80gb", "count": 1},
    ]
    assert views["acceleratorPartitioned"]["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]


def test_thead_profiles_are_published_with_the_separator() -> None:
    profiles = [{"name": "4g48gb", "count": 1}]
    devs = [devices_facts(_devices("t", 1, profiles=profiles, mfr="thead", gid="ppu-zw810e"))]
    views = accelerator_views(pool_cards("thead-ppu-zw810e", devs))
    assert views["acceleratorPartitioned"]["remainingProfiles"] == [{"name": "4g.48gb", "count": 1}]


def test_cpu_view() -> None:
    assert cpu_view({"a": 48, "b": 24}, used=0) == {
        "onceMaxRequest": "48",
        "remaining": "72",
        "capacity": "72",
    }
    assert cpu_view({"a": 4}, used=3) == {"onceMaxRequest": "4", "remaining": "1", "capacity": "4"}
    assert cpu_view({}, used=0) == {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"}
