"""``apply_scenario`` against an in-memory API server: one write per object, no GET per write, at most
``concurrency`` requests in flight, and a refused write reported exactly as the server was left."""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.cli.simulate import command as simulate_cmd
from gpustack_worker.runtime.client import ApiError, Client
from gpustack_worker.simulate import render
from gpustack_worker.simulate.apply import ApplyFailed, apply_scenario, reported_by_kubelet
from gpustack_worker.simulate.load import packaged_scenario
from gpustack_worker.simulate.scenario import Scenario
from gpustack_worker.simulate.settings import SimulateSettings
from gpustack_worker.simulate.synthetic import synthetic
from tests.kit.properties import examples

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable

    from gpustack_worker.runtime.resources import Resource

MIXED = packaged_scenario("mixed-4")


class FakeServer:
    """Objects by (kind, namespace, name); every request recorded; ``refuse`` picks writes to fail."""

    def __init__(self, refuse: Callable[[str, str], bool] = lambda verb, key: False) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []
        self.refused_at = 0
        self.refuse = refuse
        self.uids = itertools.count()
        self.in_flight = 0
        self.most_in_flight = 0

    async def _round_trip(self, verb: str, key: str) -> None:
        self.requests.append((verb, key))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # let every other ready task start its request
            await asyncio.sleep(0)
        finally:
            self.in_flight -= 1
        if verb not in ("GET", "LIST") and self.refuse(verb, key):
            self.refused.append((verb, key))
            self.refused_at = len(self.requests)  # requests started before the answer
            raise ApiError.from_status(422, {"message": f"refused {verb} {key}"})

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        await self._round_trip("GET", f"{resource.kind}/{name}")
        found = self.objects.get((resource.kind, namespace or "", name))
        return copy.deepcopy(found) if found is not None else None

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        name = body["metadata"]["name"]
        await self._round_trip("POST", f"{resource.kind}/{name}")
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"uid-{next(self.uids)}"
        self.objects[(resource.kind, namespace or "", name)] = obj
        return copy.deepcopy(obj)

    async def apply(
        self, resource: Resource, body: dict[str, Any], *, subresource: str | None = None, **_: Any
    ) -> dict[str, Any]:
        meta = body["metadata"]
        suffix = f"/{subresource}" if subresource else ""
        await self._round_trip("APPLY", f"{resource.kind}/{meta['name']}{suffix}")
        key = (resource.kind, meta.get("namespace") or "", meta["name"])
        fresh = {"metadata": {"name": meta["name"], "uid": f"uid-{next(self.uids)}"}}
        obj = self.objects.setdefault(key, fresh)
        for part, value in body.items():
            if part != "metadata":
                obj[part] = copy.deepcopy(value)
        return copy.deepcopy(obj)

    async def patch(self, resource: Resource, name: str, patch: Any, **_: Any) -> dict[str, Any]:
        await self._round_trip("PATCH", f"{resource.kind}/{name}")
        return copy.deepcopy(self.objects[(resource.kind, "", name)])

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> bool:
        await self._round_trip("DELETE", f"{resource.kind}/{name}")
        return self.objects.pop((resource.kind, namespace or "", name), None) is not None

    async def list_pages(
        self,
        resource: Resource,
        *,
        convert: Callable[[list[dict[str, Any]]], Any],
        namespace: str | None = None,
    ) -> AsyncGenerator[tuple[Any, str], None]:
        await self._round_trip("LIST", resource.kind)
        items = [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in sorted(self.objects.items())
            if kind == resource.kind and (namespace is None or ns == namespace)
        ]
        yield convert(items), "1"

    def writes(self) -> list[tuple[str, str]]:
        """The accepted writes."""
        return [
            (verb, key)
            for verb, key in self.requests
            if verb not in ("GET", "LIST") and (verb, key) not in self.refused
        ]


def _objects_of(scenario: Scenario) -> int:
    """Objects (and /status subresources) the scenario asks for: Node + status, and NodeFeature,
    Devices + status per accelerated node."""
    return sum(2 + (3 if spec.accelerators else 0) for spec in scenario.nodes)


