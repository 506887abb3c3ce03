"""Kueue's protocol is not an edit (placement/checks.py): the table of :func:`is_kueue_reset` and
:func:`is_sibling_switch`, and the check's Workload Applier over Workloads shaped as Kueue v0.19 leaves
them — a reset on eviction (``resetChecksOnEviction``, applied as ``kueue-admission``, forced) is written
over without a report; an admin's edit of the entry still is reported (once, with ``FieldsRepaired``)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.checks import (
    KUEUE_ADMISSION,
    REASON_FIELDS_REPAIRED,
    WORKLOAD_MANAGERS,
    entry_path,
    is_kueue_reset,
    is_sibling_switch,
    kueue_reset,
    repair_reporter,
)
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource

CHECK = keys.NODE_DEVICES_CHECK
ENTRY = entry_path(CHECK)
STATE, MESSAGE = (*ENTRY, "f:state"), (*ENTRY, "f:message")
RESET_MESSAGE = "Reset to Pending after eviction. Previously: Retry"
EVICTED_TRUE = {"type": "Evicted", "status": "True", "reason": "AdmissionCheck"}
#: After the next reservation Kueue flips Evicted to False (``resetActiveCondition``); it stays listed.
EVICTED_FALSE = {"type": "Evicted", "status": "False", "reason": "QuotaReserved"}


def _wl(
    state: str, *conditions: dict[str, Any], check: str = CHECK, message: str = RESET_MESSAGE
) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "team"},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, *conditions],
            "admissionChecks": [{"name": check, "state": state, "message": message}],
        },
    }


RESET = frozenset({KUEUE_ADMISSION})
DOTTED = 'status.admissionChecks[{"name":"gpustack-node-devices"}]'
ADMIN = frozenset({"kubectl-edit"})


@pytest.mark.parametrize(
    ("workload", "path", "owners", "expected"),
    [
        pytest.param(_wl("Pending", EVICTED_TRUE), STATE, RESET, True, id="reset-while-evicted"),
        pytest.param(_wl("Pending", EVICTED_FALSE), STATE, RESET, True, id="reset-then-reserved-again"),
        pytest.param(_wl("Pending", EVICTED_FALSE), MESSAGE, RESET, True, id="reset-message"),
        pytest.param(
            _wl("Pending", EVICTED_FALSE), (*ENTRY, "f:lastTransitionTime"), RESET, True, id="reset-time"
        ),
        pytest.param(_wl("Pending", EVICTED_FALSE), STATE, ADMIN, False, id="admin-edit"),
        pytest.param(
            _wl("Pending", EVICTED_FALSE, message="held by an admin"),
            STATE,
            RESET,
            False,
            id="kueue-co-owns-an-admins-pending",
        ),
        pytest.param(_wl("Pending", EVICTED_FALSE), STATE, frozenset(), False, id="owner-not-cached"),
        pytest.param(_wl("Pending"), STATE, RESET, False, id="never-evicted"),
        pytest.param(_wl("Ready", EVICTED_FALSE), STATE, RESET, False, id="kueue-but-not-the-reset-value"),
        pytest.param(_wl("Retry", EVICTED_TRUE), STATE, RESET, False, id="kueue-retry-is-no-reset"),
        pytest.param(
            _wl("Pending", EVICTED_TRUE, check=keys.JOINT_CHECK),
            STATE,
            RESET,
            False,
            id="another-checks-entry-state",
        ),
        pytest.param(_wl("Pending", EVICTED_TRUE), ENTRY, RESET, False, id="the-whole-entry"),
        pytest.param(
            _wl("Pending", EVICTED_TRUE), ("f:status", "f:admission"), RESET, False, id="outside-the-entry"
        ),
        pytest.param(
            _wl("Pending", EVICTED_TRUE),
            (*entry_path(keys.JOINT_CHECK), "f:state"),
            RESET,
            False,
            id="sibling",
        ),
    ],
)
def test_is_kueue_reset(
    workload: dict[str, Any], path: tuple[str, ...], owners: frozenset[str], expected: bool
) -> None:
    assert is_kueue_reset(workload, path, CHECK, owners) is expected


ACTIVE = ("f:spec", "f:active")


@pytest.mark.parametrize(
    ("check", "path", "owners", "expected"),
    [
        (keys.JOINT_CHECK, ACTIVE, frozenset({keys.NODE_DEVICES_CHECK}), True),
        (keys.NODE_DEVICES_CHECK, ACTIVE, frozenset({keys.JOINT_CHECK}), True),
        (keys.NODE_DEVICES_CHECK, ACTIVE, frozenset({keys.NODE_DEVICES_CHECK}), False),
        (keys.NODE_DEVICES_CHECK, ACTIVE, frozenset({"kubectl-edit"}), False),
        (keys.NODE_DEVICES_CHECK, ACTIVE, frozenset({"kubectl-edit", keys.JOINT_CHECK}), True),
        (keys.NODE_DEVICES_CHECK, ("f:spec", "f:queueName"), frozenset({keys.JOINT_CHECK}), False),
    ],
)
def test_is_sibling_switch(check: str, path: tuple[str, ...], owners: frozenset[str], expected: bool) -> None:
    assert is_sibling_switch(path, check, owners) is expected


# --- through the Applier, on Workloads as the server stores them ---------------------------------------

ENTRY_KEY = ENTRY[-1]


def _fields(*names: str) -> dict[str, Any]:
    return {"f:status": {"f:admissionChecks": {ENTRY_KEY: {".": {}, **{f"f:{n}": {} for n in names}}}}}


def _stored(
    state: str, message: str, conditions: list[dict[str, Any]], owners: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    """A Workload as the API server stores it: our entry with ``state`` and ``message``, each manager of
    ``owners`` owning those fields of the entry (through ``/status``)."""
    managed = [
        {"manager": m, "operation": "Apply", "subresource": "status", "fieldsV1": _fields(*names)}
        for m, names in owners.items()
    ]
    managed.append({"manager": "kueue", "operation": "Update", "fieldsV1": {"f:spec": {"f:queueName": {}}}})
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {
            "name": "w",
            "namespace": "team",
            "resourceVersion": "10",
            "uid": "u",
            "managedFields": managed,
        },
        "spec": {"queueName": "q"},
        "status": {
            "conditions": conditions,
            "admissionChecks": [
                {
                    "name": CHECK,
                    "state": state,
                    "message": message,
                    "lastTransitionTime": "2026-01-01T00:01:00Z",
                    "requeueAfterSeconds": 30,
                    "retryCount": 1,
                }
            ],
        },
    }


def _retry_body() -> dict[str, Any]:
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team", "resourceVersion": "10"},
        "status": {
            "admissionChecks": [
                {
                    "name": CHECK,
                    "state": "Retry",
                    "message": "role main: node n1: pod 1 of 1 needs 8 whole nvidia card(s)",
                    "lastTransitionTime": "2026-01-01T00:02:00Z",
                    "requeueAfterSeconds": 30,
                }
            ]
        },
    }


class Client:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.applied.append(body)
        out = copy.deepcopy(body)
        out["metadata"].update(uid="u", resourceVersion="11")
        return out


class Events:
    def __init__(self) -> None:
        self.warnings: list[dict[str, Any]] = []

    def warning(self, regarding: Any, **kw: Any) -> None:
        self.warnings.append({"regarding": regarding, **kw})


class Cache:
    field_managers = frozenset(WORKLOAD_MANAGERS)


REENQUEUED = [{"type": "QuotaReserved", "status": "True"}, EVICTED_FALSE]


@pytest.mark.parametrize(
    ("stored", "reported"),
    [
        pytest.param(
            # Kueue's forced apply took state, message and time; requeueAfterSeconds (same value) is shared.
            _stored(
                "Pending",
                RESET_MESSAGE,
                REENQUEUED,
                {
                    CHECK: ("name", "requeueAfterSeconds"),
                    KUEUE_ADMISSION: (
                        "name",
                        "state",
                        "message",
                        "lastTransitionTime",
                        "requeueAfterSeconds",
                        "retryCount",
                    ),
                },
            ),
            [],
            id="kueue-reset",
        ),
        pytest.param(
            _stored(
                "Pending",
                "looked at by an admin",
                REENQUEUED,
                {
                    CHECK: ("name", "requeueAfterSeconds"),
                    KUEUE_ADMISSION: (
                        "name",
                        "state",
                        "lastTransitionTime",
                        "requeueAfterSeconds",
                        "retryCount",
                    ),
                    "kubectl-edit": ("message",),
                },
            ),
            [(f"{DOTTED}.lastTransitionTime", f"{DOTTED}.message", f"{DOTTED}.state")],
            id="admin-edited-the-message-after-the-reset",
        ),
        pytest.param(
            # An admin set Pending on a Workload Kueue had evicted before; Kueue then re-applied the entry as
            # it read it (forced, same values): it co-owns the admin's state and message, and the admin's
            # own managedFields entry is not cached. Not Kueue's reset message: an edit.
            _stored(
                "Pending",
                "held by an admin",
                REENQUEUED,
                {
                    CHECK: ("name", "lastTransitionTime", "requeueAfterSeconds"),
                    KUEUE_ADMISSION: ("name", "state", "message", "requeueAfterSeconds", "retryCount"),
                    "kubectl-edit": ("state", "message"),
                },
            ),
            [(f"{DOTTED}.message", f"{DOTTED}.state")],
            id="admin-edit-co-owned-by-kueue-after-an-eviction",
        ),
        pytest.param(
            _stored(
                "Pending",
                "held by an admin",
                [{"type": "QuotaReserved", "status": "True"}],
                {
                    CHECK: ("name", "lastTransitionTime", "requeueAfterSeconds"),
                    "kubectl-edit": ("state", "message"),
                },
            ),
            [
                (
                    'status.admissionChecks[{"name":"gpustack-node-devices"}].message',
                    'status.admissionChecks[{"name":"gpustack-node-devices"}].state',
                )
            ],
            id="admin-edit-never-evicted",
        ),
    ],
)
async def test_the_applier_writes_kueues_reset_over_silently_and_reports_an_edit(
    stored: dict[str, Any], reported: list[tuple[str, ...]]
) -> None:
    repairs: list[tuple[str, ...]] = []
    client = Client()
    applier = Applier(
        client,  # type: ignore[arg-type]
        CHECK,
        cache=Cache(),
        on_repair=lambda _r, _o, fields: repairs.append(fields),
        expected_change=kueue_reset(CHECK),
    )
    cached = make_transform(WORKLOAD_MANAGERS)(stored)  # as the check's informer keeps it
    written = await applier.apply_status(kinds.WORKLOAD, _retry_body(), cached)
    assert written is not None and len(client.applied) == 1  # the verdict is written either way
    assert repairs == reported


def test_the_repair_reporter_posts_fields_repaired_on_the_workload() -> None:
    events = Events()
    report = repair_reporter(events, CHECK)  # type: ignore[arg-type]
    workload = _wl("Pending")
    report(kinds.WORKLOAD, workload, ("status.admissionChecks[x].state",))
    (warning,) = events.warnings
    assert warning["regarding"] is workload
    assert warning["reason"] == REASON_FIELDS_REPAIRED and warning["action"] == "Apply"
    assert "team/w: status.admissionChecks[x].state changed by another field manager" in warning["note"]


async def test_gate3_taking_spec_active_over_by_its_own_decision_is_no_repair() -> None:
    """Gate 3 parks a Workload whose creator set ``spec.active``, after it kept its own annotation there:
    the field is newly desired yet present with another value (what ``taken_fields`` cannot tell from an
    edit). With ``decides_active`` that is no repair; a check without it reports it."""
    stored = {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {
            "name": "w",
            "namespace": "team",
            "resourceVersion": "10",
            "uid": "u",
            "annotations": {"worker.gpustack.ai/never-fits": "{}"},
            "managedFields": [
                {"manager": "kueue", "operation": "Update", "fieldsV1": {"f:spec": {"f:active": {}}}},
                {
                    "manager": CHECK,
                    "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:annotations": {"f:worker.gpustack.ai/never-fits": {}}}},
                },
            ],
        },
        "spec": {"active": True},
    }
    park = {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {
            "name": "w",
            "namespace": "team",
            "resourceVersion": "10",
            "annotations": {"worker.gpustack.ai/never-fits": "{}"},
        },
        "spec": {"active": False},
    }
    for decides, reported in ((True, []), (False, [("spec.active",)])):
        repairs: list[tuple[str, ...]] = []
        applier = Applier(
            Client(),  # type: ignore[arg-type]
            CHECK,
            cache=Cache(),
            on_repair=lambda _r, _o, fields, out=repairs: out.append(fields),
            expected_change=kueue_reset(CHECK, decides_active=decides),
        )
        cached = make_transform(WORKLOAD_MANAGERS)(copy.deepcopy(stored))
        assert await applier.apply(kinds.WORKLOAD, park, cached, force=True) is not None
        assert repairs == reported
