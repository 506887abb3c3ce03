"""The joint check's pure decisions (reference §5.6): who is judged, the set, the verdict, parking."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.placement import joint
from gpustack_worker.placement.joint import Foreign, OwnerRef, State, Unresolved, Verdict

NS = "team-a"
DEP_UID = "dep-uid-1"
T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
T0_TEXT = "2026-01-01T12:00:00Z"


def deployment(*roles: tuple[str, int, str | None], uid: str = DEP_UID, **meta: Any) -> dict[str, Any]:
    spec_roles = []
    for name, replicas, instance_type in roles:
        role: dict[str, Any] = {"name": name, "replicas": replicas, "template": {}}
        if instance_type is not None:
            role["instanceType"] = instance_type
        spec_roles.append(role)
    return {
        "metadata": {"name": "llm", "namespace": NS, "uid": uid, "generation": 3, **meta},
        "spec": {"roles": spec_roles},
    }


PD = deployment(("prefill", 1, "it-prefill"), ("decode", 1, "it-decode"))


def owner_ref(kind: str, name: str, uid: str, *, controller: bool = True, api: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def dep_ref(uid: str = DEP_UID) -> dict[str, Any]:
    return owner_ref("ModelDeployment", "llm", uid, api="worker.gpustack.ai/v1alpha1")


def pod(name: str, role: str | None = None, *, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    labels = {keys.MODEL_DEPLOYMENT_ROLE: role} if role else {}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": labels,
            "ownerReferences": [dep_ref()] if owners is None else owners,
        }
    }


def workload(
    name: str,
    *,
    reserved: bool = True,
    admitted: bool = False,
    evicted: bool = False,
    finished: bool = False,
    active: bool | None = None,
    entry: str | None = "Pending",
    entry_time: str = T0_TEXT,
    owners: list[dict[str, Any]] | None = None,
    podsets: tuple[str, ...] = ("main",),
    deleting: bool = False,
) -> dict[str, Any]:
    conds = []
    for type_, on in (
        ("QuotaReserved", reserved),
        ("Admitted", admitted),
        ("Evicted", evicted),
        ("Finished", finished),
    ):
        conds.append({"type": type_, "status": "True" if on else "False"})
    gate3 = {"name": "gpustack-node-devices", "state": "Ready", "message": "", "lastTransitionTime": T0_TEXT}
    checks = [gate3]
    if entry is not None:
        checks.append(
            {"name": keys.JOINT_CHECK, "state": entry, "message": "", "lastTransitionTime": entry_time}
        )
    spec: dict[str, Any] = {"podSets": [{"name": p, "count": 1} for p in podsets]}
    if active is not None:
        spec["active"] = active
    meta: dict[str, Any] = {"name": name, "namespace": NS, "ownerReferences": owners or []}
    if deleting:
        meta["deletionTimestamp"] = T0_TEXT
    return {"metadata": meta, "spec": spec, "status": {"conditions": conds, "admissionChecks": checks}}


def group_wl(name: str, role: str, **kw: Any) -> dict[str, Any]:
    """A pod group's Workload, owned by its Pod ``<name>-0`` (role-labelled, controlled by the deployment)."""
    return workload(name, owners=[owner_ref("Pod", f"{name}-0", f"uid-{name}-0", controller=False)], **kw)


def lookups(pods: list[dict[str, Any]], deployments: list[dict[str, Any]]) -> tuple[joint.PodLookup, Any]:
    by_pod = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    by_dep = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in deployments}
    return (lambda ns, name: by_pod.get((ns, name))), by_dep.get


def judge(
    target: dict[str, Any], siblings: list[tuple[dict[str, Any], str]], dep: dict[str, Any] | None
) -> Verdict | None:
    """The verdict for ``target`` the way the controller computes it (owners through the Pod cache)."""
    everything = [*siblings]
    pods = [pod(f"{w['metadata']['name']}-0", role) for w, role in everything]
    pod_lookup, dep_lookup = lookups(pods, [dep] if dep else [])
    owner = joint.owner_of(target, pod_lookup, dep_lookup)
    deployment_obj = dep_lookup(owner.key) if isinstance(owner, OwnerRef) else None
    groups = []
    if deployment_obj is not None:
        for w, _ in everything:
            groups.append((w, joint.role_of(w, deployment_obj, joint.owner_pods(w, pod_lookup))))
    return joint.verdict(target, owner, deployment_obj, groups)


