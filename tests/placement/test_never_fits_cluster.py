"""A request that can never fit stops cycling, and Kueue's protocol is not an edit (issue 27, class 5), on
the real control plane: real Kueue with its Pod integration and TAS, the agent, the topology and chain
controllers, and the controller process's placement part (:class:`Placement`: the ModelDeployment
controller, the joint check, Gate 3), all as the controller's ServiceAccount.

The fleet: two 8-card L4 machines (``l4-b``, ``l4-c``) whose ledgers hold four cards each in shared use,
so each has four free whole cards; Kubernetes still counts eight ``nvidia.com/gpu`` on each (the shares
are another family's), so Kueue's quota and TAS place an 8-card Pod there, and only Gate 3 sees it can
never fit. The bound is set to 2 retries (``node-devices-never-fits-retries``, live).

1. A ModelDeployment asking 8 whole cards per Pod: Gate 3 answers ``Retry`` and Kueue evicts and resets
   the check, twice (Kueue's own ``retryCount`` and ``schedulingStats.evictions`` count them); at the next
   reservation Gate 3 parks it (``spec.active=false``, a ``NeverFits`` Warning Event); the deployment reads
   ``Placeable=False/NeverFits`` with the largest fit (4 free whole cards, node ``l4-b``). Across those
   evictions no ``FieldsRepaired`` Event is posted and no repair is counted. Then a probe Workload is
   admitted through both checks (Kueue and Gate 3 had their turns) and the parked one has not moved.
2. A node with 8 free cards (``l4-a``) joins: Gate 3 reactivates the Workload, Kueue places it on the new
   node, Gate 3 says ``Ready``, it is admitted and the deployment reads ``Placeable=True``.
3. A real edit is still one: in a two-role set whose ``huge`` role never reserves, the ``small`` group
   passes Gate 3 and waits for the joint check. An admin sets Gate 3's state back to ``Pending`` (as
   ``kubectl-edit``): Gate 3 writes ``Ready`` back and posts exactly one ``FieldsRepaired`` Warning Event
   naming the field; the admin edits the joint check's message: the joint check does the same. (An
   admitted Workload is never judged again, so an edit of its entry stays as the admin left it.)

No kubelet runs: a bound Pod never starts. Timings are printed, never asserted.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement import deployments, gate3_parking
from gpustack_worker.placement.checks import REASON_FIELDS_REPAIRED
from gpustack_worker.placement.controller import Placement
from gpustack_worker.placement.node_devices import REASON_NEVER_FITS
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import parse_text
from tests import stack as support
from tests.kit import models
from tests.placement.racks import L4, check_entry
from tests.stack import condition, module_cluster, running_stack, write_settings
from tests.topology.cluster_helpers import workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from tests.stack import Stack

pytestmark = pytest.mark.cluster

TEAM = "team-never-fits"
DEPLOYMENT = "big"
BOUND = 2
#: Each Retry is requeued no sooner than 30 s later, and the machine is shared: poll generously.
eventually = functools.partial(support.eventually, within=600.0, every=1.0)


def _node(name: str, held: int) -> str:
    """An 8-card L4 machine whose first ``held`` cards are in shared use (two shares each)."""
    allocations = ", ".join(f"{{card: {i}, mode: shared, shares: 2}}" for i in range(held))
    return f"""
  - name: {name}
    cpu: {{vendor: Intel, model: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz, cores: 64}}
    memory: 512Gi
    accelerators:
      - {{manufacturer: nvidia, product: NVIDIA L4, memoryMiB: 23034, cores: 7424, count: 8,
         family: Ada Lovelace, computeCapability: "8.9", driverVersion: 580.159.03, runtimeVersion: "13.0",
         allocations: [{allocations}]}}
