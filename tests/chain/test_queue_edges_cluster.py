"""The queue's stop-policy edges on the real control plane (issue 16 defects 1 and 2): the chain-4
scenario, the agent and the controllers in-process as their own ServiceAccounts, real Kueue admitting and
evicting.

- Defect 2: a generation bump (an admin's edit of the queue's spec, or the InstanceType's ``inactive``
  toggle) right before an idle flavor is dropped must not start a ``HoldAndDrain``: Kueue's status of the
  older generation is no answer, the queue waits for the current one, and the admitted Workload on the
  other flavor is never evicted (its conditions and Kueue's Events say so).
- Defect 1: every flavor of a pool holding an admitted Workload goes finalizing while the plan is refused
  (a new pool node whose flavor cannot be created): the queue never loses its groups while Kueue reports
  the reservation — it drains first — and when the refusal clears, the Workload is admitted again on live
  flavors, never left reserving on a flavor that is gone.

A sampler reads the queue every 0.1 s for the whole of each sequence; what it records is asserted at the
end. Durations are never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import parse_text
from tests.kit import kueue
from tests.stack import Stack, condition, eventually, module_cluster, running_stack
from tests.topology.cluster_helpers import release_as_owner as _release_as_owner
from tests.topology.cluster_helpers import workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

pytestmark = pytest.mark.cluster

P = keys.topology_profile([keys.HOSTNAME])
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
SMALL = f"gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d-{P}"
LARGE = f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"
#: The flavor the extra node t4-c would get (its name is taken by a foreign flavor in the defect-1 test).
EXTRA = f"gpustack--amd-epyc-7r32--nvidia-tesla-t4-linux-amd64-2d-{P}"
EXTRA_NODE = """
nodes:
  - name: t4-c
    cpu: {vendor: AMD, model: AMD EPYC 7R32, cores: 8}
    memory: 32Gi
    accelerators:
      - {manufacturer: nvidia, product: Tesla T4, memoryMiB: 15360, cores: 2560, count: 2,
         family: Turing, computeCapability: "7.5", driverVersion: 580.159.03, runtimeVersion: "13.0"}
"""
TEAM = "team-edges"
STEP_S = 120.0


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A fresh control plane for this module alone: the T4 pool must hold exactly the scenario's nodes."""
    with module_cluster("queue-edges") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Stack]:
    async with running_stack(devcluster, "chain-4", namespaces=(TEAM,)) as stack:
        yield stack


# --- reads ---------------------------------------------------------------------------------------------
def _flavors(cq: dict[str, Any] | None) -> list[str]:
    groups = ((cq or {}).get("spec") or {}).get("resourceGroups") or ()
    return [f["name"] for g in groups for f in g.get("flavors") or ()]


def _annotations(cq: dict[str, Any] | None) -> dict[str, str]:
    return dict(((cq or {}).get("metadata") or {}).get("annotations") or {})


def _reserving(cq: dict[str, Any] | None) -> int:
    status = (cq or {}).get("status") or {}
    return max(int(status.get("reservingWorkloads") or 0), int(status.get("admittedWorkloads") or 0))


async def _ready(admin: Client, flavors: list[str]) -> dict[str, Any] | None:
    """The T4 queue admitting on exactly ``flavors``, TopologyReady, Kueue caught up, no migration."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    generation = ((cq or {}).get("metadata") or {}).get("generation")
    active = condition(cq, "Active")
    ok = (
        cq is not None
        and _flavors(cq) == flavors
        and cq["spec"].get("stopPolicy") == "None"
        and condition(cq, keys.TOPOLOGY_READY).get("status") == "True"
        and active.get("status") == "True"
        and active.get("observedGeneration") == generation
        and keys.MIGRATION_PHASE not in _annotations(cq)
    )
    return cq if ok else None


async def _admitted(admin: Client, name: str) -> dict[str, Any] | None:
    wl = await admin.get(kinds.WORKLOAD, name, TEAM)
    return wl if condition(wl, "Admitted").get("status") == "True" else None


def _assigned(wl: dict[str, Any]) -> set[str]:
    return {
        f
        for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()
        for f in (psa.get("flavors") or {}).values()
    }


async def _eviction_events(admin: Client, name: str) -> list[str]:
    """Kueue's Events about Workload ``name`` that tell of an eviction or preemption."""
    events, _ = await admin.list(kinds.EVENT, namespace=TEAM)
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in events
        if (e.get("involvedObject") or {}).get("name") == name
        and any(word in str(e.get("reason", "")) for word in ("Evict", "Preempt"))
    ]