async def test_a_fresh_cluster_gets_one_write_per_object_and_no_read_per_object() -> None:
    scenario = synthetic(60, seed=3)
    server = FakeServer()
    report = await apply_scenario(server, scenario)  # type: ignore[arg-type]
    # Per node: the create plus its applies; the namespace once. Reads: the namespace and the LISTs.
    assert len(server.writes()) == 1 + len(scenario.nodes) + _objects_of(scenario)
    assert [verb for verb, _ in server.requests if verb == "GET"] == ["GET"]  # the namespace only
    lists = sorted(key for verb, key in server.requests if verb == "LIST")
    assert lists == ["Devices", "Node", "NodeFeature"]
    assert report.done_nodes == [spec.name for spec in scenario.nodes]
    assert len(report.created) == 1 + len(scenario.nodes)


async def test_requests_in_flight_are_bounded_by_the_concurrency() -> None:
    scenario = synthetic(40, seed=1)
    for width in (1, 3, SimulateSettings().simulate_apply_concurrency):
        server = FakeServer()
        await apply_scenario(server, scenario, concurrency=width)  # type: ignore[arg-type]
        assert server.most_in_flight == width


async def test_a_second_run_sends_only_the_applies_and_deletes_nothing_absent() -> None:
    server = FakeServer()
    await apply_scenario(server, MIXED)  # type: ignore[arg-type]
    server.requests.clear()
    report = await apply_scenario(server, MIXED)  # type: ignore[arg-type]
    assert report.created == [] and report.deleted == []
    assert {verb for verb, _ in server.writes()} == {"APPLY"}
    assert len(server.writes()) == _objects_of(MIXED)


async def test_a_node_that_lost_its_accelerators_loses_what_the_list_showed() -> None:
    server = FakeServer()
    await apply_scenario(server, MIXED)  # type: ignore[arg-type]
    cpu_now = Scenario(nodes=[spec.model_copy(update={"accelerators": []}) for spec in MIXED.nodes[:1]])
    name = cpu_now.nodes[0].name
    server.requests.clear()
    report = await apply_scenario(server, cpu_now)  # type: ignore[arg-type]
    assert report.deleted == [f"NodeFeature/{keys.device_manager_nodefeature_name(name)}", f"Devices/{name}"]
    server.requests.clear()
    await apply_scenario(server, cpu_now)  # type: ignore[arg-type]
    assert [verb for verb, _ in server.writes()] == ["APPLY", "APPLY"]  # no DELETE of what is gone


def _node_of(key: str) -> str:
    """The scenario node an object key (``Kind/name[/status]``) belongs to."""
    return key.split("/")[1].removesuffix("-gpustack-device-manager")


def _report_lines(writes: list[tuple[str, str]]) -> list[str]:
    """The report lines accepted writes make: a Node's metadata and status applies are one line,
    written once its status apply succeeded."""
    lines = []
    for verb, key in writes:
        if verb == "POST":
            lines.append(f"created {key}")
        elif verb == "DELETE":
            lines.append(f"deleted {key}")
        elif verb == "APPLY" and key.startswith("Node/"):
            if key.endswith("/status"):
                lines.append(f"applied {key.removesuffix('/status')}")
        elif verb == "APPLY":
            lines.append(f"applied {key}")
    return lines


@settings(max_examples=examples(60))
@given(
    n_nodes=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=50),
    width=st.integers(min_value=1, max_value=8),
    refused=st.integers(min_value=0, max_value=70),
)
def test_a_refused_write_reports_exactly_what_the_server_holds(
    n_nodes: int, seed: int, width: int, refused: int
) -> None:
    """Whichever write is refused, at any concurrency: the report lists every accepted write, node by
    node in file order; a node it calls done has all its writes; no node starts after the refusal."""
    scenario = synthetic(n_nodes, seed=seed)
    counter = itertools.count()
    server = FakeServer(lambda verb, key: not key.startswith("Namespace/") and next(counter) == refused)
    try:
        report = asyncio.run(apply_scenario(server, scenario, concurrency=width))  # type: ignore[arg-type]
    except ApplyFailed as exc:
        report, step = exc.report, exc.step
    else:
        assert server.refused == []
        assert len(server.writes()) == 1 + n_nodes + _objects_of(scenario)
        return
    ((_, key),) = server.refused
    assert step.endswith(key) and _node_of(key) not in report.done_nodes
    assert sorted(report.writes) == sorted(_report_lines(server.writes()))
    order = {spec.name: i for i, spec in enumerate(scenario.nodes)}
    in_report = [order[_node_of(w.split(" ", 1)[1])] for w in report.writes if "Namespace/" not in w]
    assert in_report == sorted(in_report)
    for name in report.done_nodes:
        writes = [w for w in report.writes if _node_of(w.split(" ", 1)[1]) == name]
        assert len(writes) == (4 if scenario.nodes[order[name]].accelerators else 1) + 1  # create + applies
    started = {_node_of(k) for _, k in server.requests[: server.refused_at] if "/" in k}
    assert {_node_of(k) for _, k in server.requests[server.refused_at :] if "/" in k} <= started


