"""Gate 3 end to end on the real control plane: the chain-4 scenario with the agent, topology and chain
controllers running, real Kueue reserving through the generated TAS queues, and the node-devices
controllers giving verdicts.

Shown: the controller marks ``gpustack-node-devices`` Active and the chain then references it from the
accelerated queues; a Workload whose cards are free gets ``Ready`` and Kueue admits it; on a fragmented
node (the ledger holds three of its four cards in other modes) a two-card Workload Kueue placed there by
quota and TAS gets ``Retry`` naming its role and Kueue evicts it with that message (a standalone
Workload has no job to stop, so it stays evicted instead of being requeued; a Pod group's is requeued);
once the ledger frees the cards, the same Workload submitted again is judged ``Ready`` and admitted on
that node. Inflight: with two of t4-b's cards held outside Kueue, a second two-card Workload that TAS and
the ledger both think fits is answered ``Retry`` (0 free cards) while the first one's Pod is not held
yet; once that Pod carries its allocation record and the ledger shows its cards, it is not charged
twice and the resubmitted Workload is admitted.

The node-devices controllers run with the controller ServiceAccount's client, so the verbs they use are
the ones the generated RBAC grants.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.crds.devices import AllocationMode
from tests.kit import kueue
from tests.placement.gate3_stack import Running, running_with_gate3
from tests.stack import condition, eventually, module_cluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

TEAM = "team-gate3"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
M = keys.UNITS_PER_ACCELERATOR
#: The simulator's field manager for the Devices ledger (the test edits the ledger as it would).
SIMULATOR = "gpustack-simulator"
#: Kueue requeues a Retry no sooner than 30 s later: poll well past that (never a measurement).
WITHIN = 150.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("gate3") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    async with running_with_gate3(devcluster, "chain-4", TEAM) as running:
        yield running


def _workload(name: str, gpus: int) -> dict[str, Any]:
    spec = kueue.pod_spec(kueue.gpu_container(gpus))
    return kueue.workload(name, TEAM, keys.local_queue_name(T4), kueue.pod_set(spec))


def _entry(wl: dict[str, Any] | None) -> dict[str, Any]:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == keys.NODE_DEVICES_CHECK:
            return dict(entry)
    return {}


async def _set_ledger(admin: Client, node: str, modes: dict[int, dict[str, Any]]) -> None:
    """Rewrite the ledger entries of ``node``'s cards by index (the others keep theirs)."""
    devices = await admin.get(kinds.DEVICES, node)
    assert devices is not None
    groups = []
    for group in devices["status"]["groups"]:
        cards = []
        for card in group["accelerators"]:
            entry = {
                "id": card["id"],
                "index": card.get("index", 0),
                "mode": 0,
                "allocated": 0,
                "remaining": M,
            }
            entry.update(modes.get(int(card.get("index", 0)), {}))
            cards.append(entry)
        groups.append({"id": group["id"], "manufacturer": group["manufacturer"], "accelerators": cards})
    body = {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": kinds.DEVICES.kind,
        "metadata": {"name": node},
        "status": {"groups": groups},
    }
    await admin.apply(kinds.DEVICES, body, field_manager=SIMULATOR, force=True, subresource="status")


async def test_check_is_active_and_referenced(running: Running) -> None:
    admin = running.admin

    async def active() -> dict[str, Any] | None:
        check = await admin.get(kinds.ADMISSION_CHECK, keys.NODE_DEVICES_CHECK)
        cond = condition(check, "Active")
        return cond if cond.get("status") == "True" else None

    cond = await eventually(active, within=120.0)
    assert cond is not None and cond["reason"] == "Ready"

    async def referenced() -> bool:
        cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
        checks = (((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}).get(
            "admissionChecks"
        ) or []
        return keys.NODE_DEVICES_CHECK in {c.get("name") for c in checks}

    await eventually(referenced, within=120.0)


async def test_free_cards_ready_then_admitted(running: Running) -> None:
    admin = running.admin
    await test_check_is_active_and_referenced(running)
    await admin.create(kinds.WORKLOAD, _workload("one-t4", 1), namespace=TEAM)

    async def admitted() -> dict[str, Any] | None:
        wl = await admin.get(kinds.WORKLOAD, "one-t4", TEAM)
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted, within=120.0)
    entry = _entry(wl)
    assert entry["state"] == "Ready", entry
    assert "fits the cards of its assigned nodes (main)" in entry["message"]
    assert running.check.verdicts[f"{TEAM}/one-t4"] == "Ready"


