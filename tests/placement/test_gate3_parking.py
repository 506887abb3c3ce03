"""Gate 3's parking (placement/gate3_parking.py): the table of what Gate 3 does with a verdict, a shortfall
and Kueue's ``retryCount`` under the bound; what it does with a parked Workload as the fleet changes; the
record on the Workload; and the cycle as Kueue drives it — exactly ``bound`` Retry verdicts (so ``bound``
evictions) before the park, and none after it until the fleet has room."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.placement.gate3 import READY, RETRY, Shortfall, Verdict
from gpustack_worker.placement.gate3_parking import (
    RECORD,
    Action,
    Record,
    decide_judged,
    decide_parked,
    is_parked,
    read_record,
    retry_count,
    with_shortfall,
)

SHORT = Shortfall("main", "8 whole nvidia card(s)", "4 free whole nvidia card(s) on node t4-b")
FLAVORS = {"main": ("flavor-t4",)}
UNFIT = Verdict(RETRY, "role main: node t4-b: pod 1 of 1 needs 8 whole nvidia card(s): 4 free whole card(s)")


def _wl(
    retries: int | None = None, *, active: bool | None = None, record: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": keys.NODE_DEVICES_CHECK, "state": "Pending", "message": ""}
    if retries is not None:
        entry["retryCount"] = retries
    wl: dict[str, Any] = {
        "metadata": {"name": "w", "namespace": "team", "annotations": {}},
        "spec": {},
        "status": {"admissionChecks": [{"name": keys.JOINT_CHECK, "state": "Ready", "retryCount": 9}, entry]},
    }
    if active is not None:
        wl["spec"]["active"] = active
    if record is not None:
        wl["metadata"]["annotations"][RECORD] = record
    return wl


@pytest.mark.parametrize(
    ("verdict", "found", "retries", "bound", "action", "says"),
    [
        pytest.param(Verdict(READY, "fits"), [], None, 3, Action.VERDICT, None, id="ready"),
        pytest.param(UNFIT, [], 7, 3, Action.VERDICT, None, id="retry-that-fits-elsewhere"),
        pytest.param(UNFIT, [SHORT], None, 3, Action.VERDICT, "retry 1 of 3 before", id="first-retry"),
        pytest.param(UNFIT, [SHORT], 2, 3, Action.VERDICT, "retry 3 of 3 before", id="last-retry"),
        pytest.param(UNFIT, [SHORT], 3, 3, Action.PARK, "stopped retrying after 3 retries", id="park"),
        pytest.param(UNFIT, [SHORT], 8, 3, Action.PARK, "stopped retrying after 8 retries", id="park-late"),
        pytest.param(UNFIT, [SHORT], 0, 1, Action.VERDICT, "retry 1 of 1 before", id="bound-1-first"),
        pytest.param(UNFIT, [SHORT], 1, 1, Action.PARK, "after 1 retries", id="bound-1-park"),
    ],
)
def test_decide_judged(
    verdict: Verdict,
    found: list[Shortfall],
    retries: int | None,
    bound: int,
    action: Action,
    says: str | None,
) -> None:
    decision = decide_judged(_wl(retries), verdict, found, FLAVORS, bound)
    assert decision.action is action
    if says is None:
        assert decision.record is None
        return
    assert decision.record is not None
    assert says in decision.record.message
    assert SHORT.describe() in decision.record.message
    assert decision.record.flavors == FLAVORS


def test_decide_parked_resumes_once_the_fleet_has_room_and_keeps_the_largest_fit_current() -> None:
    record = Record("old largest fit; Gate 3 stopped retrying after 3 retries: ...", FLAVORS).encode()
    parked = _wl(3, active=False, record=record)
    assert decide_parked(parked, []).action is Action.RESUME
    assert decide_parked(parked, []).record is None
    grown = Shortfall("main", "8 whole nvidia card(s)", "6 free whole nvidia card(s) on node t4-c")
    still = decide_parked(parked, [grown])
    assert still.action is Action.STAY_PARKED
    assert still.record is not None and still.record.flavors == FLAVORS
    assert "6 free whole nvidia card(s) on node t4-c" in still.record.message
    assert "stopped retrying after 3 retries" in still.record.message


def test_the_record_round_trips_and_bad_values_read_as_none() -> None:
    record = Record("m", {"b": ("f2", "f1"), "a": ("f",)})
    assert read_record(_wl(record=record.encode())) == record
    for bad in ("", "not json", "[]", '{"flavors": {}}', '{"message": 3}'):
        assert read_record(_wl(record=bad)) is None, bad
    assert read_record(_wl(record='{"message": "m", "flavors": {"a": [1], "b": ["x"]}}')) == Record(
        "m", {"b": ("x",)}
    )
    assert read_record(_wl()) is None


@pytest.mark.parametrize(("retries", "expected"), [(None, 0), (0, 0), (4, 4), (-1, 0), (True, 0), ("3", 0)])
def test_retry_count_is_kueues_count_on_this_checks_entry(retries: Any, expected: int) -> None:
    assert retry_count(_wl(retries)) == expected


def test_is_parked_needs_the_record_on_an_inactive_workload() -> None:
    record = Record("m", FLAVORS).encode()
    assert is_parked(_wl(active=False, record=record))
    assert not is_parked(_wl(active=False))  # deactivated by someone else (an admin, the joint check)
    assert not is_parked(_wl(active=True, record=record))  # reactivated: judged again
    assert not is_parked(_wl(record=record))  # still retrying


def test_with_shortfall_extends_only_a_retry() -> None:
    record = Record("the fleet is short", FLAVORS)
    assert with_shortfall(UNFIT, record) == Verdict(RETRY, f"{UNFIT.message}; the fleet is short")
    assert with_shortfall(UNFIT, None) == UNFIT
    ready = Verdict(READY, "fits")
    assert with_shortfall(ready, record) == ready
    assert len(with_shortfall(UNFIT, Record("x" * 10_000)).message) == 4096


@pytest.mark.parametrize("bound", [1, 2, 3, 5])
def test_the_cycle_stops_after_exactly_bound_retries_and_resumes_when_the_fleet_has_room(bound: int) -> None:
    """Kueue's side played out: each Retry verdict evicts the Workload and counts ``retryCount`` up; a park
    deactivates it. Gate 3 writes ``bound`` Retry verdicts, then parks; while parked nothing but fleet
    changes move it; once the fleet has room it resumes and is judged like any other."""
    wl = _wl()
    verdicts = 0
    for _ in range(bound + 5):
        decision = decide_judged(wl, UNFIT, [SHORT], FLAVORS, bound)
        if decision.action is Action.PARK:
            break
        verdicts += 1
        wl["status"]["admissionChecks"][1]["retryCount"] = retry_count(wl) + 1  # Kueue's eviction
    assert decision.action is Action.PARK and verdicts == bound
    assert decision.record is not None
    wl["spec"]["active"] = False
    wl["metadata"]["annotations"][RECORD] = decision.record.encode()
    assert is_parked(wl)
    for _ in range(3):  # ledgers change, still short: it stays parked
        assert decide_parked(wl, [SHORT]).action is Action.STAY_PARKED
    assert decide_parked(wl, []).action is Action.RESUME
