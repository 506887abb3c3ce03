"""The ``placement-racks`` scenario's rack hierarchy, shared by the end-to-end modules that use it: its
layout, the configMap TopologySource that publishes it, the wait until the L4 queue places on it with
both admission checks referenced, and a foreign Workload that takes one L4 of a rack."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from tests.stack import condition
from tests.topology.cluster_helpers import snapshot_config_map, topology_source, workload

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gpustack_worker.runtime.client import Client

__all__ = (
    "L4",
    "LEVELS",
    "PROFILE",
    "RACK",
    "RACKS",
    "RACK_OF",
    "apply_racks",
    "blocker",
    "check_entry",
)

L4: Final = "gpustack--nvidia-l4-linux-amd64"
REGION, ZONE, RACK = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
LEVELS: Final = (REGION, ZONE, RACK)
PROFILE: Final = keys.topology_profile([*LEVELS, keys.HOSTNAME])
#: rack-node-1, 2 → rack-1; rack-node-3, 4 → rack-2 (two L4s per node: four per rack).
RACK_OF: Final = {f"rack-node-{i}": f"rack-{(i - 1) // 2 + 1}" for i in range(1, 5)}
RACKS: Final = ("rack-1", "rack-2")


def check_entry(wl: dict[str, Any] | None, check: str) -> dict[str, Any]:
    """The Workload's ``status.admissionChecks`` entry of ``check`` (``{}`` when absent)."""
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == check:
            return dict(entry)
    return {}


def blocker(rack: str, namespace: str) -> dict[str, Any]:
    """A foreign Workload ``blocker-<rack>`` taking one L4 of ``rack`` (its template selects the rack)."""
    body = workload(f"blocker-{rack}", namespace, L4)
    body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {RACK: rack}
    return body


async def apply_racks(
    admin: Client, namespace: str, eventually: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
) -> None:
    """Publish the racks through a configMap TopologySource, then wait until every rack node carries its
    rack and profile, the L4 queue is TopologyReady with every flavor on the racks' Topology, both
    admission checks are Active and referenced from it, and its LocalQueue exists in ``namespace``."""
    placements = {node: {REGION: "region-1", ZONE: "zone-a", RACK: rack} for node, rack in RACK_OF.items()}
    await admin.create(kinds.CONFIG_MAP, snapshot_config_map("racks", "inventory-1", placements))
    await admin.create(
        kinds.TOPOLOGY_SOURCE,
        topology_source("racks", LEVELS, config_map="racks", match_labels={"example.com/inventory": "racks"}),
    )

    async def ready() -> bool:
        for node, rack in RACK_OF.items():
            labels = ((await admin.get(kinds.NODE, node)) or {}).get("metadata", {}).get("labels") or {}
            if labels.get(RACK) != rack or labels.get(keys.TOPOLOGY_PROFILE) != PROFILE:
                return False
        cq = await admin.get(kinds.CLUSTER_QUEUE, L4)
        spec = (cq or {}).get("spec") or {}
        names = [f["name"] for g in spec.get("resourceGroups") or () for f in g["flavors"]]
        strategy = spec.get("admissionChecksStrategy") or {}
        checks = {c.get("name") for c in strategy.get("admissionChecks") or ()}
        if not names or condition(cq, "TopologyReady").get("status") != "True":
            return False
        if condition(cq, "Active").get("status") != "True":
            return False
        if not {keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK} <= checks:
            return False
        for name in names:
            flavor = await admin.get(kinds.RESOURCE_FLAVOR, name)
            if ((flavor or {}).get("spec") or {}).get("topologyName") != keys.topology_name(PROFILE):
                return False
        return await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(L4), namespace) is not None

    await eventually(ready)
