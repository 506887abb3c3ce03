"""Issue 16 end to end: stage 3 and stage 4 read "managed" and "accelerated" alike on the real control
plane (the chain-4 scenario; the agent, topology and chain controllers as their ServiceAccounts; nfd-master
projecting the NodeFeatures).

- Defect 5: with ``instance-type-mixed-on-node=false``, ``t4-a`` loses its Device Manager labels (the DM
  NodeFeature is deleted) while its ``Devices`` keeps its card: still an accelerator, so no ``cpu-only``,
  and the chain, which counts CPU flavors by that label, leaves it out — the CPU pool's queue stays
  ``TopologyReady=True`` (its condition never transitions). Then its ``Devices`` loses the card too:
  ``cpu-only`` appears and the node's cores join the Intel CPU flavor, counted and selected alike.
- Defect 11: an admin overwrites the ``gpustack.ai/managed=true`` nfd-master projected on ``t4-b`` with
  ``yes``. A Warning Event naming the value appears on the Node (once), the node leaves both its flavors
  (the T4 and CPU queues lose that capacity and stay planned) and its fit labels and counting keys are
  withheld; restoring ``true`` brings everything back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import capacity, fit
from gpustack_worker.agent.controller import EVENT_CONTROLLER
from gpustack_worker.agent.validate import REASON_MANAGED_IGNORED
from gpustack_worker.api import keys, kinds, node_class
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.stack import Stack, condition, eventually, module_cluster, running_stack, write_settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

P = keys.topology_profile([keys.HOSTNAME])
INTEL = "intel-xeon-platinum-8259cl"
GENERIC = "gpustack--generic-linux-amd64"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
INTEL_CPU = f"gpustack--{INTEL}-linux-amd64-4c-{P}"
T4B_CPU = f"gpustack--amd-epyc-7r13-linux-amd64-48c-{P}"
T4B_T4 = f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"
T4A_T4 = f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}"
#: Generous bounds for a settings flip (flavors with an immutable selector are replaced) — never measured.
SLOW = 120.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane of this module's own: the chain reads every Node, so other modules' scenarios must
    not leak into its pools."""
    with module_cluster("nodeclass") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Stack]:
    async with running_stack(devcluster, "chain-4") as stack:
        yield stack


async def _labels(admin: Client, name: str) -> dict[str, str]:
    node = await admin.get(kinds.NODE, name)
    assert node is not None, name
    return dict(node["metadata"].get("labels") or {})


