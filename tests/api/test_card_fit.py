"""Gate 3's per-card predicates (api/card_fit): the table of what one card takes, the card population
with its not-yet-published fallback, and the slice identity the sliced fit label rests on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import card_fit, keys
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.devices_view import Card, CardLedger, DevicesFacts, Group, LedgerGroup, Profile
from tests.kit.properties import examples

M = keys.UNITS_PER_ACCELERATOR
SHARE = keys.UNITS_PER_SHARE
NONE, EXCL, SHRD, SLCD, PART, VIS = (int(m) for m in AllocationMode)
SLICEABLE = Card("S", logical_count=4)
WHOLE = Card("W")  # no logical slicing, no profiles (Iluvatar)
PARTED = Card("P", profiles=(Profile("1g.10gb", 7, 9856),))
BROKEN = Card("B", logical_count=4, unhealthy=True)


def state(mode: int = NONE, remaining: int = M, slices: int = 0) -> CardLedger:
    return CardLedger("x", mode=mode, remaining=remaining, allocated=M - remaining, allocated_slices=slices)


@pytest.mark.parametrize(
    ("card", "ledger", "whole", "share", "slice_units"),
    [
        pytest.param(SLICEABLE, state(), True, True, M, id="free-sliceable"),
        pytest.param(WHOLE, state(), True, True, 0, id="free-not-sliceable"),
        pytest.param(PARTED, state(), False, False, 0, id="partitioned-serves-neither"),
        pytest.param(BROKEN, state(), False, False, 0, id="unhealthy-gives-nothing"),
        pytest.param(SLICEABLE, state(EXCL, 0), False, False, 0, id="exclusive-held"),
        pytest.param(SLICEABLE, state(SHRD, M - 9 * SHARE), False, True, 0, id="shared-one-share-left"),
        pytest.param(SLICEABLE, state(SHRD, SHARE - 1), False, False, 0, id="shared-less-than-a-share"),
        pytest.param(SLICEABLE, state(SLCD, 400_000, 3), False, False, 400_000, id="sliced-last-slot"),
        pytest.param(SLICEABLE, state(SLCD, 800_000, 4), False, False, 0, id="hygon-four-slices-full"),
        pytest.param(SLICEABLE, state(NONE, M - 1), False, True, M - 1, id="free-mode-not-whole"),
        pytest.param(SLICEABLE, state(PART, M), False, False, 0, id="partitioned-mode"),
        pytest.param(SLICEABLE, state(VIS, M), False, False, 0, id="visibility-mode"),
    ],
)
def test_what_one_card_takes(
    card: Card, ledger: CardLedger, whole: bool, share: bool, slice_units: int
) -> None:
    assert card_fit.takes_whole_card(card, ledger) is whole
    assert card_fit.grants_share(card, ledger) is share
    assert card_fit.free_slice_units(card, ledger) == slice_units


def test_partition_placements() -> None:
    remaining = {"1g.10gb": 2}
    assert card_fit.offers_profile(PARTED, remaining, "1g.10gb", 2)
    assert not card_fit.offers_profile(PARTED, remaining, "1g.10gb", 3)
    assert not card_fit.offers_profile(PARTED, remaining, "2g.20gb", 1)
    assert not card_fit.offers_profile(SLICEABLE, remaining, "1g.10gb", 1)
    broken = Card("PB", profiles=PARTED.profiles, unhealthy=True)
    assert not card_fit.offers_profile(broken, remaining, "1g.10gb", 1)


def test_populations_are_capability_only() -> None:
    assert card_fit.serves_slices(BROKEN) and card_fit.serves_shares(BROKEN)
    assert not card_fit.serves_slices(WHOLE) and card_fit.serves_shares(WHOLE)
    assert not card_fit.serves_slices(PARTED) and not card_fit.serves_shares(PARTED)


def test_node_cards_read_unpublished_entries_as_free() -> None:
    groups = (
        Group("k100_ai", "hygon", memory_mib=65520, cards=(Card("D0", 0, 4), Card("D1", 1, 4))),
        Group("a100", "nvidia", cards=(PARTED,)),
        Group("x1", "unknownco", cards=(Card("U0"),)),
    )
    held = CardLedger("D0", 0, mode=EXCL, allocated=M, remaining=0)
    published = DevicesFacts(
        "n1", groups=groups, ledger=(LedgerGroup("k100_ai", "hygon", (held, CardLedger("GHOST"))),)
    )
    read = {nc.card.id: nc for nc in card_fit.node_cards(published)}
    assert set(read) == {"D0", "D1", "P"}  # no ghost entry, no unknown manufacturer
    assert read["D0"].ledger is held and read["D0"].a_key == "hygon-k100_ai"
    assert read["D1"].ledger.mode == NONE and read["D1"].ledger.remaining == M
    assert read["P"].ledger.remaining_profiles == {"1g.10gb": 7}
    unpublished = DevicesFacts("n1", groups=groups, ledger=None)
    assert all(nc.ledger.remaining == M for nc in card_fit.node_cards(unpublished))
    assert card_fit.node_cards(None) == []


def cards(unhealthy: st.SearchStrategy[bool]) -> st.SearchStrategy[Card]:
    return st.builds(
        Card,
        id=st.just("c"),
        logical_count=st.integers(0, 130),
        profiles=st.sampled_from([(), PARTED.profiles]),
        unhealthy=unhealthy,
    )


states = st.builds(
    CardLedger,
    id=st.just("c"),
    mode=st.sampled_from([NONE, EXCL, SHRD, SLCD, PART, VIS]),
    remaining=st.integers(-1, M),
    allocated_slices=st.integers(0, 130),
)


@settings(max_examples=examples(2000))
@given(card=cards(st.booleans()), ledger=states, units=st.integers(1, M))
def test_free_slice_units_admits_exactly_the_slices_the_card_takes(
    card: Card, ledger: CardLedger, units: int
) -> None:
    """The sliced label's ``Gt U-1`` reads ``free_slice_units ≥ U``: it must be Gate 3's ``takes_slice``."""
    assert (card_fit.free_slice_units(card, ledger) >= units) is card_fit.takes_slice(card, ledger, units)


@settings(max_examples=examples(500))
@given(card=cards(st.just(True)), ledger=states)
def test_an_unhealthy_card_takes_nothing(card: Card, ledger: CardLedger) -> None:
    assert not card_fit.takes_whole_card(card, ledger)
    assert not card_fit.grants_share(card, ledger)
    assert card_fit.free_slice_units(card, ledger) == 0
    assert not card_fit.offers_profile(card, {"1g.10gb": 7}, "1g.10gb", 1)
