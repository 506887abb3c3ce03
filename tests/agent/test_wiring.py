"""The agent's wiring without a server: which events reach the fit queue at once and which after the
coalescing window, and how many workers each controller gets in each mode."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, controller, fit, nodefeature
from gpustack_worker.agent.controller import Agent, kept
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.informer import ADDED, DELETED, MODIFIED
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.properties import examples
from tests.runtime.fake_api import FakeApi, FakeServer

SPECS = {spec.name: spec for spec in packaged_scenario("mixed-4").nodes}


def _agent(
    node_name: str | None = None, env: dict[str, str] | None = None, server: FakeServer | None = None
) -> Agent:
    client = Client(FakeApi(server or FakeServer(FakeClock()), "agent"))
    source = SettingsSource(client, model=WorkerSettings, env=env or {})
    return Agent(client, source, node_name=node_name, fit_clock=FakeClock())


def _node(name: str, **labels: str) -> Any:
    return freeze(_raw_node(name, labels=labels))


def _raw_node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    node = render.render_node(SPECS["gpu-a100"].model_copy(update={"name": name}), "2026-01-01T00:00:00Z")
    node["metadata"]["uid"] = f"uid-{name}"
    node["metadata"]["labels"].update(labels or {})
    node["status"]["capacity"].update(capacity or {})
    node["status"]["allocatable"].update(allocatable or {})
    return node


def _devices(name: str) -> Any:
    devices = render.render_devices(SPECS["gpu-a100"].model_copy(update={"name": name}), f"uid-{name}")
    assert devices is not None
    return freeze(devices)


async def test_the_first_list_reaches_the_fit_queue_without_the_window() -> None:
    """A cold start: the nodes and Devices of the first LIST are the state as it stands, nothing to
    coalesce, so every node's fit reconcile is due at once (as its NodeFeature and capacity are)."""
    agent = _agent()
    agent.nodes._dispatch(ADDED, None, _node("a"))
    agent.devices._dispatch(ADDED, None, _devices("b"))
    assert len(agent.fit.queue) == 2 and agent.fit.queue.delayed == 0
    assert len(agent.nodefeature.queue) == len(agent.capacity.queue) == 2


async def test_after_the_first_list_fit_events_wait_for_the_window() -> None:
    agent = _agent()
    agent.nodes._synced.set()
    agent.devices._synced.set()
    agent.nodes._dispatch(ADDED, None, _node("new"))  # a node created while the agent runs
    agent.nodes._dispatch(MODIFIED, _node("a"), _node("a", extra="x"))
    agent.devices._dispatch(MODIFIED, _devices("b"), _devices("b"))
    assert len(agent.fit.queue) == 0 and agent.fit.queue.delayed == 3
    assert len(agent.nodefeature.queue) == 3  # the other controllers take them at once, as before


