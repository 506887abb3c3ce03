"""The live-hierarchy change of a ClusterQueue (reference §6.8): the HoldAndDrain migration, table-tested.

The T4 pool of the four-node mixed cluster moves from the hostname-only profile to zone → hostname: the
two old T4 flavors are dropped, two new ones (same hardware, new profile) replace them. Kueue's side — the
queue's generation, its ``Active`` condition, ``reservingWorkloads`` / ``admittedWorkloads`` and the
per-flavor ``flavorsReservation`` / ``flavorsUsage`` totals — is written by the tests the way Kueue v0.19
writes it (every flavor of the resource groups listed, zero totals included).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import flavors, instancetypes, pools, queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from gpustack_worker.runtime.client import Client
from tests.chain.builders import HOSTNAME_PROFILE, mixed_cluster, node
from tests.kit import kueue
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Callable

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
ZONE_PROFILE = keys.topology_profile([keys.STANDARD_ZONE, keys.HOSTNAME])
TOPOLOGIES = frozenset({keys.topology_name(HOSTNAME_PROFILE), keys.topology_name(ZONE_PROFILE)})
OLD_T4 = [
    f"gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d-{HOSTNAME_PROFILE}",
    f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{HOSTNAME_PROFILE}",
]
NEW_T4 = [name.replace(HOSTNAME_PROFILE, ZONE_PROFILE) for name in OLD_T4]
PHASE = keys.MIGRATION_PHASE
SAVED = keys.MIGRATION_STOP_POLICY
TAS = keys.TAS_QUEUE


# --- the world ----------------------------------------------------------------------------------------
@dataclass
class World:
    nodes: list[NodeHardware]
    flavors: list[dict[str, Any]]
    types: dict[str, dict[str, Any]]


def _world(t4_profile: str = HOSTNAME_PROFILE, *, drop_t4: bool = False) -> World:
    """The mixed cluster with the T4 nodes on ``t4_profile`` (or gone, with ``drop_t4``)."""
    objs = mixed_cluster()
    for obj in objs:
        if obj["metadata"]["name"].startswith("t4-"):
            obj["metadata"]["labels"][keys.TOPOLOGY_PROFILE] = t4_profile
    if drop_t4:
        objs = [o for o in objs if not o["metadata"]["name"].startswith("t4-")]
    hw = [h for h in (node_hardware(o) for o in objs) if h is not None]
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    bodies = [flavors.flavor_body(p, mixed_on_node=True, aware=False) for p in plans]
    types = {}
    for plan in plans:
        it = pools.derived_instance_type(plan, aware=False)
        types[it["metadata"]["name"]] = it
    return World(hw, bodies, types)


OLD = _world()
NEW = _world(ZONE_PROFILE)
GONE = _world(drop_t4=True)
T4_TYPE = OLD.types[T4]


def _t4(*, inactive: bool = False) -> dict[str, Any]:
    return {**T4_TYPE, "spec": {**T4_TYPE["spec"], "inactive": inactive}}


def _finalizing(world: World, names: list[str]) -> list[dict[str, Any]]:
    """``world``'s flavors plus the old flavors ``names``, being deleted (Kueue keeps them while used)."""
    old = [
        {**f, "metadata": {**f["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"}}
        for f in OLD.flavors
        if f["metadata"]["name"] in names
    ]
    return [*world.flavors, *old]


def _decide(
    queue: dict[str, Any] | None, world: World = NEW, it: dict[str, Any] | None = None, **kw: Any
) -> queues.QueueDecision:
    base: dict[str, Any] = {
        "instance_type": it if it is not None else _t4(),
        "queue": queue,
        "flavors": _finalizing(world, OLD_T4) if world is NEW else world.flavors,
        "nodes": world.nodes,
        "topologies": TOPOLOGIES,
        "active_checks": frozenset(),
    }
    base.update(kw)
    return queues.decide(queues.QueueInputs(**base))


# --- a minimal API server + Kueue for one queue ---------------------------------------------------------
@dataclass
class Server:
    """The stored ClusterQueue: our applies (the chain owns every field it writes; an omitted stop policy
    stays whoever's it is) bump the generation on a spec change; ``kueue`` writes Kueue's status."""

    queue: dict[str, Any] | None = None
    writes: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, decision: queues.QueueDecision) -> dict[str, Any]:
        assert decision.body is not None and not decision.drain_only
        body = copy.deepcopy(decision.body)
        if self.queue is None:
            body["metadata"]["generation"] = 1
            body["metadata"]["uid"] = "uid-1"
            self.queue = body
            self.writes.append(body)
            return body
        old = self.queue
        spec = dict(body["spec"])
        if "stopPolicy" not in spec and "stopPolicy" in old["spec"]:
            spec["stopPolicy"] = old["spec"]["stopPolicy"]
        generation = old["metadata"]["generation"] + (spec != old["spec"])
        meta = {**body["metadata"], "generation": generation, "uid": old["metadata"]["uid"]}
        new = {**body, "metadata": meta, "spec": spec, "status": old.get("status", {})}
        if new != old:
            self.writes.append(new)
        self.queue = new
        return new

    def kueue(self, *, reserving: int = 0, busy: frozenset[str] = frozenset()) -> dict[str, Any]:
        assert self.queue is not None
        self.queue = _kueue(self.queue, reserving=reserving, busy=busy)
        return self.queue


