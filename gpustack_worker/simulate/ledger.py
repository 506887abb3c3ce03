"""The per-card allocation ledger a Device Manager publishes in ``Devices.status`` (``status.groups``).

The simulator must seed ledgers that the worker's stage-3 code reads exactly as it would read a real
Device Manager's: unit accounting (``M`` per card, ``M/10`` per ownership share), slice counts, and —
for hardware-partitioned cards — ``remainingProfiles`` that respect *geometry*, not just arithmetic.
One ``3g.40gb`` carved at memory slice 0 of an 80 GB card leaves room for another ``3g.40gb`` but for
no ``7g.80gb`` (the node agent's per-profile capacity keys read the ledger, so they are geometry-aware
too; docs/agent.md, "Counting capacities"), so partitions are placed on memory-slice intervals and the
remaining count of each profile is how many more non-overlapping legal placements still fit within the
card's free compute slices.

Everything here is pure: no I/O, deterministic for equal inputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import AllocationMode

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = (
    "CardGeometry",
    "CardLedger",
    "CarveError",
    "Placement",
    "ProfileGeometry",
    "carve",
    "default_placements",
    "exclusive_card",
    "free_card",
    "partitioned_card",
    "remaining_profiles",
    "shared_card",
    "sliced_card",
)

M = keys.UNITS_PER_ACCELERATOR


@dataclass(frozen=True, slots=True)
class ProfileGeometry:
    """One partition profile of a card: its size and its legal start slices on an empty card."""

    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    placements: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CardGeometry:
    """A partitionable card: its compute and memory slices and the profiles it offers."""

    compute_slices: int
    memory_slices: int
    profiles: tuple[ProfileGeometry, ...]

    def profile(self, name: str) -> ProfileGeometry | None:
        """The profile called ``name`` (manufacturer spelling), if offered."""
        return next((p for p in self.profiles if p.name == name), None)

    def capacity(self) -> dict[str, int]:
        """Max instances per profile on an empty card (``profiles[].count``)."""
        return dict(_empty_card_capacity(self))

    @property
    def max_instances(self) -> int:
        """``physicalSliced.count``: the largest per-profile count, 0 when no profiles."""
        return max(self.capacity().values(), default=0)


@dataclass(frozen=True, slots=True)
class Placement:
    """One carved partition: ``length`` memory slices starting at ``start``."""

    profile: str
    start: int
    length: int
    compute_slices: int

    def overlaps(self, start: int, length: int) -> bool:
        """Whether ``[start, start+length)`` intersects this placement."""
        return start < self.start + self.length and self.start < start + length


class CarveError(ValueError):
    """A requested set of partitions does not fit on the card."""


def default_placements(card_compute: int, card_memory: int, compute: int, memory: int) -> tuple[int, ...]:
    """Legal starts when the file gives none: aligned to the profile's own memory size, as many as
    both the memory slices and the card's compute slices allow (A100/H100: ``3g.40gb`` → 0 and 4,
    ``2g.20gb`` → 0, 2, 4, ``7g.80gb`` → 0)."""
    if memory <= 0 or compute <= 0 or memory > card_memory or compute > card_compute:
        return ()
    starts = tuple(range(0, card_memory - memory + 1, memory))
    return starts[: card_compute // compute]


def _first_free(profile: ProfileGeometry, occupied: Iterable[Placement]) -> int | None:
    taken = tuple(occupied)
    for start in profile.placements:
        if not any(p.overlaps(start, profile.memory_slices) for p in taken):
            return start
    return None


def carve(card: CardGeometry, wanted: Mapping[str, int]) -> tuple[Placement, ...]:
    """Place ``wanted`` instances per profile first-fit, largest profiles first.

    Raises :class:`CarveError` naming the profile that is unknown or does not fit.
    """
    for name in wanted:
        if card.profile(name) is None:
            raise CarveError(f"profile {name!r} is not offered by this card")
    order = sorted(wanted.items(), key=lambda kv: (-_geometry(card, kv[0]).memory_slices, kv[0]))
    placed: list[Placement] = []
    for name, count in order:
        profile = _geometry(card, name)
        for _ in range(count):
            used_compute = sum(p.compute_slices for p in placed)
            start = _first_free(profile, placed)
            if start is None or used_compute + profile.compute_slices > card.compute_slices:
                raise CarveError(f"{count} x {name} do not fit on one card next to the other partitions")
            placed.append(Placement(name, start, profile.memory_slices, profile.compute_slices))
    return tuple(sorted(placed, key=lambda p: p.start))


def _geometry(card: CardGeometry, name: str) -> ProfileGeometry:
    profile = card.profile(name)
    if profile is None:  # pragma: no cover - guarded by carve()
        raise CarveError(f"profile {name!r} is not offered by this card")
    return profile


def remaining_profiles(card: CardGeometry, occupied: Iterable[Placement]) -> dict[str, int]:
    """How many more instances of each profile still fit next to ``occupied``.

    Per profile: greedily take legal starts (ascending; equal-length intervals, so earliest-first is
    optimal) that overlap neither an occupied placement nor each other, capped by the free compute.
    """
    taken = tuple(occupied)
    free_compute = card.compute_slices - sum(p.compute_slices for p in taken)
    result: dict[str, int] = {}
    for profile in card.profiles:
        chosen: list[Placement] = list(taken)
        fits = 0
        for start in sorted(profile.placements):
            if not any(p.overlaps(start, profile.memory_slices) for p in chosen):
                chosen.append(Placement(profile.name, start, profile.memory_slices, profile.compute_slices))
                fits += 1
        result[profile.name] = min(fits, max(free_compute, 0) // profile.compute_slices)
    return result


@dataclass(frozen=True, slots=True)
class CardLedger:
    """One ``status.groups[].accelerators[]`` entry, minus identity."""

    mode: AllocationMode
    allocated: int
    remaining: int
    allocated_slices: int = 0
    allocated_profiles: dict[str, int] = field(default_factory=dict)
    remaining_profiles: dict[str, int] = field(default_factory=dict)


def free_card() -> CardLedger:
    """An unpartitioned card nobody holds."""
    return CardLedger(AllocationMode.NONE, 0, M)


def exclusive_card() -> CardLedger:
    """A card held whole by one container."""
    return CardLedger(AllocationMode.EXCLUSIVE, M, 0)


def shared_card(shares: int) -> CardLedger:
    """A card with ``shares`` ownership shares granted (``M/10`` units each)."""
    if not 1 <= shares <= keys.SHARES_PER_ACCELERATOR:
        raise ValueError(f"shares must be within 1..{keys.SHARES_PER_ACCELERATOR}")
    allocated = shares * keys.UNITS_PER_SHARE
    return CardLedger(AllocationMode.SHARED, allocated, M - allocated)


def sliced_card(units: int, slices: int, max_slices: int) -> CardLedger:
    """A card hosting ``slices`` logical slices worth ``units`` in total."""
    if not 1 <= slices <= max_slices:
        raise ValueError(f"slices must be within 1..{max_slices} (the card's logicalSliced.count)")
    if not slices <= units <= M:
        raise ValueError(f"units must be within {slices}..{M}")
    return CardLedger(AllocationMode.SLICED, units, M - units, allocated_slices=slices)


def partitioned_card(card: CardGeometry, wanted: Mapping[str, int]) -> CardLedger:
    """A partitioned card carrying ``wanted`` instances per profile (may be empty: mode 0).

    Units follow memory: a card is worth ``M`` and each carved partition its share of memory slices.
    """
    placed = carve(card, {name: n for name, n in wanted.items() if n > 0})
    used_memory = sum(p.length for p in placed)
    allocated = used_memory * M // card.memory_slices
    counts: dict[str, int] = {}
    for p in placed:
        counts[p.profile] = counts.get(p.profile, 0) + 1
    return CardLedger(
        AllocationMode.PARTITIONED if placed else AllocationMode.NONE,
        allocated,
        M - allocated,
        allocated_profiles=dict(sorted(counts.items())),
        remaining_profiles=remaining_profiles(card, placed),
    )


@functools.lru_cache(maxsize=256)
def _empty_card_capacity(geometry: CardGeometry) -> tuple[tuple[str, int], ...]:
    """:meth:`CardGeometry.capacity`, remembered per geometry (the entries of a fleet share a few)."""
    return tuple(remaining_profiles(geometry, ()).items())