async def _queue_flavors(admin: Client, name: str) -> dict[str, int] | None:
    """The queue's flavors and nominal quota, while it is planned (``TopologyReady=True``); else None."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, name)
    if condition(cq, keys.TOPOLOGY_READY).get("status") != "True":
        return None
    groups = ((cq or {}).get("spec") or {}).get("resourceGroups") or []
    return {
        f["name"]: int(parse(f["resources"][0]["nominalQuota"]) or 0)
        for g in groups
        for f in g.get("flavors") or []
    }


async def _flavor_capacity(admin: Client, name: str, own_key: str) -> str | None:
    rf = await admin.get(kinds.RESOURCE_FLAVOR, name)
    return ((rf or {}).get("metadata") or {}).get("labels", {}).get(keys.capacity_key(own_key))


async def _managed_events(admin: Client, node: str) -> list[dict[str, Any]]:
    items, _ = await admin.list(kinds.EVENT, namespace="default")
    return [
        e
        for e in items
        if e.get("reportingController") == EVENT_CONTROLLER
        and (e.get("regarding") or {}).get("name") == node
        and e.get("reason") == REASON_MANAGED_IGNORED
    ]


async def test_a_node_that_lost_its_dm_labels_keeps_the_cpu_pool_planned(running: Stack) -> None:
    admin = running.admin
    try:
        await write_settings(admin, {"instance-type-mixed-on-node": "false"})

        async def cpu_only_pool() -> dict[str, int] | None:
            rf = await admin.get(kinds.RESOURCE_FLAVOR, INTEL_CPU)
            selector = ((rf or {}).get("spec") or {}).get("nodeLabels") or {}
            quota = await _queue_flavors(admin, GENERIC)
            if selector.get(keys.CPU_ONLY) != "true" or not quota or quota.get(INTEL_CPU) != 4:
                return None
            return quota

        await eventually(cpu_only_pool, within=SLOW)
        before = condition(await admin.get(kinds.CLUSTER_QUEUE, GENERIC), keys.TOPOLOGY_READY)
        assert before["status"] == "True"
        assert keys.CPU_ONLY not in await _labels(admin, "t4-a")

        # The Device Manager's labels go; its Devices (one T4 card) stays: still a detected accelerator, so
        # no cpu-only, and the chain (which counts by that label) keeps the node out of the CPU flavor.
        await admin.delete(
            kinds.NODE_FEATURE, keys.device_manager_nodefeature_name("t4-a"), kinds.SYSTEM_NAMESPACE
        )
        devices = await admin.get(kinds.DEVICES, "t4-a")
        assert devices is not None and devices["spec"]["groups"][0]["accelerators"]

        async def dm_labels_gone() -> bool:
            labels = await _labels(admin, "t4-a")
            t4 = await _queue_flavors(admin, T4)
            return not node_class.accelerated(labels) and t4 is not None and T4A_T4 not in t4

        await eventually(dm_labels_gone, within=SLOW)
        assert keys.CPU_ONLY not in await _labels(admin, "t4-a")
        assert await _queue_flavors(admin, GENERIC) == {INTEL_CPU: 4}
        assert await _flavor_capacity(admin, INTEL_CPU, keys.general_key(INTEL)) == "4"
        after = condition(await admin.get(kinds.CLUSTER_QUEUE, GENERIC), keys.TOPOLOGY_READY)
        # Never refused on the way: the condition did not transition.
        assert after["status"] == "True"
        assert after["lastTransitionTime"] == before["lastTransitionTime"], after

        # Its Devices loses the card too: no accelerator detected anywhere, so cpu-only, and the node's
        # cores join the CPU flavor that now selects it.
        await admin.patch(kinds.DEVICES, "t4-a", {"spec": {"groups": []}})

        async def counted_and_planned() -> dict[str, int] | None:
            quota = await _queue_flavors(admin, GENERIC)
            capacity_label = await _flavor_capacity(admin, INTEL_CPU, keys.general_key(INTEL))
            return quota if quota and quota.get(INTEL_CPU) == 8 and capacity_label == "8" else None

        await eventually(counted_and_planned, within=SLOW)
        assert (await _labels(admin, "t4-a")).get(keys.CPU_ONLY) == "true"
    finally:
        await apply_scenario(admin, packaged_scenario("chain-4"))
        await write_settings(admin, {})

    async def restored() -> bool:
        labels = await _labels(admin, "t4-a")
        quota = await _queue_flavors(admin, T4)
        return node_class.accelerated(labels) and keys.CPU_ONLY not in labels and T4A_T4 in (quota or {})

    await eventually(restored, within=SLOW)


async def test_an_admin_overwriting_the_projected_managed_value_is_reported_and_withheld(
    running: Stack,
) -> None:
    admin = running.admin

    async def converged() -> bool:
        node = await admin.get(kinds.NODE, "t4-b")
        meta = (node or {}).get("metadata") or {}
        projected = keys.MANAGED in node_class.nfd_projected(meta.get("annotations") or {})
        fits = [k for k in meta.get("labels") or {} if fit.is_fit_label(k)]
        t4 = await _queue_flavors(admin, T4)
        cpu = await _queue_flavors(admin, GENERIC)
        return bool(
            projected
            and (meta.get("labels") or {}).get(keys.MANAGED) == "true"
            and fits
            and t4
            and T4B_T4 in t4
            and cpu
            and T4B_CPU in cpu
        )

    await eventually(converged, within=SLOW)
    before_t4 = await _queue_flavors(admin, T4)
    assert before_t4 == {T4A_T4: keys.UNITS_PER_ACCELERATOR, T4B_T4: 4 * keys.UNITS_PER_ACCELERATOR}
    try:
        await admin.patch(kinds.NODE, "t4-b", {"metadata": {"labels": {keys.MANAGED: "yes"}}})

        async def reported() -> list[dict[str, Any]]:
            return await _managed_events(admin, "t4-b")

        (event,) = await eventually(reported)
        assert event["type"] == "Warning"
        assert "'yes'" in event["note"]
        assert "fit labels" in event["note"]
        assert "capacity in every flavor" in event["note"]

        async def withheld() -> bool:
            node = await admin.get(kinds.NODE, "t4-b")
            assert node is not None
            labels = node["metadata"].get("labels") or {}
            counting = [k for k in node["status"].get("capacity") or {} if capacity.is_counting_key(k)]
            t4 = await _queue_flavors(admin, T4)
            cpu = await _queue_flavors(admin, GENERIC)
            # Gone from every flavor: no flavor selects it and none is left that it alone fed. A flavor
            # leaves after the queue stopped naming it (Kueue's in-use finalizer), so this is waited for.
            names = {f["metadata"]["name"] for f in (await admin.list(kinds.RESOURCE_FLAVOR))[0]}
            return bool(
                not [k for k in labels if fit.is_fit_label(k)]
                and not counting
                and t4 == {T4A_T4: keys.UNITS_PER_ACCELERATOR}
                and cpu
                and T4B_CPU not in cpu
                and not {T4B_T4, T4B_CPU} & names
            )

        await eventually(withheld, within=SLOW)
        # Said once while the value stays, however often the node was reconciled meanwhile.
        assert len(await _managed_events(admin, "t4-b")) == 1
        # The overwrite stands until nfd-master's next update of the Node (no NodeFeature changed).
        assert (await _labels(admin, "t4-b"))[keys.MANAGED] == "yes"
    finally:
        await admin.patch(kinds.NODE, "t4-b", {"metadata": {"labels": {keys.MANAGED: "true"}}})

    async def back() -> bool:
        labels = await _labels(admin, "t4-b")
        fits = [k for k in labels if fit.is_fit_label(k)]
        return bool(fits) and await _queue_flavors(admin, T4) == before_t4

    await eventually(back, within=SLOW)