def _kueue(
    queue: dict[str, Any],
    *,
    reserving: int = 0,
    admitted: int | None = None,
    busy: frozenset[str] = frozenset(),
    usage_only: frozenset[str] = frozenset(),
    unreported: frozenset[str] = frozenset(),
    observed: int | None = None,
    active: bool | None = None,
) -> dict[str, Any]:
    """``queue`` with the status Kueue writes: every flavor of its groups listed (``busy`` ones with a
    reservation and usage, ``usage_only`` ones with usage only, ``unreported`` ones left out), for the
    generation ``observed`` (default: the current one); ``Active`` follows the stop policy."""
    generation = queue["metadata"]["generation"]
    stopped = queue["spec"].get("stopPolicy", "None") != "None"
    is_active = (not stopped) if active is None else active
    resource = "credits.gpustack.ai/nvidia"

    def listed(used: frozenset[str]) -> list[dict[str, Any]]:
        return [
            {
                "name": f["name"],
                "resources": [{"name": resource, "total": "1600k" if f["name"] in used else "0"}],
            }
            for g in queue["spec"].get("resourceGroups") or ()
            for f in g["flavors"]
            if f["name"] not in unreported
        ]

    return {
        **queue,
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True" if is_active else "False",
                    "reason": "Ready" if is_active else "Stopped",
                    "observedGeneration": generation if observed is None else observed,
                }
            ],
            "reservingWorkloads": reserving,
            "admittedWorkloads": reserving if admitted is None else admitted,
            "flavorsReservation": listed(busy),
            "flavorsUsage": listed(busy | usage_only),
        },
    }


def _names(decision: queues.QueueDecision) -> list[str]:
    assert decision.body is not None
    return [f["name"] for g in decision.body["spec"]["resourceGroups"] for f in g["flavors"]]


def _groups(decision: queues.QueueDecision) -> list[dict[str, Any]]:
    assert decision.body is not None
    groups: list[dict[str, Any]] = decision.body["spec"]["resourceGroups"]
    return groups


def _annotations(decision: queues.QueueDecision) -> dict[str, str]:
    assert decision.body is not None
    return dict(decision.body["metadata"].get("annotations") or {})


def _policy(decision: queues.QueueDecision) -> str | None:
    assert decision.body is not None
    policy: str | None = decision.body["spec"].get("stopPolicy")
    return policy


def _reason(decision: queues.QueueDecision) -> str | None:
    return decision.condition.reason if decision.condition is not None else None


def _running_old_queue(**status: Any) -> dict[str, Any]:
    """The T4 queue on the old plan, admitting (stop policy None), with Kueue's status."""
    server = Server()
    server.apply(_decide(None, OLD))
    assert server.queue is not None
    return _kueue(server.queue, **status)


# --- the plan dropping flavors: in place or migration ---------------------------------------------------
def test_both_worlds_plan_two_t4_flavors() -> None:
    assert _names(_decide(None, OLD)) == OLD_T4
    assert _names(_decide(None)) == NEW_T4


def test_idle_dropped_flavors_are_replaced_in_place() -> None:
    decision = _decide(_running_old_queue())
    assert _names(decision) == NEW_T4
    assert _policy(decision) == "None"
    assert _annotations(decision) == {TAS: "true"}
    assert decision.condition == queues.Condition("True", "Ready", "2 topology-aware flavor(s)")


@pytest.mark.parametrize(
    "status",
    [
        {"reserving": 1, "busy": frozenset(OLD_T4[1:])},
        {"usage_only": frozenset(OLD_T4[:1])},
        {"unreported": frozenset(OLD_T4[:1])},
    ],
    ids=["reserved", "usage-only", "unreported"],
)
def test_a_dropped_flavor_that_may_be_in_use_starts_the_migration(status: dict[str, Any]) -> None:
    queue = _running_old_queue(**status)
    decision = _decide(queue)
    assert _names(decision) == OLD_T4  # the current groups are kept
    assert _policy(decision) == "HoldAndDrain"
    assert _annotations(decision) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    assert _reason(decision) == "Migrating"
    assert decision.requeue_after == queues.DRAIN_POLL_S
    assert decision.condition is not None and decision.condition.status == "False"
    message = decision.condition.message
    assert all(name in message for name in OLD_T4)
    assert f"{status.get('reserving', 0)} workload(s) reserve quota" in message


def test_a_stale_status_starts_nothing_it_waits_for_the_current_one() -> None:
    """Issue 16 defect 2: a status one generation old is no answer — neither "idle" nor "in use". The queue
    stays as it is (no hold), reports AwaitingQueueStatus and requeues."""
    queue = _running_old_queue(reserving=1, busy=frozenset(OLD_T4), observed=0)
    decision = _decide(queue)
    assert _names(decision) == OLD_T4 and _policy(decision) == "None"
    assert _annotations(decision) == {TAS: "true"}
    assert decision.condition == queues.Condition(
        "Unknown", "AwaitingQueueStatus", "waiting for Kueue to report the queue's current generation"
    )
    assert decision.requeue_after == queues.DRAIN_POLL_S


def test_the_saved_policy_is_the_stored_one() -> None:
    unset = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    del unset["spec"]["stopPolicy"]
    assert _annotations(_decide(unset))[SAVED] == "unset"
    held = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    held["spec"]["stopPolicy"] = "Hold"
    decision = _decide(held, it=_t4(inactive=True))
    assert _annotations(decision)[SAVED] == "Hold" and _policy(decision) == "HoldAndDrain"