@settings(max_examples=examples(40))
@given(events=st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"])), max_size=12))
def test_fit_is_immediate_exactly_for_events_of_the_first_list(events: list[tuple[bool, str]]) -> None:
    """Whatever mix of first-list and live events: the keys taken at once are exactly those seen in
    the first LIST, the others wait for the window."""
    agent = _agent()
    listed: set[str] = set()
    for synced, name in sorted(events, key=lambda e: e[0]):  # the first LIST comes first
        if synced:
            agent.nodes._synced.set()
            agent.nodes._dispatch(MODIFIED, _node(name), _node(name, changed=name))
        else:
            listed.add(name)
            agent.nodes._dispatch(ADDED, None, _node(name))
    assert len(agent.fit.queue) == len(listed)
    assert agent.fit.queue.delayed == len({n for s, n in events if s})


@pytest.mark.parametrize(
    ("node_name", "env", "workers"),
    [
        (None, {}, 8),
        ("gpu-a100", {}, 2),
        (None, {"GPUSTACK_ALL_NODES_WORKERS": "3"}, 3),
        ("gpu-a100", {"GPUSTACK_CONTROLLER_WORKERS": "4"}, 4),
    ],
)
async def test_workers_per_controller(node_name: str | None, env: dict[str, str], workers: int) -> None:
    agent = _agent(node_name, env)
    assert {c.workers for c in (agent.nodefeature, agent.capacity, agent.fit)} == {workers}


@settings(max_examples=examples(100))
@given(asks=st.lists(st.integers(0, 4), max_size=30))
def test_kept_answers_as_the_view_for_any_order_of_objects(asks: list[int]) -> None:
    """Asked about any sequence of objects (some asked again, some not), the kept view answers what the
    view answers; the view runs only for an object that is not one of the last two asked."""
    pool = [{"n": i} for i in range(5)]
    runs: list[int] = []

    def view(obj: dict[str, int]) -> int:
        runs.append(obj["n"])
        return obj["n"] * 10

    kept_view = kept(view)
    recent: list[int] = []
    for i in asks:
        before = len(runs)
        assert kept_view(pool[i]) == i * 10
        assert (len(runs) == before) == (i in recent)
        recent = [*(r for r in recent if r != i), i][-2:] if len(runs) > before else recent


async def test_a_node_event_computes_the_node_facts_twice_not_once_per_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four watches ask one predicate per Node event: the old and the new object's facts are computed
    once each, and the event still reaches every controller whose inputs changed."""
    runs: list[Any] = []

    def counting(obj: Any) -> Any:
        runs.append(obj)
        return node_facts(obj)

    monkeypatch.setattr(controller, "node_facts", counting)
    agent = _agent()
    agent.nodes._synced.set()
    old, new = _node("a"), _node("a", extra="x")
    agent.nodes._dispatch(MODIFIED, old, new)
    assert len(runs) == 2
    assert len(agent.nodefeature.queue) == len(agent.capacity.queue) == 1
    assert agent.fit.queue.delayed == 1
    same = _node("a", extra="x")  # a new object, equal facts: no controller takes it
    agent.nodes._dispatch(MODIFIED, new, same)
    assert len(runs) == 3, "the new object of the previous event was kept"
    assert agent.fit.queue.delayed == 1 and len(agent.nodefeature.queue) == 1


# --- a Node update wakes the controllers that read what it changed (agent/reads.py) ----------------------
UNITS = keys.sliced_resource("nvidia.com/gpu", "units")
FIT_LABEL = keys.sliced_max_free_units_key("nvidia-a100-sxm4-80gb")


def _synced_agent(server: FakeServer | None = None) -> Agent:
    agent = _agent(server=server)
    agent.nodes._synced.set()  # past the first LIST: fit events wait for the window
    agent.devices._synced.set()
    agent.features._synced.set()
    return agent


def _woken(agent: Agent) -> tuple[int, int, int, int]:
    """(NodeFeature queued, capacity queued, fit queued at once, fit waiting for the window)."""
    return (
        len(agent.nodefeature.queue),
        len(agent.capacity.queue),
        len(agent.fit.queue),
        agent.fit.queue.delayed,
    )


@pytest.mark.parametrize(
    ("change", "woken"),
    [
        pytest.param({}, (0, 0, 0, 0), id="nothing read (a new object, equal facts)"),
        pytest.param({"capacity": {UNITS: "6400000"}}, (0, 1, 0, 0), id="a counting key in capacity"),
        pytest.param({"allocatable": {UNITS: "6400000"}}, (0, 1, 0, 0), id="a counting key in allocatable"),
        pytest.param({"labels": {FIT_LABEL: "800000"}}, (0, 0, 0, 1), id="a fit label"),
        pytest.param({"labels": {"topology.gpustack.ai/rack": "r9"}}, (1, 1, 0, 1), id="another label"),
        pytest.param({"capacity": {"nvidia.com/gpu.sliced": "256"}}, (1, 1, 0, 1), id="a bare pool"),
        pytest.param(
            {"labels": {FIT_LABEL: "0"}, "capacity": {UNITS: "0"}},
            (0, 1, 0, 1),
            id="a fit label and a counting key",
        ),
    ],
)
async def test_a_node_update_wakes_only_the_controllers_that_read_what_changed(
    change: dict[str, dict[str, str]], woken: tuple[int, int, int, int]
) -> None:
    agent = _synced_agent()
    published = {
        "labels": {FIT_LABEL: "1600000"},
        "capacity": {UNITS: "3200000"},
        "allocatable": {UNITS: "3200000"},
    }
    old = freeze(_raw_node("a", **published))
    new = freeze(_raw_node("a", **{k: {**published[k], **change.get(k, {})} for k in published}))
    agent.nodes._dispatch(MODIFIED, old, new)
    assert _woken(agent) == woken


async def test_a_node_created_or_deleted_wakes_every_controller() -> None:
    agent = _synced_agent()
    agent.nodes._dispatch(ADDED, None, _node("a"))
    agent.nodes._dispatch(DELETED, _node("b"), None)
    assert _woken(agent) == (2, 2, 0, 2)


def _echo(written: Any, base: Any, **changed: dict[str, str]) -> Any:
    """The Node as the watch delivers it after our write: ``base`` with ``changed`` at the written
    resourceVersion."""
    node = _json_copy(base)
    for where, values in changed.items():
        target = node["metadata"] if where == "labels" else node["status"]
        target.setdefault(where, {}).update(values)
    node["metadata"]["resourceVersion"] = written["metadata"]["resourceVersion"]
    return freeze(node)


def _json_copy(obj: Any) -> Any:
    return orjson.loads(orjson.dumps(obj, default=dict))


async def _cached_node(agent: Agent, name: str) -> Any:
    """The Node as the server stores it (created through the agent's client), as the cache holds it."""
    created = await agent.steps.client.create(kinds.NODE, _raw_node(name))
    return freeze(created)


async def test_the_echo_of_the_capacity_write_wakes_nobody_but_a_list_update_still_passes() -> None:
    agent = _synced_agent(FakeServer(FakeClock()))
    cached = await _cached_node(agent, "a")
    wanted = {UNITS: 6_400_000}
    applier = agent.steps.applier(capacity.FIELD_MANAGER)
    written = await applier.apply_status(kinds.NODE, capacity.apply_body("a", wanted), cached)
    assert written is not None
    counted = {UNITS: "6400000"}
    echo = _echo(written, cached, capacity=counted, allocatable=counted)
    assert int(echo["metadata"]["resourceVersion"]) > int(cached["metadata"]["resourceVersion"])
    agent.nodes._dispatch(MODIFIED, cached, echo)
    assert _woken(agent) == (0, 0, 0, 0), "our own write's event: the capacity reconcile would be a no-op"
    # The same pair from a relist (the listed object may fold in writes the watch never delivered).
    _dispatch_from_a_list(agent, cached, echo)
    assert _woken(agent) == (0, 1, 0, 0)


def _dispatch_from_a_list(agent: Agent, old: Any, new: Any) -> None:
    """The Node update ``old`` → ``new`` handed out as one of a LIST's diffs."""
    agent.nodes.dispatching_list = True
    try:
        agent.nodes._dispatch(MODIFIED, old, new)
    finally:
        agent.nodes.dispatching_list = False


async def test_the_same_update_without_our_write_on_record_wakes_the_capacity_controller() -> None:
    """The control of the test above: the event is dropped because of the recorded write, not its shape."""
    agent = _synced_agent(FakeServer(FakeClock()))
    cached = await _cached_node(agent, "a")
    counted = {UNITS: "6400000"}
    later = {"metadata": {"resourceVersion": str(int(cached["metadata"]["resourceVersion"]) + 1)}}
    agent.nodes._dispatch(MODIFIED, cached, _echo(later, cached, capacity=counted, allocatable=counted))
    assert _woken(agent) == (0, 1, 0, 0)


async def test_another_write_folded_into_ours_is_not_dropped_as_an_echo() -> None:
    """The capacity write was computed from the cached Node, but someone else wrote the Node before it
    landed: the event of our write then comes from their version, not ours — not an echo, the capacity
    controller is woken (their change may be an input)."""
    server = FakeServer(FakeClock())
    agent = _synced_agent(server)
    cached = await _cached_node(agent, "a")
    kubelet = Client(FakeApi(server, "kubelet"))
    pool = {"nvidia.com/gpu.sliced": "256"}
    status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}, "status": {"capacity": pool}}
    theirs = await kubelet.apply(kinds.NODE, status, field_manager="kubelet", subresource="status")
    written = await agent.steps.applier(capacity.FIELD_MANAGER).apply_status(
        kinds.NODE, capacity.apply_body("a", {UNITS: 6_400_000}), cached
    )
    assert written is not None
    assert int(cached["metadata"]["resourceVersion"]) < int(theirs["metadata"]["resourceVersion"])
    assert int(theirs["metadata"]["resourceVersion"]) < int(written["metadata"]["resourceVersion"])
    counted = {UNITS: "6400000"}
    before = _echo(theirs, cached, capacity=pool, allocatable=pool)
    after = _echo(written, before, capacity=counted, allocatable=counted)
    agent.nodes._dispatch(MODIFIED, cached, before)  # their write: a bare pool, read by all three
    assert _woken(agent) == (1, 1, 0, 1)
    key = await agent.capacity.queue.get()  # that reconcile ran
    assert key == "a"
    agent.capacity.queue.done(key)
    assert len(agent.capacity.queue) == 0
    agent.nodes._dispatch(MODIFIED, before, after)  # then our write, on top of theirs
    assert len(agent.capacity.queue) == 1


