"""The agent's counting keys held to a model of reference §8.2 written from the spec alone (issue 27).

The model reads the ``Devices`` object as the API serves it and the Node's ``status.capacity``, and
imports nothing of the product that decides (only the key builders and the manufacturer table):

- per manufacturer ``<base>``, over its *sliceable* cards (``logicalSliced.count > 0``):
  ``<base>.sliced.units`` = cards × M; ``.cores-percentage`` = Σ ``count`` × 100 over cards whose compute
  is overcommittable (``coresPercentageOvercommit``), + 100 per other card; ``.memory-percentage`` =
  cards × 100; ``.memory-mib`` = Σ per-card VRAM;
- over its *partitioned* cards (``logicalSliced.count == 0`` with physical profiles):
  ``<base>.partitioned.units`` = cards × M; ``<base>.partitioned.<kind>-<profile>`` = Σ (allocated +
  remaining) instances of the profile, a card whose ledger publishes no profile data counting its static
  ceiling;
- a family's keys exist only while its bare pool (``<base>.sliced`` / ``<base>.partitioned``) is
  positive in ``status.capacity``; an unmanaged node has none.

Generated over the same ledgers as the fit properties (``test_fit_agreement.devices_object``): one-card
models, sliceable / whole-only / partitioned / pending-enable cards, profile data published or not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys
from gpustack_worker.api.manufacturers import MANUFACTURERS
from tests.kit.properties import examples
from tests.placement.test_fit_agreement import checked, devices_object

M: Final = 1_600_000


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _counts(value: Any) -> dict[str, int]:
    return {str(p["name"]): int(p.get("count") or 0) for p in _items(value)}


def _positive(raw: str | None) -> bool:
    return raw is not None and raw.isdigit() and int(raw) > 0


def model_counting_keys(obj: Mapping[str, Any], node_capacity: Mapping[str, str]) -> dict[str, int]:
    entries = {
        str(e.get("id")): e
        for g in _items((obj.get("status") or {}).get("groups"))
        for e in _items(g.get("accelerators"))
    }
    sliced: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # cards, cores %, MiB
    parted_cards: dict[str, int] = defaultdict(int)
    profiles: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for group in _items((obj.get("spec") or {}).get("groups")):
        row = MANUFACTURERS.get(str(group.get("manufacturer")))
        if row is None:
            continue
        for card in _items(group.get("accelerators")):
            status = card.get("status") or {}
            logical = status.get("logicalSliced") or {}
            count = int(logical.get("count") or 0)
            ceilings = _counts((status.get("physicalSliced") or {}).get("profiles"))
            if count > 0:
                tally = sliced[row.resource]
                tally[0] += 1
                tally[1] += count * 100 if logical.get("coresPercentageOvercommit") else 100
                tally[2] += int(group.get("memory") or 0)
            elif ceilings:
                parted_cards[row.resource] += 1
                entry = entries.get(str(card.get("id"))) or {}
                allocated = _counts(entry.get("allocatedProfiles"))
                remaining = _counts(entry.get("remainingProfiles"))
                per_card = (
                    {
                        n: allocated.get(n, 0) + remaining.get(n, 0)
                        for n in {*ceilings, *allocated, *remaining}
                    }
                    if allocated or remaining
                    else ceilings
                )
                for name, n in per_card.items():
                    profiles[row.resource][f"{row.partition_kind}-{name}"] += n
    out: dict[str, int] = {}
    for base, (cards, cores, mib) in sliced.items():
        if _positive(node_capacity.get(keys.sliced_resource(base))):
            out[keys.sliced_resource(base, "units")] = cards * M
            out[keys.sliced_resource(base, "cores-percentage")] = cores
            out[keys.sliced_resource(base, "memory-percentage")] = cards * 100
            out[keys.sliced_resource(base, "memory-mib")] = mib
    for base, cards in parted_cards.items():
        if _positive(node_capacity.get(keys.partitioned_resource(base))):
            out[keys.partitioned_resource(base, "units")] = cards * M
            out.update({keys.partitioned_resource(base, s): n for s, n in profiles[base].items()})
    return out


@st.composite
def node_capacities(draw: st.DrawFn) -> dict[str, str]:
    """The bare pools the device plugin advertises: present, at 0, or absent, per family."""
    out: dict[str, str] = {}
    for row in MANUFACTURERS.values():
        for pool in (keys.sliced_resource(row.resource), keys.partitioned_resource(row.resource)):
            value = draw(st.sampled_from(["8", "8", "8", "1", "0", None]))
            if value is not None:
                out[pool] = value
    return out


#: One Hygon card with four slots: the node's only sliceable card.
ONE_HYGON_CARD = {
    "metadata": {"name": "n1"},
    "spec": {
        "groups": [
            {
                "id": "k100",
                "manufacturer": "hygon",
                "memory": 65536,
                "accelerators": [{"id": "D0", "index": 0, "status": {"logicalSliced": {"count": 4}}}],
            }
        ]
    },
}
ALL_POOLS = {
    p: "8"
    for row in MANUFACTURERS.values()
    for p in (keys.sliced_resource(row.resource), keys.partitioned_resource(row.resource))
}


@settings(max_examples=examples(1500))
@given(obj=devices_object(), pools=node_capacities())
@example(obj=ONE_HYGON_CARD, pools=ALL_POOLS)
def test_the_counting_keys_are_the_models(obj: dict[str, Any], pools: dict[str, str]) -> None:
    node = node_facts({"metadata": {"name": "n1", "uid": "u1"}, "status": {"capacity": pools}})
    got = capacity.desired(node, checked(obj), manual=False)
    assert got == model_counting_keys(obj, pools)
