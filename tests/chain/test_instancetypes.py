"""InstanceType lifecycle decisions: finalizer, teardown, sticky Inactive backfill, phase (and why a type
out of scope serves no pool)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import queues
from gpustack_worker.chain.instancetypes import TypeDecision, decide_type, phase_of

FIN = "gpustack.ai/controlled"


def _it(
    inactive: bool = False, finalizers: tuple[str, ...] = (FIN,), deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpustack--nvidia-tesla-t4-linux-amd64", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "spec": {"inactive": inactive}}


def _cq(
    policy: str = "None", annotations: dict[str, str] | None = None, deleting: bool = False, **status: int
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpustack--nvidia-tesla-t4-linux-amd64", "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "spec": {"stopPolicy": policy}, "status": status}


def test_finalizer_added_to_a_new_type() -> None:
    assert decide_type(_it(finalizers=()), _cq(), queue_stop_is_ours=True).add_finalizer
    assert not decide_type(_it(), _cq(), queue_stop_is_ours=True).add_finalizer


def test_teardown_deletes_the_queue_once_then_waits_then_releases() -> None:
    first = decide_type(_it(deleting=True), _cq(), queue_stop_is_ours=True)
    assert first.delete_queue and not first.remove_finalizer and first.phase == "Inactive"
    waiting = decide_type(_it(deleting=True), _cq("HoldAndDrain", deleting=True), queue_stop_is_ours=True)
    assert not waiting.delete_queue and not waiting.remove_finalizer and waiting.requeue_after
    gone = decide_type(_it(deleting=True), None, queue_stop_is_ours=True)
    assert gone.remove_finalizer and not gone.delete_queue
    # Not ours to hold: nothing to do.
    assert decide_type(_it(deleting=True, finalizers=()), _cq(), queue_stop_is_ours=True) == TypeDecision(
        phase="Inactive", phase_message="being deleted: the queue is drained and removed"
    )


@pytest.mark.parametrize(
    ("queue", "ours", "want"),
    [
        (_cq("Hold"), False, True),  # an admin Hold
        (_cq("HoldAndDrain"), False, True),  # an admin HoldAndDrain
        (_cq("Hold"), True, False),  # our own Hold (the queue controller applied it)
        (_cq("Hold", {"topology.gpustack.ai/empty-plan-hold": "true"}), True, False),  # our empty-plan hold
        (_cq("HoldAndDrain", {"topology.gpustack.ai/migration-stop-policy": "None"}), True, False),  # drain
        # Issue 16 defect 6: an admin's stop is theirs whatever annotation is left on the queue.
        (_cq("Hold", {"topology.gpustack.ai/empty-plan-hold": "true"}), False, True),
        (_cq("HoldAndDrain", {"topology.gpustack.ai/migration-stop-policy": "None"}), False, True),
        (_cq("HoldAndDrain", deleting=True), False, False),  # queue being deleted
        (_cq("None"), False, False),  # a foreign release is not a stop
    ],
    ids=[
        "admin-hold",
        "admin-drain",
        "our-hold",
        "empty-plan-hold",
        "drained",
        "admin-hold-left-marked",
        "admin-drain-in-a-migration",
        "deleting",
        "foreign-none",
    ],
)
def test_inactive_backfill(queue: dict[str, Any], ours: bool, want: bool) -> None:
    assert decide_type(_it(), queue, queue_stop_is_ours=ours).backfill_inactive is want


def test_backfill_is_one_way() -> None:
    assert not decide_type(_it(inactive=True), _cq("Hold"), queue_stop_is_ours=False).backfill_inactive


@pytest.mark.parametrize(
    ("queue", "phase"),
    [
        (_cq("None"), "Active"),
        (_cq("Hold"), "Inactive"),
        (_cq("Hold", {"topology.gpustack.ai/empty-plan-hold": "true"}), "Inactive"),
        (_cq("HoldAndDrain", reservingWorkloads=2), "Draining"),
        (_cq("HoldAndDrain", {"topology.gpustack.ai/migration-stop-policy": "None"}), "Inactive"),
        (None, "Inactive"),
    ],
)
def test_phase(queue: dict[str, Any] | None, phase: str) -> None:
    assert phase_of(queue, deleting=False)[0] == phase


# --- issue 27 class 2: a type out of scope says why, naming the name its grouping expects ------------------
AMD_H100 = "gpustack--amd-epyc-7763--nvidia-h100-80gb-hbm3-linux-amd64"
COLLAPSED_H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


def _h100_type(name: str, general: str = "amd-epyc-7763") -> dict[str, Any]:
    spec = {"acceleratable": True, "acceleratorGroup": "nvidia-h100-80gb-hbm3", "generalGroup": general}
    return {"metadata": {"name": name, "finalizers": [FIN]}, "spec": {**spec, "os": "linux", "arch": "amd64"}}


def _queue_of(it: dict[str, Any], *, aware: bool) -> dict[str, Any]:
    """The queue the queue controller writes for ``it`` (no flavor, no Kueue status: the empty-plan hold)."""
    decision = queues.decide(
        queues.QueueInputs(
            instance_type=it,
            queue=None,
            flavors=[],
            nodes=[],
            topologies=frozenset(),
            active_checks=frozenset(),
            aware=aware,
        )
    )
    assert decision.body is not None
    return decision.body


@pytest.mark.parametrize(
    ("it", "aware", "expected"),
    [
        # The example: the admin's AMD-named H100 type after the flip to false.
        (_h100_type(AMD_H100), False, COLLAPSED_H100),
        # The collapsed name under awareness: the aware grouping names the AMD pool.
        (_h100_type(COLLAPSED_H100), True, AMD_H100),
        # A custom name: both groupings' names are given, the current one among them.
        (_h100_type("my-h100"), False, COLLAPSED_H100),
        (_h100_type("my-h100"), True, AMD_H100),
    ],
    ids=["aware-name-under-false", "collapsed-name-under-true", "custom-under-false", "custom-under-true"],
)
def test_a_type_out_of_scope_says_why(it: dict[str, Any], aware: bool, expected: str) -> None:
    queue = _queue_of(it, aware=aware)
    assert queue["metadata"]["labels"][keys.OTHER_GROUPING] == "true"
    decision = decide_type(it, queue, queue_stop_is_ours=True)
    assert decision.phase == "Inactive"
    assert expected in decision.phase_message and it["metadata"]["name"] in decision.phase_message
    assert decision.phase_message.endswith("held: the pool has no resource groups yet")
    # The same type under the grouping that names it: no scope message.
    served = _queue_of(it, aware=not aware) if it["metadata"]["name"] != "my-h100" else None
    if served is not None:
        assert keys.OTHER_GROUPING not in served["metadata"]["labels"]
        assert decide_type(it, served, queue_stop_is_ours=True).phase_message == (
            "held: the pool has no resource groups yet"
        )
    # Being deleted says only that.
    deleting = {**it, "metadata": {**it["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"}}
    assert decide_type(deleting, queue, queue_stop_is_ours=True).phase_message == (
        "being deleted: the queue is drained and removed"
    )
