"""The reconcilers' input checks are kept per cached object (issue 18): a Node update (our own writes'
echoes, nfd-master's projection) re-runs the Node's rules only, and the costly ``Devices`` checks run
once per ``Devices`` object. Whatever the order of replaced Nodes and Devices, what a reconcile sees is
exactly a fresh :func:`validate.check` of the cached objects."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, validate
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.agent.settings import AgentSettings
from gpustack_worker.agent.steps import FIELD_MANAGERS, Steps
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.store import Store
from gpustack_worker.runtime.transform import make_transform
from tests.kit.properties import examples

from .badinput import base_devices, base_node
from .fakes import RecordingClient

if TYPE_CHECKING:
    import pytest

    from gpustack_worker.runtime.client import Client

NAME = "n1"


def _node(variant: int) -> dict[str, Any]:
    """0: good; 1: another good label; 2: an invalid ``managed`` value (a Node finding)."""
    node = base_node(NAME)
    if variant == 1:
        node["metadata"]["labels"]["example.com/other"] = "x"
    elif variant == 2:
        node["metadata"]["labels"]["gpustack.ai/managed"] = "maybe"
    return node


def _devices(variant: int) -> dict[str, Any] | None:
    """0: good; 1: a bad VRAM (a ledger finding); 2: a bad NUMA id (an interface finding); 3: none."""
    if variant == 3:
        return None
    devices = base_devices(NAME)
    if variant == 1:
        devices["spec"]["groups"][0]["memory"] = -1
    elif variant == 2:
        devices["spec"]["interfaces"][0]["numaAffinity"] = "x y"
    return devices


def _steps() -> tuple[Steps, Store, Store]:
    nodes, devices, features = Store(), Store(), Store()
    settings = AgentSettings()
    steps = Steps(
        cast("Client", RecordingClient()),
        nodes,
        devices,
        features,
        settings=lambda: settings,
        caches=(make_transform(FIELD_MANAGERS),),
    )
    return steps, nodes, devices


def _put(store: Store, obj: dict[str, Any] | None) -> Any:
    """Replace the cached object (a new frozen object, as the informer stores on every change)."""
    if obj is None:
        store.delete(NAME)
        return None
    frozen = freeze(copy.deepcopy(obj))
    store.upsert(frozen)
    return frozen


def _fresh(node: Any, raw_devices: Any | None) -> validate.Checked:
    return validate.check(node_facts(node), devices_facts(raw_devices) if raw_devices is not None else None)


#: One step: replace the Node (variant) or the Devices (variant), or reconcile with nothing replaced.
STEP = st.one_of(
    st.tuples(st.just("node"), st.integers(0, 2)),
    st.tuples(st.just("devices"), st.integers(0, 3)),
    st.tuples(st.just("same"), st.just(0)),
)


@settings(max_examples=examples(60))
@example(steps=[("node", 2), ("devices", 1), ("node", 0), ("devices", 3), ("node", 1), ("devices", 2)])
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_the_kept_checks_are_a_fresh_check_of_the_cached_objects(steps: list[tuple[str, int]]) -> None:
    memo, nodes, devices = _steps()
    node = _put(nodes, _node(0))
    raw = _put(devices, _devices(0))
    for what, variant in steps:
        if what == "node":
            node = _put(nodes, _node(variant))
        elif what == "devices":
            raw = _put(devices, _devices(variant))
        assert memo._check(NAME, node) == _fresh(node, raw)


def test_node_updates_do_not_re_check_an_unchanged_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The regression: 2,251 Node events at 1,000 nodes ran the Devices checks 3,207 times for 750
    Devices objects (a third of the agent's CPU)."""
    runs: list[Any] = []
    real = validate.check_devices_inputs

    def counting(devices: Any) -> validate.DevicesChecked:
        runs.append(devices)
        return real(devices)

    monkeypatch.setattr(validate, "check_devices_inputs", counting)
    memo, nodes, devices = _steps()
    _put(devices, _devices(0))
    for variant in (0, 1, 2, 1, 0):
        node = _put(nodes, _node(variant))
        checked = memo._check(NAME, node)
        assert checked.devices is not None
    assert len(runs) == 1, "a Node update re-ran the Devices checks"
    raw = _put(devices, _devices(1))
    checked = memo._check(NAME, node)
    assert len(runs) == 2, "a new Devices object is checked again"
    assert checked.findings == _fresh(node, raw).findings


def test_a_capacity_reconcile_after_node_updates_still_writes_from_fresh_checks() -> None:
    """End to end through a reconcile: the capacity keys follow a Devices change that came after Node
    updates (the kept checks are dropped with the object they were made from)."""
    memo, nodes, devices = _steps()
    node = _put(nodes, _node(0))
    _put(devices, _devices(0))
    memo._check(NAME, node)
    node = _put(nodes, _node(1))
    memo._check(NAME, node)
    raw = _put(devices, _devices(3))
    checked = memo._check(NAME, node)
    assert checked.devices is None and raw is None
    assert capacity.desired(checked.node, checked.devices, manual=False) == {}
