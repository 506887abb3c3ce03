"""The ModelDeployment step's pure decisions: which Pods to create and delete, and the status it writes."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from gpustack_worker.api import keys
from gpustack_worker.placement import deployments, gate3_parking, pods
from gpustack_worker.placement.deployments import StoreView, plan_writes, status_body
from gpustack_worker.placement.gate3_parking import Record
from tests.placement.test_pods import LEVELS, TYPES, deployment, role

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
DIGEST = "sha256:" + "a" * 64
HOT = StoreView(
    digests=(DIGEST,),
    stores=[
        {
            "metadata": {"name": "hot"},
            "status": {
                "models": [{"digest": DIGEST, "state": "Ready"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    ],
    csinodes=[{"metadata": {"name": "hot"}, "spec": {"drivers": [{"name": keys.MODEL_CSI_DRIVER}]}}],
)
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set decode: topology \"gpustack-fnv64-0123456789abcdef\" doesn't allow "
    'to fit any of 8 pod(s). Total nodes: 4; excluded: resource "nvidia.com/gpu": 2'
)


def plans_of(dep: dict[str, Any]) -> dict[str, pods.RolePlan | pods.RoleProblem]:
    return {r["name"]: pods.plan_role(dep, r, TYPES, LEVELS) for r in dep["spec"]["roles"]}


def as_cached(bodies: list[dict[str, Any]], uid: str = "pod-uid") -> list[dict[str, Any]]:
    out = []
    for n, body in enumerate(bodies):
        pod = copy.deepcopy(body)
        pod["metadata"]["uid"] = f"{uid}-{n}"
        out.append(pod)
    return out


def terms_of(pod: dict[str, Any]) -> list[Any]:
    affinity = pod["spec"].get("affinity") or {}
    return list(
        (affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )


def group_label(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"][keys.POD_GROUP_NAME])


def workload(name: str, *conds: dict[str, Any], checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conds)}
    if checks is not None:
        status["admissionChecks"] = checks
    return {"metadata": {"name": name, "namespace": "team-a"}, "status": status}


def cond(type_: str, status: str, message: str = "", reason: str = "Any") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


# --- writes -------------------------------------------------------------------------------------------


def test_a_3x8_role_creates_three_groups_of_eight_in_one_pass() -> None:
    dep = deployment()
    writes = plan_writes(dep, plans_of(dep), [], StoreView())
    assert writes.delete == []
    assert len(writes.create) == 24
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in writes.create:
        groups.setdefault(group_label(pod), []).append(pod)
    assert len(groups) == 3
    assert sorted(len(g) for g in groups.values()) == [8, 8, 8]
    for members in groups.values():
        assert {p["metadata"]["labels"][keys.POD_ORDINAL] for p in members} == {
            members[0]["metadata"]["labels"][keys.POD_ORDINAL]
        }


def test_converged_deployment_writes_nothing() -> None:
    dep = deployment()
    first = plan_writes(dep, plans_of(dep), [], StoreView())
    again = plan_writes(dep, plans_of(dep), as_cached(first.create), StoreView())
    assert again.create == [] and again.delete == []


def test_node_delivered_pods_carry_the_same_store_term_every_member() -> None:
    dep = deployment()
    writes = plan_writes(dep, plans_of(dep), [], HOT)
    expected = [
        {
            "weight": 100,
            "preference": {"matchExpressions": [{"key": keys.HOSTNAME, "operator": "In", "values": ["hot"]}]},
        }
    ]
    assert all(terms_of(p) == expected for p in writes.create)


def test_missing_members_copy_the_existing_members_terms_not_the_current_stores() -> None:
    dep = deployment(role(replicas=1, size=4))
    first = plan_writes(dep, plans_of(dep), [], StoreView())  # nobody held the digest then
    kept = as_cached(first.create[:2])
    later = plan_writes(dep, plans_of(dep), kept, HOT)  # now "hot" holds it
    assert [p["metadata"]["labels"][keys.POD_GROUP_POD_INDEX] for p in later.create] == ["2", "3"]
    assert all(terms_of(p) == [] for p in later.create)
    assert {group_label(p) for p in later.create} == {group_label(kept[0])}


def test_a_download_finishing_later_changes_no_existing_pod() -> None:
    dep = deployment()
    first = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    later = plan_writes(dep, plans_of(dep), first, HOT)
    assert later.create == [] and later.delete == []


def test_scaling_down_deletes_only_the_replicas_beyond() -> None:
    dep = deployment()
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    smaller = deployment(role(replicas=1))
    writes = plan_writes(smaller, plans_of(smaller), existing, StoreView())
    assert writes.create == []
    assert sorted({p["metadata"]["labels"][keys.POD_ORDINAL] for p in writes.delete}) == ["1", "2"]
    assert len(writes.delete) == 16


def test_a_changed_render_replaces_only_that_roles_groups_and_waits_for_the_old_pods() -> None:
    dep = deployment(role(replicas=2, size=2), role(name="prefill", replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    changed = deployment(
        role(replicas=2, size=2, topology={"requiredLevel": keys.HOSTNAME}),
        role(name="prefill", replicas=1, size=2),
    )
    writes = plan_writes(changed, plans_of(changed), existing, StoreView())
    assert {p["metadata"]["labels"][keys.MODEL_DEPLOYMENT_ROLE] for p in writes.delete} == {"decode"}
    assert len(writes.delete) == 4
    assert writes.create == []  # the new groups come once the old Pods are gone
    remaining = [p for p in existing if p["metadata"]["labels"][keys.MODEL_DEPLOYMENT_ROLE] == "prefill"]
    after = plan_writes(changed, plans_of(changed), remaining, StoreView())
    assert len(after.create) == 4 and after.delete == []
    old_groups = {group_label(p) for p in existing}
    assert not old_groups & {group_label(p) for p in after.create}


def test_terminating_pods_are_neither_deleted_again_nor_recreated() -> None:
    dep = deployment(role(replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    existing[0]["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    writes = plan_writes(dep, plans_of(dep), existing, StoreView())
    assert writes.create == [] and writes.delete == []
    smaller = deployment(role(replicas=1, size=2, instanceType="missing"))
    assert plan_writes(smaller, plans_of(smaller), existing, StoreView()).delete == []


def test_a_role_that_cannot_render_keeps_its_pods_and_gets_none() -> None:
    dep = deployment(role(replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    broken = deployment(role(replicas=1, size=2, topology={"requiredLevel": keys.STANDARD_ZONE}))
    plans = plans_of(broken)
    assert isinstance(plans["decode"], pods.RoleProblem)
    writes = plan_writes(broken, plans, existing, StoreView())
    assert writes.create == [] and writes.delete == []


def test_pods_of_a_role_no_longer_in_the_spec_are_deleted() -> None:
    dep = deployment(role(replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    other = deployment(role(name="other", replicas=1, size=2))
    writes = plan_writes(other, plans_of(other), existing, StoreView())
    assert len(writes.delete) == 2 and len(writes.create) == 2


def test_pods_of_another_object_of_the_same_name_are_not_ours() -> None:
    dep = deployment()
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    recreated = deployment()
    recreated["metadata"]["uid"] = "uid-2"
    assert deployments.own_pods(recreated, existing) == []
    assert len(deployments.own_pods(dep, existing)) == 24


# --- status -------------------------------------------------------------------------------------------


def roles_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in body["status"]["roles"]}


def conds_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in body["status"]["conditions"]}


def test_a_pending_replica_carries_kueues_message_verbatim_with_role_and_replica() -> None:
    dep = deployment()
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    groups = sorted({(p["metadata"]["labels"][keys.POD_ORDINAL], group_label(p)) for p in existing})
    wls = {
        groups[0][1]: workload(groups[0][1], cond("QuotaReserved", "True"), cond("Admitted", "True")),
        groups[1][1]: workload(groups[1][1], cond("QuotaReserved", "False", QUOTA_MESSAGE, "Pending")),
        groups[2][1]: workload(
            groups[2][1],
            cond("QuotaReserved", "True"),
            checks=[{"name": keys.JOINT_CHECK, "state": "Pending", "message": "1 of 2 groups reserved"}],
        ),
    }
    body = status_body(dep, plans_of(dep), existing, wls, now=NOW)
    decode = roles_of(body)["decode"]
    assert decode["replicas"] == 3
    assert decode["admittedReplicas"] == 1
    assert decode["readyReplicas"] == 0
    lines = decode["message"].split("\n")
    assert lines[0] == f"role decode replica 1: {QUOTA_MESSAGE}"
    checks = f"admission checks: {keys.JOINT_CHECK} Pending: 1 of 2 groups reserved"
    assert lines[1] == f"role decode replica 2: quota reserved; {checks}"
    assert conds_of(body)["Admitted"]["status"] == "False"
    assert conds_of(body)["Admitted"]["message"] == "1 of 3 replica groups admitted"
    assert conds_of(body)["Rendered"]["status"] == "True"
    assert body["status"]["observedGeneration"] == 1
    assert body["metadata"] == {"name": "llama", "namespace": "team-a"}


def test_all_admitted_and_ready() -> None:
    dep = deployment(role(replicas=2, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    for pod in existing:
        pod["status"] = {"conditions": [cond("Ready", "True")]}
    wls = {g: workload(g, cond("Admitted", "True")) for g in {group_label(p) for p in existing}}
    body = status_body(dep, plans_of(dep), existing, wls, now=NOW)
    decode = roles_of(body)["decode"]
    assert decode == {"name": "decode", "replicas": 2, "admittedReplicas": 2, "readyReplicas": 2}
    assert conds_of(body)["Admitted"]["status"] == "True"


def test_placeable_relays_gate3s_record_of_groups_that_never_fit() -> None:
    dep = deployment()
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    groups = sorted({(p["metadata"]["labels"][keys.POD_ORDINAL], group_label(p)) for p in existing})
    wls = {g: workload(g, cond("QuotaReserved", "True")) for _, g in groups}
    body = status_body(dep, plans_of(dep), existing, wls, now=NOW)
    placeable = conds_of(body)[deployments.PLACEABLE]
    assert (placeable["status"], placeable["reason"]) == ("True", "Fits")

    retrying = Record("role decode: a Pod needs 8 whole nvidia card(s) ... node t4-b); retry 2 of 3", {})
    parked = Record("role decode: ... (largest fit: 6 ... node t4-c); Gate 3 stopped retrying after 3", {})
    wls[groups[0][1]]["metadata"]["annotations"] = {gate3_parking.RECORD: retrying.encode()}
    wls[groups[2][1]]["metadata"]["annotations"] = {gate3_parking.RECORD: parked.encode()}
    body = status_body(dep, plans_of(dep), existing, wls, now=NOW)
    placeable = conds_of(body)[deployments.PLACEABLE]
    assert (placeable["status"], placeable["reason"]) == ("False", "NeverFits")
    assert placeable["message"].split("\n") == [
        f"role decode replica 0: {retrying.message}",
        f"role decode replica 2: {parked.message}",
    ]
    # The record dropped (the group fits, or was resumed): Placeable again.
    wls[groups[0][1]]["metadata"]["annotations"] = {}
    wls[groups[2][1]]["metadata"]["annotations"] = {gate3_parking.RECORD: "unreadable"}
    body = status_body(dep, plans_of(dep), existing, wls, now=NOW)
    assert conds_of(body)[deployments.PLACEABLE]["status"] == "True"


def test_replicas_not_yet_assembled_or_evaluated_say_so() -> None:
    dep = deployment(role(replicas=3, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    partial = [
        p
        for p in existing
        if not (
            p["metadata"]["labels"][keys.POD_ORDINAL] == "2"
            and p["metadata"]["labels"][keys.POD_GROUP_POD_INDEX] == "1"
        )
    ]
    g1 = next(group_label(p) for p in existing if p["metadata"]["labels"][keys.POD_ORDINAL] == "1")
    body = status_body(dep, plans_of(dep), partial, {g1: workload(g1)}, now=NOW)
    decode = roles_of(body)["decode"]
    assert decode["replicas"] == 2
    lines = decode["message"].split("\n")
    assert lines[0].startswith("role decode replica 0: waiting for Kueue to create Workload ")
    assert lines[1] == f"role decode replica 1: Workload {g1} not evaluated by Kueue yet"
    assert lines[2] == "role decode replica 2: 1 of 2 Pods created"


def test_an_unknown_level_is_a_condition_and_a_role_message() -> None:
    dep = deployment(
        role(topology={"requiredLevel": keys.STANDARD_ZONE}), role(name="prefill", replicas=1, size=1)
    )
    body = status_body(dep, plans_of(dep), [], {}, now=NOW)
    rendered = conds_of(body)["Rendered"]
    assert rendered["status"] == "False" and rendered["reason"] == pods.UNKNOWN_LEVEL
    assert "role decode:" in rendered["message"] and keys.STANDARD_ZONE in rendered["message"]
    assert roles_of(body)["decode"]["message"].startswith("role decode: requiredLevel ")
    assert conds_of(body)["Admitted"]["status"] == "False"


def test_a_template_with_reserved_metadata_is_a_rendered_condition_and_keeps_its_pods() -> None:
    dep = deployment(role(replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    smuggled = copy.deepcopy(role(replicas=1, size=2))
    smuggled["template"]["metadata"]["annotations"][keys.PODSET_PREFERRED_TOPOLOGY] = keys.PRIVATE_RACK
    broken = deployment(smuggled)
    plans = plans_of(broken)
    writes = plan_writes(broken, plans, existing, StoreView())
    assert writes.create == [] and writes.delete == []
    body = status_body(broken, plans, existing, {}, now=NOW)
    rendered = conds_of(body)["Rendered"]
    assert rendered["status"] == "False" and rendered["reason"] == pods.RESERVED_TEMPLATE_METADATA
    named = f"role decode: the template sets {keys.PODSET_PREFERRED_TOPOLOGY} (annotation)"
    assert named in rendered["message"]


def test_refused_creates_surface_in_the_role_message() -> None:
    dep = deployment(role(replicas=1, size=1))
    body = status_body(dep, plans_of(dep), [], {}, now=NOW, create_errors={"decode": "denied by webhook"})
    assert "role decode: Pod creation refused: denied by webhook" in roles_of(body)["decode"]["message"]


def test_a_replaced_replica_says_so() -> None:
    dep = deployment(role(replicas=1, size=2))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    changed = deployment(role(replicas=1, size=2, topology=None))
    body = status_body(changed, plans_of(changed), existing, {}, now=NOW)
    assert (
        roles_of(body)["decode"]["message"]
        == "role decode replica 0: replacing the Pods of an earlier render"
    )
    assert roles_of(body)["decode"]["replicas"] == 0


def test_status_is_stable_so_a_converged_apply_is_a_noop() -> None:
    dep = deployment(role(replicas=1, size=1))
    first = status_body(dep, plans_of(dep), [], {}, now=NOW)
    dep["status"] = first["status"]
    again = status_body(dep, plans_of(dep), [], {}, now=NOW + dt.timedelta(hours=1))
    assert again == first


def test_long_messages_are_bounded() -> None:
    dep = deployment(role(replicas=100, size=1))
    existing = as_cached(plan_writes(dep, plans_of(dep), [], StoreView()).create)
    long = "x" * 1000
    wls = {group_label(p): workload(group_label(p), cond("QuotaReserved", "False", long)) for p in existing}
    message = roles_of(status_body(dep, plans_of(dep), existing, wls, now=NOW))["decode"]["message"]
    assert len(message) <= deployments.MESSAGE_MAX
    assert message.endswith("more")