@pytest.mark.parametrize("width", [1, 8])
async def test_the_refused_devices_write_of_the_middle_node(width: int) -> None:
    """The cluster test's case without a cluster: the second of three nodes is refused its Devices."""
    nodes = MIXED.nodes[:3]
    denied = nodes[1].name
    server = FakeServer(lambda verb, key: key == f"Devices/{denied}")
    with pytest.raises(ApplyFailed) as caught:
        await apply_scenario(server, Scenario(nodes=nodes), concurrency=width)  # type: ignore[arg-type]
    report = caught.value.report
    assert caught.value.step == f"server-side apply of Devices/{denied}"
    assert f"applied NodeFeature/{keys.device_manager_nodefeature_name(denied)}" in report.writes
    assert denied not in report.done_nodes
    expected_done = [nodes[0].name] if width == 1 else [nodes[0].name, nodes[2].name]
    assert report.done_nodes == expected_done


async def test_a_malformed_concurrency_seed_is_exit_2_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def no_connect(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("connected despite invalid settings")

    monkeypatch.setattr(Client, "connect", no_connect)
    monkeypatch.setenv("GPUSTACK_SIMULATE_APPLY_CONCURRENCY", "0")
    assert await simulate_cmd.run(argparse.Namespace(file="mixed-4", kubeconfig=None)) == 2
    err = capsys.readouterr().err
    prefix = "simulate apply: invalid settings in the environment: GPUSTACK_SIMULATE_APPLY_CONCURRENCY='0'"
    assert err.startswith(prefix), err


async def test_a_node_a_kubelet_reports_for_gets_only_what_nfd_the_plugins_and_the_dm_write() -> None:
    """A real node standing in for a scenario's node: its taints, registered labels and status stay the
    kubelet's; the simulator adds NFD's labels, the plugins' pools (capacity only) and the ledger."""
    spec = MIXED.nodes[0]
    assert spec.accelerators
    server = FakeServer()
    bodies: dict[str, dict[str, Any]] = {}
    plain_apply = server.apply

    async def apply(resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        bodies[f"{resource.kind}{'/' + kwargs['subresource'] if kwargs.get('subresource') else ''}"] = body
        return await plain_apply(resource, body, **kwargs)

    server.apply = apply  # type: ignore[method-assign]
    kubelets_node = {
        "metadata": {"name": spec.name, "uid": "uid-kubelet", "managedFields": [{"manager": "kubelet"}]},
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "False"}]},
    }
    server.objects[("Node", "", spec.name)] = kubelets_node
    await apply_scenario(server, Scenario(nodes=[spec]))  # type: ignore[arg-type]
    verbs = {verb for verb, key in server.writes() if key.startswith("Node/")}
    assert verbs == {"APPLY"}  # no create, no taint removal
    assert bodies["Node/status"]["status"] == render.render_plugin_status(spec)
    labels = bodies["Node"]["metadata"]["labels"]
    assert not set(labels) & set(render.KUBELET_LABELS) and keys.NFD_CPU_VENDOR in labels
    assert {"NodeFeature", "Devices", "Devices/status"} <= set(bodies)
    assert reported_by_kubelet(kubelets_node) and not reported_by_kubelet({"metadata": {"name": "x"}})
