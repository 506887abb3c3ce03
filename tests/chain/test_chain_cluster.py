"""Stage 4 end to end on the real control plane: the chain-4 scenario, the agent and the chain running as
their own ServiceAccounts, real Kueue admitting (and refusing) Workloads through the generated queues,
draining and restoring a pool, tearing an InstanceType down, and zero writes once converged."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds, kueue_install
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.store import resource_version
from tests.chain.fault_kit import quiescent
from tests.kit import kueue
from tests.kit.resync import resynced
from tests.stack import Stack, condition, eventually, module_cluster, running_stack, write_settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

P = keys.topology_profile([keys.HOSTNAME])
INTEL = "intel-xeon-platinum-8259cl"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
FLAVORS = {
    f"gpustack--{INTEL}-linux-amd64-4c-{P}",
    f"gpustack--amd-epyc-7r32-linux-amd64-8c-{P}",
    f"gpustack--amd-epyc-7r13-linux-amd64-48c-{P}",
    f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}",
    f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}",
    f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}",
}
TEAM = "team-a"
M = keys.UNITS_PER_ACCELERATOR


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A fresh control plane for this module alone (shadows the session fixture): the chain reads every
    Node in the cluster, and other modules' scenarios (mixed-4 has a ``cpu-a`` too) would change its
    golden pools."""
    with module_cluster("chain") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Stack]:
    async with running_stack(devcluster, "chain-4", namespaces=(TEAM,)) as stack:
        yield stack


async def _names(client: Client, resource: Any, namespace: str | None = None) -> set[str]:
    items, _ = await client.list(resource, namespace=namespace)
    return {i["metadata"]["name"] for i in items}


async def test_flavors_queues_types_and_local_queues_exist(running: Stack) -> None:
    admin = running.admin

    async def flavors_ready() -> bool:
        return await _names(admin, kinds.RESOURCE_FLAVOR) >= FLAVORS

    await eventually(flavors_ready)
    t4 = await admin.get(
        kinds.RESOURCE_FLAVOR, f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"
    )
    assert t4 is not None
    assert t4["spec"]["topologyName"] == f"gpustack-{P}"
    assert t4["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.capacity"] == "4"

    async def types_ready() -> bool:
        return {T4, A10G, GENERIC} <= await _names(admin, kinds.INSTANCE_TYPE)

    await eventually(types_ready)
    units = {}
    for name in (T4, A10G, GENERIC):
        it = await admin.get(kinds.INSTANCE_TYPE, name)
        assert it is not None
        units[name] = (
            it["spec"]["unitResources"]["cpu"],
            it["spec"]["unitResources"]["ram"],
            it["spec"]["localStorage"],
        )
        assert it["metadata"]["labels"][keys.DERIVED_FROM_NODE] == "true"
    assert units == {T4: ("8", "32Gi", "100Gi"), A10G: ("8", "64Gi", "100Gi"), GENERIC: ("1", "2Gi", "100Gi")}

    for name in (T4, A10G, GENERIC):

        async def active(name: str = name) -> bool:
            cq = await admin.get(kinds.CLUSTER_QUEUE, name)
            return (
                condition(cq, "Active").get("status") == "True"
                and condition(cq, keys.TOPOLOGY_READY).get("status") == "True"
            )

        await eventually(active)
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    assert cq is not None
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == ["credits.gpustack.ai/nvidia"]
    quotas = [parse(f["resources"][0]["nominalQuota"]) for f in cq["spec"]["resourceGroups"][0]["flavors"]]
    assert quotas == [1 * M, 4 * M]  # the server canonicalises (1600000 is stored as 1600k)

    async def local_queues() -> bool:
        names = await _names(admin, kinds.LOCAL_QUEUE, TEAM)
        return {keys.local_queue_name(n) for n in (T4, A10G, GENERIC)} <= names

    await eventually(local_queues)
    assert not await _names(admin, kinds.LOCAL_QUEUE, kinds.SYSTEM_NAMESPACE)

    async def status_fresh() -> dict[str, Any] | None:
        it = await admin.get(kinds.INSTANCE_TYPE, T4)
        status = (it or {}).get("status") or {}
        return status if status.get("acceleratorSummary") else None

    status = await eventually(status_fresh)
    assert status["entrance"] == keys.local_queue_name(T4)
    assert status["phase"] == "Active"
    assert status["acceleratorSummary"] == "4/5 4/50 100/500 0/0"


def _workload(name: str, queue: str, gpus: int) -> dict[str, Any]:
    spec = kueue.pod_spec(kueue.gpu_container(gpus))
    return kueue.workload(name, TEAM, keys.local_queue_name(queue), kueue.pod_set(spec))


