"""The ``Devices`` object as small frozen values: what every reader of the inventory and ledger sees.

The node agent (stage 3) and the chain's stage-4 and Gate-3 controllers read the same ``Devices``, so
the view lives here, below every controller: :func:`devices_facts` turns an API dict (or the informer
cache's frozen projection) into :class:`DevicesFacts`, and :mod:`gpustack_worker.api.devices_check`
checks it against the physical world.

Field names follow GPUStack's ``Devices`` API (the models in :mod:`gpustack_worker.api.crds.devices`), and
for ``spec.interfaces[]``, whose layout GPUStack has not published, the project's own (``docs/crds.md``).
The adapter is lenient: a missing field reads as its zero value, because the Device Manager omits empty
fields; a value of the wrong type also reads as zero (the schema rejects those, so only an object stored
before a schema change can carry one).
Out-of-range values are kept as they are, for the checks to see and report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import AllocationMode

__all__ = (
    "Card",
    "CardLedger",
    "DevicesFacts",
    "Group",
    "Interface",
    "LedgerGroup",
    "Profile",
    "devices_facts",
    "fresh_ledger",
)


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


# --- a card whose ledger entry is not published yet ----------------------------------------------------
def fresh_ledger(card: Card) -> CardLedger:
    """The ledger entry of a card whose ledger is not published yet: free, every profile at its ceiling
    (a fresh node advertises room, as the agent's static-ceiling fallback does). The per-card predicates
    that read it live in :mod:`gpustack_worker.api.card_fit`."""
    return CardLedger(
        id=card.id,
        index=card.index,
        mode=AllocationMode.NONE,
        allocated=0,
        remaining=keys.UNITS_PER_ACCELERATOR,
        remaining_profiles={p.name: p.count for p in card.profiles},
    )


# --- adapter from API dicts -------------------------------------------------------------------------
def _list(value: Any) -> list[Mapping[str, Any]]:
    # The informer cache freezes JSON lists into tuples; the API serves lists.
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def _counts(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    return {str(p.get("name", "")): _int(p.get("count")) for p in items if p.get("name")}


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