@dataclass
class Sampler:
    """Reads the T4 queue every 0.1 s and records what must never be seen."""

    admin: Client
    policies: set[str] = field(default_factory=set)
    phases: set[str] = field(default_factory=set)
    #: (flavors, reserving) whenever the queue had no groups while Kueue reported a reservation.
    emptied_under_reservation: list[tuple[list[str], int]] = field(default_factory=list)
    samples: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            cq = await self.admin.get(kinds.CLUSTER_QUEUE, T4)
            if cq is not None:
                self.samples += 1
                self.policies.add(str(cq["spec"].get("stopPolicy")))
                if phase := _annotations(cq).get(keys.MIGRATION_PHASE):
                    self.phases.add(phase)
                if not _flavors(cq) and _reserving(cq):
                    self.emptied_under_reservation.append((_flavors(cq), _reserving(cq)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


@contextlib.asynccontextmanager
async def sampling(admin: Client) -> AsyncIterator[Sampler]:
    sampler = Sampler(admin)
    stop = asyncio.Event()
    task = asyncio.create_task(sampler.run(stop))
    try:
        yield sampler
    finally:
        stop.set()
        await task


async def _diagnose(admin: Client, name: str) -> None:
    """Print the queue, the Workload and the flavors (a failed step needs them to be understood)."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    print(f"[diag] queue meta={(cq or {}).get('metadata')}\n spec={(cq or {}).get('spec')}")
    print(f"[diag] queue status={(cq or {}).get('status')}")
    wl = await admin.get(kinds.WORKLOAD, name, TEAM)
    print(f"[diag] workload status={(wl or {}).get('status')}")
    flavors, _ = await admin.list(kinds.RESOURCE_FLAVOR)
    for rf in flavors:
        print(f"[diag] flavor {rf['metadata']['name']} deleting={rf['metadata'].get('deletionTimestamp')}")


async def _drop_small_flavor(admin: Client) -> None:
    """An admin deletes the idle single-T4 flavor (Kueue keeps it while the queue references it; the chain
    drops it from the queue and re-creates it once Kueue lets it go)."""
    await admin.delete(kinds.RESOURCE_FLAVOR, SMALL)


# --- defect 2 --------------------------------------------------------------------------------------------
FREEZE = "example.com/freeze-kueue-status"
POLICY = Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False
)
BINDING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    False,
)
#: The devcluster runs Kueue with the admin kubeconfig: this is the identity of Kueue's status writes.
KUEUE_USER = "devcluster-admin"


@contextlib.asynccontextmanager
async def kueue_status_freezable(admin: Client) -> AsyncIterator[None]:
    """A ValidatingAdmissionPolicy refusing Kueue's writes to a ClusterQueue's status while the queue carries
    the label ``FREEZE``: the race "the generation moved, Kueue has not reported it yet" held open for as
    long as the test needs, instead of the milliseconds Kueue usually takes. The chain's own status writes
    (another identity) go through."""
    name = "queue-edges-freeze-kueue-status"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [kinds.KUEUE_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["clusterqueues/status"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"request.userInfo.username != '{KUEUE_USER}' || "
                    f"!has(oldObject.metadata.labels) || !('{FREEZE}' in oldObject.metadata.labels)",
                    "message": "Kueue's status writes are frozen by the test",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    await admin.create(POLICY, policy)
    await admin.create(BINDING, binding)
    try:
        yield
    finally:
        await admin.delete(BINDING, name)
        await admin.delete(POLICY, name)


async def _freeze(admin: Client) -> None:
    """Label the queue and wait until the policy refuses a status write of Kueue's identity."""
    await admin.patch(kinds.CLUSTER_QUEUE, T4, {"metadata": {"labels": {FREEZE: "true"}}})

    async def refused() -> bool:
        try:
            await admin.patch(kinds.CLUSTER_QUEUE, T4, {"status": {}}, subresource="status")
        except ApiError:
            return True
        return False

    await eventually(refused, within=STEP_S)


async def _thaw(admin: Client) -> None:
    await admin.patch(kinds.CLUSTER_QUEUE, T4, {"metadata": {"labels": {FREEZE: None}}})


async def _awaiting(admin: Client, policy: str) -> dict[str, Any] | None:
    """The queue waiting for Kueue's current status: the idle flavor not yet dropped, no hold started."""
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    generation = ((cq or {}).get("metadata") or {}).get("generation")
    ready = condition(cq, keys.TOPOLOGY_READY)
    ok = (
        ready.get("reason") == "AwaitingQueueStatus"
        and ready.get("observedGeneration") == generation
        and condition(cq, "Active").get("observedGeneration") != generation  # Kueue's status is older
    )
    if ok:
        assert cq is not None
        assert _flavors(cq) == [SMALL, LARGE] and cq["spec"].get("stopPolicy") == policy, cq["spec"]
        assert keys.MIGRATION_PHASE not in _annotations(cq)
    return cq if ok else None


async def _admitted_on_large(admin: Client, name: str) -> dict[str, Any]:
    """Once both T4 flavors are planned, a two-card Workload ``name`` admitted on the large flavor."""
    await eventually(lambda: _ready(admin, [SMALL, LARGE]), within=STEP_S)
    await admin.create(kinds.WORKLOAD, workload(name, TEAM, T4, gpus=2), TEAM)
    wl: dict[str, Any] = await eventually(lambda: _admitted(admin, name), within=STEP_S)
    assert _assigned(wl) == {LARGE}
    return wl


async def test_a_generation_bump_before_an_idle_flavor_drop_never_drains(running: Stack) -> None:
    admin = running.admin
    name = "steady"
    wl = await _admitted_on_large(admin, name)
    admission = wl["status"]["admission"]
    try:
        async with kueue_status_freezable(admin), sampling(admin) as sampler:
            # 1. An admin edit of the queue's spec (a field the chain does not own) moves the generation
            #    while Kueue's status stays on the older one; then the idle single-T4 flavor is dropped.
            await _freeze(admin)
            await admin.patch(kinds.CLUSTER_QUEUE, T4, {"spec": {"queueingStrategy": "StrictFIFO"}})
            await _drop_small_flavor(admin)
            try:
                await eventually(lambda: _awaiting(admin, "None"), within=STEP_S)
            finally:
                await _thaw(admin)
            # Kueue reports the current generation: the idle flavor is dropped in place, then re-created.
            await eventually(lambda: _ready(admin, [SMALL, LARGE]), within=STEP_S)
            # 2. The InstanceType's inactive toggle: the chain writes Hold (a new generation Kueue cannot
            #    report), then the drop.
            await _freeze(admin)
            await admin.patch(kinds.INSTANCE_TYPE, T4, {"spec": {"inactive": True}})

            async def held() -> bool:
                cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
                return ((cq or {}).get("spec") or {}).get("stopPolicy") == "Hold"

            await eventually(held, within=STEP_S)
            await _drop_small_flavor(admin)
            try:
                await eventually(lambda: _awaiting(admin, "Hold"), within=STEP_S)
            finally:
                await _thaw(admin)

            async def replaced_while_held() -> bool:
                cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
                rf = await admin.get(kinds.RESOURCE_FLAVOR, SMALL)
                return (
                    _flavors(cq) == [SMALL, LARGE]
                    and rf is not None
                    and not rf["metadata"].get("deletionTimestamp")
                    and condition(cq, keys.TOPOLOGY_READY).get("status") == "True"
                )

            await eventually(replaced_while_held, within=STEP_S)
            await admin.patch(kinds.INSTANCE_TYPE, T4, {"spec": {"inactive": False}})
            await eventually(lambda: _ready(admin, [SMALL, LARGE]), within=STEP_S)
        print(f"[queue-edges] defect 2: {sampler.samples} samples, policies {sorted(sampler.policies)}")
        assert sampler.samples > 0
        assert "HoldAndDrain" not in sampler.policies, "the queue went HoldAndDrain for an idle flavor"
        assert not sampler.phases, f"a migration was started: {sampler.phases}"
        now = await admin.get(kinds.WORKLOAD, name, TEAM)
        assert now is not None and condition(now, "Admitted").get("status") == "True"
        assert now["status"]["admission"] == admission, "the Workload was re-admitted"
        assert not condition(now, "Evicted"), f"evicted: {condition(now, 'Evicted')}"
        assert not await _eviction_events(admin, name)
    except BaseException:
        await _diagnose(admin, name)
        raise
    finally:
        await admin.delete(kinds.WORKLOAD, name, TEAM)


# --- defect 1 --------------------------------------------------------------------------------------------
async def test_a_refusal_while_every_flavor_finalizes_never_empties_a_reserving_queue(running: Stack) -> None:
    admin = running.admin
    name = "reserving"
    wl = await _admitted_on_large(admin, name)
    # A foreign flavor takes the name the new node's flavor needs (drift: the chain never patches it),
    # so the plan is refused for as long as it stays.
    foreign = kueue.resource_flavor(
        EXTRA,
        {"nodeLabels": {"example.com/foreign": "true"}, "topologyName": "gpustack-foreign"},
        # In the chain's flavor cache (so the flavor controller sees the drift and leaves it), but in no
        # pool: the new node is then selected by no flavor.
        labels={keys.RESOURCE_TYPE: keys.TYPE_NODES},
    )
    await admin.create(kinds.RESOURCE_FLAVOR, foreign)
    try:
        await apply_scenario(admin, parse_text(EXTRA_NODE, "t4-c"))

        async def refused() -> dict[str, Any] | None:
            cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
            cond = condition(cq, keys.TOPOLOGY_READY)
            return cq if cond.get("status") == "False" and cond.get("reason") != "Migrating" else None

        cq = await eventually(refused, within=STEP_S)
        assert _flavors(cq) == [SMALL, LARGE] and cq["spec"]["stopPolicy"] == "None"  # last complete plan
        async with sampling(admin) as sampler:
            # Every flavor of the pool goes finalizing while the plan is refused.
            for flavor in (SMALL, LARGE):
                await admin.delete(kinds.RESOURCE_FLAVOR, flavor)

            # Kueue evicts (the queue is drained first, its groups kept under the reservation) ...
            async def evicted() -> dict[str, Any] | None:
                cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
                assert _flavors(cq) or not _reserving(cq), f"emptied under a reservation: {cq}"
                wl = await admin.get(kinds.WORKLOAD, name, TEAM)
                return wl if condition(wl, "Evicted").get("status") == "True" else None

            try:
                wl = await eventually(evicted, within=STEP_S)
            except AssertionError:
                await _diagnose(admin, name)
                raise
            assert condition(wl, "Evicted").get("reason") == "ClusterQueueStopped"
            cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
            assert cq is not None and _flavors(cq) == [SMALL, LARGE]
            assert cq["spec"]["stopPolicy"] == "HoldAndDrain"
            # ... and, the Workload having no job owner to stop (Kueue 0.19 leaves its reservation to the job
            # integration), the test releases it the way the integration does once the job stopped.
            await _release_as_owner(admin, wl)

            async def emptied() -> dict[str, Any] | None:
                cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
                return cq if cq is not None and not _flavors(cq) else None

            try:
                cq = await eventually(emptied, within=STEP_S)
            except AssertionError:
                await _diagnose(admin, name)
                raise
            # Emptied only once the Workload stopped reserving (it was drained first).
            drained = await admin.get(kinds.WORKLOAD, name, TEAM)
            assert drained is not None
            assert condition(drained, "QuotaReserved").get("status") != "True", (
                f"the queue was emptied under a reservation: {drained.get('status')}"
            )
            assert cq["spec"]["stopPolicy"] == "HoldAndDrain"
            assert keys.EMPTY_PLAN_HOLD not in _annotations(cq)
            # The refusal clears: the new node's flavor is created, the pool's flavors come back.
            await admin.delete(kinds.RESOURCE_FLAVOR, EXTRA)

            async def restored() -> dict[str, Any] | None:
                return await _ready(admin, [SMALL, EXTRA, LARGE])

            await eventually(restored, within=STEP_S)
            readmitted = await eventually(lambda: _admitted(admin, name), within=STEP_S)
        print(f"[queue-edges] defect 1: {sampler.samples} samples, policies {sorted(sampler.policies)}")
        assert sampler.samples > 0
        assert not sampler.emptied_under_reservation, sampler.emptied_under_reservation
        # Never reserving on a flavor that is gone: every flavor of its admission is live.
        for flavor in _assigned(readmitted):
            rf = await admin.get(kinds.RESOURCE_FLAVOR, flavor)
            assert rf is not None and not rf["metadata"].get("deletionTimestamp"), flavor
    finally:
        await admin.delete(kinds.WORKLOAD, name, TEAM)
        with contextlib.suppress(Exception):
            await admin.delete(kinds.RESOURCE_FLAVOR, EXTRA)
