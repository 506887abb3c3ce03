"""The ClusterQueue stop-policy decision over random queue states (issue 16 defects 1, 2 and 6).

The T4 pool of the mixed cluster (the worlds of ``test_queues_migration``): its flavors live, finalizing
or gone, the new profile's Topology cached or not, a new node with or without its flavor; the queue with
or without resource groups, any stop policy (the chain's or someone else's), the empty-plan marker, the
migration annotations, ``inactive``; and Kueue's status missing, stale or current, with reservations on
any of the queue's flavors. One decision must never:

- write empty resource groups on a queue that has groups while Kueue may report a reservation (it
  reports one, or has not reported the current generation);
- start a ``HoldAndDrain`` migration on a status that is not the current generation's;
- add the empty-plan marker to a stop policy someone else set, or mark anything but a ``Hold``;
- decide differently on its own result (applied the way the API server stores it, with the same Kueue
  status).

And a run of decisions against a small Kueue model (status follows the generation when Kueue catches up,
admits onto an active queue's live flavors, evicts from a ``HoldAndDrain`` queue) never empties a queue
that Kueue really has a reservation on.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.chain import queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from tests.chain.builders import HOSTNAME_PROFILE, node
from tests.chain.test_queues_migration import (
    GONE,
    NEW,
    OLD,
    OLD_T4,
    T4_TYPE,
    TOPOLOGIES,
    ZONE_PROFILE,
    _finalizing,
    _kueue,
)
from tests.kit import kueue
from tests.kit.properties import examples

PHASE = keys.MIGRATION_PHASE
SAVED = keys.MIGRATION_STOP_POLICY
MARKER = keys.EMPTY_PLAN_HOLD
ONLY_OLD_TOPOLOGY = frozenset({keys.topology_name(HOSTNAME_PROFILE)})
_extra = node_hardware(
    node(
        "t4-c",
        vendor="AMD",
        cpu_name="AMD EPYC 7R13 Processor",
        cores=48,
        devices=(("nvidia", "Tesla T4", 2, 15360),),
        profile=ZONE_PROFILE,
    )
)
assert _extra is not None
EXTRA: NodeHardware = _extra


def _one_finalizing() -> list[dict[str, Any]]:
    return [
        {**f, "metadata": {**f["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"}}
        if f["metadata"]["name"] == OLD_T4[1]
        else f
        for f in OLD.flavors
    ]


#: What the pool's flavors and nodes look like: (flavors, nodes).
FLAVORS: dict[str, tuple[list[dict[str, Any]], list[NodeHardware]]] = {
    "old": (OLD.flavors, OLD.nodes),
    "old-one-finalizing": (_one_finalizing(), OLD.nodes),
    "new": (NEW.flavors, NEW.nodes),
    "new-old-finalizing": (_finalizing(NEW, OLD_T4), NEW.nodes),
    "gone": (GONE.flavors, GONE.nodes),
    "gone-old-finalizing": (_finalizing(GONE, OLD_T4), GONE.nodes),
}


def _plan_groups(world: Any) -> list[dict[str, Any]]:
    decision = queues.decide(
        queues.QueueInputs(
            instance_type=T4_TYPE,
            queue=None,
            flavors=world.flavors,
            nodes=world.nodes,
            topologies=TOPOLOGIES,
            active_checks=frozenset(),
        )
    )
    assert decision.body is not None
    groups: list[dict[str, Any]] = decision.body["spec"]["resourceGroups"]
    return groups


OLD_GROUPS = _plan_groups(OLD)
NEW_GROUPS = _plan_groups(NEW)
ONE_OLD_GROUPS = [{**OLD_GROUPS[0], "flavors": OLD_GROUPS[0]["flavors"][:1]}]
GROUPS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "old": OLD_GROUPS,
    "new": NEW_GROUPS,
    "one-old": ONE_OLD_GROUPS,
}
MIGRATIONS: list[dict[str, str]] = [
    {},
    *(
        {PHASE: phase, SAVED: saved}
        for phase in sorted(queues.PHASES)
        for saved in sorted(queues.SAVED_POLICIES)
    ),
    {PHASE: "draining"},  # not followable: InvalidMigrationState
    {PHASE: "sideways", SAVED: "None"},
]


def _names(groups: Any) -> list[str]:
    return [str(f.get("name")) for g in groups or () for f in g.get("flavors") or ()]


@dataclass
class State:
    """One random situation: the inputs of ``decide`` and what Kueue reports."""

    flavors: str
    topologies: frozenset[str]
    extra_node: bool
    inactive: bool
    owns_stop_policy: bool
    drain_when_no_flavors: bool
    queue: dict[str, Any] | None
    #: "missing", "stale" or "current"
    status: str
    reservations: int

    def inputs(self, queue: dict[str, Any] | None = None, owns: bool | None = None) -> queues.QueueInputs:
        flavors, nodes = FLAVORS[self.flavors]
        return queues.QueueInputs(
            instance_type={**T4_TYPE, "spec": {**T4_TYPE["spec"], "inactive": self.inactive}},
            queue=self.queue if queue is None else queue,
            flavors=flavors,
            nodes=[*nodes, EXTRA] if self.extra_node else nodes,
            topologies=self.topologies,
            active_checks=frozenset(),
            owns_stop_policy=self.owns_stop_policy if owns is None else owns,
            drain_when_no_flavors=self.drain_when_no_flavors,
        )

    def foreign_stop(self) -> bool:
        stored = ((self.queue or {}).get("spec") or {}).get("stopPolicy")
        return self.queue is not None and not self.owns_stop_policy and stored in ("Hold", "HoldAndDrain")


@st.composite
def states(draw: st.DrawFn) -> State:
    groups = GROUPS[draw(st.sampled_from(sorted(GROUPS)))]
    queue: dict[str, Any] | None = None
    status, reservations = "missing", 0
    if draw(st.booleans()) or groups:
        annotations: dict[str, str] = {}
        if groups:
            annotations[keys.TAS_QUEUE] = "true"
        if draw(st.booleans()):
            annotations[MARKER] = "true"
        annotations.update(draw(st.sampled_from(MIGRATIONS)))
        spec: dict[str, Any] = {"resourceGroups": copy.deepcopy(groups)}
        policy = draw(st.sampled_from([None, "None", "Hold", "HoldAndDrain"]))
        if policy is not None:
            spec["stopPolicy"] = policy
        generation = draw(st.integers(min_value=2, max_value=5))
        queue = kueue.cluster_queue(
            T4_TYPE["metadata"]["name"], spec, generation=generation, annotations=annotations
        )
        status = draw(st.sampled_from(["missing", "stale", "current"]))
        if status != "missing":
            names = _names(groups)
            busy = frozenset(draw(st.sets(st.sampled_from(names))) if names else ())
            reservations = draw(st.integers(min_value=1 if busy else 0, max_value=3 if busy else 1))
            if reservations and not busy and names:
                busy = frozenset(names[:1])
            unreported = frozenset(draw(st.sets(st.sampled_from(names))) if names else ())
            queue = _kueue(
                queue,
                reserving=reservations,
                admitted=draw(st.integers(min_value=0, max_value=reservations)),
                busy=busy,
                unreported=unreported,
                observed=generation if status == "current" else generation - 1,
                active=None if status == "current" else draw(st.booleans()),
            )
    return State(
        flavors=draw(st.sampled_from(sorted(FLAVORS))),
        topologies=draw(st.sampled_from([TOPOLOGIES, ONLY_OLD_TOPOLOGY])),
        extra_node=draw(st.booleans()),
        inactive=draw(st.booleans()),
        owns_stop_policy=draw(st.booleans()),
        drain_when_no_flavors=draw(st.booleans()),
        queue=queue,
        status=status,
        reservations=reservations,
    )


def _applied(queue: dict[str, Any] | None, body: dict[str, Any], owned: bool) -> tuple[dict[str, Any], bool]:
    """``body`` as the API server stores it over ``queue``: an omitted stop policy stays its owner's, a
    spec change moves the generation, Kueue's status stays (now one generation behind); and whether our
    field manager owns the stop policy afterwards."""
    new = copy.deepcopy(body)
    old = queue or {"metadata": {"generation": 0}, "spec": {}}
    spec = new["spec"]
    if "stopPolicy" not in spec and "stopPolicy" in old["spec"]:
        spec["stopPolicy"] = old["spec"]["stopPolicy"]
    generation = old["metadata"]["generation"] + (spec != old["spec"])
    new["metadata"] = {**new["metadata"], "generation": generation}
    if "status" in old:
        new["status"] = old["status"]
    return new, ("stopPolicy" in body["spec"]) or owned


def _check(state: State, decision: queues.QueueDecision) -> None:
    if decision.body is None or decision.drain_only:
        return
    queue = state.queue
    before = (queue or {}).get("metadata", {}).get("annotations") or {}
    after = decision.body["metadata"].get("annotations") or {}
    policy = decision.body["spec"].get("stopPolicy")
    had_groups = bool(((queue or {}).get("spec") or {}).get("resourceGroups"))
    invalid = decision.condition is not None and decision.condition.reason == "InvalidMigrationState"
    # Defect 1: never empty groups while Kueue may report a reservation.
    if had_groups and (state.reservations > 0 or state.status != "current"):
        assert decision.body["spec"]["resourceGroups"], "emptied a queue Kueue may report reservations on"
    # Defect 2: never a migration started on a status that is not the current generation's.
    if queue is not None and PHASE not in before and state.status != "current":
        assert PHASE not in after, "started a migration on a stale status"
        if queue["spec"].get("stopPolicy") != "HoldAndDrain":
            assert policy != "HoldAndDrain", "started a HoldAndDrain on a stale status"
    # Defect 6: the marker never goes on someone else's stop; a marked hold is Hold.
    if not invalid:
        if state.foreign_stop():
            assert MARKER not in after, "marked someone else's stop"
        if MARKER in after:
            assert policy == "Hold", "a marked hold that is not Hold"
    # Idempotent: deciding again on the result, with the same Kueue status, gives the same body.
    stored, owns = _applied(queue, decision.body, state.owns_stop_policy)
    again = queues.decide(state.inputs(stored, owns))
    assert again.body == decision.body, "a second decision on the result differs"


@settings(max_examples=examples(3000))
@given(states())
def test_one_decision_keeps_the_stop_policy_invariants(state: State) -> None:
    _check(state, queues.decide(state.inputs()))


# --- runs against a small Kueue model -------------------------------------------------------------------
@dataclass
class Kueue:
    """The truth Kueue holds for one queue (admitted Workloads per flavor) and what it last reported."""

    admitted: dict[str, int] = field(default_factory=dict)

    def reservations(self) -> int:
        return sum(self.admitted.values())

    def report(self, queue: dict[str, Any]) -> dict[str, Any]:
        """Kueue catches up: its status for the queue's current generation (a HoldAndDrain queue is
        evicted first)."""
        policy = queue["spec"].get("stopPolicy", "None")
        if policy == "HoldAndDrain":
            self.admitted.clear()
        names = set(_names(queue["spec"].get("resourceGroups")))
        # Workloads on a flavor the queue no longer references keep reserving until evicted.
        busy = frozenset(n for n, count in self.admitted.items() if count and n in names)
        return _kueue(queue, reserving=self.reservations(), busy=busy)

    def admit(self, queue: dict[str, Any], flavor_index: int, live: set[str]) -> None:
        """An active queue admits a Workload onto one of its live flavors (Kueue's status not yet updated)."""
        if queue["spec"].get("stopPolicy", "None") != "None":
            return
        names = [n for n in _names(queue["spec"].get("resourceGroups")) if n in live]
        if names:
            name = names[flavor_index % len(names)]
            self.admitted[name] = self.admitted.get(name, 0) + 1


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("decide"), st.just(0)),
        st.tuples(st.just("kueue"), st.just(0)),
        st.tuples(st.just("admit"), st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("flavors"), st.integers(min_value=0, max_value=len(FLAVORS) - 1)),
        st.tuples(st.just("topology"), st.integers(min_value=0, max_value=1)),
        st.tuples(st.just("node"), st.integers(min_value=0, max_value=1)),
        st.tuples(st.just("inactive"), st.integers(min_value=0, max_value=1)),
        st.tuples(st.just("admin"), st.integers(min_value=0, max_value=2)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=examples(1000))
