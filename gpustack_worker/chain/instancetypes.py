"""The InstanceType lifecycle (pure part): finalizer, delete-then-wait teardown, Inactive backfill, status.

The InstanceType controller never authors a type (the flavor controller does, create-only) and never
deletes one for lack of flavors (a pool left without flavors is drained and held by the queue controller
instead, and comes back when a flavor does). It:

- holds the ``gpustack.ai/controlled`` finalizer on every type;
- tears down on deletion: marks the type ``Inactive``, deletes the backing ClusterQueue once, and removes
  the finalizer only after Kueue has removed the queue (the queue controller sees the deletion and sets
  ``HoldAndDrain``, so Kueue evicts and lets go);
- back-fills ``spec.inactive=true`` — one-way and sticky — when the queue was stopped by anyone but the
  chain itself (an admin's ``Hold``): a stop whose ``spec.stopPolicy`` the queue controller's field
  manager does not own. The chain's own stops (the marked empty-plan ``Hold``, a drain waiting for
  flavors, a queue being deleted) are the queue controller's and never mirrored into ``inactive``; the
  queue controller never marks or takes over a stop it does not own, so a marker or a migration annotation
  on someone else's stop does not make it the chain's;
- keeps ``status`` fresh: the entrance LocalQueue, the phase (``Active``; ``Inactive`` for ``Hold`` or a
  drained ``HoldAndDrain``; ``Draining`` while Kueue still reports reservations) with a message saying
  why, and the capacity views (:mod:`gpustack_worker.chain.views`). A type whose queue the queue
  controller marked out of scope (``schedule.gpustack.ai/other-grouping=true``: its name is not the one
  the grouping gives its identity, :meth:`pools.PoolIdentity.out_of_scope`) says so first, naming the pool
  name of each grouping (:func:`pools.scope_reason`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys
from gpustack_worker.chain import pools
from gpustack_worker.chain.queues import unsupported

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("TypeDecision", "decide_type", "phase_of")

#: Requeue while waiting for Kueue to remove a deleted queue (its deletion event also wakes us).
TEARDOWN_POLL_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class TypeDecision:
    """What the InstanceType controller does for one type."""

    add_finalizer: bool = False
    remove_finalizer: bool = False
    #: Delete the backing queue (teardown; issued once: not when it is already being deleted).
    delete_queue: bool = False
    #: Set ``spec.inactive=true`` (the one-way backfill).
    backfill_inactive: bool = False
    phase: str = "Active"
    phase_message: str = ""
    requeue_after: float | None = None


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def phase_of(
    queue: Mapping[str, Any] | None, *, deleting: bool, instance_type: Mapping[str, Any] | None = None
) -> tuple[str, str]:
    """``(phase, message)`` from the backing queue's stop policy and Kueue's reservation counts; with
    ``instance_type``, a queue marked out of scope puts :func:`pools.scope_reason` first."""
    phase, message = _queue_phase(queue, deleting=deleting)
    marked = queue is not None and (_meta(queue).get("labels") or {}).get(keys.OTHER_GROUPING) == "true"
    if deleting or instance_type is None or not marked:
        return phase, message
    reason = pools.scope_reason(pools.identity_of(instance_type))
    return phase, f"{reason}; {message}" if message else reason


def _queue_phase(queue: Mapping[str, Any] | None, *, deleting: bool) -> tuple[str, str]:
    if deleting:
        return "Inactive", "being deleted: the queue is drained and removed"
    if queue is None:
        return "Inactive", "the backing ClusterQueue does not exist yet"
    spec = queue.get("spec") or {}
    status = queue.get("status") or {}
    annotations: Mapping[str, str] = _meta(queue).get("annotations") or {}
    policy = str(spec.get("stopPolicy") or "None")
    reserving = int(status.get("reservingWorkloads") or 0) + int(status.get("admittedWorkloads") or 0)
    if policy == "HoldAndDrain":
        if reserving:
            return "Draining", f"draining {reserving} workload(s): see the queue's TopologyReady condition"
        if keys.MIGRATION_STOP_POLICY in annotations:
            if spec.get("resourceGroups"):
                return "Inactive", "drained: switching the flavor plan"
            return "Inactive", "drained: waiting for a flavor to return"
        return "Inactive", "stopped (HoldAndDrain)"
    if policy == "Hold":
        if annotations.get(keys.EMPTY_PLAN_HOLD) == "true":
            return "Inactive", "held: the pool has no resource groups yet"
        return "Inactive", "held (inactive)"
    return "Active", ""


def decide_type(
    instance_type: Mapping[str, Any], queue: Mapping[str, Any] | None, *, queue_stop_is_ours: bool
) -> TypeDecision:
    """The lifecycle decision for one InstanceType.

    ``queue_stop_is_ours``: the queue controller's field manager owns the queue's ``spec.stopPolicy`` (when
    it does not, someone else stopped or released the queue).
    """
    meta = _meta(instance_type)
    finalizers = tuple(meta.get("finalizers") or ())
    held = keys.FINALIZER_CONTROLLED in finalizers
    if meta.get("deletionTimestamp"):
        phase, message = phase_of(queue, deleting=True)
        if not held:
            return TypeDecision(phase=phase, phase_message=message)
        if queue is None or unsupported(queue):
            # A queue the chain never filled (UnsupportedExistingObject) is not ours to tear down.
            return TypeDecision(remove_finalizer=True, phase=phase, phase_message=message)
        return TypeDecision(
            delete_queue=not _meta(queue).get("deletionTimestamp"),
            phase=phase,
            phase_message=message,
            requeue_after=TEARDOWN_POLL_S,
        )
    phase, message = phase_of(queue, deleting=False, instance_type=instance_type)
    inactive = bool((instance_type.get("spec") or {}).get("inactive", False))
    backfill = False
    if (
        queue is not None
        and not inactive
        and not queue_stop_is_ours
        and not _meta(queue).get("deletionTimestamp")
    ):
        # Who owns the stop policy decides whose stop it is, never an annotation: the chain's own stops (the
        # marked empty-plan Hold, a migration's HoldAndDrain) are applied by the queue controller's field
        # manager, and the queue controller never marks, or takes over, a stop it does not own. A marker or
        # a migration annotation left on someone else's stop is no reason to keep the stop from the type.
        policy = str((queue.get("spec") or {}).get("stopPolicy") or "None")
        backfill = policy in ("Hold", "HoldAndDrain")
    return TypeDecision(
        add_finalizer=not held, backfill_inactive=backfill, phase=phase, phase_message=message
    )
