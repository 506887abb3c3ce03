"""What every admission-check controller of ours shares: marking its AdmissionCheck ``Active``, the shape
of a write to a Workload, and telling Kueue's own resets of a check's entry from an edit.

The chain applies both AdmissionChecks but never marks them Active: a check's own
controller does, through ``/status`` as the check's field owner, so a queue references a check only once
something will answer it. Both check controllers (:mod:`.joint_controller`, :mod:`.node_devices`) call
:func:`mark_active`.

**Kueue's protocol is not an edit.** When Kueue evicts a Workload (a ``Retry`` verdict, a deactivation, a
preemption) it resets every admission check's entry that is not ``Pending`` to ``Pending`` — message
``Reset to Pending after eviction. Previously: <state>``, a new ``lastTransitionTime``, ``retryCount``
counted up after a ``Retry`` — in one forced server-side apply of the Workload's status as
:data:`KUEUE_ADMISSION` (Kueue v0.19 ``pkg/workload/evict``: ``prepareForEviction`` →
``resetChecksOnEviction``, written by ``patching.PatchAdmissionStatus``). That takes those fields from the
check's manager, so the check's next verdict writes them back: by protocol, not a repair.
:func:`kueue_reset` recognises exactly that, from what the server keeps, never from timing: a field of
the check's own entry that Kueue's admission manager owns now (the informer keeps that manager's
managedFields entry: :data:`KUEUE_ADMISSION` is registered with it), while the entry reads as Kueue's reset
leaves it — state ``Pending`` and Kueue's reset message (:data:`KUEUE_RESET_MESSAGE`) — and the Workload
carries Kueue's ``Evicted`` condition (set by the same eviction; after the next reservation it stays,
``False``). Anything else another manager changed in the entry is repaired and reported as before: a
warning log line and a ``FieldsRepaired`` Warning Event on the Workload (:func:`repair_reporter`) — an
admin's ``kubectl edit`` of the state or the message (the field moves to the admin's manager, or, once
Kueue re-applies the entry as it read it, is co-owned by Kueue with the admin's value: not Kueue's reset
message), a Kueue change to anything but its reset, or one on a Workload Kueue never evicted. An entry
edited in part after Kueue's reset is reported whole. The same holds for ``spec.active``, which both
checks switch (the joint check parks a set, Gate 3 a Workload that never fits): one check writing over
the other's switch is no edit either (:func:`is_sibling_switch`), nor is Gate 3 taking ``spec.active``
over by its own decision (``decides_active``: the park is announced by a ``NeverFits`` Event of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.apply import field_owners
from gpustack_worker.runtime.client import NotFound
from gpustack_worker.runtime.conditions import TRUE, Condition, for_apply

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable

    from gpustack_worker.runtime.apply import Applier, FieldPath
    from gpustack_worker.runtime.events import EventRecorder
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "ACTIVE",
    "ACTIVE_REASON",
    "CONFLICT_RETRY_S",
    "KUEUE_ADMISSION",
    "KUEUE_RESET_MESSAGE",
    "REASON_FIELDS_REPAIRED",
    "WORKLOAD_MANAGERS",
    "entry_path",
    "is_kueue_reset",
    "is_sibling_switch",
    "kueue_reset",
    "mark_active",
    "repair_reporter",
    "workload_patch",
)

ACTIVE: Final = "Active"
ACTIVE_REASON: Final = "Ready"
#: After a 409 (the cached Workload was stale) retry this soon; the fresh object is usually cached by then.
CONFLICT_RETRY_S: Final = 1.0
#: Kueue's field manager for a Workload's admission status (``constants.AdmissionName``): the scheduler's
#: reservation and the eviction's reset of the admission checks.
KUEUE_ADMISSION: Final = "kueue-admission"
#: The Warning Event reason of a write that put back fields another manager changed (as the chain's).
REASON_FIELDS_REPAIRED: Final = "FieldsRepaired"
#: The message of Kueue's reset (``resetChecksOnEviction``), followed by the state it replaced.
KUEUE_RESET_MESSAGE: Final = "Reset to Pending after eviction. Previously: "
_PENDING: Final = "Pending"
_EVICTED: Final = "Evicted"
_STATUS_SUBRESOURCE: Final = "status"
_ACTIVE: Final = ("f:spec", "f:active")
#: The field managers of our two admission checks (each is its check's name).
_CHECK_MANAGERS: Final = frozenset({keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK})
#: The managedFields entries a check controller's Workload informer keeps: its own, the other check's and
#: Kueue's admission manager (what :func:`kueue_reset` reads).
WORKLOAD_MANAGERS: Final = (keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK, KUEUE_ADMISSION)


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


def entry_path(check: str) -> FieldPath:
    """The managedFields path of ``check``'s item in ``status.admissionChecks`` (a list keyed by name)."""
    return ("f:status", "f:admissionChecks", "k:" + orjson.dumps({"name": check}).decode())


