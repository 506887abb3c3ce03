"""End to end on the real control plane: the simulated mixed-4 cluster, the agent in --all-nodes mode,
nfd-master projecting the worker NodeFeature, capacity keys in Node status, zero writes once converged
(every reconciler runs again on every node and has nothing to write), and live settings (manual node
management; an invalid value keeps the last good settings). One fit patch per ledger burst is shown in
``test_fit_burst_cluster.py``, with an agent on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.agent import capacity, fit
from gpustack_worker.agent.controller import Agent
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.controller import Controller

pytestmark = pytest.mark.cluster

M = keys.UNITS_PER_ACCELERATOR
#: A label no reconciler writes and every reconciler reads: a Node event that changes none of their outputs.
POKE = "test.gpustack.ai/poke"


def _q(resources: dict[str, str], key: str) -> int | None:
    raw = resources.get(key)
    value = None if raw is None else parse(raw)
    return None if value is None else int(value)


@pytest.fixture(scope="module")
async def cluster(devcluster: DevCluster) -> AsyncIterator[tuple[Client, Agent]]:
    """The mixed-4 scenario applied, and an --all-nodes agent with its own client (own request counts)."""
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, packaged_scenario("mixed-4"))
    # The agent authenticates as its ServiceAccount: a permission manifests/rbac lacks fails here.
    agent_client = await Client.connect(
        str(devcluster.service_account_kubeconfig(rbac.AGENT.name)),
        user_agent="gpustack-worker-agent/all-nodes",
    )
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    await asyncio.wait_for(agent.ready.wait(), 60)
    try:
        yield admin, agent
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0  # graceful stop
        await agent_client.close()
        await admin.close()


async def _node(client: Client, name: str) -> dict[str, Any]:
    obj = await client.get(kinds.NODE, name)
    assert obj is not None, name
    return obj


async def test_nfd_projects_worker_nodefeature_labels(cluster: tuple[Client, Agent]) -> None:
    admin, _ = cluster
    expected = {
        "cpu-a": {
            keys.MANAGED: "true",
            keys.general_key("intel"): "true",
            keys.general_key("intel-xeon-platinum-8259cl"): "true",
            keys.count_key(keys.general_key("intel-xeon-platinum-8259cl")): "96",
        },
        "gpu-a100": {
            keys.MANAGED: "true",
            keys.general_key("amd"): "true",
            keys.general_key("amd-epyc-7763"): "true",
            keys.count_key(keys.general_key("amd-epyc-7763")): "128",
            keys.RDMA_CAPABLE: "true",
            keys.RDMA_NUMA: "0",
            keys.RDMA_DISTANCE: "PIX",
        },
    }

    for name, want in expected.items():

        async def projected(name: str = name, want: dict[str, str] = want) -> bool:
            labels = (await _node(admin, name))["metadata"].get("labels") or {}
            return all(labels.get(k) == v for k, v in want.items())

        await eventually(projected)
    # Mixing is on by default: no node is marked cpu-only.
    assert keys.CPU_ONLY not in ((await _node(admin, "cpu-a"))["metadata"].get("labels") or {})


async def test_capacity_keys_in_node_status(cluster: tuple[Client, Agent]) -> None:
    """Every node's capacity and allocatable carry exactly the counting keys the formulas give for
    its live Devices (the formulas themselves are table-tested against the spec's examples)."""
    admin, _ = cluster
    expected: dict[str, dict[str, int]] = {}
    for name in ("gpu-a100", "gpu-hygon", "ppu-thead", "cpu-a"):
        raw_devices = await admin.get(kinds.DEVICES, name)
        devices = devices_facts(raw_devices) if raw_devices is not None else None
        expected[name] = capacity.desired(node_facts(await _node(admin, name)), devices, manual=False)

        async def applied(name: str = name) -> bool:
            status = (await _node(admin, name))["status"]
            return all(
                {k: _q(status[part], k) for k in status[part] if capacity.is_counting_key(k)}
                == expected[name]
                for part in ("capacity", "allocatable")
            )

        await eventually(applied)
    # Spec anchors on the scenario: both families on the mixed A100 node, one 3g.40gb carved on card 4
    # (so 7g.80gb fits only the three other MIG cards), T-Head's 4g48gb published as 4g.48gb, and
    # nothing on the CPU node.
    nv, ppu = "nvidia.com/gpu", "alibabacloud.com/ppu"
    a100 = expected["gpu-a100"]
    assert a100[f"{nv}.sliced.units"] == 4 * M
    assert a100[f"{nv}.partitioned.units"] == 4 * M
    assert a100[f"{nv}.partitioned.mig-7g.80gb"] == 3
    assert f"{ppu}.partitioned.mig-4g.48gb" in expected["ppu-thead"]
    assert not [k for k in expected["ppu-thead"] if k.endswith("4g48gb")]
    assert expected["gpu-hygon"]["hygon.com/dcu.sliced.cores-percentage"] == 4 * 100  # not overcommittable
    assert expected["cpu-a"] == {}


async def test_wiped_key_is_reapplied_and_vanished_pool_removes_keys(cluster: tuple[Client, Agent]) -> None:
    admin, _ = cluster
    units = "hygon.com/dcu.sliced.units"
    await eventually(lambda: _has_capacity(admin, "gpu-hygon", units))
    # Something (a kubelet restart) wipes a counting key: the agent puts it back.
    await admin.patch(kinds.NODE, "gpu-hygon", {"status": {"capacity": {units: None}}}, subresource="status")
    await eventually(lambda: _has_capacity(admin, "gpu-hygon", units))
    # The bare pool disappears: every .sliced.* key goes with it.
    pool = (await _node(admin, "gpu-hygon"))["status"]["capacity"]["hygon.com/dcu.sliced"]
    await admin.patch(
        kinds.NODE,
        "gpu-hygon",
        {"status": {"capacity": {"hygon.com/dcu.sliced": None}}},
        subresource="status",
    )

    async def gone() -> bool:
        cap = (await _node(admin, "gpu-hygon"))["status"]["capacity"]
        return not [k for k in cap if k.startswith("hygon.com/dcu.sliced.")]

    await eventually(gone)
    # The pool comes back: so do the keys.
    await admin.patch(
        kinds.NODE,
        "gpu-hygon",
        {"status": {"capacity": {"hygon.com/dcu.sliced": pool}}},
        subresource="status",
    )
    await eventually(lambda: _has_capacity(admin, "gpu-hygon", units))


async def _has_capacity(client: Client, name: str, key: str) -> bool:
    return key in (await _node(client, name))["status"]["capacity"]


async def test_zero_writes_once_converged(cluster: tuple[Client, Agent]) -> None:
    """Converged, every reconciler runs again on every node — woken by :data:`POKE`, which changes none of
    their outputs — and the agent writes nothing.

    The agent has no timer but its queues' delayed keys (fit windows, retries): once the reconciles of
    the last event have run and no key is pending, delayed or in flight, it does nothing more until
    the next event. So the claim is checked once, after that positive signal: each controller's
    reconcile counter moved by one per node at least, and every queue drained since."""
    admin, agent = cluster
    # Converged first: NodeFeatures projected and every window closed.
    await eventually(lambda: _has_capacity(admin, "gpu-a100", "nvidia.com/gpu.sliced.units"))
    await eventually(lambda: _idle(agent))
    nodes = agent.nodes.store.keys()
    before = dict(agent.client.requests_by_method)
    start = _reconciles(agent)
    try:
        for name in nodes:
            await admin.patch(kinds.NODE, name, {"metadata": {"labels": {POKE: "1"}}})

        def every_node_reconciled_and_drained() -> bool:
            now = _reconciles(agent)
            return all(now[c] >= start[c] + len(nodes) for c in start) and _idle(agent)

        await eventually(every_node_reconciled_and_drained)
        after = dict(agent.client.requests_by_method)
    finally:
        for name in nodes:
            await admin.patch(kinds.NODE, name, {"metadata": {"labels": {POKE: None}}})
    writes = {m: after.get(m, 0) - before.get(m, 0) for m in ("POST", "PATCH", "PUT", "DELETE")}
    assert writes == {"POST": 0, "PATCH": 0, "PUT": 0, "DELETE": 0}


async def test_per_node_mode_watches_only_its_node(
    cluster: tuple[Client, Agent], devcluster: DevCluster
) -> None:
    """The DaemonSet mode: informers narrowed to one node; it agrees with the all-nodes agent (no writes)."""
    client = await Client.connect(
        str(devcluster.service_account_kubeconfig(rbac.AGENT.name)),
        user_agent="gpustack-worker-agent/gpu-hygon",
    )
    agent = Agent(client, SettingsSource(client, model=WorkerSettings, env={}), node_name="gpu-hygon")
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.ready.wait(), 30)
        assert agent.nodes.store.keys() == ["gpu-hygon"]
        assert agent.devices.store.keys() == ["gpu-hygon"]
        assert agent.features.store.keys() == [f"{kinds.SYSTEM_NAMESPACE}/gpu-hygon-gpustack-worker"]
        # Every controller took its node from the first lists, and every queue has drained since.
        await eventually(lambda: all(c.queue.adds > 0 for c in _controllers(agent)) and _idle(agent))
        assert client.writes == 0
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        await client.close()


