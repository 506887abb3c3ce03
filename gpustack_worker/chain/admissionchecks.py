"""The two AdmissionChecks the worker applies (what each one judges: docs/admission.md).

``gpustack-node-devices`` (Gate 3) and ``gpustack-model-deployment-joint`` exist from the start, each
naming the controller that gives its verdicts. Only that controller marks a check ``Active``; until then
no queue references it (a referenced check nobody answers would block every Workload). The verdict
controllers arrive with the placement issue; the queue controller already references a check as soon as
its ``Active`` condition is ``True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("CHECKS", "active_checks", "desired_admission_checks")

#: Check name → controller name.
CHECKS: dict[str, str] = {
    keys.NODE_DEVICES_CHECK: keys.NODE_DEVICES_CONTROLLER,
    keys.JOINT_CHECK: keys.JOINT_CONTROLLER,
}


def desired_admission_checks() -> dict[str, dict[str, Any]]:
    """Both checks, by name (spec only: status belongs to the verdict controllers)."""
    return {
        name: {
            "apiVersion": kinds.ADMISSION_CHECK.api_version,
            "kind": kinds.ADMISSION_CHECK.kind,
            "metadata": {"name": name},
            "spec": {"controllerName": controller},
        }
        for name, controller in CHECKS.items()
    }


def active_checks(checks: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Names of our checks whose ``Active`` condition is ``True``."""
    active = set()
    for check in checks:
        name = str((check.get("metadata") or {}).get("name", ""))
        if name not in CHECKS:
            continue
        for cond in (check.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Active" and cond.get("status") == "True":
                active.add(name)
    return frozenset(active)