def _entry(workload: Mapping[str, Any], check: str) -> Mapping[str, Any]:
    for item in (workload.get("status") or {}).get("admissionChecks") or ():
        if isinstance(item, Mapping) and item.get("name") == check:
            return item
    return {}


def _has_condition(workload: Mapping[str, Any], type_: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == type_
        for c in (workload.get("status") or {}).get("conditions") or ()
    )


def is_kueue_reset(workload: Mapping[str, Any], path: FieldPath, check: str, owners: frozenset[str]) -> bool:
    """Is the field ``path``, which another manager changed on ``workload`` (now owned by ``owners``), Kueue's
    reset of ``check``'s entry on eviction (see the module doc)? Pure."""
    prefix = entry_path(check)
    if path[: len(prefix)] != prefix or len(path) == len(prefix):
        return False
    if KUEUE_ADMISSION not in owners:
        return False
    entry = _entry(workload, check)
    return (
        entry.get("state") == _PENDING
        and str(entry.get("message") or "").startswith(KUEUE_RESET_MESSAGE)
        and _has_condition(workload, _EVICTED)
    )


def is_sibling_switch(path: FieldPath, check: str, owners: frozenset[str]) -> bool:
    """Is ``path`` the Workload's ``spec.active`` as the other check of ours switched it (the joint check
    parks and retries a set, Gate 3 parks and resumes a Workload that never fits)? Pure."""
    return path == _ACTIVE and bool(owners & (_CHECK_MANAGERS - {check}))


def kueue_reset(
    check: str, *, decides_active: bool = False
) -> Callable[[Resource, Mapping[str, Any], FieldPath], bool]:
    """The ``expected_change`` predicate of ``check``'s Workload Applier (:class:`~gpustack_worker.runtime.
    apply.Applier`): Kueue's resets of the entry, and the other check's switch of ``spec.active``, are
    written over without a repair report. ``decides_active``: the check takes ``spec.active`` over by its
    own decision whoever set it last (Gate 3 parks a Workload its creator made active, and parks again one
    reactivated by hand that still does not fit): that write is announced by the check itself, never a
    repair."""

    def expected(_resource: Resource, cached: Mapping[str, Any], path: FieldPath) -> bool:
        if path == _ACTIVE:
            return decides_active or is_sibling_switch(path, check, field_owners(cached, path))
        owners = field_owners(cached, path, _STATUS_SUBRESOURCE)
        return is_kueue_reset(cached, path, check, owners)

    return expected


def repair_reporter(
    events: EventRecorder, check: str
) -> Callable[[Resource, Mapping[str, Any], tuple[str, ...]], None]:
    """The ``on_repair`` of ``check``'s Workload Applier: a ``FieldsRepaired`` Warning on the Workload."""

    def report(resource: Resource, obj: Mapping[str, Any], fields: tuple[str, ...]) -> None:
        meta = obj.get("metadata") or {}
        note = (
            f"{resource.kind} {meta.get('namespace')}/{meta.get('name')}: {', '.join(fields)} changed by "
            f"another field manager; written back to the {check} check's verdict (the check owns its entry: "
            "an edit of it lasts until the check judges the Workload again)"
        )
        events.warning(obj, reason=REASON_FIELDS_REPAIRED, action="Apply", note=note)

    return report