# -- who is judged ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "changes"),
    [
        ("no reservation", {"reserved": False}),
        ("evicted", {"evicted": True}),
        ("finished", {"finished": True}),
        ("admitted", {"admitted": True}),
        ("deactivated", {"active": False}),
        ("being deleted", {"deleting": True}),
        ("no entry of this check yet", {"entry": None}),
    ],
)
def test_no_verdict_outside_a_held_reservation(case: str, changes: dict[str, Any]) -> None:
    target = group_wl("llm-prefill-0", "prefill", **changes)
    other = group_wl("llm-decode-0", "decode")
    assert judge(target, [(target, "prefill"), (other, "decode")], PD) is None, case
    foreign = workload("batch", **changes)
    assert judge(foreign, [], None) is None, case


def test_a_reserved_unadmitted_group_is_judged() -> None:
    assert joint.needs_verdict(workload("w"))
    assert joint.needs_verdict(workload("w", active=True))
    assert joint.needs_verdict(workload("w", entry="Ready"))  # a Ready answer is revisited until admission


# -- Ready at once ------------------------------------------------------------------------------------------


def test_foreign_workload_is_ready() -> None:
    plain = workload("batch", owners=[owner_ref("Job", "batch", "job-uid", api="batch/v1")])
    assert judge(plain, [], None) == Verdict(State.READY, joint.FOREIGN_MESSAGE)
    # Owned by Pods that are not a deployment's (not in the deployments' Pod cache).
    by_pods = workload("pg", owners=[owner_ref("Pod", "stranger", "uid-stranger", controller=False)])
    assert judge(by_pods, [], None) == Verdict(State.READY, joint.FOREIGN_MESSAGE)


def test_pod_controlled_by_something_else_is_foreign() -> None:
    target = workload("pg", owners=[owner_ref("Pod", "pg-0", "uid-pg-0", controller=False)])
    other_owner = pod("pg-0", owners=[owner_ref("ReplicaSet", "rs", "rs-uid", api="apps/v1")])
    pod_lookup, dep_lookup = lookups([other_owner], [PD])
    assert joint.owner_of(target, pod_lookup, dep_lookup) is Foreign


def test_single_group_deployment_is_ready() -> None:
    single = deployment(("server", 1, "it-a"))
    target = group_wl("llm-server-0", "server")
    assert judge(target, [(target, "server")], single) == Verdict(State.READY, joint.SINGLE_MESSAGE)


# -- the set ------------------------------------------------------------------------------------------------


def test_one_of_two_reserved_is_pending_naming_the_waiting_instance_type() -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    decode = group_wl("llm-decode-0", "decode", reserved=False, entry=None)
    answer = judge(prefill, [(prefill, "prefill"), (decode, "decode")], PD)
    assert answer == Verdict(State.PENDING, "1 of 2 groups reserved; waiting: it-decode")


def test_a_group_without_a_workload_yet_counts_as_not_reserved() -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    answer = judge(prefill, [(prefill, "prefill")], PD)
    assert answer == Verdict(State.PENDING, "1 of 2 groups reserved; waiting: it-decode")


def test_two_of_two_reserved_is_ready() -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    decode = group_wl("llm-decode-0", "decode", admitted=True, entry="Ready")
    answer = judge(prefill, [(prefill, "prefill"), (decode, "decode")], PD)
    assert answer == Verdict(State.READY, "2 of 2 groups reserved")


@pytest.mark.parametrize(
    "sibling_change",
    [{"evicted": True}, {"finished": True}, {"active": False}, {"deleting": True}, {"reserved": False}],
)
def test_a_sibling_that_is_losing_its_reservation_does_not_count(sibling_change: dict[str, Any]) -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    decode = group_wl("llm-decode-0", "decode", **sibling_change)
    answer = judge(prefill, [(prefill, "prefill"), (decode, "decode")], PD)
    assert answer is not None and answer.state is State.PENDING
    assert answer.message.startswith("1 of 2 groups reserved")


