"""Conditions: lastTransitionTime moves only when status flips, observedGeneration only with the
generation, an unchanged condition is returned as the same mapping (so a converged status apply is a
no-op), other writers' conditions are kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from gpustack_worker.runtime.apply import is_noop
from gpustack_worker.runtime.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    Condition,
    find,
    for_apply,
    format_time,
    is_true,
    merge,
    remove,
    set_condition,
)
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.resources import FieldHints

#: Kueue's ClusterQueue status.conditions is a list map keyed by type (metav1.Condition lists all are).
CONDITION_HINTS = FieldHints(keyed={"status.conditions": ("type",)})

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
T0S = "2025-03-01T12:00:00Z"
T1S = "2025-03-01T12:05:00Z"


def ready(status: Any = TRUE, reason: str = "Ready", message: str = "", gen: int | None = 3) -> Condition:
    return Condition("TopologyReady", status, reason, message, gen)


def test_format_time_is_rfc3339_utc_seconds() -> None:
    assert format_time(T0) == T0S
    assert format_time(datetime(2025, 3, 1, 14, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=2)))) == T0S
    with pytest.raises(ValueError, match="timezone-aware"):
        format_time(datetime(2025, 3, 1))  # naive: the point of the test


def test_a_new_condition_gets_now_as_transition_time() -> None:
    out = set_condition(None, ready(message="all good"), now=T0)
    assert out == [
        {
            "type": "TopologyReady",
            "status": "True",
            "reason": "Ready",
            "message": "all good",
            "lastTransitionTime": T0S,
            "observedGeneration": 3,
        }
    ]


def test_unchanged_condition_is_the_very_same_mapping() -> None:
    first = freeze(set_condition(None, ready(), now=T0))
    again = set_condition(first, ready(), now=T1)
    assert again == list(first)
    assert again[0] is first[0]


@pytest.mark.parametrize(
    ("change", "transition", "generation"),
    [
        (ready(reason="StillReady"), T0S, 3),  # new reason, same status: time kept
        (ready(message="now with a message"), T0S, 3),  # new message: time kept
        (ready(gen=4), T0S, 4),  # generation moved: observedGeneration follows, time kept
        (ready(FALSE, reason="NoFlavors"), T1S, 3),  # status flipped: time moves
        (ready(UNKNOWN, reason="Pending"), T1S, 3),
    ],
)
def test_transition_time_moves_only_when_status_flips(
    change: Condition, transition: str, generation: int
) -> None:
    before = set_condition(None, ready(), now=T0)
    after = set_condition(before, change, now=T1)
    assert after[0]["lastTransitionTime"] == transition
    assert after[0]["observedGeneration"] == generation
    assert after[0]["status"] == change.status
    assert after[0]["reason"] == change.reason


def test_merge_keeps_other_conditions_and_their_order_and_appends_new_types() -> None:
    kueue_active = {
        "type": "Active",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": T0S,
    }
    current = [kueue_active, set_condition(None, ready(), now=T0)[0]]
    out = merge(current, [ready(FALSE, reason="Missing"), Condition("Drained", TRUE, "NoFlavors")], now=T1)
    assert [c["type"] for c in out] == ["Active", "TopologyReady", "Drained"]
    assert out[0] is kueue_active
    assert out[1]["status"] == FALSE and out[1]["lastTransitionTime"] == T1S
    assert out[2] == {
        "type": "Drained",
        "status": "True",
        "reason": "NoFlavors",
        "message": "",
        "lastTransitionTime": T1S,
    }
    assert "observedGeneration" not in out[2]


def test_merge_with_a_duplicate_type_on_the_object_keeps_the_first_and_drops_the_rest() -> None:
    current = [
        {
            "type": "TopologyReady",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": T0S,
        },
        {
            "type": "TopologyReady",
            "status": "False",
            "reason": "Old",
            "message": "",
            "lastTransitionTime": T0S,
        },
    ]
    out = merge(current, [ready(gen=None)], now=T1)
    assert len(out) == 1 and out[0]["lastTransitionTime"] == T0S


def test_for_apply_returns_only_the_callers_conditions_rendered_against_the_cache() -> None:
    cached = [
        {"type": "Active", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": T0S},
        set_condition(None, ready(), now=T0)[0],
    ]
    out = for_apply(cached, [ready(), Condition("Drained", FALSE, "HasFlavors")], now=T1)
    assert [c["type"] for c in out] == ["TopologyReady", "Drained"]
    assert out[0] is cached[1]
    assert out[1]["lastTransitionTime"] == T1S


def test_a_converged_status_apply_with_conditions_is_a_no_op() -> None:
    """The point of the helper: re-rendering at a later time against the cache writes nothing."""
    manager = "chain-queues"
    first = for_apply(None, [ready(message="ok")], now=T0)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "status": {"conditions": first},
    }
    fields: dict[str, Any] = {"f:status": {"f:conditions": {'k:{"type":"TopologyReady"}': {
        ".": {}, "f:type": {}, "f:status": {}, "f:reason": {}, "f:message": {},
        "f:lastTransitionTime": {}, "f:observedGeneration": {},
    }}}}  # fmt: skip
    cached = freeze(
        {
            **body,
            "metadata": {
                "name": "q",
                "generation": 3,
                "managedFields": [
                    {"manager": manager, "operation": "Apply", "subresource": "status", "fieldsV1": fields}
                ],
            },
        }
    )
    later = for_apply(cached["status"]["conditions"], [ready(message="ok")], now=T1)
    desired = {**body, "status": {"conditions": later}}
    assert is_noop(desired, cached, manager, "status", hints=CONDITION_HINTS)
    flipped = for_apply(cached["status"]["conditions"], [ready(FALSE, reason="Broken")], now=T1)
    assert not is_noop(
        {**body, "status": {"conditions": flipped}}, cached, manager, "status", hints=CONDITION_HINTS
    )


def test_find_is_true_and_remove() -> None:
    conds = merge(None, [ready(), Condition("Drained", FALSE, "HasFlavors")], now=T0)
    assert find(conds, "Drained") is conds[1]
    assert find(conds, "Nope") is None
    assert find(None, "Drained") is None
    assert is_true(conds, "TopologyReady")
    assert not is_true(conds, "Drained")
    assert not is_true(conds, "Nope")
    assert [c["type"] for c in remove(conds, "TopologyReady")] == ["Drained"]
    assert remove(None, "x") == []


def test_long_messages_are_clipped_to_the_api_limit() -> None:
    out = set_condition(None, ready(message="x" * 40_000), now=T0)
    assert len(out[0]["message"]) == 32768 and out[0]["message"].endswith("...")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"type": "", "status": TRUE, "reason": "Ok"}, "type"),
        ({"type": "bad type", "status": TRUE, "reason": "Ok"}, "type"),
        ({"type": "Ready", "status": "true", "reason": "Ok"}, "status"),
        ({"type": "Ready", "status": TRUE, "reason": ""}, "reason"),
        ({"type": "Ready", "status": TRUE, "reason": "not camel"}, "reason"),
        ({"type": "Ready", "status": TRUE, "reason": "1Bad"}, "reason"),
        ({"type": "Ready", "status": TRUE, "reason": "Ok", "observed_generation": -1}, "observedGeneration"),
    ],
)
def test_invalid_conditions_are_refused(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Condition(**kwargs)


def test_valid_condition_spellings() -> None:
    Condition("kueue.x-k8s.io/Admitted", TRUE, "Admitted_By,Kueue:v1")
    Condition("Ready", UNKNOWN, "R")


def test_the_same_type_twice_in_one_call_is_refused() -> None:
    with pytest.raises(ValueError, match="given twice"):
        merge(None, [ready(), ready()], now=T0)