async def test_workload_admitted_on_the_right_flavor_and_charged_in_credits(running: Stack) -> None:
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    await admin.create(kinds.WORKLOAD, _workload("two-t4", T4, 2), namespace=TEAM)

    async def admitted() -> dict[str, Any] | None:
        wl = await admin.get(kinds.WORKLOAD, "two-t4", TEAM)
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted)
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {
        "credits.gpustack.ai/nvidia": f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"
    }

    async def charged() -> list[Any] | None:
        cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
        usage = ((cq or {}).get("status") or {}).get("flavorsReservation") or []
        totals = [parse(r.get("total")) for f in usage for r in f.get("resources") or ()]
        return [int(t) for t in totals if t] or None

    assert await eventually(charged) == [2 * M]

    # More than the pool holds on any one node: pending, with Kueue's own message.
    await admin.create(kinds.WORKLOAD, _workload("eight-t4", T4, 8), namespace=TEAM)

    async def refused() -> str | None:
        wl = await admin.get(kinds.WORKLOAD, "eight-t4", TEAM)
        cond = condition(wl, "QuotaReserved")
        return cond.get("message") if cond.get("status") == "False" and cond.get("message") else None

    message = await eventually(refused)
    assert "couldn't assign flavors" in message or "insufficient" in message.lower()
    wl = await admin.get(kinds.WORKLOAD, "eight-t4", TEAM)
    assert condition(wl, "Admitted").get("status") != "True"
    for name in ("two-t4", "eight-t4"):
        await admin.delete(kinds.WORKLOAD, name, TEAM)


async def _set_nodes_managed(admin: Client, names: tuple[str, ...], value: str) -> None:
    for name in names:
        await admin.patch(kinds.NODE, name, {"metadata": {"labels": {keys.MANAGED: value}}})


async def _cq(admin: Client, name: str) -> dict[str, Any]:
    cq = await admin.get(kinds.CLUSTER_QUEUE, name)
    assert cq is not None
    return cq


async def test_pool_losing_its_last_node_drains_holds_and_restores(running: Stack) -> None:
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    before = await _cq(admin, T4)
    # An admin Hold must survive the drain and the restore.
    await admin.patch(kinds.CLUSTER_QUEUE, T4, {"spec": {"stopPolicy": "Hold"}})

    async def backfilled() -> bool:
        it = await admin.get(kinds.INSTANCE_TYPE, T4)
        return bool(((it or {}).get("spec") or {}).get("inactive"))

    await eventually(backfilled)

    # Both T4 nodes leave the chain (an admin opts them out).
    await _set_nodes_managed(admin, ("t4-a", "t4-b"), "false")

    async def drained() -> dict[str, Any] | None:
        cq = await _cq(admin, T4)
        ann = cq["metadata"].get("annotations") or {}
        empty = not cq["spec"].get("resourceGroups")
        return (
            cq
            if empty and cq["spec"].get("stopPolicy") == "HoldAndDrain" and keys.MIGRATION_STOP_POLICY in ann
            else None
        )

    cq = await eventually(drained)
    assert cq["metadata"]["uid"] == before["metadata"]["uid"]

    # The nodes come back: the queue gets its plan again and the admin's Hold (now Inactive) is restored.
    await _set_nodes_managed(admin, ("t4-a", "t4-b"), "true")

    async def restored() -> dict[str, Any] | None:
        cq = await _cq(admin, T4)
        ann = cq["metadata"].get("annotations") or {}
        ok = cq["spec"].get("resourceGroups") and keys.MIGRATION_STOP_POLICY not in ann
        return cq if ok and cq["spec"].get("stopPolicy") == "Hold" else None

    cq = await eventually(restored)
    assert cq["metadata"]["uid"] == before["metadata"]["uid"]

    # The admin reactivates the type: the queue admits again, no other action needed.
    await admin.patch(kinds.INSTANCE_TYPE, T4, {"spec": {"inactive": False}})

    async def reopened() -> bool:
        return (await _cq(admin, T4))["spec"].get("stopPolicy") == "None"

    await eventually(reopened)


async def test_deleting_an_instance_type_tears_its_queue_down(running: Stack) -> None:
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    it = await admin.get(kinds.INSTANCE_TYPE, A10G)
    assert it is not None and keys.FINALIZER_CONTROLLED in (it["metadata"].get("finalizers") or ())
    old_uid = it["metadata"]["uid"]
    await admin.delete(kinds.INSTANCE_TYPE, A10G)

    async def recreated() -> dict[str, Any] | None:
        # The queue goes away with its type, the LocalQueues with the queue, and since the pool still has
        # a flavor the type is re-authored (create-only) under the same name: a new object.
        new = await admin.get(kinds.INSTANCE_TYPE, A10G)
        return new if new is not None and new["metadata"]["uid"] != old_uid else None

    await eventually(recreated, within=90)


