"""The reconcilers' write decisions against the cache: zero writes at steady state, re-apply on drift,
merge-patch cleanup of our keys held by another manager, and no request for an empty intent."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.agent.settings import AgentSettings
from gpustack_worker.agent.steps import FIELD_MANAGERS, Steps
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.store import Store
from gpustack_worker.runtime.transform import make_transform

from .builders import card, group, managed_entry
from .fakes import RecordingClient

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client

M = keys.UNITS_PER_ACCELERATOR
POOL = "nvidia.com/gpu.sliced"
DEVICES: dict[str, Any] = {
    "metadata": {"name": "n1"},
    "spec": {"groups": [group("A100", "nvidia", 81920, [card(f"c{i}", logical=4) for i in range(4)])]},
}


def _node(
    capacity_: dict[str, str], entries: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "uid": "uid-n1", "labels": labels or {}, "managedFields": entries},
        "status": {"capacity": capacity_, "allocatable": dict(capacity_)},
    }


WANT = capacity.desired(node_facts(_node({POOL: "512"}, [])), devices_facts(DEVICES), manual=False)
OURS = managed_entry(capacity.FIELD_MANAGER, capacity.apply_body("n1", WANT), "status")
UNITS = "nvidia.com/gpu.sliced.units"


def _steps(
    client: RecordingClient,
    node: dict[str, Any] | None,
    devices: dict[str, Any] | None = None,
    feature: dict[str, Any] | None = None,
) -> Steps:
    stores = Store(), Store(), Store()
    for store, obj in zip(stores, (node, devices, feature), strict=True):
        if obj is not None:
            store.upsert(freeze(obj))
    if node is not None:
        client.objects[node["metadata"]["name"]] = node
    settings = AgentSettings()
    caches = (make_transform(FIELD_MANAGERS),)  # what the agent's informers keep
    return Steps(cast("Client", client), *stores, settings=lambda: settings, caches=caches)


def _plain(**changes: str | None) -> dict[str, str]:
    cap = {POOL: "512", **{k: str(v) for k, v in WANT.items()}}
    for key, value in changes.items():
        real = key.replace("__", ".").replace("_", "-").replace("nvidia-com", "nvidia.com/gpu")
        if value is None:
            cap.pop(real, None)
        else:
            cap[real] = value
    return cap


@pytest.mark.parametrize(
    ("cap", "calls"),
    [
        pytest.param(
            {**_plain(), UNITS: "6400k", "nvidia.com/gpu.sliced.memory-mib": "327680"},
            [],
            id="canonical-quantity-equal",
        ),
        pytest.param(_plain(), [], id="plain-equal"),
        pytest.param(
            {k: v for k, v in _plain().items() if k != "nvidia.com/gpu.sliced.memory-mib"},
            [("apply", "status")],
            id="wiped-key",
        ),
        pytest.param({**_plain(), UNITS: "1600k"}, [("apply", "status")], id="changed-value"),
        pytest.param(
            {**_plain(), "nvidia.com/gpu.partitioned.mig-1g.10gb": "7"},
            [("patch", "status")],
            id="stale-profile-key",
        ),
        pytest.param({**_plain(), "cpu": "8"}, [], id="foreign-keys-ignored"),
    ],
)
async def test_capacity_writes_only_on_difference(cap: dict[str, str], calls: list[tuple[str, str]]) -> None:
    assert len(WANT) == 4
    client = RecordingClient()
    steps = _steps(client, _node(cap, [OURS]), DEVICES)
    await steps.capacity("n1")
    assert [(verb, sub) for verb, sub, _ in client.calls] == calls
    assert sum(steps.writes.values()) == len(calls)


async def test_stale_key_of_another_manager_is_nulled_in_capacity_and_allocatable() -> None:
    client = RecordingClient()
    stale = "nvidia.com/gpu.partitioned.mig-1g.10gb"
    await _steps(client, _node({**_plain(), stale: "7"}, [OURS]), DEVICES).capacity("n1")
    (_, _, body), *_ = client.calls
    assert body == {"status": {"capacity": {stale: None}, "allocatable": {stale: None}}}


def test_capacity_apply_body_mirrors_allocatable() -> None:
    body = capacity.apply_body("n1", WANT)
    assert body["metadata"] == {"name": "n1"}
    assert body["status"]["capacity"] == body["status"]["allocatable"] == {k: str(v) for k, v in WANT.items()}
    assert capacity.apply_body("n1", {}) == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


async def test_empty_intent_sends_nothing_when_nothing_is_owned() -> None:
    client = RecordingClient()
    steps = _steps(client, _node({"cpu": "8"}, []))  # a CPU node: no counting key, no fit label
    await steps.capacity("n1")
    await steps.fit("n1")
    assert client.calls == []


async def test_empty_intent_releases_what_we_still_own() -> None:
    client = RecordingClient()
    fit_entry = managed_entry(fit.FIELD_MANAGER, fit.apply_body("n1", {"x.fit.gpustack.ai/a": "1"}))
    steps = _steps(client, _node({"cpu": "8"}, [OURS, fit_entry]))  # devices gone: nothing wanted
    await steps.capacity("n1")
    await steps.fit("n1")
    assert client.calls == [
        ("apply", "status", capacity.apply_body("n1", {})),
        ("apply", "", fit.apply_body("n1", {})),
    ]


async def test_fit_label_held_by_another_manager_is_nulled() -> None:
    client = RecordingClient()
    label = keys.shared_free_cards_key("nvidia-A100")
    await _steps(client, _node({"cpu": "8"}, [], labels={label: "3"})).fit("n1")
    assert [(v, s, b) for v, s, b in client.calls] == [("patch", "", {"metadata": {"labels": {label: None}}})]


NODE = _node({"cpu": "8"}, [])
WANTED_FEATURE = nodefeature.desired(node_facts(NODE), None, manual=False, mixed_on_node=True)
FEATURE_ENTRY = managed_entry(nodefeature.FIELD_MANAGER, WANTED_FEATURE)


def _edited(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(WANTED_FEATURE)
    obj["metadata"]["uid"] = "nf-uid"
    obj["metadata"]["resourceVersion"] = "7"
    obj["metadata"]["managedFields"] = [FEATURE_ENTRY]
    obj["metadata"]["labels"]["extra"] = "kept"  # extra metadata does not count as drift
    for path, value in changes.items():
        *head, last = path.split("__")
        target = obj
        for part in head:
            target = target[part]
        target[last] = value
    return obj


@pytest.mark.parametrize(
    ("observed", "applied"),
    [
        pytest.param(None, True, id="missing"),
        pytest.param(_edited(), False, id="same"),
        pytest.param(_edited(spec__labels={}), True, id="labels-edited"),
        pytest.param(_edited(metadata__ownerReferences=[]), True, id="owner-dropped"),
        pytest.param(_edited(metadata__labels={}), True, id="selector-labels-dropped"),
    ],
)
async def test_nodefeature_applied_only_on_drift(observed: dict[str, Any] | None, applied: bool) -> None:
    client = RecordingClient()
    await _steps(client, NODE, feature=observed).nodefeature("n1")
    assert client.calls == ([("apply", "", WANTED_FEATURE)] if applied else [])


async def test_nodefeature_deleted_with_its_node() -> None:
    client = RecordingClient()
    steps = _steps(client, None, feature=_edited())
    await steps.nodefeature("n1")
    assert client.calls == [("delete", "", {"name": keys.worker_nodefeature_name("n1")})]
    assert steps.writes[nodefeature.FIELD_MANAGER] == 1
    assert kinds.NODE_FEATURE.namespaced