"""


FLEET = parse_text("nodes:" + _node("l4-b", 4) + _node("l4-c", 4), "never-fits fleet")
JOINING = parse_text("nodes:" + _node("l4-a", 0), "never-fits joining node")


class Running:
    def __init__(self, stack: Stack, placement: Placement) -> None:
        self.stack = stack
        self.admin: Client = stack.admin
        self.placement = placement

    async def workload_name(self) -> str | None:
        md = await self.admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        if md is None:
            return None
        pods, _ = await self.admin.list(
            kinds.POD, namespace=TEAM, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={md['metadata']['uid']}"
        )
        return str(pods[0]["metadata"]["labels"][keys.POD_GROUP_NAME]) if pods else None

    async def events(self, reason: str, name: str) -> list[dict[str, Any]]:
        items, _ = await self.admin.list(kinds.EVENT, namespace=TEAM)
        return [
            e
            for e in items
            if e.get("reason") == reason
            and (e.get("regarding") or {}).get("name") == name
            and e.get("reportingController") in (keys.NODE_DEVICES_CONTROLLER, keys.JOINT_CONTROLLER)
        ]


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("never-fits") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    def extra(client: Client, settings: Any, registry: Any) -> list[Any]:
        return [Placement(client, settings, registry)]

    async with running_stack(devcluster, FLEET, namespaces=(TEAM,), extra=extra) as stack:
        (placement,) = stack.extra
        yield Running(stack, placement)


def _repairs(manager: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "gpustack_apply_repairs_total", {"field_manager": manager, "kind": "Workload"}
        )
        or 0.0
    )


def _evictions(wl: dict[str, Any] | None, reason: str) -> int:
    stats = ((wl or {}).get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count") or 0) for e in stats.get("evictions") or () if e.get("reason") == reason)


async def _queue_ready(run: Running) -> None:
    """The bound is in force, the L4 queue is Active with both checks referenced, its LocalQueue exists."""
    await write_settings(run.admin, {"node-devices-never-fits-retries": str(BOUND)})

    async def ready() -> bool:
        if getattr(run.stack.settings.current, "node_devices_never_fits_retries", None) != BOUND:
            return False
        cq = await run.admin.get(kinds.CLUSTER_QUEUE, L4)
        strategy = ((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
        checks = {c.get("name") for c in strategy.get("admissionChecks") or ()}
        if condition(cq, "Active").get("status") != "True":
            return False
        if not {keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK} <= checks:
            return False
        return await run.admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(L4), TEAM) is not None

    await eventually(ready)


def _deployment() -> dict[str, Any]:
    template = models.template(image="registry.invalid/e:1")
    server = models.role("server", instanceType=L4, resources={"accelerator": "8"}, template=template)
    return models.model_deployment(DEPLOYMENT, TEAM, server)


async def test_a_request_that_never_fits_parks_resumes_and_an_edit_is_still_reported(
    running: Running,
) -> None:
    run, admin = running, running.admin
    await _queue_ready(run)
    repairs_before = {m: _repairs(m) for m in (keys.NODE_DEVICES_CHECK, keys.JOINT_CHECK)}
    started = time.monotonic()
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment(), namespace=TEAM)
    name = await eventually(run.workload_name)
    print(f"\nWorkload {name}")

    # 1. Retried BOUND times (each an eviction that resets the check), then parked.
    async def parked() -> dict[str, Any] | None:
        wl = await admin.get(kinds.WORKLOAD, name, TEAM)
        return wl if wl is not None and gate3_parking.is_parked(wl) else None

    wl = await eventually(parked)
    print(f"parked after {time.monotonic() - started:.0f}s")
    entry = check_entry(wl, keys.NODE_DEVICES_CHECK)
    record = gate3_parking.read_record(wl)
    assert record is not None
    print(f"record: {record.message}")
    print(f"evictions: {wl['status'].get('schedulingStats')}")
    assert entry.get("retryCount") == BOUND, entry
    assert _evictions(wl, "AdmissionCheck") == BOUND
    assert "role server: a Pod needs 8 whole nvidia card(s)" in record.message
    assert "largest fit: 4 free whole nvidia card(s) on node l4-b" in record.message
    assert f"stopped retrying after {BOUND} retries" in record.message

    async def deactivated() -> dict[str, Any] | None:
        found = await admin.get(kinds.WORKLOAD, name, TEAM)
        evicted = condition(found, "Evicted")
        return (
            found
            if evicted.get("status") == "True" and evicted.get("reason", "").startswith("Deactivated")
            else None
        )

    await eventually(deactivated)

    async def never_fits_condition() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        cond = condition(md, deployments.PLACEABLE)
        return (
            cond
            if cond.get("reason") == deployments.NEVER_FITS and "stopped retrying" in cond.get("message", "")
            else None
        )

    placeable = await eventually(never_fits_condition)
    print(f"Placeable: {placeable}")
    assert placeable["status"] == "False"
    assert placeable["message"].startswith(
        "role server replica 0: role server: a Pod needs 8 whole nvidia card(s)"
    )
    assert "4 free whole nvidia card(s) on node l4-b" in placeable["message"]
    assert await eventually(lambda: run.events(REASON_NEVER_FITS, name))

    # Stopped: a probe Workload is admitted through both checks after the park (Kueue scheduled and Gate 3
    # judged since); the parked one has not been reserved, retried or evicted again.
    await admin.create(kinds.WORKLOAD, workload("probe", TEAM, L4), namespace=TEAM)

    async def probe_admitted() -> bool:
        probe = await admin.get(kinds.WORKLOAD, "probe", TEAM)
        return condition(probe, "Admitted").get("status") == "True"

    await eventually(probe_admitted)
    still = await admin.get(kinds.WORKLOAD, name, TEAM)
    assert still is not None and gate3_parking.is_parked(still)
    assert condition(still, "QuotaReserved").get("status") != "True"
    assert _evictions(still, "AdmissionCheck") == BOUND
    assert check_entry(still, keys.NODE_DEVICES_CHECK).get("retryCount") == BOUND
    # Kueue reset the check BOUND times and Gate 3 wrote over each reset: no repair, no FieldsRepaired.
    assert {m: _repairs(m) for m in repairs_before} == repairs_before
    assert await run.events(REASON_FIELDS_REPAIRED, name) == []
    await admin.delete(kinds.WORKLOAD, "probe", TEAM)

    # 2. A node with 8 free cards joins: resumed, placed there, Ready, admitted; Placeable again.
    joined = time.monotonic()
    await apply_scenario(admin, JOINING)

    async def admitted() -> dict[str, Any] | None:
        found = await admin.get(kinds.WORKLOAD, name, TEAM)
        return found if condition(found, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted)
    print(f"admitted {time.monotonic() - joined:.0f}s after l4-a joined")
    assert check_entry(wl, keys.NODE_DEVICES_CHECK)["state"] == "Ready"
    assert gate3_parking.read_record(wl) is None and wl["spec"].get("active") is not False
    ((psa,),) = [wl["status"]["admission"]["podSetAssignments"]]
    assert psa["topologyAssignment"]["slices"][0]["valuesPerLevel"][-1] == {"universal": "l4-a"}

    async def fits_again() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, DEPLOYMENT, TEAM)
        cond = condition(md, deployments.PLACEABLE)
        return cond if cond.get("status") == "True" else None

    await eventually(fits_again)
    assert {m: _repairs(m) for m in repairs_before} == repairs_before

    # 3. An admin edits Gate 3's entry of a Workload Gate 3 judges again: one group of a two-role set that
    # waits for its sibling (the joint check holds it Pending; Gate 3 said Ready). The admin sets Gate 3's
    # state back to Pending: Gate 3 writes its verdict back and reports exactly that edit. Then the admin
    # edits the joint check's message: the joint check does the same.
    await admin.create(kinds.MODEL_DEPLOYMENT, _pair(), namespace=TEAM)

    async def small_waiting() -> dict[str, Any] | None:
        found = await admin.get(kinds.WORKLOAD, await _group_of(run, PAIR, "small") or "-", TEAM)
        gate3 = check_entry(found, keys.NODE_DEVICES_CHECK)
        joint = check_entry(found, keys.JOINT_CHECK)
        return found if gate3.get("state") == "Ready" and joint.get("state") == "Pending" else None

    small = await eventually(small_waiting)
    small_name = small["metadata"]["name"]
    for check, field, value, controller in (
        (keys.NODE_DEVICES_CHECK, "state", "Pending", keys.NODE_DEVICES_CONTROLLER),
        (keys.JOINT_CHECK, "message", "held by an admin", keys.JOINT_CONTROLLER),
    ):
        found = await admin.get(kinds.WORKLOAD, small_name, TEAM)
        assert found is not None
        before = check_entry(found, check)
        index = [e["name"] for e in found["status"]["admissionChecks"]].index(check)
        await admin.patch(
            kinds.WORKLOAD,
            small_name,
            [{"op": "replace", "path": f"/status/admissionChecks/{index}/{field}", "value": value}],
            namespace=TEAM,
            patch_type="json",
            subresource="status",
            field_manager="kubectl-edit",
        )

        async def repaired(
            check: str = check, before: dict[str, Any] = before, controller: str = controller
        ) -> list[dict[str, Any]]:
            now = check_entry(await admin.get(kinds.WORKLOAD, small_name, TEAM), check)
            if (now.get("state"), now.get("message")) != (before.get("state"), before.get("message")):
                return []
            events = await run.events(REASON_FIELDS_REPAIRED, small_name)
            return [e for e in events if e.get("reportingController") == controller]

        (event,) = await eventually(repaired)
        print(f"FieldsRepaired by {controller}: {event.get('note')}")
        assert event["type"] == "Warning"
        assert f'admissionChecks[{{"name":"{check}"}}].{field}' in event["note"]
    assert _repairs(keys.NODE_DEVICES_CHECK) == repairs_before[keys.NODE_DEVICES_CHECK] + 1
    assert _repairs(keys.JOINT_CHECK) == repairs_before[keys.JOINT_CHECK] + 1
    # The parked-then-admitted Workload never got one.
    assert await run.events(REASON_FIELDS_REPAIRED, name) == []


PAIR = "pair"


def _pair() -> dict[str, Any]:
    """A set whose ``huge`` role asks more cards than the pool's quota (it never reserves), so its ``small``
    role reserves, passes Gate 3 and waits for the joint check."""
    body = _deployment()
    body["metadata"]["name"] = PAIR
    (server,) = body["spec"]["roles"]
    body["spec"]["roles"] = [
        {**server, "name": "small", "resources": {"accelerator": "1"}},
        {**server, "name": "huge", "resources": {"accelerator": "64"}},
    ]
    return body


async def _group_of(run: Running, deployment: str, role: str) -> str | None:
    md = await run.admin.get(kinds.MODEL_DEPLOYMENT, deployment, TEAM)
    if md is None:
        return None
    pods, _ = await run.admin.list(
        kinds.POD,
        namespace=TEAM,
        label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={md['metadata']['uid']},{keys.MODEL_DEPLOYMENT_ROLE}={role}",
    )
    return str(pods[0]["metadata"]["labels"][keys.POD_GROUP_NAME]) if pods else None
