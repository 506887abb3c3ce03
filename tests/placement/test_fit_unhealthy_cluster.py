"""An unhealthy card gives no room in the fit labels, end to end (issue 16, defect 7): the real control plane
and Kueue, the node agent writing the fit labels on the Nodes, the chain's generated TAS queues, and the
node-devices controllers (Gate 3) as the controller ServiceAccount, on the ``chain-4`` scenario's two T4
nodes: ``t4-b`` (four cards) and ``t4-a`` (one card).

1. ``t4-b``'s only free card is unhealthy (the other three are held exclusively) and ``t4-a``'s one card is
   held: node totals still show room on both (the three healthy cards' slice tokens, the agent's units),
   but the agent writes ``0`` in both fit labels of both nodes — not the broken card's 1,600,000 units.
   An *unpinned* 30 % slice is placed by Kueue on one of them and Gate 3 answers ``Retry`` (what the pin
   is there to prevent); the *pinned* slice is not placed at all: it stays pending with Kueue's own
   message, and Gate 3 never judges it.
2. ``t4-a``'s card frees up: the pinned slice goes to that healthy node and is admitted (``Ready``).
3. ``t4-b``'s card is healthy again with the same ledger (and ``t4-a`` held again): its labels read a
   whole card, and the pinned slice is admitted there.

The pin is the webhook's own requirement (:func:`gpustack_worker.placement.fitpin.fit_requirements` from
the demand parser) written into the Workload as the webhook stores it; the webhook itself on the real API
server is ``test_fitpin_cluster.py``'s subject. Each phase submits a new Workload (Kueue does not promise to
requeue an inadmissible one on a Node label change). Timings are printed, never asserted.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.demand import demand_of_podset
from gpustack_worker.placement.fitpin import fit_requirements
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario, parse_scenario
from tests.placement.gate3_stack import Running, running_with_gate3
from tests.placement.racks import check_entry
from tests.stack import condition, eventually, module_cluster
from tests.topology.cluster_helpers import topology_assignments, workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

TEAM = "team-fit-unhealthy"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
BROKEN, SPARE = "t4-b", "t4-a"
M = keys.UNITS_PER_ACCELERATOR
SLICE_UNITS = 30 * keys.UNITS_PER_PERCENT
SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(SLICE_UNITS)}
WITHIN = 150.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("fit-unhealthy") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    async with running_with_gate3(devcluster, "chain-4", TEAM) as running:
        yield running


async def set_t4_nodes(admin: Client, *, broken_card_unhealthy: bool, spare_held: bool) -> None:
    """Re-apply ``chain-4`` with ``t4-b``'s cards 1-3 held exclusively and its card 0 free (unhealthy or
    not), and ``t4-a``'s one card held or free — as the Device Manager would publish it."""
    data = packaged_scenario("chain-4").model_dump(by_alias=True, exclude_defaults=True)
    for node in data["nodes"]:
        if node["name"] == BROKEN:
            node["accelerators"][0]["unhealthy"] = [0] if broken_card_unhealthy else []
            node["accelerators"][0]["allocations"] = [{"card": i, "mode": "exclusive"} for i in (1, 2, 3)]
        if node["name"] == SPARE and spare_held:
            node["accelerators"][0]["allocations"] = [{"card": 0, "mode": "exclusive"}]
    await apply_scenario(admin, parse_scenario(data, "chain-4 (fit-unhealthy)"))


async def fit_labels(admin: Client, a_key: str) -> dict[str, dict[str, str]]:
    """Both fit labels of both T4 nodes, as the agent wrote them."""
    out = {}
    for name in (BROKEN, SPARE):
        labels = ((await admin.get(kinds.NODE, name)) or {}).get("metadata", {}).get("labels") or {}
        out[name] = {
            "sliced": labels.get(keys.sliced_max_free_units_key(a_key), ""),
            "shared": labels.get(keys.shared_free_cards_key(a_key), ""),
        }
    return out


def slice_workload(name: str, a_key: str, *, pinned: bool) -> dict[str, Any]:
    """One Pod of a 30 % T4 slice; ``pinned``: with the webhook's fit requirement in its required terms."""
    body = workload(name, TEAM, T4)
    template = body["spec"]["podSets"][0]["template"]
    resources = {"requests": {"cpu": "1", **SLICE}, "limits": dict(SLICE)}
    template["spec"]["containers"][0]["resources"] = resources
    if pinned:
        pin = fit_requirements(a_key, demand_of_podset(template["spec"]))
        assert pin == [
            {"key": keys.sliced_max_free_units_key(a_key), "operator": "Gt", "values": [str(SLICE_UNITS - 1)]}
        ]
        required = {"nodeSelectorTerms": [{"matchExpressions": pin}]}
        node_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": required}
        template["spec"]["affinity"] = {"nodeAffinity": node_affinity}
    return body