MANUAL = "node-management-manual"


async def _settings_data(client: Client) -> dict[str, str] | None:
    cm = await client.get(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE)
    return None if cm is None else dict(cm.get("data") or {})


async def _set_manual(client: Client, value: str | None, *, existed: bool) -> None:
    """Set (or, with None, remove) ``node-management-manual`` in the live settings ConfigMap."""
    if existed or value is None:
        await client.patch(
            kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, {"data": {MANUAL: value}}, namespace=DEFAULT_NAMESPACE
        )
        return
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": DEFAULT_NAMESPACE},
        "data": {MANUAL: value},
    }
    await client.create(kinds.CONFIG_MAP, body, namespace=DEFAULT_NAMESPACE)


async def test_manual_node_management_withdraws_stamp_keys_and_labels(cluster: tuple[Client, Agent]) -> None:
    """``node-management-manual: "true"`` in the settings ConfigMap: the worker NodeFeature stops stamping
    ``gpustack.ai/managed`` and a node without an admin label loses its counting keys and fit labels;
    an invalid value then keeps the last good settings; restoring brings everything back."""
    admin, agent = cluster
    name = "gpu-hygon"
    units = "hygon.com/dcu.sliced.units"
    feature = keys.worker_nodefeature_name(name)

    async def stamped() -> bool:
        nf = await admin.get(kinds.NODE_FEATURE, feature, kinds.SYSTEM_NAMESPACE)
        return nf is not None and (nf.get("spec") or {}).get("labels", {}).get(keys.MANAGED) == "true"

    async def withdrawn() -> bool:
        nf = await admin.get(kinds.NODE_FEATURE, feature, kinds.SYSTEM_NAMESPACE)
        node = await _node(admin, name)
        status = node["status"]
        return bool(
            nf is not None
            and keys.MANAGED not in ((nf.get("spec") or {}).get("labels") or {})
            and not [
                k for part in ("capacity", "allocatable") for k in status[part] if capacity.is_counting_key(k)
            ]
            and not [k for k in node["metadata"].get("labels") or {} if fit.is_fit_label(k)]
        )

    async def restored() -> bool:
        node = await _node(admin, name)
        fit_labels = [k for k in node["metadata"].get("labels") or {} if fit.is_fit_label(k)]
        return await stamped() and units in node["status"]["capacity"] and len(fit_labels) == 2

    await eventually(restored)
    saved = await _settings_data(admin)
    existed = saved is not None
    try:
        await _set_manual(admin, "true", existed=existed)
        await eventually(withdrawn, within=30)
        assert agent.settings.current.node_management_manual is True

        rejected_before = agent.settings.rejections
        await _set_manual(admin, "maybe", existed=True)
        await eventually(lambda: agent.settings.rejections > rejected_before)
        assert agent.settings.current.node_management_manual is True  # last good settings stay
        assert agent.settings.last_error is not None
        assert MANUAL in str(agent.settings.last_error)
        # A Node event reconciles all three outputs again, under the last good (manual) settings.
        processed = {c.name: c.queue.adds for c in _controllers(agent)}
        await admin.patch(kinds.NODE, name, {"metadata": {"labels": {POKE: "1"}}})
        # The poke was handed to every controller and every queue has drained since (no fixed wait).
        await eventually(
            lambda: all(c.queue.adds > processed[c.name] for c in _controllers(agent)) and _idle(agent)
        )
        assert await withdrawn()
        await admin.patch(kinds.NODE, name, {"metadata": {"labels": {POKE: None}}})
    finally:
        if existed:
            await _set_manual(admin, (saved or {}).get(MANUAL), existed=True)
        else:
            await admin.delete(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE)
    await eventually(restored, within=30)
    assert agent.settings.current.node_management_manual is False


def _controllers(agent: Agent) -> tuple[Controller, ...]:
    return (agent.nodefeature, agent.capacity, agent.fit)


def _idle(agent: Agent) -> bool:
    """Every agent queue empty: nothing pending, delayed (fit window) or in flight."""
    return all(
        len(c.queue) == 0 and not c.queue.processing and c.queue.delayed == 0 for c in _controllers(agent)
    )


def _reconciles(agent: Agent) -> dict[str, float]:
    """Each agent controller's successful reconciles so far (controller-runtime's counter; this module
    runs one agent at a time, so the process' count is that agent's)."""
    return {
        c.name: REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": c.name, "result": "success"}
        )
        or 0.0
        for c in _controllers(agent)
    }
