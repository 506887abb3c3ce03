"""The Workload fit pin on the real API server (reference §5.3): the handler served in-process with the dev
cluster's serving certificate, registered as the chart registers it (MutatingWebhookConfiguration
``gpustack-worker-workload-fit``, by URL here), reading real informer caches through the controller's
ServiceAccount (so the RBAC it needs is the one the chart grants).

Two InstanceType queues: one held (``stopPolicy: Hold``: Kueue never reserves, so a Workload stays
unreserved) and one open (no resource groups: with ``quotaCheckStrategy: IgnoreUndeclared`` Kueue reserves
at once). Shown: a Workload at an entrance is stored with the pin ANDed into its required terms; the
matchCondition keeps Workloads of other queues away (the API server never calls us for them); Pods are
never sent to us, while the Workload Kueue's Pod integration makes for a queued Pod is pinned; with the
setting off a Workload is stored untouched and a later UPDATE pins it while unreserved; an UPDATE after
Kueue reserved leaves it alone; a queue without the InstanceType mark is not ours. Both configurations
are removed in teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds, rbac, webhooks
from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.placement.fitpin_webhook import FitPinWebhook
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.resources import Resource
from tests.kit import kueue, models
from tests.kit.webhooks import webhooks_served
from tests.topology.cluster_helpers import condition, eventually, topology_assignments

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.webhook_server import WebhookServer

pytestmark = pytest.mark.cluster

_SUFFIX = uuid.uuid4().hex[:6]
NS = f"fitpin-{_SUFFIX}"
GROUP = "nvidia-a10g"
HELD = f"gpustack--{GROUP}-fitpin-held-{_SUFFIX}"
OPEN = f"gpustack--{GROUP}-fitpin-open-{_SUFFIX}"
#: A ClusterQueue without the InstanceType mark, with an InstanceType of its name and an entrance-named
#: LocalQueue: a foreign queue that only the recognition rules (not the matchCondition) keep out.
FOREIGN = f"gpustack--{GROUP}-fitpin-foreign-{_SUFFIX}"
SLICED_KEY = keys.sliced_max_free_units_key(GROUP)
SHARED_KEY = keys.shared_free_cards_key(GROUP)
U30 = 30 * keys.UNITS_PER_PERCENT
SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(U30)}
SLICED_PIN = {"key": SLICED_KEY, "operator": "Gt", "values": [str(U30 - 1)]}
POD = Resource("", "v1", "Pod", "pods", True)


@dataclass
class Settings:
    """The live settings, flipped by the tests (the controller reads a SettingsSource the same way)."""

    on: bool = True

    @property
    def current(self) -> ChainSettings:
        return ChainSettings(workload_fit_affinity=self.on)


@dataclass
class Served:
    admin: Client
    hook: FitPinWebhook
    settings: Settings
    server: WebhookServer
    #: Every review the API server sent: (kind, namespace, name or generateName, operation).
    calls: list[tuple[str, str, str, str]] = field(default_factory=list)

    def asked_about(self, name: str) -> list[str]:
        return [op for _kind, _ns, n, op in self.calls if n == name]


def _cluster_queue(name: str, *groups: dict[str, Any], held: bool, marked: bool = True) -> dict[str, Any]:
    spec = kueue.queue_spec(*groups, **({"stopPolicy": "Hold"} if held else {}))
    labels = {keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES} if marked else {}
    return kueue.cluster_queue(name, spec, labels=labels)


def _local_queue(cluster_queue: str) -> dict[str, Any]:
    return kueue.local_queue(keys.local_queue_name(cluster_queue), cluster_queue, NS)


def _instance_type(name: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.INSTANCE_TYPE.api_version,
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": GROUP,
            "os": "linux",
            "arch": "amd64",
            "unitResources": {"cpu": "4", "ram": "16Gi"},
            "localStorage": "100Gi",
        },
    }


def _container(resources: dict[str, str]) -> dict[str, Any]:
    return kueue.container({"cpu": "1", **resources}, resources, name="engine", image=models.ENGINE_IMAGE)


def _workload(name: str, queue: str, resources: dict[str, str], **pod_spec: Any) -> dict[str, Any]:
    return kueue.workload(name, NS, queue, kueue.pod_set(kueue.pod_spec(_container(resources), **pod_spec)))


def _terms(obj: dict[str, Any], *, pod: bool = False) -> Any:
    spec = obj["spec"] if pod else obj["spec"]["podSets"][0]["template"]["spec"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return None if required is None else required.get("nodeSelectorTerms")


async def _pinned_on_dry_run(api: ApiBootstrap) -> bool:
    """Whether the API server applies our pin now (a dry-run create: nothing is stored)."""
    probe = _workload(f"probe-{uuid.uuid4().hex[:6]}", keys.local_queue_name(HELD), SLICE)
    path = f"{kinds.WORKLOAD.collection_path(NS)}?dryRun=All"
    resp = await asyncio.to_thread(api.request, "POST", path, probe)
    return bool(resp.status_code == 201 and _terms(resp.json()) == [{"matchExpressions": [SLICED_PIN]}])


@pytest.fixture(scope="module")
async def served(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    admin = await Client.connect(str(devcluster.kubeconfig))
    controller = await Client.connect(str(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)))
    await admin.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name, held in ((HELD, True), (OPEN, False), (FOREIGN, True)):
        await admin.create(kinds.CLUSTER_QUEUE, _cluster_queue(name, held=held, marked=name != FOREIGN))
        await admin.create(kinds.INSTANCE_TYPE, _instance_type(name))
        await admin.create(kinds.LOCAL_QUEUE, _local_queue(name))

    registry = InformerRegistry(controller)
    settings = Settings()
    hook = FitPinWebhook.from_registry(registry, settings)
    informers = asyncio.create_task(registry.run())
    await registry.wait_synced()

    calls: list[tuple[str, str, str, str]] = []

    def review(body: dict[str, Any]) -> dict[str, Any]:
        req = body.get("request") or {}
        meta = (req.get("object") or {}).get("metadata") or {}
        kind = (req.get("kind") or {}).get("kind", "")
        calls.append(
            (
                kind,
                req.get("namespace", ""),
                meta.get("name") or meta.get("generateName", ""),
                req.get("operation", ""),
            )
        )
        return hook.review(body)

    cert_dir = tmp_path_factory.mktemp("fitpin-certs")
    handlers = {webhooks.WORKLOAD_FIT_PATH: review}
    try:
        async with webhooks_served(devcluster, cert_dir, handlers=handlers) as server:
            with contextlib.closing(devcluster.bootstrap()) as api:
                await eventually(lambda: _pinned_on_dry_run(api), within=60.0)
            yield Served(admin, hook, settings, server, calls)
    finally:
        informers.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await informers
        await admin.delete(kinds.NAMESPACE, NS)
        for name in (HELD, OPEN, FOREIGN):
            await admin.delete(kinds.INSTANCE_TYPE, name)
            await admin.delete(kinds.CLUSTER_QUEUE, name)
        await controller.close()
        await admin.close()


async def test_a_workload_at_an_entrance_is_stored_with_the_pin(served: Served) -> None:
    zone = {"key": keys.PRIVATE_ZONE, "operator": "In", "values": ["a"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [zone, SLICED_PIN]}]
            }
        }
    }
    queue = keys.local_queue_name(HELD)
    await served.admin.create(kinds.WORKLOAD, _workload("sliced", queue, SLICE))
    await served.admin.create(kinds.WORKLOAD, _workload("shared", queue, {"nvidia.com/gpu.shared": "3"}))
    await served.admin.create(kinds.WORKLOAD, _workload("anded", queue, SLICE, affinity=affinity))
    await served.admin.create(kinds.WORKLOAD, _workload("whole", queue, {"nvidia.com/gpu": "1"}))

    sliced = await served.admin.get(kinds.WORKLOAD, "sliced", NS)
    shared = await served.admin.get(kinds.WORKLOAD, "shared", NS)
    anded = await served.admin.get(kinds.WORKLOAD, "anded", NS)
    whole = await served.admin.get(kinds.WORKLOAD, "whole", NS)
    assert sliced is not None and shared is not None and anded is not None and whole is not None
    print("stored sliced Workload affinity:", sliced["spec"]["podSets"][0]["template"]["spec"]["affinity"])
    assert _terms(sliced) == [{"matchExpressions": [SLICED_PIN]}]
    assert _terms(shared) == [{"matchExpressions": [{"key": SHARED_KEY, "operator": "Gt", "values": ["2"]}]}]
    assert _terms(anded) == [
        {"matchExpressions": [zone, SLICED_PIN]},
        {"matchExpressions": [zone, SLICED_PIN]},  # the identical expression is not added twice
    ]
    assert _terms(whole) is None  # whole cards: Gate 3 and node totals agree, no pin
    for name in ("sliced", "shared", "anded", "whole"):
        assert served.asked_about(name)[0] == "CREATE"


async def test_workloads_of_other_queues_never_reach_the_webhook(served: Served) -> None:
    await served.admin.create(kinds.WORKLOAD, _workload("elsewhere", "team-queue", SLICE))
    stored = await served.admin.get(kinds.WORKLOAD, "elsewhere", NS)
    assert stored is not None
    assert _terms(stored) is None
    assert served.asked_about("elsewhere") == []  # the matchCondition kept the call away


async def test_a_queue_without_the_instancetype_mark_is_not_ours(served: Served) -> None:
    await served.admin.create(kinds.WORKLOAD, _workload("foreign", keys.local_queue_name(FOREIGN), SLICE))
    stored = await served.admin.get(kinds.WORKLOAD, "foreign", NS)
    assert stored is not None
    assert _terms(stored) is None
    assert served.asked_about("foreign")[0] == "CREATE"  # the entrance-like name passed the matchCondition


async def test_pods_are_never_sent_and_their_workload_is_pinned(served: Served) -> None:
    name = f"queued-{_SUFFIX}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": keys.local_queue_name(HELD)},
        },
        "spec": kueue.pod_spec(_container(SLICE)),
    }
    await served.admin.create(POD, pod)

    async def owned_workload() -> dict[str, Any] | None:
        items, _ = await served.admin.list(kinds.WORKLOAD, namespace=NS)
        for wl in items:
            owners = wl["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "Pod" and o.get("name") == name for o in owners):
                return dict(wl)
        return None

    wl = await eventually(owned_workload, within=60.0)
    assert wl is not None
    stored_pod = await served.admin.get(POD, name, NS)
    assert stored_pod is not None
    assert _terms(stored_pod, pod=True) is None  # Kueue's pod webhook ran; ours never sees Pods
    assert not [c for c in served.calls if c[0] == "Pod"]
    assert _terms(wl) == [{"matchExpressions": [SLICED_PIN]}]
    assert served.asked_about(wl["metadata"]["name"])[0] == "CREATE"


async def test_setting_off_stores_untouched_and_a_later_unreserved_update_pins(served: Served) -> None:
    served.settings.on = False
    try:
        await served.admin.create(kinds.WORKLOAD, _workload("off", keys.local_queue_name(HELD), SLICE))
    finally:
        served.settings.on = True
    stored = await served.admin.get(kinds.WORKLOAD, "off", NS)
    assert stored is not None
    assert _terms(stored) is None
    assert served.asked_about("off")[0] == "CREATE"  # asked, and answered without a patch

    updated = await served.admin.patch(
        kinds.WORKLOAD, "off", {"metadata": {"labels": {"touched": "yes"}}}, namespace=NS
    )
    assert _terms(updated) == [{"matchExpressions": [SLICED_PIN]}]
    calls = served.asked_about("off")
    assert calls[0] == "CREATE"
    assert calls[1:] and set(calls[1:]) == {"UPDATE"}  # ours, and any Kueue made meanwhile


async def test_an_update_after_kueue_reserved_is_left_alone(served: Served) -> None:
    served.settings.on = False
    try:
        await served.admin.create(kinds.WORKLOAD, _workload("reserved", keys.local_queue_name(OPEN), SLICE))
    finally:
        served.settings.on = True

    async def reserved() -> dict[str, Any] | None:
        wl = await served.admin.get(kinds.WORKLOAD, "reserved", NS)
        return wl if condition(wl, "QuotaReserved").get("status") == "True" else None

    await eventually(reserved, within=60.0)
    before = len(served.asked_about("reserved"))
    updated = await served.admin.patch(
        kinds.WORKLOAD, "reserved", {"metadata": {"labels": {"touched": "yes"}}}, namespace=NS
    )
    assert updated["metadata"]["labels"]["touched"] == "yes"
    assert _terms(updated) is None
    assert served.asked_about("reserved")[before:][:1] == ["UPDATE"]  # asked, and left alone


# --- Kueue's topology-aware scheduling honours the pin --------------------------------------------------

TAS_QUEUE = f"gpustack--{GROUP}-fitpin-tas-{_SUFFIX}"
POOL_LABEL = "fitpin.test.gpustack.ai/pool"
TAS_TOPOLOGY = f"fitpin-hostname-{_SUFFIX}"
TAS_FLAVOR = f"fitpin-flavor-{_SUFFIX}"
FRAGMENTED = f"fitpin-a-fragmented-{_SUFFIX}"
ROOMY = f"fitpin-b-roomy-{_SUFFIX}"


def _node(name: str, free_units: int) -> dict[str, Any]:
    """A Ready Node of the pool with one sliceable card's node totals and its fit label."""
    resources = {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "110",
        "nvidia.com/gpu.sliced": "128",
        "nvidia.com/gpu.sliced.units": str(keys.UNITS_PER_ACCELERATOR),
    }
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {keys.HOSTNAME: name, POOL_LABEL: _SUFFIX, SLICED_KEY: str(free_units)},
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": dict(resources), "conditions": [ready]},
    }