async def test_the_echo_of_the_fit_write_wakes_nobody() -> None:
    agent = _synced_agent(FakeServer(FakeClock()))
    cached = await _cached_node(agent, "a")
    labels = {FIT_LABEL: "1600000"}
    written = await agent.steps.applier(fit.FIELD_MANAGER).apply(
        kinds.NODE, fit.apply_body("a", labels), cached, force=True
    )
    assert written is not None
    echo = _echo(written, cached, labels=labels)
    agent.nodes._dispatch(MODIFIED, cached, echo)
    assert _woken(agent) == (0, 0, 0, 0)
    _dispatch_from_a_list(agent, cached, echo)
    assert _woken(agent) == (0, 0, 0, 1)


async def test_the_echo_of_the_nodefeature_write_wakes_nobody() -> None:
    agent = _synced_agent(FakeServer(FakeClock()))
    node = _node("a")
    wanted = nodefeature.desired(node_facts(node), None, manual=False, mixed_on_node=True)
    written = await agent.steps.applier(nodefeature.FIELD_MANAGER).apply(kinds.NODE_FEATURE, wanted, None)
    assert written is not None
    agent.features._dispatch(ADDED, None, freeze(written))
    assert _woken(agent) == (0, 0, 0, 0), "our own create's ADDED event"
    agent.features.dispatching_list = True
    try:
        agent.features._dispatch(ADDED, None, freeze(written))
    finally:
        agent.features.dispatching_list = False
    assert _woken(agent) == (1, 0, 0, 0)


