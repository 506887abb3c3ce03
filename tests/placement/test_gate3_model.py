"""The shared per-card predicates, the agent's fit labels and Gate 3's verdicts, each held to the
independent model of the specification (:mod:`tests.placement.gate3_model`).

``test_fit_agreement`` compares the agent's labels with Gate 3, but both count with
:mod:`gpustack_worker.api.card_fit`, so a wrong predicate there moves both sides together and that
property still holds. Here each side is compared with a model written from the spec alone, over
generated ledgers: healthy and unhealthy cards; free, exclusive, shared, sliced and partitioned ones
(every allocation mode); ``allocatedSlices`` at, one below and far below ``logicalSliced.count``;
whole-only, sliceable, partitioned and pending-enable cards; one-card nodes; mixed models and
manufacturers; ledger entries published or missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import fit
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import card_fit, keys, manufacturers
from gpustack_worker.placement.gate3 import READY, Cluster, judge
from tests.kit.properties import examples

from . import gate3_model as model
from .test_fit_agreement import NODE, PROFILES, checked, devices_object, share_request, slice_request
from .test_gate3 import flavor_of, hosts, podset, workload

if TYPE_CHECKING:
    from gpustack_worker.api.devices_view import DevicesFacts

M = model.M
SHARE = model.SHARE


# --- fixed nodes the generator must not be left to find ------------------------------------------------
def _node(*groups: tuple[str, str, list[dict[str, Any]], list[dict[str, Any]] | None]) -> dict[str, Any]:
    """A Devices object: (manufacturer, group id, spec card statuses, ledger entries or None)."""
    spec_groups, status_groups = [], []
    for mfr, gid, statuses, entries in groups:
        cards = [{"id": f"{mfr}-{gid}-{i}", "index": i, "status": s} for i, s in enumerate(statuses)]
        spec_groups.append(
            {"id": gid, "manufacturer": mfr, "name": gid, "memory": 65536, "accelerators": cards}
        )
        if entries is not None:
            ledger = [{"id": c["id"], "index": c["index"], **e} for c, e in zip(cards, entries, strict=True)]
            status_groups.append({"id": gid, "manufacturer": mfr, "accelerators": ledger})
    return {"metadata": {"name": NODE}, "spec": {"groups": spec_groups}, "status": {"groups": status_groups}}


def _sliceable(count: int, *, unhealthy: bool = False) -> dict[str, Any]:
    return {"unhealthy": unhealthy, "logicalSliced": {"count": count}}


#: One Hygon card (four slots) hosting three slices: one slot left, exactly at the edge.
ONE_CARD_ONE_SLOT = _node(
    ("hygon", "k100", [_sliceable(4)], [{"mode": 3, "remaining": M // 2, "allocatedSlices": 3}])
)
#: The same card full: four slices, memory left.
ONE_CARD_FULL = _node(
    ("hygon", "k100", [_sliceable(4)], [{"mode": 3, "remaining": M // 2, "allocatedSlices": 4}])
)
#: A one-card node, free, one sliceable NVIDIA card.
ONE_CARD_FREE = _node(
    ("nvidia", "a10", [_sliceable(128)], [{"mode": 0, "remaining": M, "allocatedSlices": 0}])
)
#: An unhealthy free card next to a healthy shared one.
UNHEALTHY_FREE = _node(
    (
        "nvidia",
        "a10",
        [_sliceable(128, unhealthy=True), _sliceable(128)],
        [{"mode": 0, "remaining": M}, {"mode": 2, "remaining": 3 * SHARE}],
    )
)
#: A partitioned card, free in the ledger (mode 0, remaining M), next to a whole-only one.
PARTITIONED_FREE = _node(
    (
        "nvidia",
        "a100",
        [
            {"logicalSliced": {"count": 0}, "physicalSliced": {"profiles": list(PROFILES), "count": 7}},
            {"logicalSliced": {"count": 0}},
        ],
        [
            {"mode": 0, "remaining": M, "remainingProfiles": [{"name": "1g.10gb", "count": 7}]},
            {"mode": 2, "remaining": SHARE},
        ],
    )
)
#: Two models of one manufacturer: the free card is the other model's.
MIXED_MODELS = _node(
    ("amd", "m1", [_sliceable(2)], [{"mode": 1, "remaining": 0}]),
    ("amd", "m2", [_sliceable(2)], [{"mode": 0, "remaining": M}]),
)
EXAMPLES = (ONE_CARD_ONE_SLOT, ONE_CARD_FULL, ONE_CARD_FREE, UNHEALTHY_FREE, PARTITIONED_FREE, MIXED_MODELS)


def with_examples(test: Any) -> Any:
    for obj in EXAMPLES:
        test = example(obj=obj)(test)
    return test


def _sizes(cards: list[model.ModelCard]) -> list[int]:
    """Slice sizes at every card's edge (remaining - 1, remaining, remaining + 1) and a few fixed ones."""
    edges = {c.remaining + d for c in cards for d in (-1, 0, 1)} | {1, SHARE, M // 2, M}
    return sorted(u for u in edges if 1 <= u <= M)


# --- 1. the shared predicates (api/card_fit) ----------------------------------------------------------
@settings(max_examples=examples(1500))
@given(obj=devices_object())
@with_examples
def test_the_shared_predicates_are_the_models(obj: dict[str, Any]) -> None:
    devices = checked(obj)
    expected = model.cards_of(obj)
    read = card_fit.node_cards(devices)
    assert sorted((nc.a_key, nc.card.id) for nc in read) == sorted((c.a_key, c.id) for c in expected)
    by_id = {c.id: c for c in expected}
    for nc in read:
        want, card, state = by_id[nc.card.id], nc.card, nc.ledger
        where = (want, state)
        assert card_fit.serves_slices(card) is want.in_slice_population, where
        assert card_fit.serves_shares(card) is want.in_whole_population, where
        assert card_fit.takes_whole_card(card, state) is want.whole_free, where
        assert card_fit.grants_share(card, state) is want.grants_share, where
        assert card_fit.free_slice_units(card, state) == want.largest_slice, where
        for units in _sizes([want]):
            assert card_fit.takes_slice(card, state, units) is want.takes_slice(units), (units, where)
        for profile in [p["name"] for p in PROFILES] + ["7g.80gb"]:
            for instances in (1, 2):
                got = card_fit.offers_profile(card, state.remaining_profiles, profile, instances)
                assert got is want.offers(profile, instances), (profile, instances, where)


# --- 2. the agent's fit labels (agent/fit) ----------------------------------------------------------
def labels_of(devices: DevicesFacts) -> dict[str, str]:
    node = node_facts({"metadata": {"name": NODE, "uid": "u1"}})
    return fit.desired(node, devices, manual=False)


@settings(max_examples=examples(1500))
@given(obj=devices_object())
@with_examples
def test_the_agents_fit_labels_are_the_models(obj: dict[str, Any]) -> None:
    assert labels_of(checked(obj)) == model.fit_labels(obj)


# --- 3. Gate 3's verdicts (placement/gate3) ------------------------------------------------------------
def verdict(devices: DevicesFacts, a_key: str, requests: dict[str, str], pods: int) -> bool:
    """Gate 3 on a Workload Kueue assigned to ``NODE``: ``pods`` Pods of one container asking
    ``requests``, its flavor pinning model ``a_key``."""
    a_keys = {f"{g.manufacturer}-{g.id}" for g in devices.groups} | {a_key}
    cluster = Cluster(
        nodes={NODE: {keys.HOSTNAME: NODE, **{keys.accelerator_key(a): "true" for a in a_keys}}},
        devices={NODE: devices},
        flavors={flavor_of(a): {keys.accelerator_key(a): "true"} for a in a_keys},
    )
    wl = workload("wl", podset("role", requests, assignment=hosts({NODE: pods}), flavor=flavor_of(a_key)))
    return judge(wl, cluster).state == READY


def exclusive_request(mfr: str, cards: int) -> dict[str, str]:
    return {manufacturers.MANUFACTURERS[mfr].resource: str(cards)}


def partition_request(mfr: str, profile: str) -> dict[str, str]:
    row = manufacturers.MANUFACTURERS[mfr]
    part = keys.partitioned_resource(row.resource)
    return {part: "1", f"{part}.{row.partition_kind}-{profile}": "1"}


FAMILIES = ("exclusive", "shared", "sliced", "partitioned")
PROFILE_NAMES = (*(str(p["name"]) for p in PROFILES), "7g.80gb")
#: (family, Pods on the node, cards per Pod, which slice size, profile).
Ask = tuple[str, int, int, int, str]
asks = st.lists(
    st.tuples(
        st.sampled_from(FAMILIES),
        st.sampled_from([1, 1, 2, 3, 5]),
        st.integers(1, 5),
        st.integers(0, 1000),
        st.sampled_from(PROFILE_NAMES),
    ),
    min_size=1,
    max_size=6,
)
#: Every family, one Pod and several, for the fixed nodes.
EVERY_ASK: list[Ask] = [
    (family, pods, n, size, profile)
    for family in FAMILIES
    for pods in (1, 2, 5)
    for n in (1, 2)
    for size in range(0, 12, 3)
    for profile in PROFILE_NAMES[:2]
]


def check_asks(obj: dict[str, Any], demands: list[Ask]) -> None:
    devices = checked(obj)
    cards = model.cards_of(obj)
    present = sorted({(c.manufacturer, c.a_key) for c in cards})
    for mfr, a_key in [*present, ("hygon", "hygon-absent")]:
        own = [c for c in cards if c.a_key == a_key]
        sizes = _sizes(own)
        for family, pods, n, size, profile in demands:
            if family == "exclusive":
                requests = exclusive_request(mfr, n)
                want = model.exclusive_fits(cards, a_key, cards_per_pod=n, pods=pods)
            elif family == "shared":
                n = n if pods == 1 else 1
                requests = share_request(mfr, n)
                want = model.share_fits(cards, a_key, cards_per_pod=n, pods=pods)
            elif family == "sliced":
                units = sizes[size % len(sizes)]
                requests = slice_request(mfr, units)
                want = model.slice_fits(cards, a_key, units=units, pods=pods)
            elif manufacturers.MANUFACTURERS[mfr].partition_kind:
                requests = partition_request(mfr, profile)
                want = model.partition_fits(cards, a_key, profile=profile, pods=pods)
            else:
                continue
            got = verdict(devices, a_key, requests, pods)
            assert got is want, (a_key, family, requests, pods, own)


@settings(max_examples=examples(1000))
@given(obj=devices_object(), demands=asks)
def test_gate3_answers_what_the_model_answers(obj: dict[str, Any], demands: list[Ask]) -> None:
    check_asks(obj, demands)


def test_gate3_answers_what_the_model_answers_on_the_edge_nodes() -> None:
    for obj in EXAMPLES:
        check_asks(obj, EVERY_ASK)


# --- the model itself on the spec's own examples -------------------------------------------------------
def test_the_model_reads_the_specs_examples() -> None:
    """§5.2: two 30 % slices fit one free card, two 60 % do not; Hygon's four slots; A.6's labels."""
    free = model.cards_of(ONE_CARD_FREE)
    pct = keys.UNITS_PER_PERCENT
    assert model.slice_fits(free, "nvidia-a10", units=30 * pct, pods=2)
    assert not model.slice_fits(free, "nvidia-a10", units=60 * pct, pods=2)
    assert model.slice_fits(model.cards_of(ONE_CARD_ONE_SLOT), "hygon-k100", units=1)
    assert not model.slice_fits(model.cards_of(ONE_CARD_ONE_SLOT), "hygon-k100", units=1, pods=2)
    assert not model.slice_fits(model.cards_of(ONE_CARD_FULL), "hygon-k100", units=1)
    assert model.fit_labels(ONE_CARD_FULL) == {
        keys.sliced_max_free_units_key("hygon-k100"): "0",
        keys.shared_free_cards_key("hygon-k100"): "0",  # sliced mode: grants no share
    }
    assert model.fit_labels(UNHEALTHY_FREE) == {
        keys.sliced_max_free_units_key("nvidia-a10"): "0",  # the shared card takes no slice
        keys.shared_free_cards_key("nvidia-a10"): "1",
    }
    parted = model.cards_of(PARTITIONED_FREE)
    assert not model.exclusive_fits(parted, "nvidia-a100", cards_per_pod=1)  # never a partitioned card
    assert model.share_fits(parted, "nvidia-a100", cards_per_pod=1)  # the whole-only card's one share
    assert not model.share_fits(parted, "nvidia-a100", cards_per_pod=1, pods=2)
    assert model.partition_fits(parted, "nvidia-a100", profile="1g.10gb", pods=7)
    assert not model.partition_fits(parted, "nvidia-a100", profile="3g.40gb")  # published: none left
    assert model.fit_labels(PARTITIONED_FREE) == {keys.shared_free_cards_key("nvidia-a100"): "1"}