async def test_fragmented_node_retry_names_the_role_then_admitted_once_freed(running: Running) -> None:
    admin = running.admin
    await test_check_is_active_and_referenced(running)
    # t4-b: card 0 exclusive, card 1 shared, card 2 sliced, card 3 free: Kueue's quota (credits) and TAS
    # (the node's four GPUs) both accept a two-card Pod there; only Gate 3 sees the fragmentation.
    await _set_ledger(
        admin,
        "t4-b",
        {
            0: {"mode": int(AllocationMode.EXCLUSIVE), "allocated": M, "remaining": 0},
            1: {"mode": int(AllocationMode.SHARED), "allocated": M // 10, "remaining": M - M // 10},
            2: {
                "mode": int(AllocationMode.SLICED),
                "allocated": M // 2,
                "remaining": M // 2,
                "allocatedSlices": 1,
            },
        },
    )

    async def ledger_cached() -> bool:
        facts = running.check.cluster().devices.get("t4-b")
        return facts is not None and any(
            c.mode == AllocationMode.EXCLUSIVE for c in facts.card_ledgers().values()
        )

    await eventually(ledger_cached)
    await admin.create(kinds.WORKLOAD, _workload("two-t4", 2), namespace=TEAM)

    async def retried() -> str | None:
        wl = await admin.get(kinds.WORKLOAD, "two-t4", TEAM)
        entry = _entry(wl)
        if entry.get("state") == "Retry":
            return str(entry.get("message"))
        evicted = condition(wl, "Evicted")
        if evicted.get("status") == "True" and keys.NODE_DEVICES_CHECK in str(evicted.get("message")):
            return str(evicted.get("message"))
        return None

    message = await eventually(retried, within=120.0)
    assert message is not None
    print(f"\nGate 3 Retry as Kueue shows it: {message}")
    assert "role main: node t4-b" in message
    assert "needs 2 whole nvidia card(s)" in message
    assert running.check.verdicts[f"{TEAM}/two-t4"] == "Retry"
    wl = await admin.get(kinds.WORKLOAD, "two-t4", TEAM)
    assert condition(wl, "Admitted").get("status") != "True"

    # Kueue evicts it (after the Retry's 30 s) with our message. A standalone Workload has no job whose
    # stop would release the reservation, so it stays evicted; a Pod group's Workload is requeued.
    async def evicted() -> str | None:
        wl = await admin.get(kinds.WORKLOAD, "two-t4", TEAM)
        cond = condition(wl, "Evicted")
        return str(cond.get("message")) if cond.get("status") == "True" else None

    eviction = await eventually(evicted, within=WITHIN)
    assert eviction is not None
    assert keys.NODE_DEVICES_CHECK in eviction and "role main: node t4-b" in eviction
    await admin.delete(kinds.WORKLOAD, "two-t4", TEAM)

    # The cards free up: the same Workload, submitted again, is placed there, judged Ready and admitted.
    await _set_ledger(admin, "t4-b", {})
    await eventually(_ledger_free(running))
    await admin.create(kinds.WORKLOAD, _workload("two-t4-again", 2), namespace=TEAM)

    async def admitted() -> dict[str, Any] | None:
        wl = await admin.get(kinds.WORKLOAD, "two-t4-again", TEAM)
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    try:
        wl = await eventually(admitted, within=WITHIN)
    except AssertionError:
        stuck = await admin.get(kinds.WORKLOAD, "two-t4-again", TEAM)
        print("Workload status:", (stuck or {}).get("status"))
        print("verdicts:", running.check.verdicts)
        raise
    assert wl is not None and _entry(wl)["state"] == "Ready"
    assert wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0][
        "valuesPerLevel"
    ] == [{"universal": "t4-b"}]
    for name in ("one-t4", "two-t4-again"):
        with contextlib.suppress(Exception):
            await admin.delete(kinds.WORKLOAD, name, TEAM)


