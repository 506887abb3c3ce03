"""Placement and admission end to end, everything together (issue 11): the real control plane (etcd,
kube-apiserver, kube-scheduler, Kueue with its Pod integration, nfd-master), the node agent, the
topology and chain controllers, and the controller process's placement part (:class:`Placement`: the
ModelDeployment controller, the joint check, Gate 3, and the fit pin served over HTTPS with the dev
cluster's serving certificate and registered in the API server), all as the controller's ServiceAccount,
on the ``placement-racks`` scenario (four two-L4 nodes in two racks, two two-A10G nodes of which one is
fragmented).

1. A two-role ModelDeployment (prefill 4 Pods and decode 2 Pods, one L4 each, ``requiredLevel`` rack)
   while one L4 of every rack is taken by a foreign Workload: decode fits a rack and reserves, prefill
   (a whole rack) does not; both roles stay Pending in the deployment's status (prefill with Kueue's
   message verbatim, decode with the joint check's ``1 of 2`` naming the waiting InstanceType), and no
   Pod binds. Deleting the foreign Workloads admits both groups; kube-scheduler binds every Pod, and the
   Pods of each replica share one rack.
2. A 30 % slice whose role prefers the fragmented A10G node (both its cards have 25 % free, half the node
   free in total): with ``workload-fit-affinity: "false"`` Kueue places it there by node totals and Gate 3
   answers ``Retry`` naming the role and the node; with the setting on, a new deployment's Workload is
   stored with the fit pin, and Kueue places it on the roomy node (its cards fit) despite the preference,
   where Gate 3 says ``Ready`` and kube-scheduler binds its Pod.

No kubelet runs: a bound Pod keeps ``spec.nodeName`` and never starts. No garbage collector runs either
(no kube-controller-manager): deleting a deployment leaves its Pods, so the test deletes them itself.
Timings are printed, never asserted; every poll is generous.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement import joint
from gpustack_worker.placement.controller import Placement
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from tests import stack as support
from tests.kit import kueue, models
from tests.kit.resync import resynced
from tests.kit.webhooks import webhooks_served
from tests.placement.racks import L4, RACK_OF, RACKS, apply_racks, blocker, check_entry
from tests.stack import Stack, condition, module_cluster, running_stack
from tests.topology.cluster_helpers import topology_assignments, workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

TEAM = "team-admission"
A10G = "gpustack--nvidia-a10g-linux-amd64"
RACK = keys.PRIVATE_RACK
FRAGMENTED, ROOMY = "a10g-fragmented", "a10g-roomy"
M = keys.UNITS_PER_ACCELERATOR
#: The slice every test-2 Pod asks for: 30 % of a card; each fragmented card has 25 % free.
SLICE_UNITS = 30 * keys.UNITS_PER_PERCENT
KUEUE_GATE = "kueue.x-k8s.io/admission"
#: A fresh CI machine is slower than a warm one, and Kueue requeues a Retry no sooner than 30 s later:
#: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _gated(pod: dict[str, Any]) -> bool:
    return KUEUE_GATE in {g.get("name") for g in pod["spec"].get("schedulingGates") or ()}


class Running:
    def __init__(self, stack: Stack, placement: Placement) -> None:
        self.stack = stack
        self.admin: Client = stack.admin
        self.placement = placement

    async def pods(self, deployment: str) -> list[dict[str, Any]]:
        md = await self.admin.get(kinds.MODEL_DEPLOYMENT, deployment, TEAM)
        if md is None:
            return []
        items, _ = await self.admin.list(
            kinds.POD, namespace=TEAM, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={md['metadata']['uid']}"
        )
        return items

    async def groups(self, deployment: str, sizes: dict[str, int]) -> dict[str, str] | None:
        """Role → pod group (= Workload) name, once every role has all its Pods."""
        pods = await self.pods(deployment)
        out: dict[str, str] = {}
        for role, size in sizes.items():
            mine = [p for p in pods if _labels(p).get(keys.MODEL_DEPLOYMENT_ROLE) == role]
            if len(mine) != size:
                return None
            out[role] = _labels(mine[0])[keys.POD_GROUP_NAME]
        return out

    async def workload(self, name: str) -> dict[str, Any] | None:
        return await self.admin.get(kinds.WORKLOAD, name, TEAM)

    async def settings(self, data: dict[str, str]) -> None:
        """Write the settings ConfigMap and wait until the running stack has taken it in."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": DEFAULT_NAMESPACE},
            "data": data,
        }
        if await self.admin.get(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE) is None:
            await self.admin.create(kinds.CONFIG_MAP, body, namespace=DEFAULT_NAMESPACE)
        else:
            await self.admin.replace(kinds.CONFIG_MAP, body)

    async def delete_deployment(self, name: str) -> None:
        """Delete the deployment and, as no garbage collector runs here, its Pods (Kueue's finalizer is
        dropped once the Pod is deleted; the test removes it itself if Kueue has not yet)."""
        pods = await self.pods(name)
        await self.admin.delete(kinds.MODEL_DEPLOYMENT, name, TEAM)
        for pod in pods:
            with contextlib.suppress(Exception):
                await self.admin.delete(kinds.POD, pod["metadata"]["name"], TEAM)

        async def gone() -> bool:
            left = 0
            for pod in pods:
                live = await self.admin.get(kinds.POD, pod["metadata"]["name"], TEAM)
                if live is None:
                    continue
                left += 1
                if live["metadata"].get("finalizers"):
                    with contextlib.suppress(Exception):
                        await self.admin.patch(
                            kinds.POD,
                            pod["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                            namespace=TEAM,
                        )
            return left == 0

        await eventually(gone)


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("admission") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    def extra(client: Client, settings: Any, registry: Any) -> list[Any]:
        return [Placement(client, settings, registry)]

    async with running_stack(devcluster, "placement-racks", namespaces=(TEAM,), extra=extra) as stack:
        (placement,) = stack.extra
        # The controller process serves the fit pin (and our stateless webhooks) over HTTPS; here it is
        # served in-process with the dev cluster's serving certificate and registered by URL.
        cert_dir = tmp_path_factory.mktemp("admission-certs")
        async with webhooks_served(devcluster, cert_dir, handlers=placement.handlers):
            yield Running(stack, placement)


# --- the system's chance to act (checked before a claim that nothing moved) -------------------------------


async def _resynced(run: Running) -> None:
    """Every key of the placement controllers reconciled again (tests/kit/resync.py), none queued or in
    flight."""
    await resynced(run.placement.controllers, run.placement.resync)


async def _kueue_refused_a_later_prefill(run: Running) -> None:
    """Kueue's scheduler has taken a turn on the L4 queue since now: a Workload submitted now that asks
    what prefill asks (four L4, one rack) is evaluated and marked ``QuotaReserved=False`` (then deleted)."""
    name = "later-prefill"
    body = workload(name, TEAM, L4, count=4, required_level=RACK)
    await run.admin.create(kinds.WORKLOAD, body, namespace=TEAM)
    try:

        async def refused() -> dict[str, Any] | None:
            cond = condition(await run.workload(name), "QuotaReserved")
            return cond if cond.get("status") == "False" and cond.get("message") else None

        await eventually(refused)
    finally:
        await run.admin.delete(kinds.WORKLOAD, name, TEAM)


# --- shared preconditions --------------------------------------------------------------------------------


async def _checks_referenced(run: Running, queue: str, checks: tuple[str, ...]) -> None:
    """The checks are Active and the chain references them from ``queue``."""
    for check in checks:

        async def active(check: str = check) -> bool:
            found = await run.admin.get(kinds.ADMISSION_CHECK, check)
            return condition(found, "Active").get("status") == "True"

        await eventually(active)

    async def referenced() -> bool:
        cq = await run.admin.get(kinds.CLUSTER_QUEUE, queue)
        strategy = ((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
        names = {c.get("name") for c in strategy.get("admissionChecks") or ()}
        active = condition(cq, "Active").get("status") == "True"
        return active and set(checks) <= names

    await eventually(referenced)


async def _racks(run: Running) -> None:
    """A configMap TopologySource places the L4 nodes into racks; the L4 queue places on that hierarchy."""
    await apply_racks(run.admin, TEAM, eventually)


# --- 1. a two-role set where only one role fits -------------------------------------------------------


def _role(name: str, kind: str, instance_type: str, size: int, **extra: Any) -> dict[str, Any]:
    template = extra.pop("template", None) or models.template()
    return models.role(name, kind=kind, size=size, instanceType=instance_type, template=template, **extra)


def _deployment(name: str, *roles: dict[str, Any]) -> dict[str, Any]:
    return models.model_deployment(name, TEAM, *roles)


async def test_two_roles_wait_together_then_bind_within_one_rack(running: Running) -> None:
    run, admin = running, running.admin
    await _racks(run)

    # One L4 of each rack taken: every rack has three free, decode (2) fits one, prefill (4) none.
    for rack in RACKS:
        await admin.create(kinds.WORKLOAD, blocker(rack, TEAM), namespace=TEAM)

    async def blockers_admitted() -> bool:
        wls = [await run.workload(f"blocker-{rack}") for rack in RACKS]
        return all(condition(wl, "Admitted").get("status") == "True" for wl in wls)

    await eventually(blockers_admitted)

    started = time.monotonic()
    level = {"requiredLevel": RACK}
    accel = {"accelerator": "1"}
    await admin.create(
        kinds.MODEL_DEPLOYMENT,
        _deployment(
            "disagg",
            _role("prefill", "Prefill", L4, 4, resources=accel, topology=level),
            _role("decode", "Decode", L4, 2, resources=accel, topology=level),
        ),
        namespace=TEAM,
    )
    sizes = {"prefill": 4, "decode": 2}
    groups = await eventually(lambda: run.groups("disagg", sizes))
    print(f"\ngroups: {groups}")

    # Both Pending: prefill without a reservation (Kueue's message verbatim in the status, role and replica
    # named); decode reserved but held by the joint check, "1 of 2" naming the waiting InstanceType.
    async def both_pending() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
        prefill = await run.workload(groups["prefill"])
        decode = await run.workload(groups["decode"])
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "disagg", TEAM)
        waiting = condition(prefill, "QuotaReserved")
        held = check_entry(decode, keys.JOINT_CHECK)
        roles = {r["name"]: r for r in ((md or {}).get("status") or {}).get("roles") or ()}
        if waiting.get("status") != "False" or not waiting.get("message"):
            return None
        if condition(decode, "QuotaReserved").get("status") != "True" or held.get("state") != "Pending":
            return None
        if roles.get("prefill", {}).get("message") != f"role prefill replica 0: {waiting['message']}":
            return None
        if "1 of 2" not in roles.get("decode", {}).get("message", ""):
            return None
        assert prefill is not None and decode is not None and md is not None
        return prefill, decode, md

    prefill, decode, md = await eventually(both_pending)
    held = check_entry(decode, keys.JOINT_CHECK)
    roles = {r["name"]: r for r in md["status"]["roles"]}
    print(f"held after {time.monotonic() - started:.1f}s")
    print(f"prefill status: {roles['prefill']['message']}")
    print(f"decode status: {roles['decode']['message']}")
    print(f"joint check on decode: {held['state']}: {held['message']}")
    assert held["state"] == "Pending"
    assert "1 of 2" in held["message"] and L4 in held["message"]
    assert roles["decode"]["message"].startswith("role decode replica 0: ")
    assert L4 in roles["decode"]["message"]
    for role in ("prefill", "decode"):
        assert roles[role]["admittedReplicas"] == 0, roles[role]
    assert condition(prefill, "Admitted").get("status") != "True"
    assert condition(decode, "Admitted").get("status") != "True"
    # decode keeps its reservation and domain while it waits: one rack.
    decode_racks = {
        dict(zip(levels, d.values, strict=True)).get(RACK)
        or RACK_OF[dict(zip(levels, d.values, strict=True))[keys.HOSTNAME]]
        for levels, domains in topology_assignments(decode).values()
        for d in domains
    }
    print(f"decode reserved in {decode_racks}")
    assert len(decode_racks) == 1
    pods = await run.pods("disagg")
    assert len(pods) == 6
    for pod in pods:
        assert _gated(pod), pod["metadata"]["name"]
        assert not pod["spec"].get("nodeName"), pod["metadata"]["name"]
    # Held, not moving, once both sides have had their chance: every placement controller has decided
    # every key again, and Kueue's scheduler has evaluated a later Workload asking what prefill asks.
    await _resynced(run)
    await _kueue_refused_a_later_prefill(run)
    assert check_entry(await run.workload(groups["decode"]), keys.JOINT_CHECK)["state"] == "Pending"
    assert condition(await run.workload(groups["prefill"]), "QuotaReserved").get("status") == "False"
    for pod in await run.pods("disagg"):
        assert _gated(pod) and not pod["spec"].get("nodeName"), pod["metadata"]["name"]

    # Free the racks: prefill reserves a whole rack, the set is complete, both are admitted.
    freed = time.monotonic()
    for rack in RACKS:
        await admin.delete(kinds.WORKLOAD, f"blocker-{rack}", TEAM)

    async def both_admitted() -> list[dict[str, Any]] | None:
        wls = [await run.workload(groups[role]) for role in ("prefill", "decode")]
        ok = all(condition(wl, "Admitted").get("status") == "True" for wl in wls)
        return [w for w in wls if w] if ok else None

    admitted = await eventually(both_admitted)
    for wl in admitted:
        assert check_entry(wl, keys.JOINT_CHECK)["state"] == "Ready"
        assert check_entry(wl, keys.JOINT_CHECK)["message"] == "2 of 2 groups reserved"
        assert check_entry(wl, keys.NODE_DEVICES_CHECK)["state"] == "Ready"
    print(f"both admitted {time.monotonic() - freed:.1f}s after the blockers were deleted")

    # kube-scheduler binds every Pod (nothing runs them: no kubelet), each replica within one rack.
    async def all_bound() -> list[dict[str, Any]] | None:
        pods = await run.pods("disagg")
        return pods if len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await eventually(all_bound)
    print(f"all Pods bound {time.monotonic() - freed:.1f}s after the blockers were deleted")
    by_group: dict[str, list[str]] = {}
    for pod in pods:
        assert not _gated(pod)
        by_group.setdefault(_labels(pod)[keys.POD_GROUP_NAME], []).append(pod["spec"]["nodeName"])
    assert set(by_group) == set(groups.values())
    used_racks = []
    for group, nodes in sorted(by_group.items()):
        racks = {_labels(await admin.get(kinds.NODE, node))[RACK] for node in nodes}
        print(f"group {group}: nodes {sorted(nodes)}, racks {racks}")
        assert len(racks) == 1, (group, nodes, racks)
        used_racks.append(racks.pop())
    assert sorted(used_racks) == sorted(RACKS)  # prefill took the rack decode did not
    for wl in admitted:  # kube-scheduler bound each Pod where Kueue's topology assignment says
        ((levels, domains),) = topology_assignments(wl).values()
        assigned = Counter({dict(zip(levels, d.values, strict=True))[keys.HOSTNAME]: d.pods for d in domains})
        assert Counter(by_group[wl["metadata"]["name"]]) == assigned, (wl["metadata"]["name"], assigned)

    async def deployment_admitted() -> dict[str, Any] | None:
        md = await admin.get(kinds.MODEL_DEPLOYMENT, "disagg", TEAM)
        roles = ((md or {}).get("status") or {}).get("roles") or ()
        return md if len(roles) == 2 and all(r.get("admittedReplicas") == 1 for r in roles) else None

    md = await eventually(deployment_admitted)
    assert all("message" not in r for r in md["status"]["roles"]), md["status"]["roles"]
    assert condition(md, joint.QUOTA_RESERVED).get("reason") == "Reserved"


# --- 2. a fragmented node, Gate 3 and the fit pin ----------------------------------------------------------


def _sliced_role(name: str) -> dict[str, Any]:
    """One Pod of a 30 % slice (the role's ``resources`` names whole cards or partitions only, so the
    slice is in the template: the controller keeps resources it does not set), preferring the fragmented
    node, so that without the pin Kueue's TAS picks it over the roomy one."""
    slice_ = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(SLICE_UNITS)}
    prefer = {
        "weight": 100,
        "preference": {
            "matchExpressions": [{"key": keys.HOSTNAME, "operator": "In", "values": [FRAGMENTED]}]
        },
    }
    template = {
        "spec": {
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [prefer]}},
            "containers": [kueue.container(slice_, slice_, name="engine", image=models.ENGINE_IMAGE)],
        }
    }
    return _role(name, "Server", A10G, 1, template=template)