async def _resynced(stack: Stack) -> None:
    """Every key of every chain controller reconciled again after a forced resync (tests/kit/resync.py)
    and every queue drained: no key pending, delayed or in flight."""
    await resynced(stack.chain.controllers, stack.chain.resync, lambda _: quiescent(stack.controllers))


async def _kueue_report_taken_in(stack: Stack, queue: str, reserving: int) -> bool:
    """Kueue reports ``reserving`` Workloads holding quota in ``queue``, and the chain has taken that
    report in: its ClusterQueue cache holds the very version Kueue wrote last (so the queue and
    InstanceType controllers, which every ClusterQueue event wakes, were handed it), and every chain
    queue has drained since."""
    cq = await stack.admin.get(kinds.CLUSTER_QUEUE, queue)
    if cq is None or int((cq.get("status") or {}).get("reservingWorkloads") or 0) != reserving:
        return False
    cached = resource_version(stack.chain.queues.store.get(queue))
    return cached == cq["metadata"]["resourceVersion"] and quiescent(stack.controllers)


async def test_zero_writes_once_converged(running: Stack) -> None:
    """After convergence no write (counted by the chain's client; the audit-log view of the same is in
    the bench): not while Kueue's status updates flow through the chain's watches — a Workload admitted
    on the T4 queue and deleted again, each a report on the queue that wakes the queue and InstanceType
    controllers and changes nothing they write — nor over three forced resyncs of every key. Each
    claim is checked once the chain has had its chance: Kueue's report in its cache, or every key it
    was handed reconciled, and every queue drained."""
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)

    async def quiet() -> bool:
        # Converged: a full resync of every key issues no write.
        before = running.controller_client.writes
        await _resynced(running)
        return running.controller_client.writes == before

    await eventually(quiet, within=120, every=1.0)
    before = running.controller_client.writes
    name = "kueue-reports"
    await admin.create(kinds.WORKLOAD, _workload(name, T4, 1), namespace=TEAM)
    try:
        await eventually(functools.partial(_kueue_report_taken_in, running, T4, 1))
    finally:
        await admin.delete(kinds.WORKLOAD, name, TEAM)
    await eventually(functools.partial(_kueue_report_taken_in, running, T4, 0))
    assert running.controller_client.writes == before, "writes while Kueue's reports flowed in"
    for _ in range(3):
        await _resynced(running)
    assert running.controller_client.writes == before


