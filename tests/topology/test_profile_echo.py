"""The Node profile controller's own writes do not wake it again (defect class: every profile label on a
Node and every mirror on its ``Devices`` came back as a watch event that re-ran the Node's reconcile for a
no-op — 8,625 extra reconciles on a cold 5,000-Node fleet). Any other change of those labels still wakes
it, and the other controllers watching Nodes still see the profile label arrive."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gpustack_worker.api import keys
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.frozen import freeze, thaw
from gpustack_worker.runtime.informer import ADDED, MODIFIED
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.topology.controller import Topology


class AnsweringClient:
    """Answers each apply with the body at the next resourceVersion; ``before_answer`` runs first (to hand
    the write's watch event to an informer before the answer, as the server often does)."""

    def __init__(self) -> None:
        self.version = 100
        self.applied: list[tuple[str, dict[str, Any]]] = []
        self.before_answer: Any = None

    async def apply(self, resource: Any, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.version += 1
        self.applied.append((resource.kind, body))
        if self.before_answer is not None:
            self.before_answer(resource.kind, body, self.version)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}


def _node(name: str, version: int) -> Any:
    """A managed Node without its profile yet."""
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": str(version)}
    meta["labels"] = {keys.HOSTNAME: name, keys.MANAGED: "true"}  # type: ignore[assignment]
    return freeze({"apiVersion": "v1", "kind": "Node", "metadata": meta})


def _devices(name: str, version: int) -> Any:
    meta = {"name": name, "uid": f"dev-{name}", "resourceVersion": str(version), "labels": {}}
    return freeze({"apiVersion": "gpustack.ai/v1", "kind": "Devices", "metadata": meta, "spec": {}})


def _topology(client: AnsweringClient) -> Topology:
    api = cast("Any", client)
    settings = SettingsSource(api, model=WorkerSettings, env={}, post_events=False)
    topology = Topology(api, settings, InformerRegistry(api))
    for informer in (topology.nodes, topology.devices, topology.topologies):
        informer.last_resource_version = "1"
        informer._synced.set()
    return topology


def _with_labels(obj: Any, version: int, labels: dict[str, str | None]) -> Any:
    """``obj`` at ``version`` with ``labels`` set (None: removed)."""
    out = thaw(obj)
    out["metadata"]["resourceVersion"] = str(version)
    for key, value in labels.items():
        if value is None:
            out["metadata"]["labels"].pop(key, None)
        else:
            out["metadata"]["labels"][key] = value
    return freeze(out)


@pytest.mark.parametrize("event_first", [False, True], ids=["answer first", "event first"])
async def test_the_echo_of_the_profile_write_and_its_mirror_wakes_nobody(event_first: bool) -> None:
    client = AnsweringClient()
    topology = _topology(client)
    node, devices = _node("n1", 10), _devices("n1", 11)
    topology.nodes._dispatch(ADDED, None, node)
    topology.nodes.store.replace([node])
    topology.devices.store.replace([devices])
    key = await topology.node_ctl.queue.get()
    assert key == "n1"
    echoes: list[tuple[Any, Any, Any]] = []

    def echo(kind: str, body: dict[str, Any], version: int) -> None:
        if kind == "Topology":
            return  # the profile's Topology, created on the way: another informer
        informer, cached = (topology.nodes, node) if kind == "Node" else (topology.devices, devices)
        new = _with_labels(cached, version, dict(body["metadata"].get("labels") or {}))
        echoes.append((informer, cached, new))
        if event_first:
            informer._dispatch(MODIFIED, cached, new)

    client.before_answer = echo
    await topology.steps.node_profile("n1")
    assert sorted(kind for kind, _body in client.applied) == ["Devices", "Node", "Topology"]
    if not event_first:
        for informer, old, new in echoes:
            informer._dispatch(MODIFIED, old, new)
    topology.node_ctl.queue.done(key)
    assert len(topology.node_ctl.queue) == 0, "our own writes: nothing to do for the Node"
    profile = echoes[0][2]["metadata"]["labels"][keys.TOPOLOGY_PROFILE]
    assert profile, "the profile label was written"
    assert topology.retire_ctl.queue.delayed == 1, "another controller watching Node labels still sees it"


async def test_someone_elses_change_of_the_labels_still_wakes_it() -> None:
    client = AnsweringClient()
    topology = _topology(client)
    node, devices = _node("n1", 10), _devices("n1", 11)
    topology.nodes.store.replace([node])
    topology.devices.store.replace([devices])
    await topology.steps.node_profile("n1")
    # An admin removes the mirror from the Devices (a version after ours): the controller writes it back.
    written = _with_labels(devices, client.version, {keys.TOPOLOGY_PROFILE: "x"})
    wiped = _with_labels(written, client.version + 5, {keys.TOPOLOGY_PROFILE: None})
    topology.devices._dispatch(MODIFIED, written, wiped)
    assert len(topology.node_ctl.queue) == 1
    # A label someone else put on the Node between our read and our write: not our echo.
    other = _with_labels(node, 50, {"example.com/pool": "a"})
    topology.nodes._dispatch(MODIFIED, node, other)
    assert len(topology.node_ctl.queue) == 1, "same key, still one queued"
