"""Gate 3's per-card predicates: which cards are read, and what one card can still give. Pure.

Gate 3 (:mod:`gpustack_worker.placement.gate3`) judges every claim with these, and the node agent's fit
labels (:mod:`gpustack_worker.agent.fit`) count with the very same ones, so that for a single Pod asking
for one accelerator the Workload pin (``Gt U-1`` on ``sliced-max-free-units``, ``Gt N-1`` on
``shared-free-cards``) admits a node exactly when Gate 3 would (docs/agent.md, "Per-card fit labels").
A rule changed here changes both; a rule written anywhere else is
the bug this module exists to prevent (a label counting a broken card makes the pin send a Workload to a
node Gate 3 then answers ``Retry`` every 30 s — the loop the pin is there to stop).

**Which cards** (:func:`node_cards`): every card of the node's ``spec.groups``, joined to its ledger
entry by id (the cards of a manufacturer outside the table are not read: no claim can name them, and
the checks report the group). A card whose entry is not published yet — the ``Devices`` has no
``status.groups`` yet, no status group for the model, or no entry for the card (the Device Manager
writes ``spec`` and ``status`` in separate requests) — reads as free with every profile at its static ceiling
(:func:`~gpustack_worker.api.devices_view.fresh_ledger`), as the pool views and the counting keys read
it. A ledger entry whose card is in no spec group is never read (its capability is unknown).

**What a card gives**: an *unhealthy* card gives nothing to any family. Otherwise, on its ledger state
(``mode``, ``remaining``, ``allocatedSlices``; a published entry, or Gate 3's working copy of one):

=============  ==================================================================================
family         the card takes one more claim when
=============  ==================================================================================
exclusive      unpartitioned, mode free, ``remaining ≥ M``
shared         unpartitioned, mode free or shared, ``remaining ≥ M/10`` (one owner share)
sliced         serves logical slices (``logicalSliced.count > 0``), mode free or sliced,
               ``allocatedSlices < logicalSliced.count`` (Hygon: 4), ``remaining ≥`` the slice's units
partitioned    partitioned, its ``remainingProfiles`` offers the profile as many times as asked
=============  ==================================================================================

Which cards a label *counts* at all (its population, :func:`serves_slices` / :func:`serves_shares`) is
capability only (health is a state): a model whose one sliceable card broke keeps its sliced label, at
``0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from gpustack_worker.api import keys, manufacturers
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.devices_view import fresh_ledger

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.api.devices_view import Card, CardLedger, DevicesFacts, Group

__all__ = (
    "LedgerState",
    "NodeCard",
    "a_key",
    "free_slice_units",
    "grants_share",
    "node_cards",
    "offers_profile",
    "serves_shares",
    "serves_slices",
    "takes_slice",
    "takes_whole_card",
)

M: Final = keys.UNITS_PER_ACCELERATOR
_WHOLE_MODES: Final = frozenset({int(AllocationMode.NONE)})
_SHARE_MODES: Final = frozenset({int(AllocationMode.NONE), int(AllocationMode.SHARED)})
_SLICE_MODES: Final = frozenset({int(AllocationMode.NONE), int(AllocationMode.SLICED)})


class LedgerState(Protocol):
    """A card's allocation state: a published :class:`~gpustack_worker.api.devices_view.CardLedger`, or
    Gate 3's working copy of one."""

    @property
    def mode(self) -> int: ...

    @property
    def remaining(self) -> int: ...

    @property
    def allocated_slices(self) -> int: ...


@dataclass(frozen=True, slots=True)
class NodeCard:
    """One card of a node with the ledger entry it is judged on."""

    group: Group
    card: Card
    #: The published entry, or a free one when it is not published yet.
    ledger: CardLedger

    @property
    def a_key(self) -> str:
        return a_key(self.group)


def a_key(group: Group) -> str:
    """``<manufacturer>-<group id>``: the model key of the fit labels, the flavors and Gate 3."""
    return f"{group.manufacturer}-{group.id}"


def node_cards(devices: DevicesFacts | None) -> list[NodeCard]:
    """Every spec card of the node (healthy or not, in spec order) with its entry, or a free one; the
    cards of a manufacturer outside the table are left out (no claim can name them)."""
    if devices is None:
        return []
    entries = devices.card_ledgers()
    return [
        NodeCard(group, card, entries.get(card.id) or fresh_ledger(card))
        for group in devices.groups
        if manufacturers.get(group.manufacturer) is not None
        for card in group.cards
    ]


# --- populations (capability only) ------------------------------------------------------------------
def serves_slices(card: Card) -> bool:
    """The card belongs to the logical-slicing population (``sliced-max-free-units``)."""
    return card.sliceable and not card.partitioned


def serves_shares(card: Card) -> bool:
    """The card belongs to the whole-card population (exclusive, and ``shared-free-cards``)."""
    return not card.partitioned


# --- what one card can still take -------------------------------------------------------------------
def takes_whole_card(card: Card, state: LedgerState) -> bool:
    """One more exclusive claim: a healthy, unpartitioned, free, whole card."""
    return (
        not card.unhealthy
        and serves_shares(card)
        and int(state.mode) in _WHOLE_MODES
        and state.remaining >= M
    )


def grants_share(card: Card, state: LedgerState) -> bool:
    """One more ownership share (M/10): healthy, unpartitioned, free or shared, a whole share left."""
    return (
        not card.unhealthy
        and serves_shares(card)
        and int(state.mode) in _SHARE_MODES
        and state.remaining >= keys.UNITS_PER_SHARE
    )


def _slice_slot(card: Card, state: LedgerState) -> bool:
    return (
        not card.unhealthy
        and serves_slices(card)
        and int(state.mode) in _SLICE_MODES
        and state.allocated_slices < card.logical_count
    )


def takes_slice(card: Card, state: LedgerState, units: int) -> bool:
    """One more logical slice of ``units``: a free slot under ``logicalSliced.count`` and the units."""
    return _slice_slot(card, state) and state.remaining >= units


def free_slice_units(card: Card, state: LedgerState) -> int:
    """The largest slice this card still takes, in units (0 when it takes none): ``remaining`` when it
    has a free slot, else 0. ``free_slice_units(c, s) >= U`` ⇔ ``takes_slice(c, s, U)`` for ``U ≥ 1``."""
    return max(state.remaining, 0) if _slice_slot(card, state) else 0


def offers_profile(card: Card, remaining_profiles: Mapping[str, int], profile: str, instances: int) -> bool:
    """``instances`` more partitions of ``profile`` (published name) on this partitioned card."""
    return not card.unhealthy and card.partitioned and remaining_profiles.get(profile, 0) >= instances
