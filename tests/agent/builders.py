"""API-shaped Node and Devices dicts for the agent's table tests.

Tests build inputs the way the API server serves them and go through the same adapters as production
(:func:`gpustack_worker.agent.facts.node_facts` / ``devices_facts``), so the field names of reference
§2.2 are exercised too.
"""

from __future__ import annotations

from typing import Any

from gpustack_worker.agent.facts import DevicesFacts, NodeFacts, devices_facts, node_facts


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
) -> NodeFacts:
    return node_facts(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "status": {"capacity": capacity or {}, "allocatable": capacity or {}},
        }
    )


def profile(name: str, count: int, memory_mib: int = 0) -> dict[str, Any]:
    return {"name": name, "memoryMib": memory_mib, "computeSlices": 1, "memorySlices": 1, "count": count}


def card(
    card_id: str,
    *,
    logical: int = 0,
    overcommit: bool = False,
    profiles: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "unhealthy": False,
        "logicalSliced": {"count": logical, "coresPercentageOvercommit": overcommit},
    }
    if profiles:
        status["physicalSliced"] = {"profiles": profiles, "count": max(p["count"] for p in profiles)}
    return {"id": card_id, "index": 0, "status": status}


def group(
    group_id: str, manufacturer: str, memory: int, cards: list[dict[str, Any]], name: str = ""
) -> dict[str, Any]:
    return {
        "id": group_id,
        "manufacturer": manufacturer,
        "name": name or group_id,
        "memory": memory,
        "accelerators": cards,
    }


def ledger(
    card_id: str,
    *,
    mode: int = 0,
    allocated: int = 0,
    remaining: int = 1_600_000,
    slices: int = 0,
    allocated_profiles: dict[str, int] | None = None,
    remaining_profiles: dict[str, int] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": card_id,
        "index": 0,
        "mode": mode,
        "allocated": allocated,
        "remaining": remaining,
        "allocatedSlices": slices,
    }
    if allocated_profiles:
        entry["allocatedProfiles"] = [{"name": k, "count": v} for k, v in allocated_profiles.items()]
    if remaining_profiles:
        entry["remainingProfiles"] = [{"name": k, "count": v} for k, v in remaining_profiles.items()]
    return entry


def devices(
    groups: list[dict[str, Any]],
    ledger_groups: list[dict[str, Any]] | None = None,
    *,
    interfaces: list[dict[str, Any]] | None = None,
    name: str = "n1",
) -> DevicesFacts:
    obj: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"groups": groups, "interfaces": interfaces or []},
    }
    if ledger_groups is not None:
        obj["status"] = {"groups": ledger_groups}
    return devices_facts(obj)


def ledger_group(group_id: str, manufacturer: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": group_id, "manufacturer": manufacturer, "accelerators": entries}


#: Node parts by field: ``{"labels": {...}, "annotations": {...}, "capacity": {...}}``.
NodeParts = dict[str, dict[str, str]]


def node_of(parts: NodeParts, name: str = "n1") -> NodeFacts:
    """:func:`node` from a table row's parts."""
    return node(
        name, labels=parts.get("labels"), annotations=parts.get("annotations"), capacity=parts.get("capacity")
    )


#: Top-level/metadata identity fields SSA never records in managedFields.
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def managed_entry(manager: str, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    """The managedFields entry kube-apiserver records for ``manager`` applying ``body`` (ownerReferences
    are a list keyed by uid; other lists are atomic)."""

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            here = (*path, key)
            if here in _IDENTITY:
                continue
            if isinstance(value, dict) and value:
                inner = walk(value, here)
                if inner or any((*here, k) not in _IDENTITY for k in value):
                    out[f"f:{key}"] = inner
            elif key == "ownerReferences":
                out[f"f:{key}"] = {f'k:{{"uid":"{o["uid"]}"}}': {".": {}} for o in value}
            else:
                out[f"f:{key}"] = {}
        return out

    entry: dict[str, Any] = {"manager": manager, "operation": "Apply", "fieldsV1": walk(body, ())}
    if subresource:
        entry["subresource"] = subresource
    return entry
