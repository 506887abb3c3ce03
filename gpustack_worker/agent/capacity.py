"""The counting capacities the agent writes into ``Node.status.capacity`` (and ``allocatable``).

The scheduler and kubelet count extended resources, not labels, so the per-manufacturer counting keys
live in node capacity under the device plugin's base name ``<base>`` — not under the per-model
``acceleratable.feature.gpustack.ai/<aKey>`` label names GPUStack's own tables list them by, since no
scheduler reads a label as a count. They are summed over the manufacturer's models, over two
*disjoint* card populations:

Logical slicing (cards with ``logicalSliced.count > 0``), with M = 1,600,000 credit units per card:

- ``<base>.sliced.units``             = cards * M
- ``<base>.sliced.cores-percentage``  = Σ slices * 100 over overcommittable cards + 100 per other card
- ``<base>.sliced.memory-percentage`` = cards * 100
- ``<base>.sliced.memory-mib``        = Σ cards * that model's per-card VRAM MiB

Hardware partitioning (cards with ``logicalSliced.count == 0`` that report physical profiles):

- ``<base>.partitioned.units``            = cards * M
- ``<base>.partitioned.<kind>-<profile>`` = Σ (allocated + remaining) instances of the profile; a card
  whose ledger has no profile data yet contributes its static ceiling instead of nothing.

The ``allocated +`` term is there because the scheduler subtracts the live Pods' requests itself.

Presence gating: a family's keys exist only while its bare pool (``<base>.sliced`` /
``<base>.partitioned``, written by the device plugin) is present and positive in
``status.capacity`` — not allocatable, which also drops to 0 when the family is merely saturated.
Unmanaged nodes get nothing. Everything not desired is removed, which covers every suffix and every
per-profile key: keys we applied are released by the next apply, and :func:`stale` finds the ones
another field manager holds (cleaned up with a merge patch).

Inputs are checked first (:mod:`gpustack_worker.agent.validate`): ``desired`` computes from the
sanitized ``Devices`` view, and every key a bad value feeds (``holds``) keeps its published value
(``published``: the Node's ``status.capacity``) or is left out. A pool the presence gate cannot read
(``1e1000000``) is neither present nor absent: its family's keys are held.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpustack_worker.agent.labels import is_qualified_name
from gpustack_worker.agent.managed import is_managed
from gpustack_worker.agent.validate import apply_holds, pool_state, read_count
from gpustack_worker.api import keys, manufacturers
from gpustack_worker.api.devices_check import profile_suffix

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.agent.facts import Card, CardLedger, DevicesFacts, NodeFacts

__all__ = (
    "FIELD_MANAGER",
    "apply_body",
    "desired",
    "is_counting_key",
    "profile_instances",
    "profile_suffix",  # re-exported from api.devices_check
    "stale",
)

#: Server-side apply field manager of the counting keys (``nodes/status``).
FIELD_MANAGER = "gpustack-worker-capacity"

M = keys.UNITS_PER_ACCELERATOR
_BASES = tuple(m.resource for m in manufacturers.MANUFACTURERS.values())


@dataclass(slots=True)
class _Tally:
    sliced_cards: int = 0
    cores_percentage: int = 0
    memory_mib: int = 0
    partitioned_cards: int = 0
    profiles: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def profile_instances(card: Card, ledger: CardLedger | None) -> dict[str, int]:
    """Instances per profile (manufacturer spelling) one partitioned card contributes.

    From the ledger: allocated + remaining for every profile the card or its ledger names (a profile
    the geometry no longer fits reads 0). Without ledger profile data: the static ceilings.
    """
    if ledger is None or not (ledger.allocated_profiles or ledger.remaining_profiles):
        return {p.name: p.count for p in card.profiles}
    names = [p.name for p in card.profiles]
    names += [n for n in (*ledger.allocated_profiles, *ledger.remaining_profiles) if n not in names]
    return {n: ledger.allocated_profiles.get(n, 0) + ledger.remaining_profiles.get(n, 0) for n in names}


def _family(resource: str) -> str | None:
    """The pool (``<base>.sliced`` / ``<base>.partitioned``) a counting key belongs to."""
    for base in _BASES:
        for pool in (keys.sliced_resource(base), keys.partitioned_resource(base)):
            if resource.startswith(pool + "."):
                return pool
    return None


def desired(
    node: NodeFacts,
    devices: DevicesFacts | None,
    *,
    manual: bool,
    holds: Iterable[str] = (),
    published: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Every counting key this node's capacity should carry, by resource name.

    ``devices`` is the checked view; keys matching ``holds`` keep their ``published`` value (when it is
    a whole number in bounds and the family's pool is not gone) or are left out.
    """
    if devices is None or not is_managed(node, manual=manual):
        return {}
    ledgers = devices.card_ledgers()
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    rows: dict[str, manufacturers.Manufacturer] = {}
    for group in devices.groups:
        mfr = manufacturers.get(group.manufacturer)
        if mfr is None:
            continue
        rows[mfr.resource] = mfr
        tally = tallies[mfr.resource]
        for card in group.cards:
            if card.sliceable:
                tally.sliced_cards += 1
                tally.cores_percentage += card.logical_count * 100 if card.overcommit else 100
                tally.memory_mib += group.memory_mib
            elif card.partitioned:
                tally.partitioned_cards += 1
                for name, count in profile_instances(card, ledgers.get(card.id)).items():
                    tally.profiles[profile_suffix(mfr, name)] += count

    out: dict[str, int] = {}
    for base, tally in tallies.items():
        if tally.sliced_cards and pool_state(node, keys.sliced_resource(base)) != "absent":
            out[keys.sliced_resource(base, "units")] = tally.sliced_cards * M
            out[keys.sliced_resource(base, "cores-percentage")] = tally.cores_percentage
            out[keys.sliced_resource(base, "memory-percentage")] = tally.sliced_cards * 100
            out[keys.sliced_resource(base, "memory-mib")] = tally.memory_mib
        if tally.partitioned_cards and pool_state(node, keys.partitioned_resource(base)) != "absent":
            out[keys.partitioned_resource(base, "units")] = tally.partitioned_cards * M
            for suffix, count in tally.profiles.items():
                out[keys.partitioned_resource(base, suffix)] = count
    valid = {k: v for k, v in out.items() if is_qualified_name(k)}

    def in_scope(key: str) -> bool:
        pool = _family(key)
        return pool is not None and is_counting_key(key) and pool_state(node, pool) != "absent"

    return apply_holds(valid, holds, published, read=lambda _k, raw: read_count(raw), scope=in_scope)