async def _admitted_on(admin: Client, name: str) -> list[str] | None:
    """The hostnames Kueue's topology assignment names for an admitted Workload (None until admitted)."""
    wl = await admin.get(kinds.WORKLOAD, name, NS)
    if condition(wl, "Admitted").get("status") != "True":
        return None
    assert wl is not None
    return [
        dict(zip(levels, domain.values, strict=True))[keys.HOSTNAME]
        for levels, domains in topology_assignments(wl).values()
        for domain in domains
    ]


async def _pending_message(admin: Client, name: str) -> str | None:
    cond = condition(await admin.get(kinds.WORKLOAD, name, NS), "QuotaReserved")
    return cond.get("message") if cond.get("status") == "False" and cond.get("message") else None


async def test_kueue_places_a_pinned_workload_only_where_one_card_fits(served: Served) -> None:
    """The fragmented node has room by its node totals (1.6 M units) but no card with 30 % free (its fit
    label reads 100,000): unpinned, Kueue places a 30 % slice there (where Gate 3 would answer Retry);
    pinned, it waits for a node whose card fits and takes the roomy one as soon as it appears."""
    admin = served.admin
    created: list[tuple[Resource, str, str | None]] = []

    async def create(resource: Resource, body: dict[str, Any]) -> None:
        await admin.create(resource, body)
        created.append((resource, body["metadata"]["name"], body["metadata"].get("namespace")))

    queue = keys.local_queue_name(TAS_QUEUE)
    try:
        await create(kinds.NODE, _node(FRAGMENTED, 100_000))
        await create(
            kinds.TOPOLOGY,
            {
                "apiVersion": kinds.TOPOLOGY.api_version,
                "kind": "Topology",
                "metadata": {"name": TAS_TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": keys.HOSTNAME}]},
            },
        )
        flavor = {"nodeLabels": {POOL_LABEL: _SUFFIX}, "topologyName": TAS_TOPOLOGY}
        await create(kinds.RESOURCE_FLAVOR, kueue.resource_flavor(TAS_FLAVOR, flavor))
        cpu_quota = kueue.resource_group(TAS_FLAVOR, {"cpu": "100"})
        await create(kinds.CLUSTER_QUEUE, _cluster_queue(TAS_QUEUE, cpu_quota, held=False))
        await create(kinds.INSTANCE_TYPE, _instance_type(TAS_QUEUE))
        await create(kinds.LOCAL_QUEUE, _local_queue(TAS_QUEUE))
        await eventually(lambda: _pinned_on_dry_run_at(served, queue), within=60.0)

        # Unpinned (setting off): node totals say the fragmented node has room, so Kueue places it there.
        served.settings.on = False
        try:
            await create(kinds.WORKLOAD, _workload("unpinned", queue, SLICE))
        finally:
            served.settings.on = True
        assert await eventually(lambda: _admitted_on(admin, "unpinned"), within=60.0) == [FRAGMENTED]
        await admin.delete(kinds.WORKLOAD, "unpinned", NS)

        # Pinned: no node has a card with 30 % free, so Kueue keeps it pending, in its own words.
        await create(kinds.WORKLOAD, _workload("pinned", queue, SLICE))
        stored = await admin.get(kinds.WORKLOAD, "pinned", NS)
        assert stored is not None
        assert _terms(stored) == [{"matchExpressions": [SLICED_PIN]}]
        message = await eventually(lambda: _pending_message(admin, "pinned"), within=60.0)
        print(f"Kueue on the pinned Workload with only the fragmented node: {message}")
        assert await _admitted_on(admin, "pinned") is None

        # A node whose card fits appears: Kueue admits the pinned Workload there, not on the fragmented one.
        await create(kinds.NODE, _node(ROOMY, keys.UNITS_PER_ACCELERATOR))
        assert await eventually(lambda: _admitted_on(admin, "pinned"), within=90.0) == [ROOMY]
    finally:
        for resource, name, namespace in reversed(created):
            with contextlib.suppress(Exception):
                await admin.delete(resource, name, namespace)


async def _pinned_on_dry_run_at(served: Served, queue: str) -> bool:
    """Whether a dry-run Workload at ``queue`` comes back pinned (the caches hold the new queue)."""
    probe = _workload(f"probe-{uuid.uuid4().hex[:6]}", queue, SLICE)
    try:
        created = await served.admin.create(kinds.WORKLOAD, probe, namespace=NS)
    except Exception:
        return False
    await served.admin.delete(kinds.WORKLOAD, probe["metadata"]["name"], NS)
    return bool(_terms(created) == [{"matchExpressions": [SLICED_PIN]}])
