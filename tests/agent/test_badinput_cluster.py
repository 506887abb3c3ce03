"""The stuck classes of issue 8 end to end: the agent (``--all-nodes``, in process) on the simulated
``mixed-4`` cluster, then

- ``gpu-a100``'s Devices gets ``memory: 1e16`` (stored as an object written before the schema bound
  existed: the test loosens the CRD for the write) together with a valid change in the same edit;
- ``gpu-hygon``'s Node gets ``status.capacity.cpu`` and its ``hygon.com/dcu.sliced`` pool set to
  ``1e1000000`` (the API server stores ``10e999999``), and a valid ledger change.

The bad keys keep their last good values, the rest of each node converges, exactly one Event per bad
value is posted, and the retry loop ends: the controllers' error and panic counters do not move while
later events reconcile the same nodes again, and no key waits in a queue for a retry.
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.agent import capacity, fit
from gpustack_worker.agent.controller import EVENT_CONTROLLER, Agent
from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import ApiError, Client
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

M = keys.UNITS_PER_ACCELERATOR
NV = "nvidia.com/gpu"
DCU = "hygon.com/dcu"
HUGE = "1e1000000"
CONTROLLERS = ("agent-nodefeature", "agent-capacity", "agent-fit")
DEVICES_CRD = "devices.worker.gpustack.ai"
MEMORY_MAX = (
    "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/groups/items/properties/memory/maximum"
)


def _metric(name: str, controller: str) -> float:
    return REGISTRY.get_sample_value(name, {"controller": controller}) or 0.0


def _counters() -> dict[str, float]:
    out: dict[str, float] = {}
    for ctl in CONTROLLERS:
        out[f"{ctl}/errors"] = _metric("controller_runtime_reconcile_errors_total", ctl)
        out[f"{ctl}/panics"] = _metric("controller_runtime_reconcile_panics_total", ctl)
    return out


def _successes(ctl: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": ctl, "result": "success"}
        )
        or 0
    )


async def _node(client: Client, name: str) -> dict[str, Any]:
    obj = await client.get(kinds.NODE, name)
    assert obj is not None, name
    return obj


def _counting(node: dict[str, Any]) -> dict[str, int]:
    cap = node["status"]["capacity"]
    return {k: int(parse(v) or -1) for k, v in cap.items() if capacity.is_counting_key(k)}


def _fits(node: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (node["metadata"].get("labels") or {}).items() if fit.is_fit_label(k)}


async def _agent_events(client: Client, node: str) -> list[dict[str, Any]]:
    items, _ = await client.list(kinds.EVENT, namespace="default")
    return [
        e
        for e in items
        if e.get("reportingController") == EVENT_CONTROLLER and (e.get("regarding") or {}).get("name") == node
    ]


@pytest.fixture(scope="module")
async def cluster(devcluster: DevCluster) -> AsyncIterator[tuple[Client, Agent]]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, packaged_scenario("mixed-4"))
    agent_client = await Client.connect(str(devcluster.kubeconfig))
    # A 1 s fit window keeps the test short; the window's own behaviour is tested elsewhere.
    settings = SettingsSource(
        agent_client, model=WorkerSettings, env={"GPUSTACK_FIT_LABEL_COALESCE_SECONDS": "1"}
    )
    agent = Agent(agent_client, settings, node_name=None)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    await asyncio.wait_for(agent.ready.wait(), 60)
    try:
        yield admin, agent
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
        await agent_client.close()
        await admin.close()


async def _loosen_memory_bound(admin: Client, *, loose: bool) -> None:
    """Remove (or put back) the CRD's VRAM maximum: objects stored before a bound existed still exist."""
    op = (
        {"op": "remove", "path": MEMORY_MAX} if loose else {"op": "add", "path": MEMORY_MAX, "value": 4194304}
    )
    await admin.patch(kinds.CRD, DEVICES_CRD, [op], patch_type="json")


