"""The agent's inputs as small frozen values, and the adapters that build them from API objects.

Every output of the agent is a pure function of (Node, Devices, settings). Those functions read these
dataclasses, never raw API dicts nor the runtime cache's representation, so the formulas can be table
tested from the spec's own examples and the wiring can change without touching them.

Field names follow reference §2.2 (``Devices``) and the project's layout for ``spec.interfaces[]``
(the reference leaves that subsystem UNCONFIRMED; see ``docs/agent.md``). Adapters are lenient: a
missing field reads as its zero value, because the Device Manager omits empty fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_worker.api.crds.devices import AllocationMode

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


@dataclass(frozen=True, slots=True)
class Profile:
    """One hardware-partition profile a card can host (manufacturer spelling)."""

    name: str
    #: Static ceiling: the most instances of this profile an empty card takes.
    count: int
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Card:
    """One accelerator's capability (``spec.groups[].accelerators[]``)."""

    id: str
    index: int = 0
    #: ``status.logicalSliced.count``: soft slices this card hosts; 0 when partitioning is enabled.
    logical_count: int = 0
    #: ``status.logicalSliced.coresPercentageOvercommit``: each slice may claim 100 % of compute.
    overcommit: bool = False
    profiles: tuple[Profile, ...] = ()
    unhealthy: bool = False

    @property
    def partitioned(self) -> bool:
        """In a partitioning mode: no logical slices, physical profiles reported instead."""
        return self.logical_count == 0 and bool(self.profiles)

    @property
    def sliceable(self) -> bool:
        """Serves the logical-slicing family."""
        return self.logical_count > 0


@dataclass(frozen=True, slots=True)
class Group:
    """One accelerator model on the node (``spec.groups[]``)."""

    id: str
    manufacturer: str
    name: str = ""
    #: Per-card VRAM in MiB.
    memory_mib: int = 0
    cards: tuple[Card, ...] = ()


@dataclass(frozen=True, slots=True)
class CardLedger:
    """One accelerator's allocation state (``status.groups[].accelerators[]``)."""

    id: str
    index: int = 0
    #: :class:`~gpustack_worker.api.crds.devices.AllocationMode` (an unknown number is kept as is).
    mode: int = AllocationMode.NONE
    allocated: int = 0
    remaining: int = 0
    allocated_slices: int = 0
    allocated_profiles: Mapping[str, int] = field(default_factory=dict)
    remaining_profiles: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LedgerGroup:
    """The ledger of one model (``status.groups[]``)."""

    id: str
    manufacturer: str
    cards: tuple[CardLedger, ...] = ()


@dataclass(frozen=True, slots=True)
class Interface:
    """One network link (``spec.interfaces[]``, project layout)."""

    name: str
    rdma: bool = False
    #: ``Active`` | ``Down`` | ``Init`` | ``Armed`` | ``Unknown``.
    state: str = "Unknown"
    link_layer: str = ""
    numa: str = ""
    #: ``PIX`` | ``PXB`` | ``PHB`` | ``NODE`` | ``SYS``, or empty when unknown.
    distance: str = ""


@dataclass(frozen=True, slots=True)
class DevicesFacts:
    """What the agent reads from the node's same-named ``Devices``."""

    name: str
    groups: tuple[Group, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    #: ``status.groups``; None while the Device Manager has not published a ledger at all.
    ledger: tuple[LedgerGroup, ...] | None = None

    def has_accelerators(self) -> bool:
        """At least one detected card."""
        return any(g.cards for g in self.groups)

    def card_ledgers(self) -> dict[str, CardLedger]:
        """Every published card ledger by card id."""
        return {c.id: c for g in self.ledger or () for c in g.cards}


# --- adapters from API dicts ------------------------------------------------------------------------
def _map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Mapping[str, Any]]:
    # The informer cache freezes JSON lists into tuples; the API serves lists.
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _counts(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    return {str(p.get("name", "")): _int(p.get("count")) for p in items if p.get("name")}


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


def _card(obj: Mapping[str, Any]) -> Card:
    status = obj.get("status") or {}
    logical = status.get("logicalSliced") or {}
    physical = status.get("physicalSliced") or {}
    return Card(
        id=str(obj.get("id", "")),
        index=_int(obj.get("index")),
        logical_count=_int(logical.get("count")),
        overcommit=bool(logical.get("coresPercentageOvercommit", False)),
        profiles=tuple(
            Profile(str(p["name"]), _int(p.get("count")), _int(p.get("memoryMib")))
            for p in _list(physical.get("profiles"))
            if p.get("name")
        ),
        unhealthy=bool(status.get("unhealthy", False)),
    )


def _ledger(obj: Mapping[str, Any]) -> CardLedger:
    return CardLedger(
        id=str(obj.get("id", "")),
        index=_int(obj.get("index")),
        mode=_int(obj.get("mode")),
        allocated=_int(obj.get("allocated")),
        remaining=_int(obj.get("remaining")),
        allocated_slices=_int(obj.get("allocatedSlices")),
        allocated_profiles=_counts(_list(obj.get("allocatedProfiles"))),
        remaining_profiles=_counts(_list(obj.get("remainingProfiles"))),
    )


def _interface(obj: Mapping[str, Any]) -> Interface:
    numa = obj.get("numaAffinity")
    return Interface(
        name=str(obj.get("name", "")),
        rdma=bool(obj.get("rdma", False)),
        state=str(obj.get("state", "Unknown")),
        link_layer=str(obj.get("linkLayer", "")),
        numa="" if numa is None else str(numa),
        distance=str(obj.get("distance", "") or ""),
    )


def devices_facts(obj: Mapping[str, Any]) -> DevicesFacts:
    """A ``Devices`` dict (as served by the API) → :class:`DevicesFacts`."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    raw_ledger = status.get("groups")
    return DevicesFacts(
        name=str((obj.get("metadata") or {}).get("name", "")),
        groups=tuple(
            Group(
                id=str(g.get("id", "")),
                manufacturer=str(g.get("manufacturer", "")).lower(),
                name=str(g.get("name", "")),
                memory_mib=_int(g.get("memory")),
                cards=tuple(_card(c) for c in _list(g.get("accelerators"))),
            )
            for g in _list(spec.get("groups"))
        ),
        interfaces=tuple(_interface(i) for i in _list(spec.get("interfaces"))),
        ledger=None
        if raw_ledger is None
        else tuple(
            LedgerGroup(
                id=str(g.get("id", "")),
                manufacturer=str(g.get("manufacturer", "")).lower(),
                cards=tuple(_ledger(c) for c in _list(g.get("accelerators"))),
            )
            for g in _list(raw_ledger)
        ),
    )
