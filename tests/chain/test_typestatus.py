"""The InstanceType status the controller's step and both plans compose through one function
(``chain/typestatus.py``), table-tested over the chain's four-node cluster: the pool's flavors as the
flavor cache holds them, a finalizing flavor's nodes no longer counted, a flavor not labelled as the
chain's ignored, CPU in use from the queue, entrance and phase."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain import pools
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.chain.typestatus import capacity_status, instance_type_status, pool_flavors
from tests.chain.builders import mixed_cluster
from tests.chain.test_views import _devices

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpustack_worker.chain.nodes import NodeHardware

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
#: The T4 pool's flavors: t4-a's (Intel, 1 card) and t4-b's (AMD, 4 cards).
ONE, FOUR = "t4-linux-amd64-1d-", "t4-linux-amd64-4d-"


def _world() -> tuple[list[NodeHardware], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The cluster's Node views, its flavors by name and its derived InstanceTypes by name."""
    hardware = [h for n in mixed_cluster() if (h := node_hardware(n)) is not None]
    plans = chain_flavors.plan_flavors(hardware, mixed_on_node=True)
    flavors = {p.name: chain_flavors.flavor_body(p, mixed_on_node=True, aware=False) for p in plans}
    types = {}
    for p in plans:
        it = pools.derived_instance_type(p, aware=False)
        types[it["metadata"]["name"]] = it
    return hardware, flavors, types


def _facts() -> Callable[[str], DevicesFacts | None]:
    ledgers = {"t4-a": devices_facts(_devices("t4-a", 1)), "t4-b": devices_facts(_devices("t4-b", 4))}
    return ledgers.get


def _flavor(flavors: dict[str, dict[str, Any]], fragment: str) -> str:
    (name,) = [n for n in flavors if fragment in n]
    return name


def _finalizing(flavor: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(flavor)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out


def _untyped(flavor: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(flavor)
    out["metadata"]["labels"][keys.RESOURCE_TYPE] = "edited"
    return out


#: (case, InstanceType, {flavor fragment: how the cache holds it}, the view read, its expected value,
#: the pool's flavors by fragment).
CASES: list[tuple[str, str, dict[str, str], str, dict[str, str], list[str]]] = [
    ("both live", T4, {}, "accelerator", {"onceMaxRequest": "4", "remaining": "5", "capacity": "5"},
     [ONE, FOUR]),
    ("4-card flavor finalizing", T4, {FOUR: "finalizing"}, "accelerator",
     {"onceMaxRequest": "1", "remaining": "1", "capacity": "1"}, [ONE]),
    ("1-card flavor finalizing", T4, {ONE: "finalizing"}, "accelerator",
     {"onceMaxRequest": "4", "remaining": "4", "capacity": "4"}, [FOUR]),
    ("both finalizing", T4, {ONE: "finalizing", FOUR: "finalizing"}, "accelerator",
     {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"}, []),
    ("4-card flavor not labelled as the chain's", T4, {FOUR: "untyped"}, "accelerator",
     {"onceMaxRequest": "1", "remaining": "1", "capacity": "1"}, [ONE]),
    ("4-card flavor not in the cache", T4, {FOUR: "absent"}, "accelerator",
     {"onceMaxRequest": "1", "remaining": "1", "capacity": "1"}, [ONE]),
    ("CPU pool, every flavor live", GENERIC, {}, "cpu",
     {"onceMaxRequest": "48", "remaining": "64", "capacity": "64"},
     ["-4c-", "-8c-", "-48c-"]),
    ("CPU pool, the 48-core flavor finalizing", GENERIC, {"-48c-": "finalizing"}, "cpu",
     {"onceMaxRequest": "8", "remaining": "16", "capacity": "16"}, ["-4c-", "-8c-"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "pool", "held", "view", "expected", "chosen"), CASES, ids=[c[0] for c in CASES]
)
def test_capacity_counts_the_pool_flavors_the_cache_holds_less_finalizing_ones(
    case: str, pool: str, held: dict[str, str], view: str, expected: dict[str, str], chosen: list[str]
) -> None:
    hardware, flavors, types = _world()
    cache = []
    for name, body in flavors.items():
        how = next((h for fragment, h in held.items() if fragment in name), "live")
        if how == "absent":
            continue
        cache.append({"finalizing": _finalizing, "untyped": _untyped}.get(how, lambda f: f)(body))
    it = types[pool]
    status = capacity_status(it, None, cache, hardware, _facts(), aware=False)
    assert status[view] == expected, case
    names = [f["metadata"]["name"] for f in pool_flavors(it, cache, aware=False)]
    assert names == sorted(_flavor(flavors, fragment) for fragment in chosen)
    # the descriptors are the first pool flavor's, and none without one
    assert ("detail" in status) == bool(chosen)


def test_cpu_in_use_is_what_kueue_reports_on_the_queue() -> None:
    hardware, flavors, types = _world()
    queue = {"status": {"flavorsUsage": [{"name": "x", "resources": [{"name": "cpu", "total": "9500m"}]}]}}
    status = capacity_status(types[GENERIC], queue, list(flavors.values()), hardware, _facts(), aware=False)
    assert status["cpu"] == {"onceMaxRequest": "48", "remaining": "54", "capacity": "64"}  # 9.5 → 10 used


def test_nodes_outside_the_pool_flavors_do_not_count_whatever_nodes_are_passed() -> None:
    hardware, flavors, types = _world()
    everything = capacity_status(types[T4], None, list(flavors.values()), hardware, _facts(), aware=False)
    only_t4 = [h for h in hardware if h.name.startswith("t4-")]
    assert (
        capacity_status(types[T4], None, list(flavors.values()), only_t4, _facts(), aware=False) == everything
    )


@pytest.mark.parametrize(
    ("phase", "message", "expected"),
    [
        ("Active", "", {"entrance": keys.local_queue_name(T4), "phase": "Active"}),
        (
            "Draining",
            "draining 2 workload(s): see the queue's TopologyReady condition",
            {
                "entrance": keys.local_queue_name(T4),
                "phase": "Draining",
                "phaseMessage": "draining 2 workload(s): see the queue's TopologyReady condition",
            },
        ),
    ],
)
def test_the_status_is_entrance_phase_and_capacity(
    phase: str, message: str, expected: dict[str, str]
) -> None:
    hardware, flavors, types = _world()
    cache = list(flavors.values())
    status = instance_type_status(
        types[T4], None, cache, hardware, _facts(), aware=False, phase=phase, phase_message=message
    )
    capacity = capacity_status(types[T4], None, cache, hardware, _facts(), aware=False)
    assert status == {**expected, **capacity}
    assert status["acceleratorSummary"] == "4/5 4/50 100/500 0/0"