async def _patch_devices_spec(
    admin: Client, name: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Replace ``spec.groups`` of a Devices by ``change(current groups)`` (retrying while a just-changed
    CRD schema settles); returns the groups before."""
    current = await admin.get(kinds.DEVICES, name)
    assert current is not None
    original: list[dict[str, Any]] = copy.deepcopy(current["spec"]["groups"])
    groups = change(copy.deepcopy(original))

    async def attempt() -> bool:
        try:
            await admin.patch(kinds.DEVICES, name, {"spec": {"groups": groups}})
        except ApiError as err:
            if err.status != 422:
                raise
            return False
        return True

    await eventually(attempt, within=30)
    return original


async def test_stuck_values_hold_their_keys_report_once_and_end_the_retry_loop(
    cluster: tuple[Client, Agent],
) -> None:
    admin, agent = cluster
    a100, hygon = "gpu-a100", "gpu-hygon"
    memory_mib = f"{NV}.sliced.memory-mib"
    hygon_count = keys.count_key(keys.general_key("hygon-c86-7285"))

    # Converged first: the last good values every bad key must keep.
    await eventually(lambda: _has(admin, a100, memory_mib, 4 * 81920))
    await eventually(lambda: _labelled(admin, hygon, hygon_count, "64"))
    await eventually(lambda: _fit_is(admin, hygon, keys.shared_free_cards_key("hygon-k100_ai"), "2"))
    before_a100 = await _node(admin, a100)
    before_hygon = await _node(admin, hygon)
    others = {
        n: (_counting(await _node(admin, n)), _fits(await _node(admin, n))) for n in ("ppu-thead", "cpu-a")
    }
    assert _counting(before_hygon)[f"{DCU}.sliced.units"] == 4 * M
    counters = _counters()

    # gpu-a100: memory 1e16 and, in the same edit, card 3 stops serving the sliced family.
    def bad_memory(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups[0]["memory"] = 10**16
        card3 = next(c for c in groups[0]["accelerators"] if c["index"] == 3)
        card3["status"]["logicalSliced"]["count"] = 0
        return groups

    await _loosen_memory_bound(admin, loose=True)
    original_groups = await _patch_devices_spec(admin, a100, bad_memory)
    # gpu-hygon: CPU and sliced pool overflow in one status edit, and a valid ledger change.
    saved_capacity = {k: before_hygon["status"]["capacity"][k] for k in ("cpu", f"{DCU}.sliced")}
    await admin.patch(
        kinds.NODE,
        hygon,
        {"status": {"capacity": {"cpu": HUGE, f"{DCU}.sliced": HUGE}}},
        subresource="status",
    )
    hygon_devices = await admin.get(kinds.DEVICES, hygon)
    assert hygon_devices is not None
    saved_ledger = copy.deepcopy(hygon_devices["status"]["groups"])
    ledger = copy.deepcopy(saved_ledger)
    for entry in ledger[0]["accelerators"]:
        if entry["index"] == 3:
            entry.update(mode=1, allocated=M, remaining=0)
    await admin.patch(kinds.DEVICES, hygon, {"status": {"groups": ledger}}, subresource="status")
    try:
        # gpu-a100: memory-mib at its last good value, the rest of the family follows the valid change.
        want_a100 = {
            **_counting(before_a100),
            f"{NV}.sliced.units": 3 * M,
            f"{NV}.sliced.cores-percentage": 3 * 128 * 100,
            f"{NV}.sliced.memory-percentage": 300,
            memory_mib: 4 * 81920,
        }
        await eventually(lambda: _counting_is(admin, a100, want_a100))
        # gpu-hygon: count label and .sliced keys held; the fit label follows the ledger change.
        shared = keys.shared_free_cards_key("hygon-k100_ai")
        await eventually(lambda: _fit_is(admin, hygon, shared, str(int(_fits(before_hygon)[shared]) - 1)))
        node = await _node(admin, hygon)
        assert node["status"]["capacity"]["cpu"] == "10e999999"  # what the API server made of it
        assert _counting(node) == _counting(before_hygon)
        assert (node["metadata"].get("labels") or {})[hygon_count] == "64"
        feature = await admin.get(
            kinds.NODE_FEATURE, keys.worker_nodefeature_name(hygon), kinds.SYSTEM_NAMESPACE
        )
        assert feature is not None and feature["spec"]["labels"][hygon_count] == "64"

        # One Event per bad value, naming field, value and rule.
        a100_events = await eventually(lambda: _events_settled(admin, a100, 1))
        (memory_event,) = a100_events
        assert memory_event["type"] == "Warning" and memory_event["reason"] == "ValueOutOfRange"
        assert memory_event["regarding"]["kind"] == "Devices"
        assert "memory=10000000000000000" in memory_event["note"] and "4,194,304" in memory_event["note"]
        hygon_events = await eventually(lambda: _events_settled(admin, hygon, 2))
        assert {e["regarding"]["kind"] for e in hygon_events} == {"Node"}
        notes = sorted(e["note"] for e in hygon_events)
        assert notes[0].startswith("status.capacity[cpu]='10e999999'")
        assert notes[1].startswith(f"status.capacity[{DCU}.sliced]='10e999999'")

        # The retry loop ended: more events reconcile both nodes again, nothing fails, nothing waits.
        for i in range(3):
            done = {ctl: _successes(ctl) for ctl in CONTROLLERS}
            for name in (a100, hygon):
                await admin.patch(
                    kinds.NODE, name, {"metadata": {"labels": {"test.gpustack.ai/poke": str(i)}}}
                )
            await eventually(lambda done=done: _all_reconciled_again(done, 1))
        assert _counters() == counters, "a bad value must not make a reconcile fail or retry"
        for ctl in (agent.nodefeature, agent.capacity, agent.fit):
            assert ctl.queue.num_requeues(a100) == 0 and ctl.queue.num_requeues(hygon) == 0
        assert len(await _agent_events(admin, a100)) == 1
        assert len(await _agent_events(admin, hygon)) == 2
        # Nothing else moved.
        for name, (counting, fits) in others.items():
            node = await _node(admin, name)
            assert (_counting(node), _fits(node)) == (counting, fits), name
    finally:
        await _patch_devices_spec(admin, a100, lambda _bad: original_groups)
        await _loosen_memory_bound(admin, loose=False)
        await admin.patch(kinds.NODE, hygon, {"status": {"capacity": saved_capacity}}, subresource="status")
        await admin.patch(kinds.DEVICES, hygon, {"status": {"groups": saved_ledger}}, subresource="status")
        for name in (a100, hygon):
            await admin.patch(kinds.NODE, name, {"metadata": {"labels": {"test.gpustack.ai/poke": None}}})
    # Fixed inputs: everything converges back to the good values.
    await eventually(lambda: _counting_is(admin, a100, _counting(before_a100)))
    await eventually(lambda: _counting_is(admin, hygon, _counting(before_hygon)))


async def _has(client: Client, name: str, key: str, value: int) -> bool:
    return _counting(await _node(client, name)).get(key) == value


async def _labelled(client: Client, name: str, key: str, value: str) -> bool:
    return ((await _node(client, name))["metadata"].get("labels") or {}).get(key) == value


async def _counting_is(client: Client, name: str, want: dict[str, int]) -> dict[str, int] | None:
    got = _counting(await _node(client, name))
    return got if got == want else None


async def _fit_is(client: Client, name: str, key: str, value: str) -> bool:
    return _fits(await _node(client, name)).get(key) == value


async def _events_settled(client: Client, node: str, count: int) -> list[dict[str, Any]] | None:
    events = await _agent_events(client, node)
    return events if len(events) >= count else None


async def _all_reconciled_again(before: dict[str, float], at_least: int) -> bool:
    return all(_successes(ctl) - before[ctl] >= at_least for ctl in CONTROLLERS)