@given(STEPS)
def test_runs_against_kueue_never_empty_a_queue_holding_a_reservation(steps: list[tuple[str, int]]) -> None:
    state = State(
        flavors="old",
        topologies=TOPOLOGIES,
        extra_node=False,
        inactive=False,
        owns_stop_policy=True,
        drain_when_no_flavors=True,
        queue=None,
        status="missing",
        reservations=0,
    )
    kueue = Kueue()
    for step, arg in [("decide", 0), *steps, ("kueue", 0), ("decide", 0)]:
        queue = state.queue
        if step == "decide":
            state.status = "missing" if queue is None or "status" not in queue else state.status
            decision = queues.decide(state.inputs())
            if decision.body is None or decision.drain_only:
                continue
            _check(state, decision)
            groups = decision.body["spec"]["resourceGroups"]
            if queue is not None and queue["spec"].get("resourceGroups") and not groups:
                assert kueue.reservations() == 0, "emptied a queue Kueue holds a reservation on"
            state.queue, state.owns_stop_policy = _applied(queue, decision.body, state.owns_stop_policy)
            state.status = _status_of(state.queue)
        elif queue is None:
            continue
        elif step == "kueue":
            state.queue = kueue.report(queue)
            state.status, state.reservations = "current", kueue.reservations()
        elif step == "admit":
            flavors, _ = FLAVORS[state.flavors]
            live = {f["metadata"]["name"] for f in flavors if not f["metadata"].get("deletionTimestamp")}
            kueue.admit(queue, arg, live)
        elif step == "flavors":
            state.flavors = sorted(FLAVORS)[arg]
        elif step == "topology":
            state.topologies = (TOPOLOGIES, ONLY_OLD_TOPOLOGY)[arg]
        elif step == "node":
            state.extra_node = bool(arg)
        elif step == "inactive":
            state.inactive = bool(arg)
        else:  # an admin sets (or clears) the stop policy with their own field manager
            policy = ("None", "Hold", "HoldAndDrain")[arg]
            changed = queue["spec"].get("stopPolicy") != policy
            queue = {**queue, "spec": {**queue["spec"], "stopPolicy": policy}}
            if changed:
                queue["metadata"] = {**queue["metadata"], "generation": queue["metadata"]["generation"] + 1}
            state.queue, state.owns_stop_policy = queue, False
            state.status = _status_of(queue)


def _status_of(queue: dict[str, Any]) -> str:
    if "status" not in queue:
        return "missing"
    return "current" if queues._reported(queue) is not None else "stale"
