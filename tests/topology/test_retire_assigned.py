"""The retire pass's profile set: memoised per Node and per set of sources in effect, it is exactly what
recomputing every Node from scratch gives — through Node updates, deletions and source changes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.topology import profiles
from gpustack_worker.topology.controller import Topology
from tests.kit.properties import examples

if TYPE_CHECKING:
    import pytest

    from gpustack_worker.runtime.client import Client

RACK, ZONE = "example.com/rack", "example.com/zone"


def _topology() -> Topology:
    api = cast("Client", object())  # the pass issues no request
    source = SettingsSource(api, model=WorkerSettings, env={}, post_events=False)
    return Topology(api, source, InformerRegistry(api))


def _node(name: str, rv: int, *, managed: bool, rack: str, zone: str, carried: str) -> dict[str, Any]:
    labels = {keys.HOSTNAME: name}
    if managed:
        labels[keys.MANAGED] = "true"
    if rack:
        labels[RACK] = rack
    if zone:
        labels[ZONE] = zone
    if carried:
        labels[keys.TOPOLOGY_PROFILE] = carried
    meta = {"name": name, "resourceVersion": str(rv), "labels": labels}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def _source(rv: int, levels: list[str], ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "TopologySource",
        "metadata": {"name": "fabric", "resourceVersion": str(rv), "uid": "s-1"},
        "spec": {"nodeSelector": {}, "levels": levels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "x"}]},
    }


def _naive(topology: Topology) -> set[str]:
    ready = topology.steps.ready_sources()
    out: set[str] = set()
    for node in topology.nodes.store.list():
        labels = node["metadata"]["labels"]
        if labels.get(keys.TOPOLOGY_PROFILE):
            out.add(labels[keys.TOPOLOGY_PROFILE])
        assignment = profiles.node_assignment(labels, ready)
        if assignment is not None:
            out.add(assignment.profile)
    return out


_node_step = st.tuples(
    st.just("node"),
    st.sampled_from(["n0", "n1", "n2", "n3"]),
    st.booleans(),  # deleted
    st.booleans(),  # managed
    st.sampled_from(["", "r1", "r2"]),
    st.sampled_from(["", "z1"]),
    st.sampled_from(["", "fnv64-0000000000000001"]),
)
_source_step = st.tuples(
    st.just("source"),
    st.sampled_from([[ZONE, RACK], [RACK], [ZONE]]),
    st.booleans(),  # ready
    st.booleans(),  # deleted
)


@settings(max_examples=examples(150))
@given(st.lists(st.one_of(_node_step, _source_step), min_size=1, max_size=25))
def test_the_memoised_pass_equals_recomputing_every_node(steps: list[tuple[Any, ...]]) -> None:
    topology = _topology()
    for rv, step in enumerate(steps, start=1):
        if step[0] == "node":
            _, name, deleted, managed, rack, zone, carried = step
            obj = _node(name, rv, managed=managed, rack=rack, zone=zone, carried=carried)
            topology.nodes._apply({"type": "DELETED" if deleted else "MODIFIED", "object": obj})
        else:
            _, levels, ready, deleted = step
            obj = _source(rv, levels, ready)
            topology.sources._apply({"type": "DELETED" if deleted else "MODIFIED", "object": obj})
        assert topology.steps._assigned_profiles() == _naive(topology)


def test_an_unchanged_node_is_not_assigned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    topology = _topology()
    for i in range(3):
        node = _node(f"n{i}", 1, managed=True, rack="r1", zone="", carried="")
        topology.nodes._apply({"type": "ADDED", "object": node})
    calls: list[str] = []
    real = profiles.node_assignment

    def counting(labels: Any, ready: Any) -> Any:
        calls.append(labels[keys.HOSTNAME])
        return real(labels, ready)

    monkeypatch.setattr(profiles, "node_assignment", counting)
    first = topology.steps._assigned_profiles()
    assert sorted(calls) == ["n0", "n1", "n2"]
    calls.clear()
    assert topology.steps._assigned_profiles() == first
    assert calls == []  # nothing changed: nothing recomputed
    moved = _node("n1", 2, managed=True, rack="r2", zone="", carried="")
    topology.nodes._apply({"type": "MODIFIED", "object": moved})
    topology.steps._assigned_profiles()
    assert calls == ["n1"]
    calls.clear()
    topology.sources._apply({"type": "ADDED", "object": _source(3, [RACK], True)})
    assert topology.steps._assigned_profiles() == _naive(topology)
    assert sorted(calls) == ["n0", "n0", "n1", "n1", "n2", "n2"]  # a source change: every Node again
