"""bench/latency_bench.py's pure helpers: the nearest-rank percentile, what an event must change, and
when a live flavor or queue shows it.

At the top of tests/ (not in a tests/bench package, which would shadow the repository's ``bench``
directory on the import path).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import latency_bench as lb
from gpustack_worker.api import keys
from tests.kit.properties import examples


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([3.0], 50, 3.0),
        ([3.0], 99, 3.0),
        ([1.0, 2.0], 50, 1.0),  # rank ceil(0.5 * 2) = 1: never interpolated
        ([4.0, 1.0, 3.0, 2.0], 50, 2.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),  # p99 of 100 is the 99th smallest
        ([float(i) for i in range(1, 101)], 100, 100.0),
        ([float(i) for i in range(1, 201)], 99, 198.0),
        ([5.0, 5.0, 1.0], 50, 5.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert lb.percentile(values, q) == expected


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        lb.percentile([], 50)


@settings(max_examples=examples(300))
@given(
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=300),
    st.floats(min_value=0.01, max_value=100),
)
def test_percentile_is_a_measured_value_at_its_rank(values: list[float], q: float) -> None:
    """Nearest rank: a value that was measured, with at least ``q`` % of the values at or below it and
    fewer than that strictly below it."""
    p = lb.percentile(values, q)
    rank = max(1, math.ceil(q / 100 * len(values)))
    assert p in values
    assert sum(v <= p for v in values) >= rank
    assert sum(v < p for v in values) < rank


def _flavor(name: str, capacity: int, notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"x.capacity": str(capacity), keys.RESOURCE_TYPE: keys.TYPE_NODES},
            "annotations": {f"{keys.NOTE_PREFIX}{k}": v for k, v in (notes or {}).items()},
        },
        "spec": {"nodeLabels": {"a": "b"}},
    }


def _queue(flavors: list[tuple[str, str]], stop: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": n, "resources": [{"name": "cpu", "nominalQuota": q}]} for n, q in flavors
                ],
            }
        ]
    }
    if stop is not None:
        spec["stopPolicy"] = stop
    return {"metadata": {"name": "q"}, "spec": spec}


def test_change_lists_only_what_differs() -> None:
    before = lb.Want(
        {"f1": _flavor("f1", 8), "f2": _flavor("f2", 4), "f3": _flavor("f3", 2)},
        {"q1": (("f1", 8),), "q2": (("f2", 4), ("f3", 2)), "q3": None},
    )
    after = lb.Want(
        {"f1": _flavor("f1", 8), "f2": _flavor("f2", 6), "f4": _flavor("f4", 1)},
        {"q1": (("f1", 8),), "q2": (("f2", 6),), "q3": None, "q4": (("f4", 1),)},
    )
    c = lb.change(before, after, emptied=["q9"])
    assert set(c.flavors) == {"f2", "f4"}
    assert c.gone == frozenset({"f3"})
    assert c.plans == {"q2": (("f2", 6),), "q4": (("f4", 1),)}  # a refused plan (None) is not waited for
    assert c.emptied == frozenset({"q9"})
    assert not c.empty
    assert lb.change(after, after).empty


def test_flavor_matches_needs_labels_exact_notes_selector_and_no_deletion() -> None:
    body = _flavor("f", 8, {"cpuDetail": "x"})
    assert lb.flavor_matches(body, body)
    assert not lb.flavor_matches(None, body)
    assert not lb.flavor_matches(_flavor("f", 7, {"cpuDetail": "x"}), body)
    # a note the body no longer has (awareness switched off) is a difference, not a superset
    assert not lb.flavor_matches(_flavor("f", 8, {"cpuDetail": "x", "extra": "y"}), body)
    assert not lb.flavor_matches(_flavor("f", 8), body)
    other = _flavor("f", 8, {"cpuDetail": "x"})
    other["spec"]["nodeLabels"] = {"a": "c"}
    assert not lb.flavor_matches(other, body)
    deleting = _flavor("f", 8, {"cpuDetail": "x"})
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not lb.flavor_matches(deleting, body)
    assert lb.flavor_gone(deleting)
    assert lb.flavor_gone(None)
    assert not lb.flavor_gone(body)


def test_queue_plan_and_stop_policy() -> None:
    q = _queue([("f1", "1600k"), ("f2", "16M")], stop="HoldAndDrain")
    assert lb.queue_plan(q) == (("f1", 1_600_000), ("f2", 16_000_000))
    assert lb.stop_policy(q) == "HoldAndDrain"
    assert lb.stop_policy(_queue([])) == "None"
    assert lb.queue_plan(_queue([])) == ()
    assert lb.queue_plan(None) is None
