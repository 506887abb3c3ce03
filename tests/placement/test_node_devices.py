"""Gate 3's thin controller step against a recording client and hand-filled caches: the Active condition,
the entry written (Ready / Retry with requeueAfterSeconds, resourceVersion precondition), who is skipped,
a 409 retried, and a Ready written but not cached yet counted inflight for the next Workload."""

from __future__ import annotations

import copy
import datetime as dt
from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.placement.gate3 import RETRY_AFTER_S
from gpustack_worker.placement.node_devices import CHECK_KEY, FIELD_MANAGER, NodeDevicesCheck
from gpustack_worker.runtime.client import Conflict
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource
from tests.placement.test_gate3 import FLAVOR, gpu, hosts, podset, workload

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource

M = keys.UNITS_PER_ACCELERATOR
NOW = dt.datetime(2026, 12, 2, 20, 0, tzinfo=dt.UTC)


class FakeClient:
    """Answers LISTs of Devices from ``objects``; records applies and answers them with a new
    resourceVersion (or raises ``fail`` once)."""

    def __init__(self) -> None:
        self.devices: dict[str, dict[str, Any]] = {}
        self.applies: list[tuple[str, str, dict[str, Any]]] = []
        self.fail: Exception | None = None
        self.rv = 100

    async def list(self, resource: Resource, *, field_selector: str | None = None, **_: Any) -> Any:
        name = (field_selector or "").removeprefix("metadata.name=")
        found = [copy.deepcopy(self.devices[name])] if name in self.devices else []
        return found, "1"

    async def apply(
        self, resource: Resource, body: dict[str, Any], *, subresource: str | None = None, **_: Any
    ) -> dict[str, Any]:
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        self.applies.append((resource.kind, subresource or "", copy.deepcopy(body)))
        self.rv += 1
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = str(self.rv)
        return out


def devices_obj(node: str, modes: list[int]) -> dict[str, Any]:
    cards = [
        {"id": f"{node}-GPU-{i}", "index": i, "status": {"logicalSliced": {"count": 128}}}
        for i in range(len(modes))
    ]
    ledger = [
        {
            "id": f"{node}-GPU-{i}",
            "index": i,
            "mode": mode,
            "allocated": 0 if mode == AllocationMode.NONE else M,
            "remaining": M if mode == AllocationMode.NONE else 0,
        }
        for i, mode in enumerate(modes)
    ]
    return {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": "Devices",
        "metadata": {"name": node, "resourceVersion": "1"},
        "spec": {
            "groups": [{"id": "a100", "manufacturer": "nvidia", "memory": 81920, "accelerators": cards}]
        },
        "status": {"groups": [{"id": "a100", "manufacturer": "nvidia", "accelerators": ledger}]},
    }


