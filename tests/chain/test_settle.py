"""The settle gate (``chain/settle.py`` and its use in ``Steps``): at a cold start the chain writes each
flavor, queue plan and InstanceType status once its inputs are complete, not once per arriving Node
profile; a Node whose profile never comes holds nothing back for longer than ``chain-settle-seconds``
after the labelling stops; and a stop-policy change never waits."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import flavors, pools, queues, settle
from gpustack_worker.chain.controller import Chain
from gpustack_worker.chain.nodes import node_hardware, unprofiled_hardware
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from tests.chain.builders import HOSTNAME_PROFILE, node
from tests.kit.properties import examples

if TYPE_CHECKING:
    from gpustack_worker.chain.nodes import NodeHardware
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer

RACK_PROFILE = keys.topology_profile(["example.com/rack", keys.HOSTNAME])
PROFILES = (HOSTNAME_PROFILE, RACK_PROFILE)
TOPOLOGIES = frozenset(keys.topology_name(p) for p in PROFILES)
XEON = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
EPYC = "AMD EPYC 7R32"
A10G, T4 = ("nvidia", "NVIDIA A10G", 23028), ("nvidia", "Tesla T4", 15360)
#: (vendor, CPU, cores, devices): CPU-only, one and four cards, two models on one CPU, arm64 below.
SHAPES: tuple[tuple[str, str, int, tuple[tuple[str, str, int, int], ...]], ...] = (
    ("Intel", XEON, 4, ()),
    ("Intel", XEON, 96, ()),
    ("AMD", EPYC, 8, ((*A10G[:2], 1, A10G[2]),)),
    ("AMD", EPYC, 48, ((*A10G[:2], 4, A10G[2]),)),
    ("Intel", XEON, 4, ((*T4[:2], 1, T4[2]),)),
    ("AMD", EPYC, 48, ((*T4[:2], 4, T4[2]),)),
)


def _node(i: int, shape: int, profile: str | None, *, arm: bool = False) -> dict[str, Any]:
    vendor, cpu, cores, devices = SHAPES[shape]
    return node(
        f"n{i}",
        vendor=vendor,
        cpu_name=cpu,
        cores=cores,
        devices=devices,
        profile=profile,
        arch="arm64" if arm else "amd64",
    )


# --- held ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pending", "last_arrival", "now", "settle_s", "nodes", "recheck"),
    [
        ({}, None, 5.0, 10.0, set(), None),
        ({"a": 0.0}, None, 5.0, 0.0, set(), None),  # 0 disables the gate
        ({"a": 0.0}, None, 5.0, 10.0, {"a"}, 5.0),  # young: held
        ({"a": 0.0}, None, 10.0, 10.0, set(), None),  # seen settle ago, nothing arrived since: free
        ({"a": 0.0}, 8.0, 12.0, 10.0, {"a"}, 6.0),  # old, but profiles still arriving: held
        ({"a": 0.0}, 8.0, 18.0, 10.0, set(), None),  # the labelling stopped settle ago: the stuck one is free
        ({"a": 0.0, "b": 9.0}, 2.0, 15.0, 10.0, {"b"}, 4.0),  # only the young one still holds
    ],
)
def test_held(
    pending: dict[str, float],
    last_arrival: float | None,
    now: float,
    settle_s: float,
    nodes: set[str],
    recheck: float | None,
) -> None:
    got = settle.held(pending, last_arrival=last_arrival, now=now, settle=settle_s)
    assert got == settle.Held(frozenset(nodes), recheck)


@settings(max_examples=examples(200))
@given(
    pending=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 100).map(float)),
    last_arrival=st.none() | st.integers(0, 100).map(float),
    after=st.integers(0, 100).map(float),
    later=st.integers(0, 100).map(float),
    settle_s=st.integers(0, 60).map(float),
)
def test_held_ends_and_never_comes_back_without_an_arrival(
    pending: dict[str, float], last_arrival: float | None, after: float, later: float, settle_s: float
) -> None:
    """Without a new arrival, what holds only shrinks as time passes, each held Node holds at most
    ``settle`` more seconds, and nothing holds once ``recheck_after`` has passed for each: a Node whose
    profile never comes never blocks its pool forever."""
    latest = max([*pending.values(), last_arrival or 0.0], default=0.0)
    now = latest + after
    first = settle.held(pending, last_arrival=last_arrival, now=now, settle=settle_s)
    second = settle.held(pending, last_arrival=last_arrival, now=now + later, settle=settle_s)
    assert second.nodes <= first.nodes
    assert not settle.held(pending, last_arrival=last_arrival, now=latest + settle_s, settle=settle_s).nodes
    if first.nodes:
        assert first.recheck_after is not None and 0 < first.recheck_after <= settle_s
        expired = settle.held(
            pending, last_arrival=last_arrival, now=now + first.recheck_after, settle=settle_s
        )
        assert len(expired.nodes) < len(first.nodes)
    else:
        assert first.recheck_after is None


# --- wait ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("held_for", "own", "waited", "settle_s", "expected"),
    [
        (None, False, 0.0, 10.0, None),  # complete: write now
        (4.0, False, 0.0, 10.0, 4.0),  # a held Node of the pool: until it stops holding at most
        (4.0, True, 0.0, 10.0, settle.OWN_WRITES_POLL_S),  # and our writes in flight: recheck sooner
        (None, True, 0.0, 10.0, settle.OWN_WRITES_POLL_S),  # our flavor writes not in the cache yet
        (None, True, 9.5, 10.0, 0.5),  # the key's own bound
        (None, True, 10.0, 10.0, None),  # waited long enough: write on what there is
        (4.0, True, 0.0, 0.0, None),  # the gate is off
    ],
)
def test_wait(
    held_for: float | None, own: bool, waited: float, settle_s: float, expected: float | None
) -> None:
    assert settle.wait(held_for=held_for, own_writes=own, waited=waited, settle=settle_s) == expected


# --- deferrable ------------------------------------------------------------------------------------


def _queue(policy: str | None, **annotations: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": []}
    if policy is not None:
        spec["stopPolicy"] = policy
    return {"metadata": {"name": "q", "annotations": annotations}, "spec": spec}


_MARK = {keys.EMPTY_PLAN_HOLD: "true"}
_DRAINING = {keys.MIGRATION_PHASE: queues.PHASE_DRAINING, keys.MIGRATION_STOP_POLICY: queues.NONE}


@pytest.mark.parametrize(
    ("body", "queue", "expected"),
    [
        (None, None, False),
        (_queue(queues.HOLD, **_MARK), None, True),  # a first write: the queue is created complete
        (_queue(queues.NONE), _queue(queues.NONE), True),  # only the plan / quota / condition changes
        (_queue(queues.HOLD, **_MARK), _queue(queues.HOLD, **_MARK), True),
        (_queue(None), _queue(queues.HOLD), True),  # someone else's stop, left to them
        (_queue(queues.NONE), _queue(queues.HOLD, **_MARK), False),  # the empty-plan hold released
        (_queue(queues.HOLD), _queue(queues.NONE), False),  # inactive: held at once
        (_queue(queues.HOLD_AND_DRAIN, **_DRAINING), _queue(queues.NONE), False),  # a drain starts
        (_queue(queues.NONE), _queue(queues.HOLD_AND_DRAIN, **_DRAINING), False),  # restored
        (_queue(None, **_DRAINING), _queue(queues.HOLD), False),  # migration annotations change
        (
            _queue(queues.NONE),
            {**_queue(queues.NONE), "metadata": {"name": "q", "deletionTimestamp": "now"}},
            False,
        ),
    ],
)
def test_deferrable(body: dict[str, Any] | None, queue: dict[str, Any] | None, expected: bool) -> None:
    assert settle.deferrable(body, queue) is expected


# --- families --------------------------------------------------------------------------------------


@settings(max_examples=examples(50))
@given(shape=st.integers(0, len(SHAPES) - 1), profile=st.sampled_from(PROFILES), mixed=st.booleans())
def test_a_pending_node_names_the_families_its_profile_will_feed(
    shape: int, profile: str, mixed: bool
) -> None:
    pending = unprofiled_hardware(_node(0, shape, None))
    profiled = node_hardware(_node(0, shape, profile))
    assert pending is not None and profiled is not None
    assert unprofiled_hardware(_node(0, shape, profile)) is None
    planned = flavors.plan_flavors([profiled], mixed_on_node=mixed)
    assert flavors.node_families(pending, mixed_on_node=mixed) == {p.family for p in planned}


def test_an_unmanaged_node_is_not_pending() -> None:
    vendor, cpu, cores, devices = SHAPES[2]
    off = node(
        "off", vendor=vendor, cpu_name=cpu, cores=cores, devices=devices, managed="false", profile=None
    )
    assert unprofiled_hardware(off) is None


# --- a cold start, over every arrival order --------------------------------------------------------


class _ColdStart:
    """The chain's decisions at a cold start, composed as ``Steps`` composes them (the flavor pass, the
    authoring, the queue plan, each behind the gate), with every write counted. Every pending Node is
    young (it holds), so this is the gate without its time bound."""

    def __init__(self, fleet: list[tuple[dict[str, Any], dict[str, Any]]], *, mixed: bool) -> None:
        self.fleet = fleet
        self.mixed = mixed
        self.profiled: set[int] = set()
        self.flavors: dict[str, dict[str, Any]] = {}
        self.types: dict[str, dict[str, Any]] = {}
        self.plans: dict[str, queues.Plan | queues.Refusal] = {}
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()

    def hardware(self) -> list[NodeHardware]:
        views = [node_hardware(self.fleet[i][1]) for i in sorted(self.profiled)]
        return [v for v in views if v is not None]

    def pass_(self) -> None:
        pending = {
            f"n{i}": v
            for i in range(len(self.fleet))
            if i not in self.profiled and (v := unprofiled_hardware(self.fleet[i][0])) is not None
        }
        held = settle.held(dict.fromkeys(pending, 0.0), last_arrival=0.0, now=1.0, settle=10.0)
        blocked: set[flavors.Family] = set()
        for name in held.nodes:
            blocked |= flavors.node_families(pending[name], mixed_on_node=self.mixed)
        hardware = self.hardware()
        planned = flavors.plan_flavors(hardware, mixed_on_node=self.mixed)
        plans = [p for p in planned if p.family not in blocked]
        for plan in plans:
            body = flavors.flavor_body(plan, mixed_on_node=self.mixed, aware=False)
            if self.flavors.get(plan.name) != body:
                self.flavors[plan.name] = body
                self.writes["flavor", plan.name] += 1
        if not held.nodes:
            for name in set(self.flavors) - {p.name for p in planned}:
                del self.flavors[name]
                self.writes["flavor", name] += 1
        for plan in plans:
            it = pools.derived_instance_type(plan, aware=False)
            self.types.setdefault(it["metadata"]["name"], it)
        views = [pending[n] for n in sorted(held.nodes)]
        for name, it in self.types.items():
            pool = pools.identity_of(it)
            selector = pools.flavor_selector(pools.schedule_labels(pool, aware=False))
            if queues.pool_nodes(pool, views, mixed_on_node=self.mixed, selector=selector):
                continue  # the pool's inputs are still arriving
            outcome = queues.plan_queue(
                pool, selector, list(self.flavors.values()), hardware, TOPOLOGIES, mixed_on_node=self.mixed
            )
            if self.plans.get(name) != outcome:
                self.plans[name] = outcome
                self.writes["queue", name] += 1


@settings(max_examples=examples(60))
@given(data=st.data())
def test_cold_start_writes_each_object_once_in_any_arrival_order(data: st.DataObject) -> None:
    """Over random fleets, random orders in which the profiles arrive and random moments at which the
    chain reconciles: every flavor and every queue plan is written at most once, and the end state is
    what a profiled fleet gives (every flavor as planned, every queue a complete plan)."""
    shapes = data.draw(st.lists(st.integers(0, len(SHAPES) - 1), min_size=1, max_size=14), label="shapes")
    mixed = data.draw(st.booleans(), label="mixed")
    fleet = []
    for i, shape in enumerate(shapes):
        profile = data.draw(st.sampled_from(PROFILES))
        arm = data.draw(st.booleans())
        fleet.append((_node(i, shape, None, arm=arm), _node(i, shape, profile, arm=arm)))
    order = data.draw(st.permutations(range(len(fleet))), label="order")
    chain = _ColdStart(fleet, mixed=mixed)
    chain.pass_()
    for i in order:
        chain.profiled.add(i)
        if data.draw(st.booleans(), label="reconcile"):
            chain.pass_()
    chain.pass_()
    assert max(chain.writes.values(), default=0) <= 1, chain.writes
    everything = chain.hardware()
    assert chain.flavors == flavors.desired_flavors(everything, mixed_on_node=mixed, aware=False)
    assert all(isinstance(p, queues.Plan) and p.groups for p in chain.plans.values()), chain.plans
    assert set(chain.plans) == {
        pools.derived_instance_type(p, aware=False)["metadata"]["name"]
        for p in flavors.plan_flavors(everything, mixed_on_node=mixed)
    }


# --- Steps: what it tracks -------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _feed(informer: Informer, kind: str, obj: dict[str, Any]) -> None:
    informer._apply({"type": kind, "object": copy.deepcopy(obj)})


@pytest.fixture
def chain() -> tuple[Chain, _Clock]:
    client = cast("Client", object())
    source = SettingsSource(client, model=WorkerSettings, env={}, post_events=False)
    chain = Chain(client, source, InformerRegistry(client))
    clock = _Clock()
    chain.steps.monotonic = clock
    return chain, clock


def _device_plan(obj: dict[str, Any]) -> flavors.FlavorPlan:
    view = node_hardware(obj)
    assert view is not None
    return next(p for p in flavors.plan_flavors([view], mixed_on_node=True) if p.accelerated)


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


def test_steps_hold_a_pool_until_its_last_profile_arrives(chain: tuple[Chain, _Clock]) -> None:
    c, clock = chain
    steps = c.steps
    a10g = [_with_rv(_node(i, 3, None), 1) for i in range(3)]
    t4 = _with_rv(_node(9, 5, HOSTNAME_PROFILE), 1)
    for n in [*a10g, t4]:
        _feed(c.nodes, "ADDED", n)
    assert set(steps.held().nodes) == {"n0", "n1", "n2"}
    a10g_type = pools.derived_instance_type(_device_plan(_node(0, 3, HOSTNAME_PROFILE)), aware=False)
    t4_type = pools.derived_instance_type(_device_plan(t4), aware=False)
    assert a10g_type["metadata"]["name"].endswith("a10g-linux-amd64")
    assert steps._pool_held(a10g_type, steps.held())
    assert not steps._pool_held(t4_type, steps.held())
    assert steps._wait("queue", "a10g", a10g_type) == pytest.approx(10.0)
    assert steps._wait("queue", "t4", t4_type) is None

    # Profiles arrive: each arrival keeps the rest held, however old they are.
    for i in range(2):
        clock.t += 8.0
        _feed(c.nodes, "MODIFIED", _with_rv(_node(i, 3, HOSTNAME_PROFILE), 2))
        assert steps.held().nodes == {f"n{j}" for j in range(i + 1, 3)}
    assert steps._pool_held(a10g_type, steps.held())
    # The last one never comes: settle seconds after the last arrival it holds nothing back.
    clock.t += 10.0
    assert not steps.held().nodes
    assert steps._wait("queue", "a10g", a10g_type) == settle.OWN_WRITES_POLL_S  # no flavor pass since
    steps._flavor_pass_started = clock.t
    assert steps._wait("queue", "a10g", a10g_type) is None
    # Deleting it counts as its arrival (nothing pending is left).
    _feed(c.nodes, "DELETED", a10g[2])
    assert not steps._pending


def test_steps_wait_for_their_own_flavor_writes_at_most_settle_seconds(chain: tuple[Chain, _Clock]) -> None:
    c, clock = chain
    steps = c.steps
    t4 = _with_rv(_node(9, 5, HOSTNAME_PROFILE), 1)
    _feed(c.nodes, "ADDED", t4)
    plan = _device_plan(t4)
    it = pools.derived_instance_type(plan, aware=False)
    body = _with_rv(flavors.flavor_body(plan, mixed_on_node=True, aware=False), 7)
    steps._flavor_writes[plan.name] = (7, clock.t)  # created, the watch event not there yet
    assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
    _feed(c.flavors, "ADDED", body)
    # The flavor's Topology is on its way (the topology controller created it): TopologyReady waits.
    assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
    topology = {
        "apiVersion": kinds.TOPOLOGY.api_version,
        "kind": kinds.TOPOLOGY.kind,
        "metadata": {"name": body["spec"]["topologyName"], "resourceVersion": "3"},
    }
    _feed(c.topologies, "ADDED", topology)
    assert steps._wait("queue", "t4", it) is None  # the cache has both
    assert not steps._flavor_writes
    # A write whose object never reaches the cache (deleted meanwhile) is forgotten after the setting.
    steps._flavor_writes["gone"] = (8, clock.t)
    assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
    clock.t += 10.0
    assert steps._wait("queue", "t4", it) is None
    # A profile that arrived after the last flavor pass started: its flavor is not planned yet.
    pending = _with_rv(_node(8, 5, None), 1)
    _feed(c.nodes, "ADDED", pending)
    clock.t += 0.1
    _feed(c.nodes, "MODIFIED", _with_rv(_node(8, 5, HOSTNAME_PROFILE), 2))
    assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
    steps._flavor_pass_started = clock.t + 0.1  # the next pass plans it
    clock.t += 0.1
    assert steps._wait("queue", "t4", it) is None
    # The InstanceType's status waits for its queue, bounded by the setting.
    assert steps._wait("instancetype", "t4", it, also=True) == settle.OWN_WRITES_POLL_S
    clock.t += 9.5
    assert steps._wait("instancetype", "t4", it, also=True) == pytest.approx(0.5)
    clock.t += 0.5
    assert steps._wait("instancetype", "t4", it, also=True) is None


def test_the_live_families_follow_every_node_event(chain: tuple[Chain, _Clock]) -> None:
    """The family counts the Node handler keeps equal a recount over the profiled Nodes after adds,
    changes of shape and deletes."""
    c, _clock = chain
    steps = c.steps

    def recount() -> set[flavors.Family]:
        mixed = steps.settings().instance_type_mixed_on_node
        return {f for n in steps.hardware() for f in flavors.node_families(n, mixed_on_node=mixed)}

    assert steps._live_families() == set()
    for i, shape in enumerate([3, 3, 5]):
        _feed(c.nodes, "ADDED", _with_rv(_node(i, shape, HOSTNAME_PROFILE), 1))
        assert steps._live_families() == recount()
    _feed(c.nodes, "MODIFIED", _with_rv(_node(2, 3, HOSTNAME_PROFILE), 2))  # the T4 Node now an A10G one
    assert steps._live_families() == recount()
    _feed(c.nodes, "DELETED", _with_rv(_node(0, 3, HOSTNAME_PROFILE), 3))
    _feed(c.nodes, "MODIFIED", _with_rv(_node(1, 3, None), 3))  # its profile gone: pending, not profiled
    only = node_hardware(_node(2, 3, HOSTNAME_PROFILE))
    assert only is not None
    mixed = steps.settings().instance_type_mixed_on_node
    assert steps._live_families() == recount() == set(flavors.node_families(only, mixed_on_node=mixed))


async def test_the_flavor_pass_plans_nothing_while_every_family_is_held(chain: tuple[Chain, _Clock]) -> None:
    """A cold fleet being labelled: every profiled Node's family also has a held pending Node, so the pass
    returns before planning over every Node (the client here refuses any call) and polls the hold."""
    c, _clock = chain
    steps = c.steps
    for i in range(3):
        _feed(c.nodes, "ADDED", _with_rv(_node(i, 3, None), 1))
    _feed(c.nodes, "ADDED", _with_rv(_node(3, 3, HOSTNAME_PROFILE), 1))
    assert steps.held().nodes == {"n0", "n1", "n2"}
    result = await steps.flavors("flavors")
    assert result.requeue_after == steps.held().recheck_after is not None
    assert steps._flavor_pass_started is None  # the arrivals are not planned yet
    # A profiled Node of a family nothing holds (a T4): the pass plans, and needs the client.
    _feed(c.nodes, "ADDED", _with_rv(_node(9, 5, HOSTNAME_PROFILE), 1))
    with pytest.raises(AttributeError):
        await steps.flavors("flavors")
    assert steps._flavor_pass_started is not None


class _HeldWrite:
    """The flavor applier and the chain's client as a cold pass meets them: no flavor exists yet (the
    holders' LIST is empty), and the first apply waits on :attr:`release` — the moment a queue reconcile
    runs in between on a loaded machine."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def list(self, _resource: Any, **_kw: Any) -> tuple[list[dict[str, Any]], str]:
        return [], "1"

    async def apply(self, _resource: Any, body: dict[str, Any], _cached: Any, **_kw: Any) -> dict[str, Any]:
        self.entered.set()
        await self.release.wait()
        return _with_rv(copy.deepcopy(body), 7)