def test_added_flavors_and_quota_changes_go_in_place_even_on_a_stale_busy_status() -> None:
    # Added: the old plan plus the new flavors (nodes split between profiles is a different plan, so the
    # queue is on the new plan minus one flavor and gets it added).
    queue = _running_old_queue()
    queue["spec"]["resourceGroups"][0]["flavors"] = [
        {**f, "name": NEW_T4[0]} if i == 0 else {**f, "name": NEW_T4[1]}
        for i, f in enumerate(queue["spec"]["resourceGroups"][0]["flavors"])
    ][:1]
    busy = _kueue(queue, reserving=3, busy=frozenset(NEW_T4[:1]), observed=0)
    added = _decide(busy)
    assert _names(added) == NEW_T4 and _policy(added) == "None" and _reason(added) == "Ready"
    # Quota only: the same flavors, another nominal quota.
    stale = _running_old_queue(reserving=3, busy=frozenset(OLD_T4), observed=0)
    stale["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]["nominalQuota"] = "3200k"
    quota = _decide(stale, OLD)
    assert _names(quota) == OLD_T4 and _policy(quota) == "None"
    assert _groups(quota) == _groups(_decide(None, OLD))


# --- draining → switched → restored -------------------------------------------------------------------
def _draining(saved: str = "None", groups: list[str] | None = None) -> dict[str, Any]:
    queue = _running_old_queue()
    queue["spec"]["stopPolicy"] = "HoldAndDrain"
    queue["metadata"]["annotations"] = {SAVED: saved, PHASE: "draining", TAS: "true"}
    queue["metadata"]["generation"] = 2
    return queue


def _switched(saved: str = "None") -> dict[str, Any]:
    queue = _draining(saved)
    queue["spec"]["resourceGroups"] = _groups(_decide(None))
    queue["metadata"]["annotations"] = {SAVED: saved, PHASE: "switched", TAS: "true"}
    queue["metadata"]["generation"] = 3
    return queue


def test_draining_stays_while_kueue_reports_reservations() -> None:
    decision = _decide(_kueue(_draining(), reserving=2, busy=frozenset(OLD_T4)))
    assert _names(decision) == OLD_T4 and _policy(decision) == "HoldAndDrain"
    assert _annotations(decision)[PHASE] == "draining"
    assert decision.condition is not None and decision.condition.reason == "Migrating"
    assert "2 workload(s) reserve quota" in decision.condition.message


def test_draining_waits_for_kueue_to_report_the_queue_stopped() -> None:
    # Zero reserving, but Kueue's Active condition at this generation does not say Stopped yet.
    decision = _decide(_kueue(_draining(), active=True))
    assert _names(decision) == OLD_T4 and _annotations(decision)[PHASE] == "draining"
    assert decision.condition is not None and "stopped" in decision.condition.message


def test_draining_at_zero_switches_the_complete_plan() -> None:
    decision = _decide(_kueue(_draining()))
    assert _names(decision) == NEW_T4
    assert _policy(decision) == "HoldAndDrain"
    assert _annotations(decision) == {SAVED: "None", PHASE: "switched", TAS: "true"}
    assert _reason(decision) == "Migrating"


def test_switched_waits_for_the_new_generation_then_restores() -> None:
    stale = _decide(_kueue(_switched(), observed=2))
    assert _names(stale) == NEW_T4 and _policy(stale) == "HoldAndDrain"
    assert _annotations(stale)[PHASE] == "switched" and _reason(stale) == "AwaitingQueueStatus"
    restored = _decide(_kueue(_switched()))
    assert _names(restored) == NEW_T4
    assert _policy(restored) == "None"
    assert _annotations(restored) == {TAS: "true"}
    assert _reason(restored) == "Ready"
    assert restored.notes == ["restored the stop policy saved by the migration (None)"]


@pytest.mark.parametrize(
    ("saved", "inactive", "restored"),
    [
        ("None", False, "None"),
        ("unset", False, "None"),
        ("Hold", True, "Hold"),
        ("HoldAndDrain", True, "Hold"),
    ],
    ids=["None", "unset", "Hold-via-inactive", "HoldAndDrain-via-inactive"],
)
def test_restore_gives_back_the_previous_policy(saved: str, inactive: bool, restored: str) -> None:
    decision = _decide(_kueue(_switched(saved)), it=_t4(inactive=inactive))
    assert _policy(decision) == restored
    assert _annotations(decision) == {TAS: "true"}


def test_a_reverted_change_ends_the_drain_in_place() -> None:
    """While draining, the old flavors come back (the source change was undone): nothing is dropped any
    more, so the migration ends with the plan in place and the policy restored."""
    decision = _decide(_kueue(_draining(), reserving=2, busy=frozenset(OLD_T4)), OLD)
    assert _names(decision) == OLD_T4 and _policy(decision) == "None"
    assert _annotations(decision) == {TAS: "true"}


def test_a_refusal_during_the_migration_keeps_the_hold() -> None:
    only_old = frozenset({keys.topology_name(HOSTNAME_PROFILE)})
    # Kueue still reports a reservation: the finalizing old flavors stay, the queue stays draining.
    busy = _decide(_kueue(_draining(), reserving=1, busy=frozenset(OLD_T4)), topologies=only_old)
    assert _reason(busy) == "MissingTopology"
    assert _names(busy) == OLD_T4 and _policy(busy) == "HoldAndDrain"
    assert _annotations(busy) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    # Stopped with none at the current generation: emptied through the drain, still held.
    decision = _decide(_kueue(_draining()), topologies=only_old)
    assert _reason(decision) == "MissingTopology"
    assert _names(decision) == [] and _policy(decision) == "HoldAndDrain"
    assert _annotations(decision) == {SAVED: "None", PHASE: "switched"}


def test_a_whole_migration_against_a_fake_kueue() -> None:
    """Old plan admitting → HoldAndDrain → Kueue evicts → switched → restored; one name, one UID."""
    server = Server()
    server.apply(_decide(None, OLD))
    server.kueue(reserving=1, busy=frozenset(OLD_T4[1:]))
    steps: list[tuple[str | None, str | None, str | None]] = []
    decision = _decide(server.queue)
    reports: tuple[dict[str, Any], ...] = (
        {"reserving": 1, "busy": frozenset(OLD_T4[1:])},  # Kueue sees the hold, still evicting
        {},  # evicted
        {},  # sees the switched plan
        {},
    )
    for kueue_report in reports:
        queue = server.apply(decision)
        steps.append((_annotations(decision).get(PHASE), _policy(decision), _reason(decision)))
        # During the migration, before Kueue's status for the new generation, the decision only waits.
        if PHASE in _annotations(decision) and queues._reported(queue) is None:
            waiting = _decide(queue)
            assert _reason(waiting) == "AwaitingQueueStatus"
            assert server.apply(waiting) == queue  # no change while waiting
        server.kueue(**kueue_report)
        decision = _decide(server.queue)
    server.apply(decision)
    assert steps == [
        ("draining", "HoldAndDrain", "Migrating"),
        ("draining", "HoldAndDrain", "Migrating"),
        ("switched", "HoldAndDrain", "Migrating"),
        (None, "None", "Ready"),
    ]
    assert server.queue is not None
    assert server.queue["metadata"]["uid"] == "uid-1" and server.queue["metadata"]["name"] == T4
    assert [f["name"] for f in server.queue["spec"]["resourceGroups"][0]["flavors"]] == NEW_T4
    assert server.queue["metadata"]["annotations"] == {TAS: "true"}
    # Converged: deciding again writes nothing.
    before = len(server.writes)
    server.kueue()
    server.apply(_decide(server.queue))
    assert len(server.writes) == before


# --- an admin's stop during a migration ------------------------------------------------------------------
def test_an_admin_hold_during_the_migration_is_kept_and_restored() -> None:
    queue = _kueue(_draining(), reserving=2, busy=frozenset(OLD_T4))
    queue["spec"]["stopPolicy"] = "Hold"  # an admin, with their own field manager
    waiting = _decide(queue, owns_stop_policy=False)
    # Their stop is left theirs (the field is omitted), nothing switches until the backfill.
    assert _policy(waiting) is None and _names(waiting) == OLD_T4
    assert _annotations(waiting) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    assert _reason(waiting) == "Migrating"
    # The InstanceType controller mirrors that Hold into inactive (the migration marks only HoldAndDrain).
    typed = instancetypes.decide_type(_t4(), queue, queue_stop_is_ours=False)
    assert typed.backfill_inactive
    # Back-filled: the migration holds HoldAndDrain again and goes on; the restore gives Hold back.
    resumed = _decide(queue, it=_t4(inactive=True), owns_stop_policy=False)
    assert _policy(resumed) == "HoldAndDrain" and _annotations(resumed)[PHASE] == "draining"
    restored = _decide(_kueue(_switched()), it=_t4(inactive=True))
    assert _policy(restored) == "Hold" and _annotations(restored) == {TAS: "true"}


def test_the_chains_own_migration_hold_is_never_backfilled() -> None:
    queue = _kueue(_draining(), reserving=2, busy=frozenset(OLD_T4))
    assert not instancetypes.decide_type(_t4(), queue, queue_stop_is_ours=True).backfill_inactive
    # A HoldAndDrain the queue controller does not own is an admin's, migration annotations or not: it is
    # back-filled, and the migration then goes on under the chain's own hold (the type is inactive now).
    assert instancetypes.decide_type(_t4(), queue, queue_stop_is_ours=False).backfill_inactive
    resumed = _decide(queue, it=_t4(inactive=True), owns_stop_policy=False)
    assert _policy(resumed) == "HoldAndDrain" and _annotations(resumed)[PHASE] == "draining"


def test_an_admin_hold_not_yet_backfilled_delays_the_start() -> None:
    queue = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    queue["spec"]["stopPolicy"] = "Hold"
    decision = _decide(queue, owns_stop_policy=False)
    assert _policy(decision) is None and _names(decision) == OLD_T4
    assert _annotations(decision) == {TAS: "true"}
    assert decision.requeue_after == queues.DRAIN_POLL_S


def test_an_admin_hold_and_drain_during_the_migration_drains_under_it() -> None:
    queue = _kueue(_draining())  # stopped, zero: the switch is due
    decision = _decide(queue, owns_stop_policy=False)
    assert _names(decision) == NEW_T4 and _annotations(decision)[PHASE] == "switched"
    assert _policy(decision) is None  # theirs, still HoldAndDrain
    restored = _decide(_kueue(_switched()), owns_stop_policy=False)
    assert _policy(restored) is None and _annotations(restored) == {TAS: "true"}  # now backfilled as theirs
    # Without the migration mark, their HoldAndDrain is an admin stop like any other: back-filled.
    after = _kueue(_switched())
    after["metadata"]["annotations"] = {TAS: "true"}
    assert instancetypes.decide_type(_t4(), after, queue_stop_is_ours=False).backfill_inactive


def test_an_admin_release_during_the_migration_is_held_again() -> None:
    queue = _kueue(_draining(), reserving=1, busy=frozenset(OLD_T4))
    queue["spec"]["stopPolicy"] = "None"
    decision = _decide(queue, owns_stop_policy=False)
    assert _policy(decision) == "HoldAndDrain"


# --- the emptied plan shares the machine ----------------------------------------------------------------
def test_an_emptied_plan_drains_empties_and_stays_held() -> None:
    busy = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    draining = _decide(busy, GONE)
    assert _names(draining) == OLD_T4 and _policy(draining) == "HoldAndDrain"
    assert _annotations(draining) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    # An idle queue whose plan empties is held first, and emptied once Kueue reports it stopped (nothing
    # can be admitted between Kueue's report and the emptying write).
    idle = _decide(_running_old_queue(), GONE)
    assert _names(idle) == OLD_T4 and _policy(idle) == "HoldAndDrain"
    assert _annotations(idle) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    server = Server(_running_old_queue())
    server.apply(idle)
    emptied = _decide(server.kueue(), GONE)
    assert _names(emptied) == [] and _policy(emptied) == "HoldAndDrain"
    assert _annotations(emptied) == {SAVED: "None", PHASE: "switched"}


def test_a_migration_whose_plan_then_empties_ends_emptied_and_held() -> None:
    decision = _decide(_kueue(_draining()), GONE)
    assert _names(decision) == [] and _policy(decision) == "HoldAndDrain"
    assert _annotations(decision) == {SAVED: "None", PHASE: "switched"}
    waiting = _decide(_kueue({**_switched(), "spec": {**_switched()["spec"], "resourceGroups": []}}), GONE)
    assert _names(waiting) == [] and _policy(waiting) == "HoldAndDrain"
    assert _annotations(waiting) == {SAVED: "None", PHASE: "switched"}
    assert keys.EMPTY_PLAN_HOLD not in _annotations(waiting)
    # The flavors return (in the new profile): plan and restore in one write.
    back = _decide(_kueue({**_switched(), "spec": {**_switched()["spec"], "resourceGroups": []}}))
    assert _names(back) == NEW_T4 and _policy(back) == "None" and _annotations(back) == {TAS: "true"}


def test_a_switched_plan_dropping_a_busy_flavor_drains_again() -> None:
    queue = _kueue(_switched(), reserving=1, busy=frozenset(NEW_T4[:1]))
    decision = _decide(queue, OLD, flavors=OLD.flavors)
    assert _names(decision) == NEW_T4 and _annotations(decision)[PHASE] == "draining"
    assert _policy(decision) == "HoldAndDrain"


# --- objects the machine does not follow -----------------------------------------------------------------
@pytest.mark.parametrize(
    "annotations",
    [
        {PHASE: "paused", SAVED: "None"},
        {PHASE: "draining", SAVED: "Stop"},
        {PHASE: "switched"},
        {SAVED: "Hold"},
    ],
    ids=["unknown-phase", "unknown-saved-policy", "phase-without-saved", "saved-without-phase"],
)
def test_invalid_migration_annotations_change_nothing(annotations: dict[str, str]) -> None:
    queue = _kueue(_draining(), reserving=0)  # a valid draining queue would switch now
    queue["metadata"]["annotations"] = {TAS: "true", **annotations}
    decision = _decide(queue)
    assert _reason(decision) == "InvalidMigrationState"
    assert decision.condition is not None and decision.condition.status == "False"
    assert _names(decision) == OLD_T4  # not switched
    assert _policy(decision) == "HoldAndDrain"  # not released
    assert _annotations(decision) == {TAS: "true", **annotations}  # left for the admin to repair
    # Someone else's stop policy is not taken either.
    assert _policy(_decide(queue, owns_stop_policy=False)) is None
    # A migration restore is not done either.
    switched = _kueue(_switched())
    switched["metadata"]["annotations"] = {TAS: "true", **annotations}
    assert _policy(_decide(switched)) == "HoldAndDrain"


def test_removing_both_annotations_ends_an_invalid_migration() -> None:
    queue = _kueue(_draining())
    queue["metadata"]["annotations"] = {TAS: "true"}
    decision = _decide(queue)
    assert _reason(decision) == "Ready" and _policy(decision) == "None" and _names(decision) == NEW_T4


def test_an_existing_queue_not_filled_by_the_chain_is_never_adopted() -> None:
    queue = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    queue["metadata"]["annotations"] = {}
    decision = _decide(queue)
    assert decision.body is None and not decision.drain_only
    assert decision.condition is not None
    assert (decision.condition.status, decision.condition.reason) == ("False", "UnsupportedExistingObject")
    # Nor drained when its InstanceType goes away or is being deleted.
    deleting = {**T4_TYPE, "metadata": {**T4_TYPE["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"}}
    assert _decide(queue, it=deleting).body is None
    assert queues.decide(
        queues.QueueInputs(None, queue, [], [], TOPOLOGIES, frozenset())
    ) == queues.QueueDecision(None)
    # A queue of our name without groups is not "filled" by anyone: the chain takes it over.
    empty = {**queue, "spec": {**queue["spec"], "resourceGroups": []}}
    assert _names(_decide(empty)) == NEW_T4


# --- a new leader resumes from the object alone -----------------------------------------------------------
STATUSES: dict[str, dict[str, Any]] = {
    "stale": {"observed": 1, "reserving": 2, "busy": "all"},
    "admitting-busy": {"active": True, "reserving": 2, "busy": "all"},
    "stopped-busy": {"active": False, "reserving": 2, "busy": "all"},
    "admitting-idle": {"active": True},
    "stopped-idle": {"active": False},
}
# (phase, status) → (groups, stop policy, phase annotation, reason)
EXPECTED = {
    (None, "stale"): (OLD_T4, "None", None, "AwaitingQueueStatus"),
    (None, "admitting-busy"): (OLD_T4, "HoldAndDrain", "draining", "Migrating"),
    (None, "stopped-busy"): (OLD_T4, "HoldAndDrain", "draining", "Migrating"),
    (None, "admitting-idle"): (NEW_T4, "None", None, "Ready"),
    (None, "stopped-idle"): (NEW_T4, "None", None, "Ready"),
    ("draining", "stale"): (OLD_T4, "HoldAndDrain", "draining", "AwaitingQueueStatus"),
    ("draining", "admitting-busy"): (OLD_T4, "HoldAndDrain", "draining", "Migrating"),
    ("draining", "stopped-busy"): (OLD_T4, "HoldAndDrain", "draining", "Migrating"),
    ("draining", "admitting-idle"): (OLD_T4, "HoldAndDrain", "draining", "Migrating"),
    ("draining", "stopped-idle"): (NEW_T4, "HoldAndDrain", "switched", "Migrating"),
    ("switched", "stale"): (NEW_T4, "HoldAndDrain", "switched", "AwaitingQueueStatus"),
    ("switched", "admitting-busy"): (NEW_T4, "None", None, "Ready"),
    ("switched", "stopped-busy"): (NEW_T4, "None", None, "Ready"),
    ("switched", "admitting-idle"): (NEW_T4, "None", None, "Ready"),
    ("switched", "stopped-idle"): (NEW_T4, "None", None, "Ready"),
}


def _stored(phase: str | None, status: str) -> dict[str, Any]:
    """A queue as a new leader reads it: only the object (spec, annotations, Kueue's status)."""
    stored: dict[str | None, Callable[[], dict[str, Any]]] = {
        None: _running_old_queue,
        "draining": _draining,
        "switched": _switched,
    }
    queue = stored[phase]()
    report = dict(STATUSES[status])
    if report.pop("busy", None):
        report["busy"] = frozenset(f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"])
    if "observed" in report:
        report["observed"] = queue["metadata"]["generation"] - 1
    return _kueue(queue, **report)


@pytest.mark.parametrize(("phase", "status"), sorted(EXPECTED, key=str), ids=lambda v: str(v))
def test_every_phase_and_status_resumes_without_memory(phase: str | None, status: str) -> None:
    groups, policy, next_phase, reason = EXPECTED[(phase, status)]
    queue = _stored(phase, status)
    decision = _decide(queue)
    assert (_names(decision), _policy(decision), _annotations(decision).get(PHASE), _reason(decision)) == (
        groups,
        policy,
        next_phase,
        reason,
    )
    if next_phase is not None:
        assert _annotations(decision)[SAVED] == "None"
    else:
        assert SAVED not in _annotations(decision)
    # Pure: the same object decides the same way (a second leader, or a retry, agrees).
    assert _decide(copy.deepcopy(queue)) == decision


# --- issue 16: a refusal never empties a reserving queue (defect 1) ------------------------------------
ONLY_OLD_TOPOLOGY = frozenset({keys.topology_name(HOSTNAME_PROFILE)})
NEW_NODE = node(
    "t4-c",
    vendor="AMD",
    cpu_name="AMD EPYC 7R13 Processor",
    cores=48,
    devices=(("nvidia", "Tesla T4", 2, 15360),),
    profile=ZONE_PROFILE,
)
#: Refusals that arrive while the old flavors finalize: the new profile's Topology not cached yet, or a
#: new node whose flavor does not exist yet.
REFUSALS: dict[str, dict[str, Any]] = {
    "topology-missing": {"topologies": ONLY_OLD_TOPOLOGY},
    "flavor-missing": {"nodes": [*NEW.nodes, *(h for h in [node_hardware(NEW_NODE)] if h is not None)]},
}


def _groups_of(queue: dict[str, Any] | None) -> list[str]:
    groups = ((queue or {}).get("spec") or {}).get("resourceGroups") or ()
    return [f["name"] for g in groups for f in g["flavors"]]


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refusal_while_every_flavor_finalizes_keeps_the_groups_under_a_reservation(refusal: str) -> None:
    """The old flavors finalize, the replacement plan is refused: the queue never loses its groups while
    Kueue reports a reservation; it drains them, and empties only at zero. When the refusal clears, the
    new plan goes in and the saved policy comes back — no Workload left reserving on a gone flavor."""
    server = Server(_running_old_queue(reserving=1, busy=frozenset(OLD_T4[1:])))
    refused = _decide(server.queue, **REFUSALS[refusal])
    assert _reason(refused) in ("MissingTopology", "NonConservedQuota")
    assert _names(refused) == OLD_T4 and _policy(refused) == "HoldAndDrain"
    assert _annotations(refused) == {SAVED: "None", PHASE: "draining", TAS: "true"}
    server.apply(refused)
    # Not yet reported at the new generation: kept as it is.
    waiting = _decide(server.queue, **REFUSALS[refusal])
    assert _reason(waiting) == "AwaitingQueueStatus" and _names(waiting) == OLD_T4
    # Kueue sees the hold, still evicting: kept.
    still = _decide(server.kueue(reserving=1, busy=frozenset(OLD_T4[1:])), **REFUSALS[refusal])
    assert _names(still) == OLD_T4 and _policy(still) == "HoldAndDrain"
    server.apply(still)
    # Evicted: emptied, held HoldAndDrain (never the marked Hold, which the groups would release).
    emptied = _decide(server.kueue(), **REFUSALS[refusal])
    assert _names(emptied) == [] and _policy(emptied) == "HoldAndDrain"
    assert _annotations(emptied) == {SAVED: "None", PHASE: "switched"}
    server.apply(emptied)
    server.kueue()
    # The refusal clears: the new plan, the policy restored.
    back = _decide(server.queue)
    assert _names(back) == NEW_T4 and _policy(back) == "None" and _annotations(back) == {TAS: "true"}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refusal_that_clears_mid_drain_switches_only_at_zero(refusal: str) -> None:
    server = Server(_running_old_queue(reserving=1, busy=frozenset(OLD_T4)))
    server.apply(_decide(server.queue, **REFUSALS[refusal]))
    server.kueue(reserving=1, busy=frozenset(OLD_T4))
    # The refusal clears while Kueue still reports the reservation: the migration keeps the old groups.
    cleared = _decide(server.queue)
    assert _names(cleared) == OLD_T4 and _policy(cleared) == "HoldAndDrain"
    assert _reason(cleared) == "Migrating"
    server.apply(cleared)
    switched = _decide(server.kueue())
    assert _names(switched) == NEW_T4 and _annotations(switched)[PHASE] == "switched"


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refusal_on_a_stale_status_keeps_the_queue_as_it_is(refusal: str) -> None:
    queue = _running_old_queue(reserving=1, busy=frozenset(OLD_T4), observed=0)
    decision = _decide(queue, **REFUSALS[refusal])
    assert _names(decision) == OLD_T4 and _policy(decision) == "None"
    assert _annotations(decision) == {TAS: "true"} and _reason(decision) == "AwaitingQueueStatus"


def test_a_refusal_without_the_drain_setting_waits_unheld_with_the_groups() -> None:
    queue = _running_old_queue(reserving=2, busy=frozenset(OLD_T4))
    decision = _decide(queue, topologies=ONLY_OLD_TOPOLOGY, drain_when_no_flavors=False)
    assert _names(decision) == OLD_T4 and _policy(decision) == "None"
    assert _reason(decision) == "MissingTopology"


# --- issue 16: decide only on the current generation's status (defect 2) ---------------------------------
def test_a_generation_bump_right_before_an_idle_drop_never_drains() -> None:
    """The joint check turns Active (a spec change: the generation moves past Kueue's status), then the old
    flavors are dropped. The stale status says nothing: the queue waits as it is; Kueue's current status
    shows them idle → in place, never a hold."""
    server = Server()
    server.apply(_decide(None, OLD))
    server.kueue()
    bumped = _decide(server.queue, OLD, active_checks=frozenset({keys.JOINT_CHECK}))
    generation = server.queue["metadata"]["generation"] if server.queue else 0
    server.apply(bumped)
    assert server.queue is not None and server.queue["metadata"]["generation"] == generation + 1
    dropped = _decide(server.queue, active_checks=frozenset({keys.JOINT_CHECK}))
    assert _reason(dropped) == "AwaitingQueueStatus" and dropped.requeue_after == queues.DRAIN_POLL_S
    assert _names(dropped) == OLD_T4 and _policy(dropped) == "None" and _annotations(dropped) == {TAS: "true"}
    server.apply(dropped)
    assert server.queue["metadata"]["generation"] == generation + 1  # waiting writes no spec change
    in_place = _decide(server.kueue(), active_checks=frozenset({keys.JOINT_CHECK}))
    assert _names(in_place) == NEW_T4 and _policy(in_place) == "None"
    assert _annotations(in_place) == {TAS: "true"} and _reason(in_place) == "Ready"


@pytest.mark.parametrize("inactive", [True, False], ids=["inactive", "reactivated"])
def test_an_inactive_toggle_before_a_drop_waits_then_decides_on_the_current_status(inactive: bool) -> None:
    server = Server()
    server.apply(_decide(None, OLD))
    server.kueue()
    server.apply(_decide(server.queue, OLD, it=_t4(inactive=True)))  # Hold: a new generation
    if not inactive:
        server.kueue()
        server.apply(_decide(server.queue, OLD))  # and back to None: another one
    waiting = _decide(server.queue, it=_t4(inactive=inactive))
    assert _reason(waiting) == "AwaitingQueueStatus" and _names(waiting) == OLD_T4
    assert _policy(waiting) == ("Hold" if inactive else "None") and PHASE not in _annotations(waiting)
    server.apply(waiting)
    # Kueue's current status: one old flavor busy → only now the migration starts.
    busy = _decide(server.kueue(reserving=1, busy=frozenset(OLD_T4[:1])), it=_t4(inactive=inactive))
    assert _policy(busy) == "HoldAndDrain" and _annotations(busy)[PHASE] == "draining"
    assert _annotations(busy)[SAVED] == ("Hold" if inactive else "None")


def test_a_draining_or_switched_queue_on_a_stale_status_changes_nothing() -> None:
    for stored in (_draining(), _switched()):
        queue = _kueue(stored, observed=stored["metadata"]["generation"] - 1)
        decision = _decide(queue)
        assert _names(decision) == _groups_of(stored) and _policy(decision) == "HoldAndDrain"
        assert _annotations(decision) == stored["metadata"]["annotations"]


# --- issue 16: the empty-plan hold never takes over an admin's stop (defect 6) ---------------------------
@pytest.mark.parametrize("admin", ["Hold", "HoldAndDrain"])
def test_an_admin_stop_on_a_groupless_queue_is_theirs_until_they_clear_inactive(admin: str) -> None:
    server = Server()
    created = _decide(None, GONE)
    assert _policy(created) == "Hold" and _annotations(created) == {keys.EMPTY_PLAN_HOLD: "true"}
    server.apply(created)
    # The admin stops the queue (their own field manager now owns spec.stopPolicy).
    assert server.queue is not None
    server.queue["spec"]["stopPolicy"] = admin
    theirs = _decide(server.queue, GONE, owns_stop_policy=False)
    assert _policy(theirs) is None and keys.EMPTY_PLAN_HOLD not in _annotations(theirs)
    assert _names(theirs) == []
    stored = server.apply(theirs)
    assert stored["spec"]["stopPolicy"] == admin
    # The InstanceType controller back-fills inactive (the stop is theirs, unmarked).
    assert instancetypes.decide_type(_t4(), stored, queue_stop_is_ours=False).backfill_inactive
    # Inactive: the type's own Hold, unmarked; the flavors arrive and the queue stays held.
    held = _decide(stored, GONE, it=_t4(inactive=True), owns_stop_policy=False)
    assert _policy(held) == "Hold" and keys.EMPTY_PLAN_HOLD not in _annotations(held)
    server.apply(held)
    filled = _decide(server.kueue(), OLD, it=_t4(inactive=True))
    assert _names(filled) == OLD_T4 and _policy(filled) == "Hold"
    assert _annotations(filled) == {TAS: "true"}
    server.apply(filled)
    # Only the admin clearing inactive releases it.
    released = _decide(server.kueue(), OLD)
    assert _policy(released) == "None"


def test_clearing_inactive_on_a_groupless_queue_marks_its_hold() -> None:
    held = Server()
    held.apply(_decide(None, GONE, it=_t4(inactive=True)))
    assert held.queue is not None and held.queue["spec"]["stopPolicy"] == "Hold"
    marked = _decide(held.queue, GONE)
    assert _policy(marked) == "Hold" and _annotations(marked) == {keys.EMPTY_PLAN_HOLD: "true"}


# --- the thin steps: drift is reported, never patched; a foreign queue gets a condition only --------------
class RecordingClient:
    """Records every write the steps issue (the steps read their caches, and LIST a name they lack)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str | None]] = []

    async def apply(
        self, resource: Any, body: dict[str, Any], *, field_manager: str, force: bool, subresource: str | None
    ) -> dict[str, Any]:
        self.calls.append(("apply", resource.kind, body["metadata"]["name"], subresource))
        return body

    async def delete(self, resource: Any, name: str, namespace: str | None = None, **_kw: Any) -> bool:
        self.calls.append(("delete", resource.kind, name, None))
        return True

    async def create(self, resource: Any, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        self.calls.append(("create", resource.kind, body["metadata"]["name"], None))
        return body

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        self.calls.append(("patch", resource.kind, name, None))
        return body

    async def list(self, _resource: Any, **_kw: Any) -> tuple[list[Any], str]:
        """The server holds nothing the caches do not (the flavor step looks up uncached names)."""
        return [], "1"


def _chain(client: RecordingClient) -> Any:
    from gpustack_worker.chain.controller import Chain
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import SettingsSource

    api = cast("Client", client)
    chain = Chain(
        api, SettingsSource(api, model=WorkerSettings, env={}, post_events=False), InformerRegistry(api)
    )
    for n in mixed_cluster():
        n["metadata"]["resourceVersion"] = "1"
        chain.nodes._apply({"type": "ADDED", "object": n})
    return chain


async def test_a_flavor_whose_topology_fields_drifted_is_reported_not_patched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = RecordingClient()
    chain = _chain(client)
    drifted = copy.deepcopy(next(f for f in OLD.flavors if f["metadata"]["name"] == OLD_T4[1]))
    drifted["spec"]["topologyName"] = "gpustack-someone-elses"
    drifted["metadata"].update(uid="u-1", resourceVersion="1")
    chain.flavors._apply({"type": "ADDED", "object": drifted})
    await chain.steps.flavors("flavors")
    touched = [c for c in client.calls if c[2] == OLD_T4[1]]
    assert touched == []  # neither patched nor deleted (nor pruned: it is still a desired name)
    others = {c[2] for c in client.calls if c[0] == "apply" and c[1] == "ResourceFlavor"}
    assert OLD_T4[0] in others  # the rest of the flavors converge
    out = capsys.readouterr()
    assert "flavor topology drift" in out.out + out.err
    assert "gpustack-someone-elses" in out.out + out.err


async def test_a_queue_not_filled_by_the_chain_only_gets_the_condition() -> None:
    client = RecordingClient()
    chain = _chain(client)
    chain.types._apply({"type": "ADDED", "object": copy.deepcopy(T4_TYPE)})
    foreign = _running_old_queue(reserving=1, busy=frozenset(OLD_T4))
    foreign["metadata"].update(annotations={}, uid="q-1", resourceVersion="1")
    chain.queues._apply({"type": "ADDED", "object": foreign})
    await chain.steps.queue(T4)
    assert client.calls == [("apply", "ClusterQueue", T4, "status")]


def test_tearing_down_an_instance_type_leaves_a_queue_it_never_filled() -> None:
    foreign = _running_old_queue()
    foreign["metadata"]["annotations"] = {}
    deleting = {
        **T4_TYPE,
        "metadata": {
            **T4_TYPE["metadata"],
            "deletionTimestamp": "2026-12-02T00:00:00Z",
            "finalizers": [keys.FINALIZER_CONTROLLED],
        },
    }
    typed = instancetypes.decide_type(deleting, foreign, queue_stop_is_ours=False)
    assert not typed.delete_queue and typed.remove_finalizer
    ours = instancetypes.decide_type(deleting, _running_old_queue(), queue_stop_is_ours=True)
    assert ours.delete_queue and not ours.remove_finalizer


# --- what real Kueue reports (the readers above assume it) ------------------------------------------------
@pytest.mark.cluster
async def test_real_kueue_reports_idle_flavors_and_a_stop_the_way_the_decision_reads_them(
    devcluster: Any,
) -> None:
    """Kueue v0.19 lists every flavor of the groups with zero totals (so a dropped idle flavor goes in place)
    and reports a stop policy as ``Active=False/Stopped`` at the new generation (what the switch waits
    for). Objects of their own names: the session's control plane is shared with other modules."""
    admin = await Client.connect(str(devcluster.kubeconfig))
    topology = "probe-migration-topology"
    names = ["probe-migration-a", "probe-migration-b"]
    queue_name = "probe-migration-queue"
    try:
        await admin.apply(
            kinds.TOPOLOGY,
            {
                "apiVersion": kinds.TOPOLOGY.api_version,
                "kind": "Topology",
                "metadata": {"name": topology},
                "spec": {"levels": [{"nodeLabel": keys.HOSTNAME}]},
            },
            field_manager="probe",
        )
        for name in names:
            flavor = kueue.resource_flavor(name, {"nodeLabels": {"probe": name}, "topologyName": topology})
            await admin.apply(kinds.RESOURCE_FLAVOR, flavor, field_manager="probe")
        group = {
            "coveredResources": ["cpu"],
            "flavors": [{"name": n, "resources": [{"name": "cpu", "nominalQuota": "4"}]} for n in names],
        }
        body = kueue.cluster_queue(queue_name, kueue.queue_spec(group))
        await admin.apply(kinds.CLUSTER_QUEUE, body, field_manager="probe")
        seen: dict[str, Any] = {}

        async def current() -> bool:
            seen["queue"] = await admin.get(kinds.CLUSTER_QUEUE, queue_name)
            return queues._reported(seen["queue"]) is not None

        await eventually(current, within=60, every=0.2)
        queue = seen["queue"]
        for listed in ("flavorsReservation", "flavorsUsage"):
            assert sorted(f["name"] for f in queue["status"][listed]) == names
        reported = queues._reported(queue)
        assert reported is not None
        assert reported.in_use(names[1:]) == []  # idle, reported: dropped in place
        assert reported.in_use(["probe-never-listed"]) == ["probe-never-listed"]
        assert not reported.stopped()

        body["spec"]["stopPolicy"] = "HoldAndDrain"
        await admin.apply(kinds.CLUSTER_QUEUE, body, field_manager="probe")
        await eventually(current, within=60, every=0.2)
        stopped = queues._reported(seen["queue"])
        assert stopped is not None and stopped.stopped() and stopped.workloads() == 0
    finally:
        await admin.delete(kinds.CLUSTER_QUEUE, queue_name)
        for name in names:
            await admin.delete(kinds.RESOURCE_FLAVOR, name)
        await admin.delete(kinds.TOPOLOGY, topology)
        await admin.close()
