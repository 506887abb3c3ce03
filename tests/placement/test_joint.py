"""The joint check's pure decisions (reference §5.6): who is judged, the set, the verdict, parking."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.placement import joint
from gpustack_worker.placement.joint import Foreign, OwnerRef, State, Unresolved, Verdict
from tests.kit.properties import examples

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


# -- parking, release and retry ----------------------------------------------------------------------------

Groups = list[tuple[dict[str, Any], str | None]]


def _set(entry_time: str = T0_TEXT, *, active: bool | None = None) -> Groups:
    prefill = group_wl("llm-prefill-0", "prefill", entry_time=entry_time, active=active)
    decode = group_wl("llm-decode-0", "decode", reserved=False, entry=None, active=active)
    return [(prefill, "prefill"), (decode, "decode")]


def _released() -> Groups:
    """The set once parked: both Workloads deactivated, Kueue has cleared the reservation."""
    prefill = group_wl("llm-prefill-0", "prefill", reserved=False, evicted=True, active=False)
    decode = group_wl("llm-decode-0", "decode", reserved=False, evicted=True, entry=None, active=False)
    return [(prefill, "prefill"), (decode, "decode")]


def _with(
    dep: dict[str, Any],
    *,
    hold: dict[str, Any] | None = None,
    retry: str | None = None,
    generation: int | None = None,
) -> dict[str, Any]:
    out = {**dep, "metadata": dict(dep["metadata"])}
    if hold is not None:
        out["status"] = {"hold": hold}
    if retry is not None:
        out["metadata"]["annotations"] = {keys.JOINT_RETRY: retry}
    if generation is not None:
        out["metadata"]["generation"] = generation
    return out


PARKED_HOLD = {"parkedAt": "2026-01-01T12:30:00Z", "parkedGeneration": 3}
RETRY_HINT = f"kubectl annotate modeldeployment llm -n {NS} --overwrite {keys.JOINT_RETRY}=<any new value>"


def test_not_parked_before_thirty_minutes() -> None:
    now = T0 + joint.PARK_AFTER - dt.timedelta(seconds=1)
    decision = joint.decide(PD, _set(), now)
    cond = decision.condition
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("QuotaReserved", "False", "Waiting")
    assert cond.message == "1 of 2 groups reserved; waiting: it-decode"
    assert cond.observed_generation == 3
    assert decision.deadline == T0 + joint.PARK_AFTER
    assert (decision.action, decision.active, decision.hold) == (joint.Action.NONE, None, joint.Hold())


def test_parked_after_thirty_minutes_releases_every_workload_of_the_set() -> None:
    now = T0 + joint.PARK_AFTER
    decision = joint.decide(PD, _set(), now)
    cond = decision.condition
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("QuotaReserved", "False", "Parked")
    assert cond.message == (
        "1 of 2 groups reserved; waiting: it-decode; parked at 2026-01-01T12:30:00Z: the set did not "
        "assemble within 30 "
        "minutes, so its Workloads are deactivated and the quota they held is released; to retry, change "
        f"the spec or run: {RETRY_HINT}"
    )
    assert decision.action is joint.Action.PARK and decision.active is False and decision.deadline is None
    assert decision.hold == joint.Hold(parked_at=now, parked_generation=3)
    assert decision.hold.to_status() == PARKED_HOLD
    # The reserved group and the unreserved one alike (it would otherwise reserve later on its own).
    assert [w["metadata"]["name"] for w in joint.to_switch([w for w, _ in _set()], False)] == [
        "llm-prefill-0",
        "llm-decode-0",
    ]


def test_a_parked_set_stays_parked_and_released_after_kueue_frees_the_quota() -> None:
    parked = _with(PD, hold=PARKED_HOLD)
    decision = joint.decide(parked, _released(), T0 + dt.timedelta(days=1))
    assert decision.action is joint.Action.STAY_PARKED and decision.active is False
    assert decision.condition is not None and decision.condition.reason == "Parked"
    assert decision.condition.message.startswith(
        "0 of 2 groups reserved; waiting: it-decode, it-prefill; parked at 2026-01-01T12:30:00Z"
    )
    assert decision.hold == joint.read_hold(parked)  # our own status write changes nothing
    assert joint.to_switch([w for w, _ in _released()], False) == []  # nothing left to write
    # A Workload that appeared since (a re-created Pod's) is deactivated too.
    fresh = group_wl("llm-decode-1", "decode", reserved=False, entry=None)
    assert joint.to_switch([*(w for w, _ in _released()), fresh], False) == [fresh]


@pytest.mark.parametrize(
    ("case", "changes"),
    [("spec changed", {"generation": 4}), ("admin annotation", {"retry": "1"})],
)
def test_a_parked_set_is_retried_on_a_spec_change_or_an_admin_request(
    case: str, changes: dict[str, Any]
) -> None:
    later = T0 + dt.timedelta(hours=2)
    decision = joint.decide(_with(PD, hold=PARKED_HOLD, **changes), _released(), later)
    assert decision.action is joint.Action.RETRY and decision.active is True, case
    assert decision.condition is not None
    assert (decision.condition.reason, decision.condition.message) == (
        "Waiting",
        "0 of 2 groups reserved; waiting: it-decode, it-prefill; retried at 2026-01-01T14:00:00Z",
    )
    assert decision.hold == joint.Hold(since=later, retry=changes.get("retry"))
    assert [w["metadata"]["name"] for w in joint.to_switch([w for w, _ in _released()], True)] == [
        "llm-prefill-0",
        "llm-decode-0",
    ]


def test_the_retry_restarts_the_clock_then_the_set_parks_again_or_assembles() -> None:
    retried_at = T0 + dt.timedelta(hours=2)
    dep = _with(PD, hold={"since": "2026-01-01T14:00:00Z", "retry": "1"}, retry="1")
    # Reactivated, prefill reserves again; its entry kept the old transition time (still Pending).
    waiting = joint.decide(dep, _set(), retried_at + dt.timedelta(minutes=5))
    assert waiting.action is joint.Action.NONE and waiting.deadline == retried_at + joint.PARK_AFTER
    assert waiting.condition is not None and waiting.condition.message == (
        "1 of 2 groups reserved; waiting: it-decode; retried at 2026-01-01T14:00:00Z"
    )
    again = joint.decide(dep, _set(), retried_at + joint.PARK_AFTER)
    assert again.action is joint.Action.PARK
    assert again.hold == joint.Hold(
        since=retried_at, parked_at=retried_at + joint.PARK_AFTER, parked_generation=3, retry="1"
    )
    both = [(group_wl("llm-prefill-0", "prefill"), "prefill"), (group_wl("llm-decode-0", "decode"), "decode")]
    assembled = joint.decide(dep, both, retried_at + dt.timedelta(days=1))
    assert assembled.condition is not None and assembled.condition.reason == "Reserved"
    assert assembled.action is joint.Action.NONE and assembled.deadline is None


def test_the_same_annotation_value_does_not_retry_twice() -> None:
    # The value was consumed when the set last parked (or while it waited): only a new one retries.
    dep = _with(PD, hold={**PARKED_HOLD, "retry": "1"}, retry="1")
    assert joint.decide(dep, _released(), T0 + dt.timedelta(days=1)).action is joint.Action.STAY_PARKED
    # A value set while the set waits is recorded, so it does not un-park a later parking.
    waiting = joint.decide(_with(PD, retry="early"), _set(), T0)
    assert waiting.action is joint.Action.NONE and waiting.hold == joint.Hold(retry="early")
    parks = joint.decide(_with(PD, retry="early"), _set(), T0 + joint.PARK_AFTER)
    assert parks.action is joint.Action.PARK and parks.hold.retry == "early"


def test_a_long_annotation_value_is_kept_as_its_digest() -> None:
    token = joint.retry_token(_with(PD, retry="x" * 300))
    assert token is not None and token.startswith("sha256:") and len(token) <= 253
    assert joint.retry_token(_with(PD, retry="x" * 301)) != token
    assert joint.retry_token(PD) is None


def test_the_oldest_pending_entry_starts_the_clock() -> None:
    dep = deployment(("a", 1, "it-a"), ("b", 1, "it-b"), ("c", 1, "it-c"))
    older = group_wl("a0", "a", entry_time="2026-01-01T11:50:00Z")
    newer = group_wl("b0", "b", entry_time=T0_TEXT)
    ready_one = group_wl("x", "b", entry="Ready", entry_time="2026-01-01T10:00:00Z")
    groups: Groups = [(older, "a"), (newer, "b"), (ready_one, "b")]
    assert joint.decide(dep, groups, T0).deadline == dt.datetime(2026, 1, 1, 12, 20, tzinfo=dt.UTC)


def test_an_assembled_set_is_reserved_and_never_parks() -> None:
    prefill = group_wl("llm-prefill-0", "prefill")
    decode = group_wl("llm-decode-0", "decode")
    groups: Groups = [(prefill, "prefill"), (decode, "decode")]
    decision = joint.decide(PD, groups, T0 + dt.timedelta(days=1))
    cond = decision.condition
    assert cond is not None and (cond.status, cond.reason) == ("True", "Reserved")
    assert cond.message == "2 of 2 groups reserved"
    assert decision.deadline is None and decision.action is joint.Action.NONE
    # Groups an admin reactivated by hand that all reserved end a parking: the set has assembled.
    unparked = joint.decide(_with(PD, hold=PARKED_HOLD), groups, T0 + dt.timedelta(days=1))
    assert unparked.action is joint.Action.NONE and unparked.hold == joint.Hold()


def test_nobody_reserved_waits_without_a_clock() -> None:
    groups: Groups = [(group_wl("p", "prefill", reserved=False, entry=None), "prefill")]
    decision = joint.decide(PD, groups, T0 + dt.timedelta(days=1))
    assert decision.condition is not None and decision.condition.reason == "Waiting"
    assert decision.condition.message == "0 of 2 groups reserved; waiting: it-decode, it-prefill"
    assert decision.deadline is None and decision.action is joint.Action.NONE


def test_single_group_deployment_has_no_condition_and_no_hold() -> None:
    single = deployment(("server", 1, "it"))
    decision = joint.decide(single, [(group_wl("s", "server"), "server")], T0 + dt.timedelta(days=1))
    assert decision == joint.Decision(None, joint.Hold(), joint.Action.NONE, None)


def test_unparseable_transition_time_never_parks() -> None:
    decision = joint.decide(PD, _set(entry_time="yesterday"), T0 + dt.timedelta(days=1))
    assert decision.action is joint.Action.NONE and decision.deadline is None


def test_admitted_finished_and_deleted_workloads_are_not_switched() -> None:
    serving = group_wl("a", "prefill", admitted=True)
    done = group_wl("b", "prefill", finished=True)
    going = group_wl("c", "prefill", deleting=True)
    assert joint.to_switch([serving, done, going], False) == []
    assert joint.to_switch([group_wl("d", "prefill", active=False, admitted=True)], True) == []


# -- the parking lifecycle as a property --------------------------------------------------------------------


@st.composite
def _histories(draw: st.DrawFn) -> list[tuple[str, int]]:
    """Event sequences: minutes passing, spec changes, admin retries, the decode group reserving."""
    steps = st.one_of(
        st.tuples(st.just("wait"), st.integers(1, 45)),
        st.tuples(st.just("spec"), st.just(0)),
        st.tuples(st.just("annotate"), st.just(0)),
        st.tuples(st.just("fits"), st.just(0)),
    )
    return draw(st.lists(steps, max_size=12))


@settings(max_examples=examples(300))
@given(_histories())
def test_parking_lifecycle_property(history: list[tuple[str, int]]) -> None:
    """Simulate the controller and Kueue over random histories: a set is parked iff it waited 30 minutes
    since its last start without assembling; a parked set holds no quota; only a spec change or a new
    annotation value reactivates it; our own status write never does."""
    now = T0
    dep = _with(PD)
    generation, annotation, decode_fits = 3, 0, False
    active = True
    started = T0  # when the current wait started (first reservation or the last retry)
    for kind, minutes in [*history, ("wait", 0)]:
        if kind == "wait":
            now += dt.timedelta(minutes=minutes)
        elif kind == "spec":
            generation += 1
        elif kind == "annotate":
            annotation += 1
        else:
            decode_fits = True
        dep = _with(dep, generation=generation, retry=str(annotation) if annotation else None)
        for _ in range(3):  # reconcile, Kueue reacts, reconcile again (over our own write too)
            # Kueue: an active Workload reserves (prefill always fits, decode once it does); inactive ones
            # hold nothing. The prefill entry keeps its first transition time (Pending → evicted → Pending).
            prefill = group_wl("llm-prefill-0", "prefill", reserved=active, active=active, evicted=not active)
            decode = group_wl(
                "llm-decode-0", "decode", reserved=active and decode_fits, active=active, entry=None
            )
            groups: Groups = [(prefill, "prefill"), (decode, "decode")]
            decision = joint.decide(dep, groups, now)
            dep = {**dep, "status": {"hold": decision.hold.to_status()}}
            if decision.action is joint.Action.RETRY:
                started = now
            if decision.active is not None:
                active = decision.active
        assembled = active and decode_fits
        hold = joint.read_hold(dep)
        assert decision.action is not joint.Action.RETRY  # a retry happens once per request
        if hold.parked:
            assert not active and decision.condition is not None and decision.condition.reason == "Parked"
            assert now - started >= joint.PARK_AFTER
        elif assembled:
            assert decision.condition is not None and decision.condition.reason == "Reserved"
        else:
            assert active and decision.condition is not None and decision.condition.reason == "Waiting"
            assert now - started < joint.PARK_AFTER
            assert decision.deadline == started + joint.PARK_AFTER