async def test_a_queue_waits_while_a_flavor_pass_is_under_way(chain: tuple[Chain, _Clock]) -> None:
    """Between a flavor pass's start and its first write's answer nothing of the pass is in the cache or
    remembered as written; a queue planned then saw no flavor (CI: a CPU queue created empty, then
    written again a second later). It waits while the pass runs, then for the pass's writes."""
    c, _clock = chain
    steps = c.steps
    t4 = _with_rv(_node(9, 5, HOSTNAME_PROFILE), 1)
    _feed(c.nodes, "ADDED", t4)
    it = pools.derived_instance_type(_device_plan(t4), aware=False)
    held_write = _HeldWrite()
    steps.client = held_write  # type: ignore[assignment]  # only list() is asked of it before the write
    steps.flavor_applier = held_write  # type: ignore[assignment]
    assert steps._wait("queue", "t4", it) is None  # no pass has started: nothing planned to wait for
    task = asyncio.create_task(steps.flavors("flavors"))
    try:
        await asyncio.wait_for(held_write.entered.wait(), 5)
        assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
        held_write.release.set()
        with contextlib.suppress(AttributeError):  # authoring the InstanceType needs a real client
            await asyncio.wait_for(task, 5)
        assert not steps._flavor_pass_writing
        assert steps._flavor_writes  # written, the watch event not there yet: still waits
        assert steps._wait("queue", "t4", it) == settle.OWN_WRITES_POLL_S
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, AttributeError):
            await task


