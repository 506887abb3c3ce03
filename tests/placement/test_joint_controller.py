"""The joint check's thin step over filled caches (no control plane): which keys an event wakes, the
exact apply bodies, the 409 retry, and the requeue at the park deadline on an injected clock."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement import joint
from gpustack_worker.placement.joint_controller import (
    CONFLICT_RETRY_S,
    FIELD_MANAGER,
    JointCheck,
    _deployment_view,
)
from gpustack_worker.runtime.client import Client, Conflict
from gpustack_worker.runtime.controller import Result, semantic_changed
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource
from tests.kit import kueue, models

NS = "team-a"
UID = "dep-uid"
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
T0_TEXT = "2026-01-01T12:00:00Z"


class FakeClient:
    """Records applies; raises ``fail`` once when set."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.fail: Exception | None = None

    async def create(self, resource: Any, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        self.created.append({"kind": resource.kind, "body": body, **options})
        return body

    async def apply(self, resource: Any, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if self.fail is not None:
            error, self.fail = self.fail, None
            raise error
        self.applied.append({"kind": resource.kind, "body": body, **options})
        return body


class Settings:
    current = RuntimeSettings()


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def _deployment() -> dict[str, Any]:
    prefill = models.role("prefill", replicas=1, instanceType="it-p", template={})
    decode = models.role("decode", replicas=1, instanceType="it-d", template={})
    return models.model_deployment("llm", NS, prefill, decode, uid=UID, generation=2, resourceVersion="7")


def _pod(role: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"llm-{role}-0-0",
            "namespace": NS,
            "uid": f"pod-{role}",
            "labels": {keys.MODEL_DEPLOYMENT_UID: UID, keys.MODEL_DEPLOYMENT_ROLE: role},
            "ownerReferences": [
                {
                    "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
                    "kind": "ModelDeployment",
                    "name": "llm",
                    "uid": UID,
                    "controller": True,
                }
            ],
        }
    }


def _workload(role: str, *, reserved: bool = True, state: str = "Pending") -> dict[str, Any]:
    """The Workload Kueue made for the role's first pod group with what the joint check reads of it: its
    owner Pod, its PodSet (no template) and the status under test (no queue: the check reads none)."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": f"llm-{role}-0-0", "uid": f"pod-{role}"}
    body = kueue.workload(
        f"llm-{role}-0", NS, None, {"name": role, "count": 1}, resourceVersion="41", ownerReferences=[owner]
    )
    body["status"] = {
        "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}],
        "admissionChecks": [
            {"name": keys.JOINT_CHECK, "state": state, "message": "", "lastTransitionTime": T0_TEXT}
        ],
    }
    return body


@pytest.fixture
def parts() -> tuple[JointCheck, FakeClient, Wall]:
    client = FakeClient()
    wall = Wall()
    fake = cast("Client", client)
    check = JointCheck(
        fake, InformerRegistry(fake), cast("SettingsSource[RuntimeSettings]", Settings()), clock=wall
    )
    check.deployments.store.upsert(_deployment())
    for role in ("prefill", "decode"):
        check.pods.store.upsert(_pod(role))
    check.workloads.store.upsert(_workload("prefill"))
    check.workloads.store.upsert(_workload("decode", reserved=False))
    return check, client, wall


def test_a_workload_event_wakes_its_siblings_and_its_deployment(
    parts: tuple[JointCheck, FakeClient, Wall],
) -> None:
    check, _, _ = parts
    decode = check.workloads.store.get(f"{NS}/llm-decode-0")
    assert list(check._workload_and_siblings(decode)) == [f"{NS}/llm-decode-0", f"{NS}/llm-prefill-0"]
    assert list(check._deployment_key(decode)) == [f"{NS}/llm"]
    assert list(check._owned_workloads(_pod("decode"))) == [f"{NS}/llm-decode-0"]
    assert list(check._deployment_workloads(_deployment())) == [f"{NS}/llm-decode-0", f"{NS}/llm-prefill-0"]
    foreign = {"metadata": {"name": "batch", "namespace": NS}}
    assert list(check._workload_and_siblings(foreign)) == [f"{NS}/batch"]
    assert list(check._deployment_key(foreign)) == []
    assert [role for _, role in check.groups(_deployment(), joint.OwnerRef(NS, "llm", UID))] == [
        "decode",
        "prefill",
    ]


async def test_verdict_applies_only_our_entry_with_a_resource_version_precondition(
    parts: tuple[JointCheck, FakeClient, Wall],
) -> None:
    check, client, _ = parts
    assert await check.reconcile_workload(f"{NS}/llm-prefill-0") == Result.done()
    assert await check.reconcile_workload(f"{NS}/llm-decode-0") == Result.done()  # not reserved: no verdict
    assert client.applied == [
        {
            "kind": "Workload",
            "field_manager": FIELD_MANAGER,
            "force": True,
            "subresource": "status",
            "body": {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": "llm-prefill-0", "namespace": NS, "resourceVersion": "41"},
                "status": {
                    "admissionChecks": [
                        {
                            "name": keys.JOINT_CHECK,
                            "state": "Pending",
                            "message": "1 of 2 groups reserved; waiting: it-d",
                            "lastTransitionTime": T0_TEXT,
                        }
                    ]
                },
            },
        }
    ]


async def test_a_stale_workload_is_retried_soon(parts: tuple[JointCheck, FakeClient, Wall]) -> None:
    check, client, _ = parts
    client.fail = Conflict(409, "Conflict", {}, "the object has been modified")
    assert await check.reconcile_workload(f"{NS}/llm-prefill-0") == Result.after(CONFLICT_RETRY_S)
    assert client.applied == []


async def test_deployment_waits_then_parks_at_the_deadline(
    parts: tuple[JointCheck, FakeClient, Wall],
) -> None:
    check, client, wall = parts
    wall.now = T0 + dt.timedelta(minutes=10)
    assert await check.reconcile_deployment(f"{NS}/llm") == Result.after(20 * 60)
    cond = client.applied[-1]["body"]["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in cond] == [("QuotaReserved", "False", "Waiting")]
    assert "hold" not in client.applied[-1]["body"]["status"]
    assert client.applied[-1]["body"]["metadata"] == {"name": "llm", "namespace": NS, "resourceVersion": "7"}
    wall.now = T0 + joint.PARK_AFTER
    client.applied.clear()
    assert await check.reconcile_deployment(f"{NS}/llm") == Result.done()
    await check.events.flush()
    # First the park is recorded, then every Workload of the set is deactivated (reserved or not).
    status, *deactivations = client.applied
    assert status["subresource"] == "status"
    assert [(c["reason"], c["observedGeneration"]) for c in status["body"]["status"]["conditions"]] == [
        ("Parked", 2)
    ]
    assert status["body"]["status"]["hold"] == {"parkedAt": "2026-01-01T12:30:00Z", "parkedGeneration": 2}
    assert deactivations == [
        {
            "kind": "Workload",
            "field_manager": FIELD_MANAGER,
            "force": True,
            "subresource": None,
            "body": {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": f"llm-{role}-0", "namespace": NS, "resourceVersion": "41"},
                "spec": {"active": False},
            },
        }
        for role in ("decode", "prefill")
    ]
    # One Warning Event on the deployment, in its namespace.
    [event] = client.created
    assert event["namespace"] == NS
    assert (event["body"]["type"], event["body"]["reason"]) == ("Warning", "Parked")
    assert event["body"]["regarding"]["name"] == "llm"
    assert "quota they held is released" in event["body"]["note"]


async def test_a_parked_set_is_retried_reactivating_first(parts: tuple[JointCheck, FakeClient, Wall]) -> None:
    check, client, wall = parts
    parked = _deployment()
    parked["status"] = {"hold": {"parkedAt": "2026-01-01T12:30:00Z", "parkedGeneration": 2}}
    parked["metadata"]["annotations"] = {keys.JOINT_RETRY: "now"}
    check.deployments.store.upsert(parked)
    for role in ("prefill", "decode"):
        released = _workload(role, reserved=False)
        released["spec"]["active"] = False
        check.workloads.store.upsert(released)
    wall.now = T0 + dt.timedelta(hours=1)
    assert await check.reconcile_deployment(f"{NS}/llm") == Result.done()
    *activations, status = client.applied
    assert [(a["body"]["metadata"]["name"], a["body"]["spec"]) for a in activations] == [
        ("llm-decode-0", {"active": True}),
        ("llm-prefill-0", {"active": True}),
    ]
    assert status["body"]["status"]["hold"] == {"since": "2026-01-01T13:00:00Z", "retry": "now"}
    assert client.created == []  # no Event for a retry


async def test_a_stale_workload_delays_the_retry_and_the_park_stays(
    parts: tuple[JointCheck, FakeClient, Wall],
) -> None:
    check, client, _ = parts
    parked = _deployment()
    parked["status"] = {"hold": {"parkedAt": "2026-01-01T12:30:00Z", "parkedGeneration": 1}}  # spec changed
    check.deployments.store.upsert(parked)
    released = _workload("decode", reserved=False)
    released["spec"]["active"] = False
    check.workloads.store.upsert(released)
    client.fail = Conflict(409, "Conflict", {}, "the object has been modified")
    assert await check.reconcile_deployment(f"{NS}/llm") == Result.after(CONFLICT_RETRY_S)
    assert client.applied == []  # the park is not cleared before every Workload is active again


async def test_check_is_marked_active_once_it_exists(parts: tuple[JointCheck, FakeClient, Wall]) -> None:
    check, client, _ = parts
    assert await check.reconcile_check(keys.JOINT_CHECK) == Result.done()
    assert client.applied == []  # not applied by the chain yet
    check.checks.store.upsert({"metadata": {"name": keys.JOINT_CHECK, "generation": 1}})
    await check.reconcile_check(keys.JOINT_CHECK)
    body = client.applied[-1]["body"]
    assert client.applied[-1]["subresource"] == "status"
    assert body["status"]["conditions"] == [
        {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "the joint check controller gives verdicts",
            "lastTransitionTime": T0_TEXT,
            "observedGeneration": 1,
        }
    ]


def test_the_deployment_decision_wakes_on_spec_and_retry_annotation_not_on_its_own_status() -> None:
    wakes = semantic_changed(_deployment_view)
    before = _deployment()
    annotated = {**before, "metadata": {**before["metadata"], "annotations": {keys.JOINT_RETRY: "1"}}}
    respec = {**before, "metadata": {**before["metadata"], "generation": 3}}
    parked = {**before, "status": {"hold": {"parkedAt": T0_TEXT, "parkedGeneration": 2}}}
    assert wakes("update", before, annotated)
    assert wakes("update", before, respec)
    assert not wakes("update", before, parked)  # our own status write retries nothing
