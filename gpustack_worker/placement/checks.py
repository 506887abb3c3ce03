"""What every admission-check controller of ours shares: marking its AdmissionCheck ``Active``, and the
shape of a write to a Workload.

The chain applies both AdmissionChecks but never marks them Active (reference §5.2, §5.6): a check's own
controller does, through ``/status`` as the check's field owner, so a queue references a check only once
something will answer it. Both check controllers (:mod:`.joint_controller`, :mod:`.node_devices`) call
:func:`mark_active`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import NotFound
from gpustack_worker.runtime.conditions import TRUE, Condition, for_apply

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Mapping

    from gpustack_worker.runtime.apply import Applier

__all__ = ("ACTIVE", "ACTIVE_REASON", "CONFLICT_RETRY_S", "mark_active", "workload_patch")

ACTIVE: Final = "Active"
ACTIVE_REASON: Final = "Ready"
#: After a 409 (the cached Workload was stale) retry this soon; the fresh object is usually cached by then.
CONFLICT_RETRY_S: Final = 1.0


def workload_patch(workload: Mapping[str, Any], **parts: Any) -> dict[str, Any]:
    """An apply body for ``workload`` carrying ``parts`` (``spec=...`` / ``status=...``), with the read
    Workload's ``resourceVersion`` as precondition: a check never writes over a Workload newer than the one
    it decided on (Kueue resets the checks on eviction in a separate write)."""
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        **parts,
    }


def active_status(check: Mapping[str, Any], message: str, now: dt.datetime) -> dict[str, Any]:
    """The AdmissionCheck ``/status`` apply body saying ``Active=True`` (pure)."""
    meta = check.get("metadata") or {}
    generation = meta.get("generation")
    active = Condition(
        ACTIVE, TRUE, ACTIVE_REASON, message, generation if isinstance(generation, int) else None
    )
    return {
        "apiVersion": kinds.ADMISSION_CHECK.api_version,
        "kind": kinds.ADMISSION_CHECK.kind,
        "metadata": {"name": meta.get("name")},
        "status": {"conditions": for_apply((check.get("status") or {}).get("conditions"), [active], now=now)},
    }


async def mark_active(
    applier: Applier, check: Mapping[str, Any] | None, message: str, now: dt.datetime
) -> None:
    """Apply ``Active=True`` on the cached AdmissionCheck (nothing when the chain has not applied it yet,
    or it was deleted meanwhile: the chain re-applies it and its event brings us back)."""
    if check is None:
        return
    try:
        await applier.apply_status(kinds.ADMISSION_CHECK, active_status(check, message, now), check)
    except NotFound:
        return
