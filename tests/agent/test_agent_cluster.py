"""End to end on the real control plane: the simulated mixed-4 cluster, the agent in --all-nodes mode,
nfd-master projecting the worker NodeFeature, capacity keys in Node status, zero writes over a quiet
minute, and live settings (manual node management; an invalid value keeps the last good settings). One fit
patch per ledger burst is shown in ``test_fit_burst_cluster.py``, with an agent on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import capacity, fit
from gpustack_worker.agent.controller import Agent
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.settings import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE, SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

M = keys.UNITS_PER_ACCELERATOR
#: The issue's "quiet minute".
QUIET_S = 60.0


async def _eventually(check: Callable[[], Any], *, within: float = 30.0, every: float = 0.25) -> Any:
    """Poll an async ``check`` until it returns a truthy value (nfd-master batches about once a second)."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(every)
    raise AssertionError(f"condition not met within {within}s; last value: {last!r}")


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

        await _eventually(projected)
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

        await _eventually(applied)
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
    await _eventually(lambda: _has_capacity(admin, "gpu-hygon", units))
    # Something (a kubelet restart) wipes a counting key: the agent puts it back.
    await admin.patch(kinds.NODE, "gpu-hygon", {"status": {"capacity": {units: None}}}, subresource="status")
    await _eventually(lambda: _has_capacity(admin, "gpu-hygon", units))
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

    await _eventually(gone)
    # The pool comes back: so do the keys.
    await admin.patch(
        kinds.NODE,
        "gpu-hygon",
        {"status": {"capacity": {"hygon.com/dcu.sliced": pool}}},
        subresource="status",
    )
    await _eventually(lambda: _has_capacity(admin, "gpu-hygon", units))


async def _has_capacity(client: Client, name: str, key: str) -> bool:
    return key in (await _node(client, name))["status"]["capacity"]


async def test_zero_writes_over_a_quiet_minute(cluster: tuple[Client, Agent]) -> None:
    admin, agent = cluster
    # Converged first: NodeFeatures projected and every window closed.
    await _eventually(lambda: _has_capacity(admin, "gpu-a100", "nvidia.com/gpu.sliced.units"))
    # Converged by construction, not by a fixed wait: every queue empty, nothing delayed or in flight.
    await _eventually(lambda: _true(_idle(agent)))
    before = dict(agent.client.requests_by_method)
    await asyncio.sleep(QUIET_S)
    after = dict(agent.client.requests_by_method)
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
        await asyncio.sleep(1)
        assert agent.nodes.store.keys() == ["gpu-hygon"]
        assert agent.devices.store.keys() == ["gpu-hygon"]
        assert agent.features.store.keys() == [f"{kinds.SYSTEM_NAMESPACE}/gpu-hygon-gpustack-worker"]
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

    await _eventually(restored)
    saved = await _settings_data(admin)
    existed = saved is not None
    try:
        await _set_manual(admin, "true", existed=existed)
        await _eventually(withdrawn, within=30)
        assert agent.settings.current.node_management_manual is True

        rejected_before = agent.settings.rejections
        await _set_manual(admin, "maybe", existed=True)
        await _eventually(lambda: _true(agent.settings.rejections > rejected_before))
        assert agent.settings.current.node_management_manual is True  # last good settings stay
        assert agent.settings.last_error is not None
        assert MANUAL in str(agent.settings.last_error)
        # A Node event reconciles all three outputs again, under the last good (manual) settings.
        poke = "test.gpustack.ai/poke"
        processed = {c.name: c.queue.adds for c in (agent.nodefeature, agent.capacity, agent.fit)}
        await admin.patch(kinds.NODE, name, {"metadata": {"labels": {poke: "1"}}})
        # The poke was handed to every controller and every queue has drained since (no fixed wait).
        await _eventually(
            lambda: _true(
                all(c.queue.adds > processed[c.name] for c in (agent.nodefeature, agent.capacity, agent.fit))
                and _idle(agent)
            )
        )
        assert await withdrawn()
        await admin.patch(kinds.NODE, name, {"metadata": {"labels": {poke: None}}})
    finally:
        if existed:
            await _set_manual(admin, (saved or {}).get(MANUAL), existed=True)
        else:
            await admin.delete(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE)
    await _eventually(restored, within=30)
    assert agent.settings.current.node_management_manual is False


async def _true(value: bool) -> bool:
    return value


def _idle(agent: Agent) -> bool:
    """Every agent queue empty: nothing pending, delayed (fit window) or in flight."""
    return all(
        len(c.queue) == 0 and not c.queue.processing and c.queue.delayed == 0
        for c in (agent.nodefeature, agent.capacity, agent.fit)
    )