async def test_settings_changes_converge_without_restart(running: Stack) -> None:
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    aware_t4 = "gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64"
    aware_cpu = f"gpustack--{INTEL}-linux-amd64"
    try:
        # Awareness regroups the aggregation layer only: new per-CPU pools appear, flavors stay.
        await write_settings(admin, {"instance-type-aware-cpu-manufacturer": "true"})

        async def regrouped() -> bool:
            names = await _names(admin, kinds.INSTANCE_TYPE)
            return {aware_t4, aware_cpu} <= names

        await eventually(regrouped)
        assert await _names(admin, kinds.RESOURCE_FLAVOR) >= FLAVORS
        cq = await _cq(admin, aware_t4)
        assert cq["metadata"]["labels"][keys.general_key("amd-epyc-7r13")] == "true"
        flavors_of_aware = [
            f["name"]
            for f in (await _cq_when_filled(admin, aware_t4))["spec"]["resourceGroups"][0]["flavors"]
        ]
        assert flavors_of_aware == [f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"]
        # The collapsed types stay (create-only, never garbage-collected).
        assert T4 in await _names(admin, kinds.INSTANCE_TYPE)

        # Mixing off: accelerated nodes leave the CPU flavors; the Intel 4-core flavor (an immutable
        # selector) is replaced, now selecting only the CPU-only node.
        await write_settings(admin, {"instance-type-mixed-on-node": "false"})
        intel_cpu = f"gpustack--{INTEL}-linux-amd64-4c-{P}"

        async def cpu_only() -> bool:
            rf = await admin.get(kinds.RESOURCE_FLAVOR, intel_cpu)
            labels = ((rf or {}).get("metadata") or {}).get("labels") or {}
            selector = ((rf or {}).get("spec") or {}).get("nodeLabels") or {}
            return (
                selector.get(keys.CPU_ONLY) == "true"
                and labels.get(f"{keys.general_key(INTEL)}.capacity") == "4"
            )

        try:
            await eventually(cpu_only, within=120)
        except AssertionError as exc:
            rf = await admin.get(kinds.RESOURCE_FLAVOR, intel_cpu)
            generic = await admin.get(kinds.CLUSTER_QUEUE, GENERIC)
            raise AssertionError(f"{exc}\nflavor: {rf}\ngeneric queue: {generic}") from None

        async def pruned() -> bool:  # the accelerated nodes' CPU flavors go (once Kueue lets them go)
            names = await _names(admin, kinds.RESOURCE_FLAVOR)
            return f"gpustack--amd-epyc-7r13-linux-amd64-48c-{P}" not in names

        await eventually(pruned, within=120)
    finally:
        await write_settings(admin, {})

    async def mixed_again() -> bool:
        rf = await admin.get(kinds.RESOURCE_FLAVOR, f"gpustack--{INTEL}-linux-amd64-4c-{P}")
        return keys.CPU_ONLY not in (((rf or {}).get("spec") or {}).get("nodeLabels") or {})

    await eventually(mixed_again, within=120)


async def _cq_when_filled(admin: Client, name: str) -> dict[str, Any]:
    async def filled() -> dict[str, Any] | None:
        cq = await admin.get(kinds.CLUSTER_QUEUE, name)
        return cq if cq and cq["spec"].get("resourceGroups") else None

    result: dict[str, Any] = await eventually(filled)
    return result


async def test_an_admin_type_without_flavors_is_held_and_marked(running: Stack) -> None:
    admin = running.admin
    name = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
    await admin.create(
        kinds.INSTANCE_TYPE,
        {
            "apiVersion": kinds.INSTANCE_TYPE.api_version,
            "kind": "InstanceType",
            "metadata": {"name": name},
            "spec": {
                "acceleratable": True,
                "acceleratorGroup": "nvidia-h100-80gb-hbm3",
                "os": "linux",
                "arch": "amd64",
                "unitResources": {"cpu": "12", "ram": "192Gi"},
                "localStorage": "100Gi",
            },
        },
    )

    async def held() -> dict[str, Any] | None:
        cq = await admin.get(kinds.CLUSTER_QUEUE, name)
        ann = ((cq or {}).get("metadata") or {}).get("annotations") or {}
        return (
            cq
            if cq and cq["spec"].get("stopPolicy") == "Hold" and ann.get(keys.EMPTY_PLAN_HOLD) == "true"
            else None
        )

    cq = await eventually(held)
    assert not cq["spec"].get("resourceGroups")

    async def phase() -> str | None:
        it = await admin.get(kinds.INSTANCE_TYPE, name)
        status = (it or {}).get("status") or {}
        return status.get("phase") if status.get("phase") == "Inactive" else None

    await eventually(phase)
    it = await admin.get(kinds.INSTANCE_TYPE, name)
    assert it is not None and not it["spec"].get("inactive"), (
        "an empty-plan Hold is never mirrored into inactive"
    )


async def test_no_local_queues_in_kueue_and_nfd_namespaces_by_default(running: Stack) -> None:
    """Under the default settings Kueue's and NFD's namespaces get no LocalQueue (issue 29: six each), the
    team namespace gets one per queue. The negative is checked after a positive signal: a namespace
    created after them (its key queued long after theirs) has its LocalQueues."""
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    expected = {keys.local_queue_name(q) for q in await _names(admin, kinds.CLUSTER_QUEUE)}
    system = (kueue_install.KUEUE_NAMESPACE, keys.NFD_NAMESPACE)
    for ns in system:
        assert await admin.get(kinds.NAMESPACE, ns) is not None, ns  # the devcluster makes both
    late = "team-late"
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": late}})
    try:

        async def late_served() -> bool:
            return await _names(admin, kinds.LOCAL_QUEUE, late) == expected

        await eventually(late_served, within=120)
        assert await _names(admin, kinds.LOCAL_QUEUE, TEAM) == expected
        for ns in system:
            assert not await _names(admin, kinds.LOCAL_QUEUE, ns), ns
    finally:
        await admin.delete(kinds.NAMESPACE, late)


async def test_the_namespace_selector_scopes_local_queues_live(running: Stack) -> None:
    """``local-queue-namespace-selector``: a Namespace it stops selecting loses the operator's LocalQueues,
    one labelled to match gets them, and the empty selector brings every Namespace back — no restart."""
    admin = running.admin
    await test_flavors_queues_types_and_local_queues_exist(running)
    expected = {keys.local_queue_name(q) for q in await _names(admin, kinds.CLUSTER_QUEUE)}
    label = "example.com/gpu-queues"

    async def queues_in(namespace: str) -> set[str]:
        return await _names(admin, kinds.LOCAL_QUEUE, namespace)

    try:
        await write_settings(admin, {"local-queue-namespace-selector": f"{label}=yes"})

        async def pruned() -> bool:
            return not await queues_in(TEAM)

        await eventually(pruned, within=120)
        await admin.patch(kinds.NAMESPACE, TEAM, {"metadata": {"labels": {label: "yes"}}})

        async def selected() -> bool:
            return await queues_in(TEAM) == expected

        await eventually(selected, within=120)
        await admin.patch(kinds.NAMESPACE, TEAM, {"metadata": {"labels": {label: None}}})
        await eventually(pruned, within=120)
    finally:
        await write_settings(admin, {})
    await eventually(selected, within=120)  # the default selector: every team Namespace again