def node_obj(name: str) -> dict[str, Any]:
    labels = {keys.HOSTNAME: name, keys.accelerator_key("nvidia-a100"): "true"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def flavor_obj() -> dict[str, Any]:
    return {
        "metadata": {"name": FLAVOR, "labels": {keys.RESOURCE_TYPE: keys.TYPE_NODES}},
        "spec": {"nodeLabels": {keys.accelerator_key("nvidia-a100"): "true"}},
    }


def pending(name: str, cards: int, rv: str = "10") -> dict[str, Any]:
    wl = workload(name, podset("role", gpu(cards), assignment=hosts({"n1": 1})))
    wl["metadata"]["resourceVersion"] = rv
    wl["status"]["admissionChecks"][0]["lastTransitionTime"] = "2026-12-02T19:00:00Z"
    return wl


def setup(modes: list[int]) -> tuple[NodeDevicesCheck, FakeClient]:
    client = FakeClient()
    registry = InformerRegistry(client)  # type: ignore[arg-type]
    settings = SettingsSource(client, model=RuntimeSettings, env={}, post_events=False)  # type: ignore[arg-type]
    check = NodeDevicesCheck(client, registry, settings, clock=lambda: NOW)  # type: ignore[arg-type]
    check.nodes.store.upsert(node_obj("n1"))
    dev = devices_obj("n1", modes)
    check.devices.store.upsert(dev)
    client.devices["n1"] = dev
    check.flavors.store.upsert(flavor_obj())
    return check, client


def entry_of(body: dict[str, Any]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = body["status"]["admissionChecks"]
    assert len(entries) == 1
    return entries[0]


async def test_marks_the_check_active() -> None:
    check, client = setup([0])
    check.checks.store.upsert({"metadata": {"name": CHECK_KEY, "generation": 3}, "spec": {}})
    await check.reconcile_check(CHECK_KEY)
    ((kind, sub, body),) = client.applies
    assert (kind, sub) == ("AdmissionCheck", "status")
    (cond,) = body["status"]["conditions"]
    assert cond["type"] == "Active" and cond["status"] == "True" and cond["reason"] == "Ready"
    assert cond["observedGeneration"] == 3
    assert cond["lastTransitionTime"] == "2026-12-02T20:00:00Z"
    await check.reconcile_check("some-other-check")  # not cached: nothing
    assert len(client.applies) == 1


async def test_ready_entry_with_the_precondition_and_no_second_write_until_cached() -> None:
    check, client = setup([0, 0])
    check.workloads.store.upsert(pending("wl", 2))
    await check.reconcile_workload("team/wl")
    ((kind, sub, body),) = client.applies
    assert (kind, sub) == ("Workload", "status")
    assert body["metadata"] == {"name": "wl", "namespace": "team", "resourceVersion": "10"}
    assert entry_of(body) == {
        "name": keys.NODE_DEVICES_CHECK,
        "state": "Ready",
        "message": "fits the cards of its assigned nodes (role)",
        "lastTransitionTime": "2026-12-02T20:00:00Z",
    }
    assert check.verdicts == {"team/wl": "Ready"}
    # The cache still shows the version judged: no second verdict.
    await check.reconcile_workload("team/wl")
    assert len(client.applies) == 1
    # The cache catches up: the entry is Ready, nothing to judge.
    shown = pending("wl", 2, rv="11")
    shown["status"]["admissionChecks"][0]["state"] = "Ready"
    check.workloads.store.upsert(shown)
    await check.reconcile_workload("team/wl")
    assert len(client.applies) == 1


async def test_retry_entry_asks_kueue_to_wait() -> None:
    check, client = setup([int(AllocationMode.EXCLUSIVE), 0])
    check.workloads.store.upsert(pending("wl", 2))
    await check.reconcile_workload("team/wl")
    entry = entry_of(client.applies[0][2])
    assert entry["state"] == "Retry"
    assert entry["requeueAfterSeconds"] == RETRY_AFTER_S
    assert entry["message"].startswith("role role: node n1: pod 1 of 1 needs 2 whole nvidia card(s)")


async def test_the_ledger_is_read_fresh_for_the_assigned_nodes() -> None:
    check, client = setup([0, 0])
    client.devices["n1"] = devices_obj("n1", [int(AllocationMode.EXCLUSIVE), 0])  # the cache lags
    check.workloads.store.upsert(pending("wl", 2))
    await check.reconcile_workload("team/wl")
    assert entry_of(client.applies[0][2])["state"] == "Retry"


async def test_not_judged() -> None:
    check, client = setup([0])
    admitted = workload("a", podset("role", gpu(1), assignment=hosts({"n1": 1})), admitted=True)
    evicted = workload("e", podset("role", gpu(1), assignment=hosts({"n1": 1})), evicted=True)
    for wl in (admitted, evicted):
        check.workloads.store.upsert(wl)
    for key in ("team/a", "team/e", "team/missing"):
        await check.reconcile_workload(key)
    assert client.applies == []


async def test_a_conflict_is_retried_soon() -> None:
    check, client = setup([0])
    check.workloads.store.upsert(pending("wl", 1))
    client.fail = Conflict(409, "Conflict", {})
    result = await check.reconcile_workload("team/wl")
    assert result.requeue_after == 1.0
    assert client.applies == [] and check.verdicts == {}
    await check.reconcile_workload("team/wl")
    assert entry_of(client.applies[0][2])["state"] == "Ready"


async def test_a_ready_not_cached_yet_counts_inflight() -> None:
    check, client = setup([0, 0])
    check.workloads.store.upsert(pending("first", 2))
    await check.reconcile_workload("team/first")
    assert entry_of(client.applies[0][2])["state"] == "Ready"
    # "first" still reads Pending in the cache; its promised cards are charged for "second".
    check.workloads.store.upsert(pending("second", 1))
    await check.reconcile_workload("team/second")
    second = entry_of(client.applies[1][2])
    assert second["state"] == "Retry", second
    assert "0 free whole card(s)" in second["message"]


def test_field_manager_is_the_checks_own() -> None:
    assert FIELD_MANAGER == keys.NODE_DEVICES_CHECK == "gpustack-node-devices"
