"""An independent model of Gate 3's per-card predicates, written from the specification alone.

It reads a ``Devices`` object as the API serves it (plain dicts) and says, per card and per node, what
Gate 3 must answer and what the per-card fit labels must carry. It imports no product code that
decides anything — not :mod:`gpustack_worker.api.card_fit`, :mod:`~gpustack_worker.api.devices_view`,
:mod:`~gpustack_worker.agent.fit` or :mod:`~gpustack_worker.placement.gate3` — only plain constants (the
unit sizes, the manufacturer table's names, the label-key builders), so a wrong predicate in the
product cannot make the model agree with it. The tests in ``test_gate3_model.py`` hold the shared
predicates, the agent's fit labels and Gate 3's verdicts to it.

The rules, with where the specification states them:

- **Cards and their state** (reference §2.2): the cards of ``spec.groups[]`` of a known manufacturer;
  each is joined to the ledger entry with its ``id`` under the ``status.groups[]`` entry of the same
  ``id`` and ``manufacturer``. A card the ledger does not list holds no Pod: the ledger is "rebuilt from
  the Pods bound to the node" (§5.2) and seeds every card at ``M`` — free, ``remaining = M``, no slice,
  every profile at its ceiling ``count``.
- **Populations by capability** (§2.2 ``logicalSliced.count`` "0 when the card's MIG/partition mode is
  enabled"; §5.4 "Each accelerator feeds exactly one group by its reported capability"): a card is
  *partitioned* when its ``logicalSliced.count`` is 0 and it reports physical profiles; it serves only
  the partitioned family. An unpartitioned card serves exclusive and shared claims; one with
  ``logicalSliced.count > 0`` serves logical slices too.
- **Health** (``AcceleratorStatus.unhealthy``; §5.2): an unhealthy card gives nothing to any family,
  but stays in its population (scheduling-chain "Per-card fit labels": a value is ``0`` when every
  accelerator of the population is full).
- **Per card** (§5.2 "Per-accelerator feasibility ``Remaining ≥ demand``", "only free or already-sliced
  cards take slices"; §5.4 "free shares over free/shared cards"; A.6):

  =============  =====================================================================================
  exclusive      mode 0 (None, free) and ``remaining ≥ M`` — a whole card
  shared         mode 0 or 2 (Shared) and ``remaining ≥ M/10`` — one owner share
  sliced         mode 0 or 3 (Sliced), ``allocatedSlices < logicalSliced.count`` and ``remaining ≥ U``
  partitioned    ``remainingProfiles[profile] ≥`` the instances asked
  =============  =====================================================================================

- **Per node, one claim per Pod, ``k`` Pods on the node, eligible cards = the claim's model**: the
  counts below are what any packing of identical claims reaches, so they do not depend on Gate 3's
  packing order (§5.2 "Two 30 % slices fit one free card; two 60 % do not"):

  - exclusive, ``N`` cards each: ``k·N`` cards take a whole card;
  - shared, one share each: the shares left over share-granting cards (``⌊remaining / (M/10)⌋`` each)
    reach ``k``; ``N`` distinct cards for one Pod: ``N`` cards grant a share;
  - sliced, ``U`` units each: Σ over slice-taking cards of ``min(free slots, ⌊remaining / U⌋)`` reaches
    ``k``;
  - partitioned, one instance each: Σ of ``remainingProfiles[profile]`` reaches ``k``.

- **Fit labels** (scheduling-chain "Per-card fit labels", A.6): ``sliced-max-free-units`` is present iff
  the model has a card with ``logicalSliced.count > 0`` (unpartitioned), and is the largest
  ``remaining`` of such a card that takes a slice (healthy, mode 0/3, a free slot), else ``0``;
  ``shared-free-cards`` is present iff the model has an unpartitioned card, and counts the cards that
  grant a share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_worker.api import keys
from gpustack_worker.api.manufacturers import MANUFACTURERS

__all__ = (
    "SHARE",
    "M",
    "ModelCard",
    "cards_of",
    "exclusive_fits",
    "fit_labels",
    "partition_fits",
    "share_fits",
    "slice_fits",
)

M: Final = 1_600_000
SHARE: Final = M // 10
#: Ledger modes (reference §2.2), serialized as numbers.
FREE: Final = 0
SHARED: Final = 2
SLICED: Final = 3
# The model restates the unit sizes from the spec; the product's constants must say the same.
assert keys.UNITS_PER_ACCELERATOR == M and keys.UNITS_PER_SHARE == SHARE


@dataclass(frozen=True, slots=True)
class ModelCard:
    """One spec card of the node and the ledger state it is judged on (its own, or a free one)."""

    a_key: str
    manufacturer: str
    id: str
    unhealthy: bool
    logical_count: int
    #: Profile name → ceiling ``count`` (``physicalSliced.profiles``).
    profiles: Mapping[str, int]
    mode: int
    remaining: int
    allocated_slices: int
    remaining_profiles: Mapping[str, int] = field(default_factory=dict)
    published: bool = True

    # --- populations (capability) --------------------------------------------------------------------
    @property
    def partitioned(self) -> bool:
        return self.logical_count == 0 and bool(self.profiles)

    @property
    def in_slice_population(self) -> bool:
        return self.logical_count > 0

    @property
    def in_whole_population(self) -> bool:
        return not self.partitioned

    # --- what it can still take ----------------------------------------------------------------------
    @property
    def whole_free(self) -> bool:
        return not self.unhealthy and not self.partitioned and self.mode == FREE and self.remaining >= M

    @property
    def shares_left(self) -> int:
        """Owner shares this card can still grant (0 when it grants none)."""
        if self.unhealthy or self.partitioned or self.mode not in (FREE, SHARED):
            return 0
        return max(self.remaining, 0) // SHARE

    @property
    def grants_share(self) -> bool:
        return self.shares_left >= 1

    @property
    def free_slots(self) -> int:
        """Logical slices this card can still host, whatever its memory (0 when it takes none)."""
        if self.unhealthy or not self.in_slice_population or self.mode not in (FREE, SLICED):
            return 0
        return max(self.logical_count - self.allocated_slices, 0)

    def takes_slice(self, units: int) -> bool:
        return self.free_slots >= 1 and self.remaining >= units

    @property
    def largest_slice(self) -> int:
        """The fit label's per-card value: ``remaining`` when a slot is free, else 0."""
        return max(self.remaining, 0) if self.free_slots >= 1 else 0

    def slices_of(self, units: int) -> int:
        """How many slices of ``units`` (≥ 1) this card can still host."""
        return min(self.free_slots, max(self.remaining, 0) // units)

    def offers(self, profile: str, instances: int = 1) -> bool:
        return (
            not self.unhealthy and self.partitioned and self.remaining_profiles.get(profile, 0) >= instances
        )


# --- reading the raw object -------------------------------------------------------------------------
def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _counts(value: Any) -> dict[str, int]:
    return {str(p["name"]): int(p.get("count") or 0) for p in _items(value) if "name" in p}


def cards_of(obj: Mapping[str, Any]) -> list[ModelCard]:
    """Every spec card of a known manufacturer, with its ledger state (a free one when unlisted)."""
    ledger: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for group in _items((obj.get("status") or {}).get("groups")):
        by_id = ledger.setdefault((str(group.get("id")), str(group.get("manufacturer"))), {})
        by_id.update({str(e.get("id")): e for e in _items(group.get("accelerators"))})
    out = []
    for group in _items((obj.get("spec") or {}).get("groups")):
        mfr, gid = str(group.get("manufacturer")), str(group.get("id"))
        if mfr not in MANUFACTURERS:
            continue
        entries = ledger.get((gid, mfr), {})
        for card in _items(group.get("accelerators")):
            status = card.get("status") or {}
            ceilings = _counts((status.get("physicalSliced") or {}).get("profiles"))
            entry = entries.get(str(card.get("id")))
            common = {
                "a_key": f"{mfr}-{gid}",
                "manufacturer": mfr,
                "id": str(card.get("id")),
                "unhealthy": bool(status.get("unhealthy")),
                "logical_count": int((status.get("logicalSliced") or {}).get("count") or 0),
                "profiles": ceilings,
            }
            if entry is None:
                out.append(
                    ModelCard(
                        **common,
                        mode=FREE,
                        remaining=M,
                        allocated_slices=0,
                        remaining_profiles=dict(ceilings),
                        published=False,
                    )
                )
            else:
                out.append(
                    ModelCard(
                        **common,
                        mode=int(entry.get("mode") or 0),
                        remaining=int(entry.get("remaining") or 0),
                        allocated_slices=int(entry.get("allocatedSlices") or 0),
                        remaining_profiles=_counts(entry.get("remainingProfiles")),
                    )
                )
    return out


def _of(cards: list[ModelCard], a_key: str) -> list[ModelCard]:
    return [c for c in cards if c.a_key == a_key]


# --- Gate 3 on one node: k Pods, one claim each, on the cards of model a_key --------------------------
def exclusive_fits(cards: list[ModelCard], a_key: str, *, cards_per_pod: int, pods: int = 1) -> bool:
    return sum(c.whole_free for c in _of(cards, a_key)) >= cards_per_pod * pods


def share_fits(cards: list[ModelCard], a_key: str, *, cards_per_pod: int, pods: int = 1) -> bool:
    """One share on each of ``cards_per_pod`` distinct cards per Pod (``pods`` > 1 only with one card
    each: with several, which cards the first Pods took decides, and the spec names no order)."""
    own = _of(cards, a_key)
    if pods == 1:
        return sum(c.grants_share for c in own) >= cards_per_pod
    assert cards_per_pod == 1, "the model decides several Pods of one share each only"
    return sum(c.shares_left for c in own) >= pods


def slice_fits(cards: list[ModelCard], a_key: str, *, units: int, pods: int = 1) -> bool:
    assert units >= 1
    return sum(c.slices_of(units) for c in _of(cards, a_key)) >= pods


def partition_fits(cards: list[ModelCard], a_key: str, *, profile: str, pods: int = 1) -> bool:
    own = [c for c in _of(cards, a_key) if c.offers(profile)]
    return sum(c.remaining_profiles.get(profile, 0) for c in own) >= pods


# --- the fit labels ---------------------------------------------------------------------------------
def fit_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The fit labels a managed node with this ``Devices`` carries."""
    cards = cards_of(obj)
    out: dict[str, str] = {}
    for a_key in dict.fromkeys(c.a_key for c in cards):
        own = _of(cards, a_key)
        sliceable = [c for c in own if c.in_slice_population]
        if sliceable:
            out[keys.sliced_max_free_units_key(a_key)] = str(max(c.largest_slice for c in sliceable))
        whole = [c for c in own if c.in_whole_population]
        if whole:
            out[keys.shared_free_cards_key(a_key)] = str(sum(c.grants_share for c in whole))
    return out