#: ``<base>.sliced.`` and ``<base>.partitioned.`` of every manufacturer, built once: the stale scans ask
#: :func:`is_counting_key` of every capacity and allocatable key on every capacity reconcile.
_SLICED_PREFIXES = tuple(keys.sliced_resource(base) + "." for base in _BASES)
_PARTITIONED_PREFIXES = tuple(keys.partitioned_resource(base) + "." for base in _BASES)


def is_counting_key(resource: str) -> bool:
    """Whether ``resource`` is one of the agent's counting keys (any manufacturer, any suffix)."""
    for sliced in _SLICED_PREFIXES:
        if resource.startswith(sliced) and resource[len(sliced) :] in keys.SLICED_COUNTING_SUFFIXES:
            return True
    return resource.startswith(_PARTITIONED_PREFIXES)


def stale(observed: Mapping[str, str], wanted: Mapping[str, int]) -> set[str]:
    """Counting keys present in ``observed`` capacity/allocatable that are not wanted any more."""
    return {k for k in observed if is_counting_key(k) and k not in wanted}


def apply_body(node_name: str, wanted: Mapping[str, int]) -> dict[str, Any]:
    """The ``nodes/status`` apply body: the keys in capacity, mirrored into allocatable as the kubelet
    does for extended resources (nothing else on the node consumes them). With nothing wanted the body
    is bare, which releases (and so removes) every key this manager held."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
    if wanted:
        values = {k: str(v) for k, v in sorted(wanted.items())}
        body["status"] = {"capacity": values, "allocatable": dict(values)}
    return body