def test_replicas_count_as_groups_and_roles_are_capped_at_their_replicas() -> None:
    dep = deployment(("prefill", 1, "it-prefill"), ("decode", 3, "it-decode"))
    prefill = group_wl("p0", "prefill")
    decodes = [group_wl(f"d{i}", "decode") for i in range(2)]
    extra_prefill = group_wl("p-old", "prefill", admitted=True)  # an old group being replaced
    groups = [(prefill, "prefill"), (extra_prefill, "prefill"), *((d, "decode") for d in decodes)]
    answer = judge(prefill, groups, dep)
    assert answer == Verdict(State.PENDING, "3 of 4 groups reserved; waiting: it-decode")
    decodes.append(group_wl("d2", "decode"))
    groups.append((decodes[-1], "decode"))
    assert judge(prefill, groups, dep) == Verdict(State.READY, "4 of 4 groups reserved")


def test_waiting_lists_every_short_instance_type_once_and_roles_without_one_by_name() -> None:
    dep = deployment(("a", 1, "it-x"), ("b", 1, "it-x"), ("c", 1, None), ("d", 1, "it-d"))
    d = group_wl("d0", "d")
    answer = judge(d, [(d, "d")], dep)
    assert answer == Verdict(State.PENDING, "1 of 4 groups reserved; waiting: it-x, role c")


def test_role_from_podset_name_or_single_role() -> None:
    two = PD
    by_podset = workload("w", podsets=("decode",))
    assert joint.role_of(by_podset, two) == "decode"
    assert joint.role_of(workload("w", podsets=("hash",)), two) is None
    one = deployment(("server", 2, "it"))
    assert joint.role_of(workload("w", podsets=("hash",)), one) == "server"
    labelled = pod("w-0", "prefill")
    assert joint.role_of(by_podset, two, [labelled]) == "prefill"  # the Pod's label wins


def test_direct_deployment_owner_is_followed() -> None:
    target = workload("w", owners=[dep_ref()], podsets=("prefill",))
    pod_lookup, dep_lookup = lookups([], [PD])
    owner = joint.owner_of(target, pod_lookup, dep_lookup)
    assert owner == OwnerRef(NS, "llm", DEP_UID)


@pytest.mark.parametrize(
    ("deployments", "why"),
    [
        ([], "not in the cache"),
        ([deployment(("a", 2, "it"), uid="other-uid")], "was replaced"),
        ([deployment(("a", 2, "it"), deletionTimestamp=T0_TEXT)], "is being deleted"),
    ],
)
def test_unreadable_owner_gives_no_verdict(deployments: list[dict[str, Any]], why: str) -> None:
    target = group_wl("w", "a")
    pod_lookup, dep_lookup = lookups([pod("w-0", "a")], deployments)
    owner = joint.owner_of(target, pod_lookup, dep_lookup)
    assert isinstance(owner, Unresolved) and why in owner.reason
    assert joint.verdict(target, owner, None, []) is None


def test_a_pod_with_another_uid_is_not_the_owner() -> None:
    target = group_wl("w", "a")
    recreated = pod("w-0", "a")
    recreated["metadata"]["uid"] = "someone-new"
    pod_lookup, dep_lookup = lookups([recreated], [PD])
    assert joint.owner_of(target, pod_lookup, dep_lookup) is Foreign


def test_malformed_deployment_does_not_raise() -> None:
    bad = {"metadata": {"name": "llm", "namespace": NS, "uid": DEP_UID}, "spec": {"roles": "nope"}}
    assert joint.group_count(bad) == 0
    odd = {"metadata": {"name": "llm"}, "spec": {"roles": [{"name": "a", "replicas": "x"}, 7, {"name": "b"}]}}
    assert joint.group_count(odd) == 2


def test_never_retry_or_rejected() -> None:
    assert {s.value for s in State} == {"Ready", "Pending"}
    dep = deployment(("a", 2, "it-a"), ("b", 2, "it-b"))
    seen = set()
    for reserved_a in range(3):
        for reserved_b in range(3):
            groups = [(group_wl(f"a{i}", "a", reserved=i < reserved_a), "a") for i in range(2)]
            groups += [(group_wl(f"b{i}", "b", reserved=i < reserved_b), "b") for i in range(2)]
            for target, _ in groups:
                answer = judge(target, groups, dep)
                if answer is not None:
                    seen.add(answer.state)
    assert seen == {State.READY, State.PENDING}


