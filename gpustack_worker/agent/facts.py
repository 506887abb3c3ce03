"""The agent's inputs as small frozen values, and the adapters that build them from API objects.

Every output of the agent is a pure function of (Node, Devices, settings). Those functions read these
dataclasses, never raw API dicts nor the runtime cache's representation, so the formulas can be table
tested from GPUStack's documented examples and the wiring can change without touching them.

The ``Devices`` view (:class:`DevicesFacts` and its parts) is shared with the chain's controllers and
lives in :mod:`gpustack_worker.api.devices_view`; it is re-exported here. :class:`NodeFacts` is the
agent's own. Adapters are lenient: a missing field reads as its zero value, because the Device Manager
omits empty fields; values are checked by :mod:`gpustack_worker.agent.validate`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_worker.api.devices_view import (
    Card,
    CardLedger,
    DevicesFacts,
    Group,
    Interface,
    LedgerGroup,
    Profile,
    devices_facts,
)

__all__ = (
    "Card",
    "CardLedger",
    "DevicesFacts",
    "Group",
    "Interface",
    "LedgerGroup",
    "NodeFacts",
    "Profile",
    "devices_facts",
    "node_facts",
)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the agent reads from a Node."""

    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: ``status.capacity`` as the API serves it (quantity strings).
    capacity: Mapping[str, str] = field(default_factory=dict)
    #: ``status.allocatable`` (only used to detect drift of the mirrored counting keys).
    allocatable: Mapping[str, str] = field(default_factory=dict)


def _map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def node_facts(obj: Mapping[str, Any]) -> NodeFacts:
    """A Node dict (as served by the API) → :class:`NodeFacts`."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return NodeFacts(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels=_map(meta.get("labels")),
        annotations=_map(meta.get("annotations")),
        capacity=_map(status.get("capacity")),
        allocatable=_map(status.get("allocatable")),
    )
