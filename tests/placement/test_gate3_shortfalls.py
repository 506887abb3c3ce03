"""Gate 3's "never fits as the fleet stands" (:func:`gate3.shortfalls`): a role one Pod of which fits no
node of its flavors' pool on the ledgers as they are, with the largest fit and its node — per family —
and what it never claims (room promised to another Workload, a fragmentation another node of the pool
does not have, a pool it cannot know)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.placement.gate3 import RETRY, Shortfall, assigned_flavors, judge, shortfalls
from tests.placement.test_gate3 import (
    A100_PROFILES,
    FLAVOR,
    L4,
    card,
    cluster,
    devices,
    exclusive,
    flavor_of,
    free,
    gpu,
    hosts,
    parted,
    partition,
    podset,
    share,
    shared,
    slice_pct,
    sliced,
    workload,
)


def _wl(requests: dict[str, str], **kw: Any) -> dict[str, Any]:
    return workload("wl", podset("role", requests, assignment=hosts({"n1": 1}), **kw))


FOUR_FREE = [free()] * 4


@pytest.mark.parametrize(
    ("ledgers", "requests", "largest"),
    [
        pytest.param(
            {"n1": FOUR_FREE, "n2": FOUR_FREE},
            gpu(8),
            "4 free whole nvidia card(s) on node n1",
            id="8-cards-on-4-card-nodes",
        ),
        pytest.param(
            {"n1": [exclusive()] * 4 + [free()] * 4, "n2": [free()] * 3 + [exclusive()]},
            gpu(8),
            "4 free whole nvidia card(s) on node n1",
            id="8-card-node-half-held",
        ),
        pytest.param(
            {"n1": [shared(2)] * 4 + [free()] * 4},
            gpu(8),
            "4 free whole nvidia card(s) on node n1",
            id="cards-in-shared-use-are-not-free-whole-cards",
        ),
        pytest.param(
            {"n1": [free()] * 2, "n2": [exclusive(), free(), free(), free()]},
            gpu(4),
            "3 free whole nvidia card(s) on node n2",
            id="the-freest-node-is-named",
        ),
        pytest.param(
            {"n1": [shared(10)] * 2 + [free()] * 2, "n2": [shared(3)] * 4},
            share(5),
            "4 nvidia card(s) that can grant a share on node n2",
            id="shared",
        ),
        pytest.param(
            {"n1": [sliced(50, 1), sliced(70, 1)], "n2": [exclusive()]},
            slice_pct(60),
            f"{50 * keys.UNITS_PER_PERCENT:,} free units on one nvidia card with a free slot on node n1",
            id="sliced",
        ),
    ],
)
def test_a_role_larger_than_every_node_falls_short(
    ledgers: dict[str, list[dict[str, Any]]], requests: dict[str, str], largest: str
) -> None:
    c = cluster([devices(n, entries) for n, entries in ledgers.items()])
    (found,) = shortfalls(_wl(requests), c)
    assert found.role == "role"
    assert found.largest == largest
    assert "more than any node of its pool has free as the fleet stands" in found.describe()


def test_a_partition_no_card_offers_falls_short() -> None:
    full = parted({"1g.10gb": 7, "7g.80gb": 0})
    cards = [card(0, profiles=A100_PROFILES)]
    c = cluster([devices("n1", [full], cards=cards)])
    (found,) = shortfalls(_wl(partition("7g.80gb")), c)
    assert found.largest == "0 free 7g.80gb instance(s) on one card on node n1"
    assert found.needs == "1 nvidia partition(s) 7g.80gb"


def test_unhealthy_cards_are_not_free() -> None:
    cards = [card(i, unhealthy=i == 7) for i in range(8)]
    c = cluster([devices("n1", [free()] * 8, cards=cards)])
    (found,) = shortfalls(_wl(gpu(8)), c)
    assert found.largest == "7 free whole nvidia card(s) on node n1"


@pytest.mark.parametrize(
    ("ledgers", "requests"),
    [
        pytest.param({"n1": FOUR_FREE, "n2": [free()] * 8}, gpu(8), id="one-node-has-room"),
        pytest.param({"n1": [exclusive()] * 4, "n2": FOUR_FREE}, gpu(4), id="fragmented-elsewhere"),
        pytest.param({"n1": [sliced(50, 1)], "n2": [free()]}, slice_pct(60), id="a-free-card-elsewhere"),
        pytest.param({"n1": FOUR_FREE}, {"cpu": "1"}, id="no-accelerator-demand"),
        pytest.param({"n1": FOUR_FREE}, {"nvidia.com/gpu": "x"}, id="unreadable-demand"),
    ],
)
def test_what_fits_some_node_is_no_shortfall(
    ledgers: dict[str, list[dict[str, Any]]], requests: dict[str, str]
) -> None:
    c = cluster([devices(n, entries) for n, entries in ledgers.items()])
    assert shortfalls(_wl(requests), c) == []


def test_room_promised_to_another_workload_still_counts_as_the_fleet() -> None:
    """Gate 3's verdict charges the admitted Workload's unheld Pod (Retry), but the fleet has the room."""
    c = cluster([devices("n1", FOUR_FREE)])
    other = workload("other", podset("role", gpu(4), assignment=hosts({"n1": 1})), admitted=True)
    wl = _wl(gpu(4))
    assert judge(wl, c, [other]).state == RETRY
    assert shortfalls(wl, c) == []


def test_the_pool_is_the_flavors_nodes_only() -> None:
    """An 8-card L4 node does not help an A100 request: the A100 flavor's pool has 4 cards a node."""
    l4 = devices("l4-node", [free()] * 8, model="l4")
    c = cluster([devices("n1", FOUR_FREE), l4])
    (found,) = shortfalls(_wl(gpu(8)), c)
    assert found.largest == "4 free whole nvidia card(s) on node n1"
    assert shortfalls(_wl(gpu(8), flavor=flavor_of(L4)), c) == []


def test_an_empty_pool_and_an_unknown_pool() -> None:
    c = cluster([devices("n1", FOUR_FREE, model="l4")])  # the A100 flavor selects no node
    (found,) = shortfalls(_wl(gpu(1)), c)
    assert found.largest == "no node in the pool"
    gone = _wl(gpu(8), flavor="flavor-deleted")  # a flavor that no longer exists: no claim made
    assert shortfalls(gone, c) == []


def test_a_parked_workload_is_judged_on_the_recorded_flavors() -> None:
    """Without an admission (Kueue cleared it on deactivation) the flavors come from the caller."""
    c = cluster([devices("n1", FOUR_FREE)])
    wl = _wl(gpu(8))
    flavors = assigned_flavors(wl)
    assert flavors == {"role": (FLAVOR,)}
    del wl["status"]["admission"]
    assert shortfalls(wl, c) == []  # nothing assigned, nothing judged
    assert shortfalls(wl, c, flavors) == [
        Shortfall("role", "8 whole nvidia card(s)", "4 free whole nvidia card(s) on node n1")
    ]
    c8 = cluster([devices("n1", FOUR_FREE), devices("n2", [free()] * 8)])
    assert shortfalls(wl, c8, flavors) == []


def test_only_the_short_role_is_named() -> None:
    c = cluster([devices("n1", FOUR_FREE)])
    wl = workload(
        "wl",
        podset("small", gpu(2), assignment=hosts({"n1": 1})),
        podset("big", gpu(6), assignment=hosts({"n1": 1})),
    )
    assert [f.role for f in shortfalls(wl, c)] == ["big"]