# -- the applied entry -------------------------------------------------------------------------------------


def test_entry_keeps_its_transition_time_while_the_state_holds() -> None:
    later = T0 + dt.timedelta(minutes=5)
    pending = workload("w", entry="Pending")
    same = joint.entry_for_apply(pending, Verdict(State.PENDING, "1 of 2 groups reserved"), later)
    assert same == {
        "name": keys.JOINT_CHECK,
        "state": "Pending",
        "message": "1 of 2 groups reserved",
        "lastTransitionTime": T0_TEXT,
    }
    flipped = joint.entry_for_apply(pending, Verdict(State.READY, "2 of 2 groups reserved"), later)
    assert flipped["lastTransitionTime"] == "2026-01-01T12:05:00Z"


# -- parking ----------------------------------------------------------------------------------------------


def _set(entry_time: str = T0_TEXT) -> list[tuple[dict[str, Any], str | None]]:
    prefill = group_wl("llm-prefill-0", "prefill", entry_time=entry_time)
    decode = group_wl("llm-decode-0", "decode", reserved=False, entry=None)
    return [(prefill, "prefill"), (decode, "decode")]


def test_not_parked_before_thirty_minutes() -> None:
    now = T0 + joint.PARK_AFTER - dt.timedelta(seconds=1)
    cond = joint.deployment_condition(PD, _set(), now)
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("QuotaReserved", "False", "Waiting")
    assert cond.message == "1 of 2 groups reserved; waiting: it-decode"
    assert cond.observed_generation == 3
    assert joint.park_deadline(PD, _set()) == T0 + joint.PARK_AFTER


def test_parked_after_thirty_minutes() -> None:
    cond = joint.deployment_condition(PD, _set(), T0 + joint.PARK_AFTER)
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("QuotaReserved", "False", "Parked")
    assert cond.message == (
        "1 of 2 groups reserved; waiting: it-decode; "
        "parked: the set has not assembled since 2026-01-01T12:00:00Z"
    )


def test_the_oldest_pending_entry_starts_the_clock() -> None:
    dep = deployment(("a", 1, "it-a"), ("b", 1, "it-b"), ("c", 1, "it-c"))
    older = group_wl("a0", "a", entry_time="2026-01-01T11:50:00Z")
    newer = group_wl("b0", "b", entry_time=T0_TEXT)
    ready_one = group_wl("x", "b", entry="Ready", entry_time="2026-01-01T10:00:00Z")
    groups: list[tuple[dict[str, Any], str | None]] = [(older, "a"), (newer, "b"), (ready_one, "b")]
    assert joint.park_deadline(dep, groups) == dt.datetime(2026, 1, 1, 12, 20, tzinfo=dt.UTC)


def test_an_assembled_set_is_reserved_and_never_parks() -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    decode = group_wl("llm-decode-0", "decode")
    groups: list[tuple[dict[str, Any], str | None]] = [(prefill, "prefill"), (decode, "decode")]
    much_later = T0 + dt.timedelta(days=1)
    cond = joint.deployment_condition(PD, groups, much_later)
    assert cond is not None and (cond.status, cond.reason) == ("True", "Reserved")
    assert cond.message == "2 of 2 groups reserved"
    assert joint.park_deadline(PD, groups) is None


def test_nobody_reserved_waits_without_a_clock() -> None:
    groups: list[tuple[dict[str, Any], str | None]] = [
        (group_wl("p", "prefill", reserved=False, entry=None), "prefill")
    ]
    cond = joint.deployment_condition(PD, groups, T0 + dt.timedelta(days=1))
    assert cond is not None and cond.reason == "Waiting"
    assert cond.message == "0 of 2 groups reserved; waiting: it-decode, it-prefill"
    assert joint.park_deadline(PD, groups) is None


def test_single_group_deployment_has_no_condition() -> None:
    single = deployment(("server", 1, "it"))
    assert joint.deployment_condition(single, [(group_wl("s", "server"), "server")], T0) is None


def test_unparseable_transition_time_never_parks() -> None:
    assert joint.park_deadline(PD, _set(entry_time="yesterday")) is None