async def checks_ready(running: Running) -> str:
    """Gate 3 Active and referenced from the T4 queue; the T4 model key."""
    admin = running.admin

    async def referenced() -> bool:
        check = await admin.get(kinds.ADMISSION_CHECK, keys.NODE_DEVICES_CHECK)
        cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
        strategy = ((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
        names = {c.get("name") for c in strategy.get("admissionChecks") or ()}
        return condition(check, "Active").get("status") == "True" and keys.NODE_DEVICES_CHECK in names

    await eventually(referenced, within=120.0)
    instance_type = await admin.get(kinds.INSTANCE_TYPE, T4)
    assert instance_type is not None
    return str(instance_type["spec"]["acceleratorGroup"])


async def admitted_on(running: Running, name: str) -> tuple[dict[str, Any], list[str]]:
    """Wait until Workload ``name`` is admitted; it, and the hosts its assignment names."""
    seen: set[str] = set()

    async def admitted() -> dict[str, Any] | None:
        wl = await running.admin.get(kinds.WORKLOAD, name, TEAM)
        if state := check_entry(wl, keys.NODE_DEVICES_CHECK).get("state"):
            seen.add(str(state))
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted, within=WITHIN)
    assert "Retry" not in seen, seen
    assert check_entry(wl, keys.NODE_DEVICES_CHECK)["state"] == "Ready"
    hosts = [
        dict(zip(levels, d.values, strict=True))[keys.HOSTNAME]
        for levels, domains in topology_assignments(wl).values()
        for d in domains
    ]
    return wl, hosts


async def test_an_unhealthy_free_card_gives_no_room_and_the_pin_keeps_the_slice_away(
    running: Running,
) -> None:
    admin = running.admin
    a_key = await checks_ready(running)
    names = ("unpinned", "pinned", "pinned-spare", "pinned-healed")
    try:
        # 1. The only free card of t4-b is unhealthy; t4-a's card is held.
        await set_t4_nodes(admin, broken_card_unhealthy=True, spare_held=True)
        no_room = {"sliced": "0", "shared": "0"}

        async def labels_no_room() -> dict[str, dict[str, str]] | None:
            out = await fit_labels(admin, a_key)
            return out if out == {BROKEN: no_room, SPARE: no_room} else None

        print(f"\nfit labels, broken card and held spare: {await eventually(labels_no_room)}")

        async def gate3_sees_ledgers() -> bool:
            devices = running.check.cluster().devices
            broken, spare = devices.get(BROKEN), devices.get(SPARE)
            return (
                broken is not None
                and spare is not None
                and any(c.unhealthy for g in broken.groups for c in g.cards)
                and all(e.mode != 0 for e in spare.card_ledgers().values())
            )

        await eventually(gate3_sees_ledgers)

        # Without the pin, node totals let Kueue place the slice, and Gate 3 answers Retry.
        await admin.create(kinds.WORKLOAD, slice_workload("unpinned", a_key, pinned=False), namespace=TEAM)

        async def retried() -> str | None:
            wl = await admin.get(kinds.WORKLOAD, "unpinned", TEAM)
            entry = check_entry(wl, keys.NODE_DEVICES_CHECK)
            if entry.get("state") == "Retry":
                return str(entry.get("message"))
            evicted = condition(wl, "Evicted")
            if evicted.get("status") == "True" and keys.NODE_DEVICES_CHECK in str(evicted.get("message")):
                return str(evicted.get("message"))
            return None

        message = await eventually(retried, within=WITHIN)
        print(f"unpinned slice, Gate 3: {message}")
        assert "no free or sliced card with a free slot and enough units" in message
        await admin.delete(kinds.WORKLOAD, "unpinned", TEAM)

        # With the pin, Kueue does not place it: pending with Kueue's message, never judged by Gate 3.
        started = time.monotonic()
        await admin.create(kinds.WORKLOAD, slice_workload("pinned", a_key, pinned=True), namespace=TEAM)

        async def kueue_pending() -> str | None:
            wl = await admin.get(kinds.WORKLOAD, "pinned", TEAM)
            reserved = condition(wl, "QuotaReserved")
            if reserved.get("status") == "False" and reserved.get("message"):
                return str(reserved["message"])
            return None

        pending = await eventually(kueue_pending, within=WITHIN)
        print(f"pinned slice pending after {time.monotonic() - started:.1f}s, Kueue: {pending}")
        wl = await admin.get(kinds.WORKLOAD, "pinned", TEAM)
        assert condition(wl, "Admitted").get("status") != "True"
        assert check_entry(wl, keys.NODE_DEVICES_CHECK).get("state") != "Retry"
        assert not (wl or {}).get("status", {}).get("admission"), "Kueue placed it"
        assert f"{TEAM}/pinned" not in running.check.verdicts
        await admin.delete(kinds.WORKLOAD, "pinned", TEAM)

        # 2. t4-a's card frees up: the pinned slice goes to that healthy node.
        await set_t4_nodes(admin, broken_card_unhealthy=True, spare_held=False)

        async def spare_free() -> dict[str, dict[str, str]] | None:
            out = await fit_labels(admin, a_key)
            want = {BROKEN: no_room, SPARE: {"sliced": str(M), "shared": "1"}}
            return out if out == want else None

        print(f"fit labels, spare freed: {await eventually(spare_free)}")
        await admin.create(kinds.WORKLOAD, slice_workload("pinned-spare", a_key, pinned=True), namespace=TEAM)
        _, hosts = await admitted_on(running, "pinned-spare")
        assert hosts == [SPARE]
        await admin.delete(kinds.WORKLOAD, "pinned-spare", TEAM)

        # 3. t4-b's card is healthy again with the same ledger (t4-a held again): admitted there.
        await set_t4_nodes(admin, broken_card_unhealthy=False, spare_held=True)

        async def healed() -> dict[str, dict[str, str]] | None:
            out = await fit_labels(admin, a_key)
            want = {BROKEN: {"sliced": str(M), "shared": "1"}, SPARE: no_room}
            return out if out == want else None

        print(f"fit labels, card healed: {await eventually(healed)}")
        healed_wl = slice_workload("pinned-healed", a_key, pinned=True)
        await admin.create(kinds.WORKLOAD, healed_wl, namespace=TEAM)
        wl, hosts = await admitted_on(running, "pinned-healed")
        assert hosts == [BROKEN]
        print(f"pinned slice on the healed node, Gate 3: {check_entry(wl, keys.NODE_DEVICES_CHECK)}")
    finally:
        for name in names:
            with contextlib.suppress(Exception):
                await admin.delete(kinds.WORKLOAD, name, TEAM)
