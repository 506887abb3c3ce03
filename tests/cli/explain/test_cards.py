"""``explain`` tells Kueue's credits in cards (issue 29 item 8: ``38400k > 25600k`` is ``24 cards > 16
cards``), the credits kept in parentheses, from Kueue's own message formats (``fitsResourceQuota``,
v0.19.2) spelled as Kueue's resource formatter spells credits (DecimalSI, canonical)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.cli.explain.cards import cards, in_cards, quota_in_cards
from gpustack_worker.runtime.quantity import format_integer

M = keys.UNITS_PER_ACCELERATOR
NVIDIA = keys.credits_resource("nvidia")
FLAVOR = "gpustack--amd-epyc-7r13--nvidia-h100-80gb-hbm3-linux-amd64-8d-fnv64-87bf574bea2a4f23"


def _exceeds(resource: str, prev: str, req: str, most: str) -> str:
    """Kueue's ``insufficient quota`` reason, its Go format string filled in."""
    return (
        f"insufficient quota for {resource} in flavor {FLAVOR}, previously considered podsets requests "
        f"({prev}) + current podset request ({req}) > maximum capacity ({most})"
    )


def _unused(resource: str, more: str) -> str:
    return f"insufficient unused quota for {resource} in flavor {FLAVOR}, {more} more needed"


@pytest.mark.parametrize(
    ("credits", "shown"),
    [
        ("38400k", "24 cards"),  # the issue's request: three 8-card nodes
        ("25600k", "16 cards"),  # the demo's H100 pool: two nodes of eight
        ("1600k", "1 card"),
        ("0", "0 cards"),
        ("16M", "10 cards"),  # canonical DecimalSI for 16,000,000
        ("800k", "0.5 cards"),  # a half-card slice
        ("600k", "0.38 cards"),  # 37.5 % of a card, to the hundredth
        ("100", "<0.01 cards"),
        ("Unlimited", None),  # Kueue's unlimited amount is not a quantity: left as Kueue wrote it
    ],
)
def test_cards(credits: str, shown: str | None) -> None:
    assert cards(credits) == shown


def test_the_issue_message_in_cards() -> None:
    message = "couldn't assign flavors to pod set main: " + _exceeds(NVIDIA, "0", "38400k", "25600k")
    assert in_cards(message) == (
        f"couldn't assign flavors to pod set main: insufficient quota for {NVIDIA} in flavor {FLAVOR}: "
        "previously considered podsets 0 cards + this podset 24 cards > at most 16 cards "
        "(credits: 0 + 38400k > 25600k)"
    )


def test_unused_quota_in_cards_and_other_resources_untouched() -> None:
    cpu = _exceeds("cpu", "0", "400", "192")
    message = f"{_unused(NVIDIA, '3200k')}, {cpu}"
    assert in_cards(message) == (
        f"insufficient unused quota for {NVIDIA} in flavor {FLAVOR}: 2 cards more needed (credits: 3200k), "
        f"{cpu}"
    )
    assert in_cards(cpu) == cpu
    assert in_cards("Workload no longer fits after processing another workload") == (
        "Workload no longer fits after processing another workload"
    )
    unlimited = _exceeds(NVIDIA, "0", "38400k", "Unlimited")
    assert in_cards(unlimited) == unlimited  # an amount that is not a quantity: the reason as Kueue wrote it


def test_quota_lines() -> None:
    assert quota_in_cards(NVIDIA, "25600k") == f"{NVIDIA} 25600k (16 cards)"
    assert quota_in_cards("cpu", "192") == "cpu 192"


@given(
    prev=st.integers(min_value=0, max_value=512),
    req=st.integers(min_value=1, max_value=512),
    most=st.integers(min_value=0, max_value=512),
    manufacturer=st.sampled_from(["nvidia", "ascend", "amd", "hygon", "t-head"]),
)
def test_whole_cards_read_back_exactly(prev: int, req: int, most: int, manufacturer: str) -> None:
    """Whatever the counts, the cards said are the credits divided by M, and the credits stay verbatim."""
    resource = keys.credits_resource(manufacturer)
    amounts = [format_integer(n * M) for n in (prev, req, most)]
    told = in_cards(_exceeds(resource, *amounts))

    def n_cards(n: int) -> str:
        return f"{n} card" if n == 1 else f"{n} cards"

    assert f"podsets {n_cards(prev)} + this podset {n_cards(req)} > at most {n_cards(most)}" in told
    assert told.endswith(f"(credits: {amounts[0]} + {amounts[1]} > {amounts[2]})")
    assert f"{n_cards(req // 2)} more needed" in in_cards(_unused(resource, format_integer(req // 2 * M)))