def _ledger_free(running: Running) -> Any:
    async def check() -> bool:
        facts = running.check.cluster().devices.get("t4-b")
        return facts is not None and all(c.mode == AllocationMode.NONE for c in facts.card_ledgers().values())

    return check


def _held_pod(workload: str, node: str) -> dict[str, Any]:
    """A Pod as the Device Manager leaves it once it allocated the Pod's cards: tied to its Workload and
    PodSet by Kueue's keys, bound to ``node``, its allocation record naming the claiming container. (No
    kubelet runs here: the Pod stays bound and never starts.)"""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload}-0",
            "namespace": TEAM,
            "labels": {keys.KUEUE_PODSET_LABEL: "main"},
            "annotations": {
                # A topology request marks it a TAS Pod: Kueue counts it through its Workload's admission,
                # not a second time as a foreign Pod's usage of the node.
                keys.PODSET_REQUIRED_TOPOLOGY: keys.HOSTNAME,
                keys.KUEUE_WORKLOAD_ANNOTATION: workload,
                keys.ACCELERATOR_ALLOCATED: '{"c": {"ids": ["GPU-2", "GPU-3"]}}',
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/x",
                    "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }


async def test_inflight_admitted_workload_counts_until_its_pod_is_held(running: Running) -> None:
    admin = running.admin
    await test_check_is_active_and_referenced(running)
    exclusive = {"mode": int(AllocationMode.EXCLUSIVE), "allocated": M, "remaining": 0}
    # Cards 0 and 1 of t4-b are held by something outside Kueue; 2 and 3 are free.
    await _set_ledger(admin, "t4-b", {0: exclusive, 1: exclusive})

    async def ledger_cached() -> bool:
        facts = running.check.cluster().devices.get("t4-b")
        ledgers = facts.card_ledgers().values() if facts is not None else ()
        return sum(c.mode == AllocationMode.EXCLUSIVE for c in ledgers) == 2

    await eventually(ledger_cached)

    async def state_of(name: str) -> str | None:
        wl = await admin.get(kinds.WORKLOAD, name, TEAM)
        if condition(wl, "Admitted").get("status") == "True":
            return "Admitted"
        evicted = condition(wl, "Evicted")
        if evicted.get("status") == "True":
            return "Evicted: " + str(evicted.get("message"))
        return None

    await admin.create(kinds.WORKLOAD, _workload("first", 2), namespace=TEAM)
    assert await eventually(lambda: state_of("first"), within=120.0) == "Admitted"

    # Kueue's TAS still sees two of t4-b's GPUs free (only "first" is admitted there), and so does the
    # ledger: but "first"'s Pod is not held yet, so Gate 3 charges it inflight and answers Retry.
    await admin.create(kinds.WORKLOAD, _workload("second", 2), namespace=TEAM)
    second = await eventually(lambda: state_of("second"), within=WITHIN)
    assert second is not None
    print(f"\nsecond, while first is inflight: {second}")
    assert second.startswith("Evicted") and "role main: node t4-b" in second
    assert "0 free whole card(s)" in second
    await admin.delete(kinds.WORKLOAD, "second", TEAM)

    # The Device Manager allocates "first": its Pod carries the record and the ledger holds cards 2 and 3
    # (the outside holder let 0 and 1 go). The held Pod is not charged twice: the resubmitted Workload fits.
    await admin.create(kinds.POD, _held_pod("first", "t4-b"), namespace=TEAM)
    await _set_ledger(admin, "t4-b", {2: exclusive, 3: exclusive})

    async def pod_cached() -> bool:
        return bool(running.check.cluster().pods.get((TEAM, "first")))

    await eventually(pod_cached)
    await admin.create(kinds.WORKLOAD, _workload("second-again", 2), namespace=TEAM)
    assert await eventually(lambda: state_of("second-again"), within=WITHIN) == "Admitted"
    for name in ("first", "second-again"):
        with contextlib.suppress(Exception):
            await admin.delete(kinds.WORKLOAD, name, TEAM)
    with contextlib.suppress(Exception):
        await admin.delete(kinds.POD, "first-0", TEAM)
