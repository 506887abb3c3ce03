"""The four capacity views of an InstanceType's status (and the CPU view of a CPU pool), pure.

Each accelerator of the pool feeds exactly one group by its reported capability: unpartitioned cards feed
the exclusive (EX), shared (SH) and sliced (SL) views, partitioned cards feed the partitioned view (PT),
so a partition-only pool reads ``0/0 0/0 0/0`` in the first three. Each view is
``{onceMaxRequest, remaining, capacity}``:

- EX ``accelerator``: capacity = unpartitioned cards; remaining = free whole cards; onceMaxRequest = the
  largest single node's free cards.
- SH ``acceleratorShared``: capacity = unpartitioned cards × 10; remaining = Σ free shares on free or
  shared cards; onceMaxRequest = the largest single node's count of cards with a free share.
- SL ``acceleratorSliced``: capacity = sliceable unpartitioned cards × 100; remaining = Σ free VRAM percent
  on free or sliced cards with a free slot; onceMaxRequest = the freest single card's percent.
- PT ``acceleratorPartitioned``: capacity = Σ per partitioned card of its largest profile ceiling;
  remaining = Σ per card of its largest free profile count; onceMaxRequest = 1 if any card can host an
  instance, else 0.

PT ``remainingProfiles`` lists every offered profile (by published name) even at 0; ``allocatedProfiles``
only non-zero ones. GPUStack does not document the PT capacity formula; the largest-ceiling reading
matches how the agent counts the ``.partitioned`` pool (docs/chain.md, "Choices where GPUStack leaves the
behaviour open"). A card whose ledger is not
published yet reads as free (a fresh node advertises room, as the agent's static-ceiling fallback does).
The CPU view of a CPU pool: capacity = Σ CPU cores of the pool's nodes, remaining = capacity minus the
``cpu`` usage Kueue reports for the queue's flavors, onceMaxRequest = the largest single node's cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, manufacturers
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.devices_view import Card, CardLedger, DevicesFacts, fresh_ledger
from gpustack_worker.runtime.quantity import parse

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ("PoolCard", "accelerator_views", "column", "cpu_used", "cpu_view", "pool_cards", "pool_status")

_FREE: Final = AllocationMode.NONE


@dataclass(frozen=True, slots=True)
class PoolCard:
    """One card of the pool with its (possibly synthesised) ledger entry."""

    node: str
    card: Card
    ledger: CardLedger
    manufacturer: str


def pool_cards(a_key: str, devices: Iterable[DevicesFacts]) -> list[PoolCard]:
    """Every healthy card of model ``a_key`` (``<mfr>-<group id>``) on the given nodes."""
    out = []
    for facts in devices:
        ledgers = facts.card_ledgers()
        for group in facts.groups:
            if f"{group.manufacturer}-{group.id}" != a_key:
                continue
            for card in group.cards:
                if card.unhealthy:
                    continue
                out.append(
                    PoolCard(facts.name, card, ledgers.get(card.id) or fresh_ledger(card), group.manufacturer)
                )
    return out


def _published(mfr: manufacturers.Manufacturer | None, profile: str) -> str:
    return manufacturers.publish_profile_name(mfr, profile) if mfr is not None else profile


def _view(once: int, remaining: int, capacity: int) -> dict[str, str]:
    return {"onceMaxRequest": str(once), "remaining": str(remaining), "capacity": str(capacity)}


def _per_node_max(counts: Mapping[str, int]) -> int:
    return max(counts.values(), default=0)


def accelerator_views(cards: list[PoolCard]) -> dict[str, Any]:
    """The four accelerator views (status field name → view)."""
    whole = [c for c in cards if not c.card.partitioned]
    parted = [c for c in cards if c.card.partitioned]

    free_by_node: dict[str, int] = {}
    share_cards_by_node: dict[str, int] = {}
    shares = 0
    for c in whole:
        free_by_node.setdefault(c.node, 0)
        share_cards_by_node.setdefault(c.node, 0)
        if c.ledger.mode == _FREE and c.ledger.allocated == 0:
            free_by_node[c.node] += 1
        if c.ledger.mode in (_FREE, AllocationMode.SHARED):
            free_shares = max(c.ledger.remaining, 0) // keys.UNITS_PER_SHARE
            shares += free_shares
            if free_shares:
                share_cards_by_node[c.node] += 1

    sliceable = [c for c in whole if c.card.sliceable]
    percents = [
        max(c.ledger.remaining, 0) // keys.UNITS_PER_PERCENT
        if c.ledger.mode in (_FREE, AllocationMode.SLICED)
        and c.ledger.allocated_slices < c.card.logical_count
        else 0
        for c in sliceable
    ]

    offered: dict[str, int] = {}
    allocated: dict[str, int] = {}
    pt_capacity = pt_remaining = 0
    for c in parted:
        mfr = manufacturers.get(c.manufacturer)
        pt_capacity += max((p.count for p in c.card.profiles), default=0)
        pt_remaining += max(c.ledger.remaining_profiles.values(), default=0)
        for profile in c.card.profiles:
            name = _published(mfr, profile.name)
            offered[name] = offered.get(name, 0) + c.ledger.remaining_profiles.get(profile.name, 0)
        for name, count in c.ledger.allocated_profiles.items():
            if count:
                published = _published(mfr, name)
                allocated[published] = allocated.get(published, 0) + count
    partitioned: dict[str, Any] = _view(1 if pt_remaining else 0, pt_remaining, pt_capacity)
    if offered:
        partitioned["remainingProfiles"] = [{"name": n, "count": offered[n]} for n in sorted(offered)]
    if allocated:
        partitioned["allocatedProfiles"] = [{"name": n, "count": allocated[n]} for n in sorted(allocated)]
    return {
        "accelerator": _view(_per_node_max(free_by_node), sum(free_by_node.values()), len(whole)),
        "acceleratorShared": _view(
            _per_node_max(share_cards_by_node), shares, len(whole) * keys.SHARES_PER_ACCELERATOR
        ),
        "acceleratorSliced": _view(max(percents, default=0), sum(percents), len(sliceable) * 100),
        "acceleratorPartitioned": partitioned,
    }


def cpu_view(node_cores: Mapping[str, int], used: int) -> dict[str, str]:
    """The CPU view of a CPU pool: ``node_cores`` by node, ``used`` the cores Kueue reports in use."""
    capacity = sum(node_cores.values())
    return _view(max(node_cores.values(), default=0), max(capacity - used, 0), capacity)


def column(status: Mapping[str, Any]) -> str:
    """The ``ACCELERATOR(EX/SH/SL/PT)`` column: four ``onceMaxRequest/remaining`` pairs."""
    pairs = []
    for view in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"):
        v = status.get(view) or {}
        pairs.append(f"{v.get('onceMaxRequest', '0')}/{v.get('remaining', '0')}")
    return " ".join(pairs)


def pool_status(
    accelerator_group: str | None,
    pool_flavors: Sequence[Mapping[str, Any]],
    facts: Sequence[DevicesFacts],
    cores: Mapping[str, int],
    cpu_used: int,
) -> dict[str, Any]:
    """An InstanceType's capacity status: the four-view and its column for an accelerated pool
    (``accelerator_group``), the CPU view for a CPU pool, plus the descriptors of the pool's first flavor.

    ``facts`` are the pool nodes' ledgers, ``cores`` their CPU cores, ``cpu_used`` the cores Kueue reports
    in use on the queue. The InstanceType controller and ``gpustack-worker plan`` both call this, so a
    plan and a live cluster show the same views."""
    out: dict[str, Any] = {}
    if accelerator_group is not None:
        views = accelerator_views(pool_cards(accelerator_group, facts))
        out.update(views)
        out["acceleratorSummary"] = column(views)
    else:
        out["cpu"] = cpu_view(cores, cpu_used)
    if pool_flavors:
        notes: Mapping[str, str] = (pool_flavors[0].get("metadata") or {}).get("annotations") or {}
        detail = {
            k: notes[f"{keys.NOTE_PREFIX}{k}"]
            for k in ("manufacturer", "product", "family", "memory", "cores")
            if notes.get(f"{keys.NOTE_PREFIX}{k}")
        }
        if detail:
            out["detail"] = detail
    return out


def cpu_used(queue: Mapping[str, Any] | None) -> int:
    """CPU cores Kueue reports in use on the queue's flavors (``status.flavorsUsage``), rounded up."""
    total = 0.0
    for flavor in ((queue or {}).get("status") or {}).get("flavorsUsage") or ():
        for res in flavor.get("resources") or ():
            if res.get("name") == "cpu":
                value = parse(str(res.get("total") or "0"))
                total += float(value) if value is not None else 0.0
    return int(total + 0.999999)