def test_a_family_a_pass_held_back_makes_queues_wait_for_the_next_pass(chain: tuple[Chain, _Clock]) -> None:
    """A pass that left a family for its held pending Node is out of date once that hold runs out with no
    profile arriving (a refused label write): the next pass writes the family's flavor, so a queue of that
    pool waits for it instead of being written without it and again after."""
    c, clock = chain
    steps = c.steps
    _feed(c.nodes, "ADDED", _with_rv(_node(0, 3, HOSTNAME_PROFILE), 1))  # an A10G Node with its profile
    _feed(c.nodes, "ADDED", _with_rv(_node(1, 3, None), 1))  # another, its profile never comes
    a10g_type = pools.derived_instance_type(_device_plan(_node(0, 3, HOSTNAME_PROFILE)), aware=False)
    held = steps.held()
    assert held.nodes == {"n1"}
    steps._flavor_pass_started = clock.t  # a pass (of other families) ran meanwhile
    steps._flavor_pass_blocked = frozenset(steps._held_families(held))
    assert steps._flavor_pass_blocked
    assert steps._wait("queue", "a10g", a10g_type) == pytest.approx(10.0)  # the pool itself is held
    clock.t += 10.0  # the hold ran out: the A10G family is free, its flavor not written yet
    assert not steps.held().nodes
    assert steps._wait("queue", "a10g", a10g_type) == settle.OWN_WRITES_POLL_S
    steps._flavor_pass_started = clock.t  # the next pass plans it, nothing held back
    steps._flavor_pass_blocked = frozenset()
    assert steps._wait("queue", "a10g", a10g_type) is None
