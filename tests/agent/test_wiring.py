"""The agent's wiring without a server: which events reach the fit queue at once and which after the
coalescing window, and how many workers each controller gets in each mode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import controller
from gpustack_worker.agent.controller import Agent, kept
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.informer import ADDED, MODIFIED
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario
from tests.runtime.fake_api import FakeApi, FakeServer

SPECS = {spec.name: spec for spec in packaged_scenario("mixed-4").nodes}


def _agent(node_name: str | None = None, env: dict[str, str] | None = None) -> Agent:
    client = Client(FakeApi(FakeServer(FakeClock()), "agent"))
    source = SettingsSource(client, model=WorkerSettings, env=env or {})
    return Agent(client, source, node_name=node_name, fit_clock=FakeClock())


def _node(name: str, **labels: str) -> Any:
    node = render.render_node(SPECS["gpu-a100"].model_copy(update={"name": name}), "2026-01-01T00:00:00Z")
    node["metadata"]["uid"] = f"uid-{name}"
    node["metadata"]["labels"].update(labels)
    return freeze(node)


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


@settings(max_examples=40)
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


@settings(max_examples=100)
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
