"""A leaving node drops its flavor in place, whatever else the queue is doing (issue 27, class 1).

The T4 pool of the mixed cluster: a 1-card flavor (t4-a, ``S``) and a 4-card flavor (t4-b, ``L``). The 4-card
node leaves: the flavor controller deletes ``L``, which Kueue keeps (``resource-in-use``) while the queue
references it, and no Node carries its hardware any more. Kueue's status reports the queue's current
generation with reservations on BOTH flavors (``reservingWorkloads=2``) unless a row says otherwise. The
queue must drop ``L`` in place — no ``HoldAndDrain`` because of it, no wait for Kueue's status — while the
rest of the decision (a migration, a refusal, a quota change, an unrelated drop, an admin's stop) goes on
as it would without ``L``. Only a queue whose every flavor left takes the no-live-flavor drain.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from tests.chain.builders import HOSTNAME_PROFILE, node
from tests.chain.test_queue_properties import NEW_GROUPS, OLD_GROUPS, _plan_groups
from tests.chain.test_queues_migration import NEW, NEW_T4, OLD, OLD_T4, T4_TYPE, TOPOLOGIES, _kueue
from tests.kit import kueue
from tests.kit.properties import examples

S, L = OLD_T4
S_NEW, L_NEW = NEW_T4
PHASE = keys.MIGRATION_PHASE
SAVED = keys.MIGRATION_STOP_POLICY
TAS = keys.TAS_QUEUE
DELETED = "2026-12-05T00:00:00Z"
#: A flavor the queue still lists but the cache no longer has (deleted and released): a genuine,
#: non-finalizing drop that follows the migration rule.
RETIRED = f"gpustack--retired--nvidia-tesla-t4-linux-amd64-2d-{HOSTNAME_PROFILE}"


def _hw(*objs: dict[str, Any]) -> list[NodeHardware]:
    return [h for h in (node_hardware(o) for o in objs) if h is not None]


def _t4_node(name: str, cpu: str, cores: int, cards: int, profile: str = HOSTNAME_PROFILE) -> dict[str, Any]:
    vendor = "AMD" if cpu.startswith("AMD") else "Intel"
    return node(
        name,
        vendor=vendor,
        cpu_name=cpu,
        cores=cores,
        devices=(("nvidia", "Tesla T4", cards, 15360),),
        profile=profile,
    )


INTEL = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
#: A second 1-card node of S's hardware (S's quota grows to 2 cards).
T4_A2 = _hw(_t4_node("t4-a2", INTEL, 4, 1))
#: A new pool node whose flavor does not exist yet: the plan is refused (NonConservedQuota).
T4_C = _hw(_t4_node("t4-c", "AMD EPYC 7R32", 8, 2))


def _deleting(bodies: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """``bodies`` with the flavors ``names`` being deleted (Kueue's finalizer keeps them)."""
    return [
        {**b, "metadata": {**b["metadata"], "deletionTimestamp": DELETED}}
        if b["metadata"]["name"] in names
        else b
        for b in bodies
    ]


def _without_nodes(nodes: list[NodeHardware], names: set[str]) -> list[NodeHardware]:
    return [n for n in nodes if n.name not in names]


def _planned_bodies(nodes: list[NodeHardware]) -> list[dict[str, Any]]:
    """The flavors the flavor controller writes for ``nodes``."""
    return [
        flavors.flavor_body(p, mixed_on_node=True, aware=False)
        for p in flavors.plan_flavors(nodes, mixed_on_node=True)
    ]


@dataclass(frozen=True)
class World:
    """The cache the queue controller reads: flavors (some finalizing) and the Nodes."""

    flavors: list[dict[str, Any]]
    nodes: list[NodeHardware]


#: t4-b left: L finalizing, no node of its hardware.
LEFT = World(_deleting(OLD.flavors, {L}), _without_nodes(OLD.nodes, {"t4-b"}))
#: Mid hierarchy change (hostname → zone+hostname): the old flavors finalizing, their nodes re-advertised by
#: the new ones — and t4-b left meanwhile (its new flavor deleted too; the old one never left the groups).
MOVED_AND_LEFT = World(
    [
        *_deleting(NEW.flavors, {L_NEW}),
        *_deleting([f for f in OLD.flavors if f["metadata"]["name"] in OLD_T4], set(OLD_T4)),
    ],
    _without_nodes(NEW.nodes, {"t4-b"}),
)
#: Both T4 nodes left: every flavor of the queue is finalizing.
ALL_LEFT = World(_deleting(OLD.flavors, set(OLD_T4)), _without_nodes(OLD.nodes, {"t4-a", "t4-b"}))


def _queue(
    groups: list[dict[str, Any]] = OLD_GROUPS,
    *,
    phase: str | None = None,
    policy: str | None = "None",
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The T4 queue with ``groups`` (held ``HoldAndDrain`` with the phase recorded when ``phase``), and
    Kueue's status of it (default: current generation, both flavors of the groups reserved, 2 Workloads)."""
    notes = {TAS: "true"}
    if phase is not None:
        notes.update({PHASE: phase, SAVED: "None"})
        policy = "HoldAndDrain"
    notes.update(annotations or {})
    spec: dict[str, Any] = {"resourceGroups": copy.deepcopy(groups)}
    if policy is not None:
        spec["stopPolicy"] = policy
    queue = kueue.cluster_queue(T4_TYPE["metadata"]["name"], spec, generation=4, annotations=notes)
    names = frozenset(f["name"] for g in groups for f in g["flavors"])
    return _kueue(queue, **({"reserving": 2, "busy": names} if status is None else status))


def _decide(queue: dict[str, Any] | None, world: World = LEFT, **kw: Any) -> queues.QueueDecision:
    base: dict[str, Any] = {
        "instance_type": T4_TYPE,
        "queue": queue,
        "flavors": world.flavors,
        "nodes": world.nodes,
        "topologies": TOPOLOGIES,
        "active_checks": frozenset(),
    }
    base.update(kw)
    return queues.decide(queues.QueueInputs(**base))


def _names(decision: queues.QueueDecision) -> list[str]:
    assert decision.body is not None
    return [f["name"] for g in decision.body["spec"]["resourceGroups"] for f in g["flavors"]]


def _policy(decision: queues.QueueDecision) -> str | None:
    assert decision.body is not None
    policy: str | None = decision.body["spec"].get("stopPolicy")
    return policy


def _notes(decision: queues.QueueDecision) -> dict[str, str]:
    assert decision.body is not None
    return dict(decision.body["metadata"].get("annotations") or {})


def _reason(decision: queues.QueueDecision) -> str | None:
    return decision.condition.reason if decision.condition is not None else None


def _with_flavor(groups: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """``groups`` plus a flavor ``name`` (2 cards) at the end of the first group."""
    out = copy.deepcopy(groups)
    resource = out[0]["coveredResources"][0]
    out[0]["flavors"].append({"name": name, "resources": [{"name": resource, "nominalQuota": "3200k"}]})
    return out


def _only(groups: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    out = copy.deepcopy(groups)
    out[0]["flavors"] = [f for f in out[0]["flavors"] if f["name"] in names]
    return out


@dataclass(frozen=True)
class Row:
    """One variant: the queue and the cache, and what must be written."""

    queue: dict[str, Any]
    world: World = LEFT
    inputs: tuple[tuple[str, Any], ...] = ()
    names: tuple[str, ...] = (S,)
    policy: str | None = "None"
    notes: tuple[tuple[str, str], ...] = ((TAS, "true"),)
    reason: str = "Ready"


HELD_NEW = ((TAS, "true"), (PHASE, "draining"), (SAVED, "None"))
ROWS: dict[str, Row] = {
    # Nothing else going on: in place, no hold, no annotation.
    "no-migration": Row(_queue()),
    # Kueue has not reported the current generation: the leaving flavor needs no status, nothing waits.
    "stale-status": Row(_queue(status={"reserving": 2, "busy": frozenset(OLD_T4), "observed": 3})),
    "no-status-at-all": Row({k: v for k, v in _queue().items() if k != "status"}),
    # The survivor idle, or the leaving flavor unreported: the same.
    "survivor-idle": Row(_queue(status={"reserving": 1, "busy": frozenset({L})})),
    "left-unreported": Row(
        _queue(status={"reserving": 2, "busy": frozenset({S}), "unreported": frozenset({L})})
    ),
    # A quota change at the same time (a second 1-card node joins S).
    "quota-change": Row(
        _queue(),
        World(
            [
                *_planned_bodies([*LEFT.nodes, *T4_A2]),
                *(f for f in LEFT.flavors if f["metadata"]["name"] == L),
            ],
            [*LEFT.nodes, *T4_A2],
        ),
    ),
    # A refusal at the same time: the last complete plan minus the leaving flavor.
    "refusal-new-node": Row(_queue(), World(LEFT.flavors, [*LEFT.nodes, *T4_C]), reason="NonConservedQuota"),
    "refusal-no-topology": Row(_queue(), inputs=(("topologies", frozenset()),), reason="MissingTopology"),
    # An inactive type keeps its Hold; someone else's stop stays theirs (the field omitted).
    "inactive": Row(
        _queue(policy="Hold"),
        inputs=(("instance_type", {**T4_TYPE, "spec": {**T4_TYPE["spec"], "inactive": True}}),),
        policy="Hold",
    ),
    "foreign-stop": Row(_queue(policy="Hold"), inputs=(("owns_stop_policy", False),), policy=None),
    # Annotations the machine cannot follow: nothing switched or restored, but the leaving flavor goes.
    "invalid-migration": Row(
        _queue(annotations={PHASE: "sideways", SAVED: "None"}, policy="HoldAndDrain"),
        policy="HoldAndDrain",
        notes=((TAS, "true"), (PHASE, "sideways"), (SAVED, "None")),
        reason="InvalidMigrationState",
    ),
    # A drain whose only dropped flavor left: nothing is left to drain for, the migration ends in place.
    "draining-for-nothing-else": Row(_queue(phase="draining")),
    # A hierarchy change draining, the 4-card node leaves: its old flavor goes from the held groups, the
    # moved one keeps the hold until Kueue reports the queue drained.
    "hierarchy-draining": Row(
        _queue(phase="draining", status={"reserving": 2, "busy": frozenset(OLD_T4), "active": False}),
        MOVED_AND_LEFT,
        names=(S,),
        policy="HoldAndDrain",
        notes=HELD_NEW,
        reason="Migrating",
    ),
    "hierarchy-draining-stale": Row(
        _queue(phase="draining", status={"reserving": 2, "busy": frozenset(OLD_T4), "observed": 3}),
        MOVED_AND_LEFT,
        names=(S,),
        policy="HoldAndDrain",
        notes=HELD_NEW,
        reason="AwaitingQueueStatus",
    ),
    # The hierarchy change starts as the node leaves: the hold is for the moved flavor alone.
    "hierarchy-starts": Row(
        _queue(), MOVED_AND_LEFT, names=(S,), policy="HoldAndDrain", notes=HELD_NEW, reason="Migrating"
    ),
    # Drained: the switch to the new plan (which the leaving node is not part of).
    "hierarchy-switch": Row(
        _queue(phase="draining", status={"active": False}),
        MOVED_AND_LEFT,
        names=(S_NEW,),
        policy="HoldAndDrain",
        notes=((TAS, "true"), (PHASE, "switched"), (SAVED, "None")),
        reason="Migrating",
    ),
    # Switched to the new plan, then the node leaves: its new flavor goes, the base policy comes back.
    "switched": Row(
        _queue(NEW_GROUPS, phase="switched"),
        World(_deleting(NEW.flavors, {L_NEW}), _without_nodes(NEW.nodes, {"t4-b"})),
        names=(S_NEW,),
    ),
    "switched-stale": Row(
        _queue(
            NEW_GROUPS, phase="switched", status={"reserving": 2, "busy": frozenset(NEW_T4), "observed": 3}
        ),
        World(_deleting(NEW.flavors, {L_NEW}), _without_nodes(NEW.nodes, {"t4-b"})),
        names=(S_NEW,),
        policy="HoldAndDrain",
        notes=((TAS, "true"), (PHASE, "switched"), (SAVED, "None")),
        reason="AwaitingQueueStatus",
    ),
    # A genuine (non-finalizing) drop in the same plan follows the migration rule on its own.
    "retired-in-use": Row(
        _queue(_with_flavor(OLD_GROUPS, RETIRED)),
        names=(S, RETIRED),
        policy="HoldAndDrain",
        notes=HELD_NEW,
        reason="Migrating",
    ),
    "retired-idle": Row(
        _queue(_with_flavor(OLD_GROUPS, RETIRED), status={"reserving": 2, "busy": frozenset(OLD_T4)})
    ),
    "retired-stale": Row(
        _queue(
            _with_flavor(OLD_GROUPS, RETIRED),
            status={"reserving": 2, "busy": frozenset(OLD_T4), "observed": 3},
        ),
        names=(S, RETIRED),
        reason="AwaitingQueueStatus",
    ),
    # The queue had only the leaving flavor, and a new node's flavor arrives: the plan replaces it —
    # in place, or under the hold of a migration that waits for Kueue's current status.
    "only-left-replaced": Row(_queue(_only(OLD_GROUPS, [L]))),
    "only-left-draining-stale": Row(
        _queue(
            _only(OLD_GROUPS, [L]),
            phase="draining",
            status={"reserving": 1, "busy": frozenset({L}), "observed": 3},
        ),
        policy="HoldAndDrain",
        notes=HELD_NEW,
        reason="AwaitingQueueStatus",
    ),
    # Every flavor of the queue left while Workloads reserve: the no-live-flavor drain (kept as it was).
    "last-flavors-leave": Row(
        _queue(), ALL_LEFT, names=(S, L), policy="HoldAndDrain", notes=HELD_NEW, reason="Migrating"
    ),
    "last-flavors-leave-no-drain": Row(
        _queue(), ALL_LEFT, inputs=(("drain_when_no_flavors", False),), names=(S, L)
    ),
}


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_a_leaving_node_drops_its_flavor_in_place(row: Row) -> None:
    decision = _decide(row.queue, row.world, **dict(row.inputs))
    assert decision.body is not None and not decision.drain_only
    assert (_names(decision), _policy(decision), _notes(decision), _reason(decision)) == (
        list(row.names),
        row.policy,
        dict(row.notes),
        row.reason,
    )
    if row.policy == "HoldAndDrain" and decision.condition is not None and row.reason == "Migrating":
        # The hold is never for the leaving flavor.
        assert L not in decision.condition.message or row.world is ALL_LEFT, decision.condition.message


def test_the_quota_change_row_changes_the_quota() -> None:
    decision = _decide(_queue(), ROWS["quota-change"].world)
    assert decision.body is not None
    flavor = decision.body["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor["name"] == S and flavor["resources"][0]["nominalQuota"] == "3200k"


def test_the_hold_for_a_moved_flavor_names_it_not_the_leaving_one() -> None:
    decision = _decide(_queue(), MOVED_AND_LEFT)
    assert decision.condition is not None
    assert decision.condition.message.startswith(f"dropping 1 flavor(s) that may be in use ({S})")


def test_without_a_queue_the_leaving_flavor_is_not_planned() -> None:
    """The plan alone (no queue, so no status): moved here from ``test_queues.py``."""
    decision = _decide(None)
    assert _names(decision) == [S] and _policy(decision) == "None"


def test_the_leaving_flavor_stays_dropped_once_written() -> None:
    """Applied and reported again (Kueue still counting the evicted Workload until it is released), the
    queue does not move: no second write, no hold."""
    first = _decide(_queue())
    assert first.body is not None
    stored = {**first.body, "metadata": {**first.body["metadata"], "generation": 5}}
    again = _decide(_kueue(stored, reserving=2, busy=frozenset({S})))
    assert again.body == first.body and _reason(again) == "Ready"


# --- the property: random queue states --------------------------------------------------------------
#: Three T4 flavors: t4-a (S, 1 card), t4-c (2 cards), t4-b (L, 4 cards), all on the hostname profile.
THREE_NODES = [*OLD.nodes, *T4_C]
THREE = _planned_bodies(THREE_NODES)
THREE_GROUPS = _plan_groups(World(THREE, THREE_NODES))
T4_FLAVORS = [f["name"] for f in THREE_GROUPS[0]["flavors"]]
NODE_OF = {T4_FLAVORS[0]: "t4-a", T4_FLAVORS[1]: "t4-c", T4_FLAVORS[2]: "t4-b"}
assert (NODE_OF[S], NODE_OF[L]) == ("t4-a", "t4-b")


@dataclass(frozen=True)
class State:
    leaving: frozenset[str]
    phase: str | None
    busy: frozenset[str]
    unreported: frozenset[str]
    reserving: int
    current: bool
    stopped_report: bool
    refusal: str
    retired: bool
    quota: bool
    in_groups: frozenset[str]

    def queue(
        self, busy: frozenset[str] | None = None, unreported: frozenset[str] | None = None
    ) -> dict[str, Any]:
        groups = _only(THREE_GROUPS, [n for n in T4_FLAVORS if n in self.in_groups])
        if self.retired:
            groups = _with_flavor(groups, RETIRED)
        if self.quota:  # what the queue holds differs from the plan in quota only
            groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = "9600k"
        status = {
            "reserving": self.reserving,
            "busy": self.busy if busy is None else busy,
            "unreported": self.unreported if unreported is None else unreported,
            "observed": None if self.current else 3,
            "active": False if self.stopped_report else None,
        }
        return _queue(groups, phase=self.phase, status=status)

    def world(self) -> World:
        nodes = [n for n in THREE_NODES if n.name not in {NODE_OF[f] for f in self.leaving}]
        if self.refusal == "new-node":
            nodes.append(_hw(_t4_node("t4-d", "AMD EPYC 9654", 96, 8))[0])
        return World(_deleting(THREE, set(self.leaving)), nodes)

    def inputs(self) -> dict[str, Any]:
        return {"topologies": frozenset()} if self.refusal == "no-topology" else {}


@st.composite
def states(draw: st.DrawFn) -> State:
    in_groups = frozenset(draw(st.sets(st.sampled_from(T4_FLAVORS), min_size=1)))
    retired = draw(st.booleans())
    refusal = draw(st.sampled_from(["none", "new-node", "no-topology"]))
    leaving = frozenset(draw(st.sets(st.sampled_from(sorted(in_groups)), min_size=1)))
    # Never every flavor of the pool (then nothing is live: the no-live-flavor drain, kept as it was), and
    # every flavor of the queue only while the plan stands (a refusal keeps the last plan, which would be
    # empty under reservations: the same drain).
    if leaving == set(T4_FLAVORS) or (leaving == in_groups and not retired and refusal != "none"):
        leaving = frozenset(sorted(leaving)[:-1])
    assume(leaving)
    listed = sorted(in_groups | ({RETIRED} if retired else set()))
    busy = frozenset(draw(st.sets(st.sampled_from(listed))))
    return State(
        leaving=leaving,
        phase=draw(st.sampled_from([None, "draining", "switched"])),
        busy=busy,
        unreported=frozenset(draw(st.sets(st.sampled_from(listed)))),
        reserving=draw(st.integers(min_value=len(busy), max_value=len(busy) + 2)),
        current=draw(st.booleans()),
        stopped_report=draw(st.booleans()),
        refusal=refusal,
        retired=retired,
        quota=draw(st.booleans()),
        in_groups=in_groups,
    )


def _decide_state(state: State, queue: dict[str, Any]) -> queues.QueueDecision:
    return _decide(queue, state.world(), **state.inputs())


@settings(max_examples=examples(1500), deadline=None)
@given(states())
@example(  # the case: L leaves, nothing else going on, Kueue reports both flavors reserved
    State(
        leaving=frozenset({L}),
        phase=None,
        busy=frozenset({S, L}),
        unreported=frozenset(),
        reserving=2,
        current=True,
        stopped_report=False,
        refusal="none",
        retired=False,
        quota=False,
        in_groups=frozenset({S, L}),
    )
)
def test_a_leaving_flavor_is_never_held_for_nor_kept(state: State) -> None:
    decision = _decide_state(state, state.queue())
    assert decision.body is not None and not decision.drain_only
    written = set(_names(decision))
    # Never kept in the groups, whatever the phase, the refusal or Kueue's status.
    assert not written & state.leaving, f"a leaving flavor kept: {sorted(written & state.leaving)}"
    # Never the reason for a hold: what Kueue reports on a leaving flavor (reserved, idle, or nothing)
    # changes nothing in the decision.
    for busy, unreported in (
        (state.busy | state.leaving, state.unreported - state.leaving),
        (state.busy - state.leaving, state.unreported - state.leaving),
        (state.busy, state.unreported | state.leaving),
    ):
        other = _decide_state(state, state.queue(busy, unreported))
        assert other == decision, (
            f"Kueue's report on a leaving flavor changed the decision: {other} vs {decision}"
        )
    # Nothing else dropped, no migration, no refusal: in place at once — no hold, no wait for Kueue.
    if state.phase is None and state.refusal == "none" and not state.retired:
        assert _policy(decision) == "None" and _reason(decision) == "Ready", decision