class _EventFirst:
    """The agent's client, but the watch event of each apply is handed to the informer before the apply's
    answer is returned (the server sends both at once; the agent often reads the event first).
    ``folded`` makes the event carry another version than the answer (someone else's write came first)."""

    def __init__(self, client: Client, informer: Any, change: dict[str, dict[str, str]]) -> None:
        self.client = client
        self.informer = informer
        self.change = change
        self.folded = False
        self.cached: Any = None

    async def apply(self, resource: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        written = await self.client.apply(resource, body, **kwargs)
        version = int(written["metadata"]["resourceVersion"]) + (1 if self.folded else 0)
        event = _echo({"metadata": {"resourceVersion": str(version)}}, self.cached, **self.change)
        self.informer._dispatch(MODIFIED, self.cached, event)
        return written


@pytest.mark.parametrize("folded", [False, True], ids=["exactly our write", "not our write"])
async def test_the_echo_read_before_the_answer_wakes_nobody_and_any_other_event_is_released(
    folded: bool,
) -> None:
    agent = _synced_agent(FakeServer(FakeClock()))
    cached = await _cached_node(agent, "a")
    counted = {UNITS: "6400000"}
    applier = agent.steps.applier(capacity.FIELD_MANAGER)
    gate = _EventFirst(applier.client, agent.nodes, {"capacity": counted, "allocatable": counted})
    gate.cached, gate.folded = cached, folded
    applier.client = gate  # type: ignore[assignment]
    written = await applier.apply_status(kinds.NODE, capacity.apply_body("a", {UNITS: 6_400_000}), cached)
    assert written is not None
    assert _woken(agent) == ((0, 1, 0, 0) if folded else (0, 0, 0, 0))


async def test_the_nodefeature_create_read_before_its_answer_wakes_nobody() -> None:
    agent = _synced_agent(FakeServer(FakeClock()))
    applier = agent.steps.applier(nodefeature.FIELD_MANAGER)
    real = applier.client

    class AddedFirst:
        async def apply(self, resource: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            written = await real.apply(resource, body, **kwargs)
            agent.features._dispatch(ADDED, None, freeze(written))
            assert _woken(agent) == (0, 0, 0, 0), "held while the create is on its way"
            return written

    applier.client = AddedFirst()  # type: ignore[assignment]
    wanted = nodefeature.desired(node_facts(_node("a")), None, manual=False, mixed_on_node=True)
    assert await applier.apply(kinds.NODE_FEATURE, wanted, None) is not None
    assert _woken(agent) == (0, 0, 0, 0)