def _required_terms(wl: dict[str, Any]) -> Any:
    spec = wl["spec"]["podSets"][0]["template"]["spec"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return None if required is None else required.get("nodeSelectorTerms")


async def test_fragmented_node_retry_then_the_pin_places_where_a_card_fits(running: Running) -> None:
    run, admin = running, running.admin
    await _checks_referenced(run, A10G, (keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK))
    instance_type = await admin.get(kinds.INSTANCE_TYPE, A10G)
    assert instance_type is not None
    fit_key = keys.sliced_max_free_units_key(instance_type["spec"]["acceleratorGroup"])

    # The agent's fit labels: no fragmented card has 30 % free, a roomy one has a whole card.
    async def fit_labels() -> dict[str, str] | None:
        out = {
            node: _labels(await admin.get(kinds.NODE, node)).get(fit_key, "") for node in (FRAGMENTED, ROOMY)
        }
        return out if out == {FRAGMENTED: str(M - 1_200_000), ROOMY: str(M)} else None

    print(f"\nfit labels {fit_key}: {await eventually(fit_labels)}")

    # Pin off: Kueue places the slice by node totals on the preferred, fragmented node; Gate 3 says Retry.
    await run.settings({"workload-fit-affinity": "false"})

    async def pin_off() -> bool:
        return not run.stack.settings.current.workload_fit_affinity

    await eventually(pin_off)
    started = time.monotonic()
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("unpinned", _sliced_role("shard")), namespace=TEAM)
    group = (await eventually(lambda: run.groups("unpinned", {"shard": 1})))["shard"]

    async def retried() -> str | None:
        wl = await run.workload(group)
        entry = check_entry(wl, keys.NODE_DEVICES_CHECK)
        if entry.get("state") == "Retry":
            return str(entry.get("message"))
        evicted = condition(wl, "Evicted")
        if evicted.get("status") == "True" and keys.NODE_DEVICES_CHECK in str(evicted.get("message")):
            return str(evicted.get("message"))
        return None

    message = await eventually(retried)
    print(f"Gate 3 on the unpinned slice after {time.monotonic() - started:.1f}s: {message}")
    assert f"role shard: node {FRAGMENTED}" in message
    unpinned = await run.workload(group)
    assert unpinned is not None
    assert _required_terms(unpinned) is None  # stored without the pin
    assert condition(unpinned, "Admitted").get("status") != "True"
    assert all(not p["spec"].get("nodeName") for p in await run.pods("unpinned"))
    await run.delete_deployment("unpinned")

    # Pin on: a new deployment's Workload is stored pinned; Kueue skips the fragmented node despite the
    # preference and places the slice on the roomy node, where Gate 3 says Ready.
    await run.settings({"workload-fit-affinity": "true"})

    async def pin_on() -> bool:
        return bool(run.stack.settings.current.workload_fit_affinity)

    await eventually(pin_on)
    started = time.monotonic()
    await admin.create(kinds.MODEL_DEPLOYMENT, _deployment("pinned", _sliced_role("shard")), namespace=TEAM)
    group = (await eventually(lambda: run.groups("pinned", {"shard": 1})))["shard"]
    seen: set[str] = set()

    async def admitted() -> dict[str, Any] | None:
        wl = await run.workload(group)
        state = check_entry(wl, keys.NODE_DEVICES_CHECK).get("state")
        if state:
            seen.add(str(state))
        return wl if condition(wl, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted)
    print(
        f"pinned slice admitted after {time.monotonic() - started:.1f}s; Gate 3 states seen: {sorted(seen)}"
    )
    pin = {"key": fit_key, "operator": "Gt", "values": [str(SLICE_UNITS - 1)]}
    assert _required_terms(wl) == [{"matchExpressions": [pin]}]
    assert "Retry" not in seen
    entry = check_entry(wl, keys.NODE_DEVICES_CHECK)
    assert entry["state"] == "Ready", entry
    print(f"Gate 3 on the pinned slice: {entry['message']}")
    hosts = [
        dict(zip(levels, d.values, strict=True))[keys.HOSTNAME]
        for levels, domains in topology_assignments(wl).values()
        for d in domains
    ]
    assert hosts == [ROOMY]

    async def bound() -> str | None:
        pods = await run.pods("pinned")
        return pods[0]["spec"].get("nodeName") if len(pods) == 1 else None

    assert await eventually(bound) == ROOMY
    (pod,) = await run.pods("pinned")
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in (
        (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    )  # the pin stays on the Workload; the Pod only carries Kueue's node selector
