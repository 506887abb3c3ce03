"""Per-card facts of one scenario accelerator entry: which family each card serves and its ledger.

A card is either *partitioned* (listed under ``partitioning.cards``; it serves only the partitioned
family and reports ``logicalSliced.count = 0``) or *unpartitioned* (it serves the exclusive and
shared families, and the sliced family when its manufacturer records logical slices). Both
:mod:`~gpustack_worker.simulate.checks` (to reject what cannot exist) and
:mod:`~gpustack_worker.simulate.render` (to write it) derive these facts here, so the validation and
the rendering can never disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api import manufacturers
from gpustack_worker.simulate import ledger

if TYPE_CHECKING:
    from gpustack_worker.simulate.scenario import Accelerator, Allocation, Partitioning

__all__ = (
    "AllocationError",
    "allocation_ledger",
    "card_geometry",
    "card_ledger",
    "logical_slices",
    "manufacturer_of",
    "partitioned_positions",
)


class AllocationError(ValueError):
    """An allocation that this card cannot carry; ``field`` is the offending allocation key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def manufacturer_of(acc: Accelerator) -> manufacturers.Manufacturer:
    """The manufacturer row (validated to exist by the checks)."""
    row = manufacturers.get(acc.manufacturer)
    if row is None:
        raise ValueError(f"unknown manufacturer {acc.manufacturer!r}")
    return row


def card_geometry(p: Partitioning) -> ledger.CardGeometry:
    """The partition geometry every partitioned card of the entry shares."""
    profiles = tuple(
        ledger.ProfileGeometry(
            name=prof.name,
            memory_mib=prof.memoryMiB,
            compute_slices=prof.computeSlices,
            memory_slices=prof.memorySlices,
            placements=(
                tuple(sorted(set(prof.placements)))
                if prof.placements is not None
                else ledger.default_placements(
                    p.computeSlices, p.memorySlices, prof.computeSlices, prof.memorySlices
                )
            ),
        )
        for prof in p.profiles
    )
    return ledger.CardGeometry(p.computeSlices, p.memorySlices, profiles)


def partitioned_positions(acc: Accelerator) -> frozenset[int]:
    """Positions (0-based within the entry) of the cards in partitioning mode."""
    if acc.partitioning is None:
        return frozenset()
    if acc.partitioning.cards is None:
        return frozenset(range(acc.count))
    return frozenset(acc.partitioning.cards)


def logical_slices(acc: Accelerator, position: int) -> int:
    """``logicalSliced.count`` of one card: the manufacturer's default, 0 when partitioned."""
    if position in partitioned_positions(acc):
        return 0
    return manufacturer_of(acc).logical_slices


def allocation_ledger(acc: Accelerator, alloc: Allocation) -> ledger.CardLedger:
    """The ledger of the card ``alloc`` describes; raises :class:`AllocationError` when impossible."""
    partitioned = alloc.card in partitioned_positions(acc)
    wanted = {
        "units": alloc.units is not None,
        "slices": alloc.slices is not None,
        "shares": alloc.shares is not None,
        "profiles": alloc.profiles is not None,
    }
    allowed = {
        "exclusive": set(),
        "shared": {"shares"},
        "sliced": {"units", "slices"},
        "partitioned": {"profiles"},
    }[alloc.mode]
    for key, given in wanted.items():
        if given and key not in allowed:
            raise AllocationError(key, f"not allowed with mode {alloc.mode}")
        if not given and key in allowed:
            raise AllocationError(key, f"required with mode {alloc.mode}")
    if alloc.mode == "partitioned":
        if not partitioned or acc.partitioning is None:
            raise AllocationError("mode", f"card {alloc.card} is not in partitioning mode")
        assert alloc.profiles is not None
        try:
            return ledger.partitioned_card(card_geometry(acc.partitioning), alloc.profiles)
        except ledger.CarveError as exc:
            raise AllocationError("profiles", str(exc)) from None
    if partitioned:
        raise AllocationError("mode", f"card {alloc.card} is partitioned: only mode partitioned applies")
    if alloc.mode == "exclusive":
        return ledger.exclusive_card()
    if alloc.mode == "shared":
        assert alloc.shares is not None
        try:
            return ledger.shared_card(alloc.shares)
        except ValueError as exc:
            raise AllocationError("shares", str(exc)) from None
    assert alloc.units is not None and alloc.slices is not None
    slices = logical_slices(acc, alloc.card)
    if slices == 0:
        raise AllocationError("mode", f"{acc.manufacturer} records no logical slices")
    if alloc.slices > slices:
        raise AllocationError("slices", f"must be ≤ {slices} (the card's logicalSliced.count)")
    if not alloc.slices <= alloc.units <= ledger.M:
        raise AllocationError("units", f"must be within {alloc.slices}..{ledger.M}")
    return ledger.sliced_card(alloc.units, alloc.slices, slices)


def card_ledger(acc: Accelerator, position: int) -> ledger.CardLedger:
    """The ledger of one card: its allocation's, else a free card (with full remaining profiles)."""
    alloc = next((a for a in acc.allocations if a.card == position), None)
    if alloc is not None:
        return allocation_ledger(acc, alloc)
    if position in partitioned_positions(acc) and acc.partitioning is not None:
        return ledger.partitioned_card(card_geometry(acc.partitioning), {})
    return ledger.free_card()
