"""What only a kubelet can break (issue 31): the node agent, the chain and Gate 3 on a real kubelet.

A control plane of the module's own with one real node (``devcluster-node-0``: a kubelet on containerd +
runc, tests/devcluster/test_real_node_cluster.py). The kubelet owns that Node — its registration, its
status, its conditions — so the scenario is given to it the way the other parties of a GPU node give
theirs, never by writing the kubelet's own fields (as the simulator's ``apply_node`` does for a Node a
kubelet reports for; here part by part, the device plugin's pools under a field manager of their own so
the test can tell its writes apart):

- NFD's labels and annotations (the CPU identity) by server-side apply of the Node's metadata, leaving
  the labels the kubelet registers (hostname, os, arch) the kubelet's;
- the Device Manager's NodeFeature and its ``Devices`` inventory and ledger, as the simulator writes them;
- the device plugin's pools (``nvidia.com/gpu``, ``.shared``, ``.sliced``) into ``status.capacity``
  only — the documented way of advertising a node-level extended resource; the kubelet mirrors them into
  ``allocatable`` in its next status update. No device plugin registers with this kubelet (no gRPC
  here); the agent's presence gate reads only that the pools are there.

The node agent runs as the DaemonSet's does (``node_name=devcluster-node-0``), with the topology, chain
and Gate 3 controllers, all in-process with their ServiceAccounts' clients (tests/stack.py). The kubelet's
own requests are read from the audit log (user ``system:node:devcluster-node-0``).

Shown, in order (each test builds on the state the previous one left):

1. the agent's counting keys appear in the real Node's ``capacity`` and ``allocatable``, owned by it;
2. a status update of the kubelet's own, and a kubelet restart (it registers again, then posts its
   status), leave them as the agent wrote them and make the agent write nothing. The restart zeroes
   nothing: kubelet v1.35.4's ``reconcileExtendedResource`` zeroes extended resources only when the
   device manager lists no checkpoint file, and its socket is one, created before the registration;
3. a Node deleted and registered anew by its restarted kubelet (a new uid, none of the extended
   resources) is counted again once NFD, the Device Manager and the device plugin have given it theirs;
4. a Pod the chain admits (Kueue's Pod integration, through the pool's LocalQueue; Gate 3 ``Ready``),
   asking for a slice by the agent's counting key, is bound to the real node and runs (Running, ready):
   kube-scheduler and the kubelet's admission both count it against that allocatable;
5. Gate 3 reads what the kubelet reports of a Pod: a Workload whose Pod the kubelet ended (phase
   ``Failed``: its ``activeDeadlineSeconds`` passed) holds no cards any more, though Kueue keeps its
   admission — the next Workload that needs those cards is judged ``Ready`` and runs. (Gate 3 and the fit
   labels read the ``Devices`` ledger, never the Node's capacity or allocatable: the Pod's phase and the
   hostname label the kubelet registered are what they take from the kubelet.)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import capacity
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds
from gpustack_worker.devcluster import build
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.devcluster.node import PAUSE_IMAGE_NAME
from gpustack_worker.devcluster.real_nodes import NODE_PREFIX
from gpustack_worker.placement.node_devices import NodeDevicesCheck
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import parse_scenario
from tests.kit import kueue
from tests.kit.cluster import own
from tests.kit.waiting import eventually
from tests.stack import Stack, condition, running_stack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.simulate.scenario import NodeSpec

pytestmark = pytest.mark.cluster

NODE = f"{NODE_PREFIX}0"
TEAM = "team-real-node"
CARDS = 4
M = keys.UNITS_PER_ACCELERATOR
#: The pool of the node's cards (grouping by accelerator only: the default).
POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
NVIDIA = kueue.NVIDIA_GPU
SLICED = keys.sliced_resource(NVIDIA)
SLICED_UNITS = keys.sliced_resource(NVIDIA, "units")
#: The labels the kubelet registers the Node with (and sets again whenever it registers): its own.
#: A node-level extended resource no one counts: advertised in ``capacity`` to make the kubelet post a
#: status update now (it mirrors it into ``allocatable``) instead of at its five-minute report.
DONGLE = "example.com/dongle"
#: The field manager of the device plugin's stand-in.
DEVICE_PLUGIN = "devcluster-device-plugin"
#: The kubelet's field manager (from its user agent), and the user it authenticates as.
KUBELET = "kubelet"
KUBELET_USER = f"system:node:{NODE}"
#: Kueue requeues a Retry no sooner than 30 s later, Pods start on a loaded machine: generous bounds.
WITHIN = 180.0

SCENARIO = parse_scenario(
    {
        "nodes": [
            {
                "name": NODE,
                "cpu": {
                    "vendor": "Intel",
                    "model": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
                    "cores": 2,
                },
                "memory": "16Gi",
                "accelerators": [
                    {
                        "manufacturer": "nvidia",
                        "product": "Tesla T4",
                        "memoryMiB": 15360,
                        "cores": 2560,
                        "count": CARDS,
                        "family": "Turing",
                        "computeCapability": "7.5",
                        "driverVersion": "580.159.03",
                        "runtimeVersion": "13.0",
                    }
                ],
            }
        ]
    }
)
SPEC = SCENARIO.nodes[0]


# --- giving the real Node its scenario -------------------------------------------------------------


async def _give_node_metadata(admin: Client, spec: NodeSpec) -> None:
    """NFD's labels and the CPU annotations; the kubelet's own labels are left to it."""
    body = render.render_node_metadata(spec, kubelet=True)
    await admin.apply(kinds.NODE, body, field_manager=render.FIELD_MANAGER, force=True)


async def _advertise_pools(admin: Client, spec: NodeSpec, extra: dict[str, str] | None = None) -> None:
    """The device plugin's pools (and ``extra``) into ``status.capacity`` only: the kubelet fills
    ``allocatable``."""
    pools = {name: str(value) for name, value in render.device_plugin_resources(spec).items()}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name},
        "status": {"capacity": {**pools, **(extra or {})}},
    }
    await admin.apply(kinds.NODE, body, field_manager=DEVICE_PLUGIN, force=True, subresource="status")


async def _give_devices(admin: Client, spec: NodeSpec) -> None:
    """The Device Manager's NodeFeature, ``Devices`` and ledger, owned by the real Node."""
    node = await admin.get(kinds.NODE, spec.name)
    assert node is not None, spec.name
    uid = str(node["metadata"]["uid"])
    feature = render.render_node_feature(spec, uid)
    devices = render.render_devices(spec, uid)
    ledger = render.render_devices_status(spec)
    assert feature is not None and devices is not None and ledger is not None
    manager = render.FIELD_MANAGER
    await admin.apply(kinds.NODE_FEATURE, feature, field_manager=manager, force=True)
    await admin.apply(kinds.DEVICES, devices, field_manager=manager, force=True)
    await admin.apply(kinds.DEVICES, ledger, field_manager=manager, force=True, subresource="status")


# --- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with own(
        "real-node-agent",
        why="a real kubelet: it owns the Node's status and registration and admits Pods against "
        "allocatable (its requests read back from the audit log)",
        kubelets=1,
        audit_log=tmp_path_factory.mktemp("real-node-audit") / "audit.log",
    ) as cluster:
        yield cluster


class Running:
    """The running stack (agent for the real node, topology, chain and Gate 3) and its cluster."""

    def __init__(self, stack: Stack, cluster: DevCluster) -> None:
        self.stack = stack
        self.admin: Client = stack.admin
        self.cluster = cluster


@pytest.fixture(scope="module")
async def running(real_cluster: DevCluster) -> AsyncIterator[Running]:
    def gate3(client: Client, settings: Any, registry: InformerRegistry) -> list[Any]:
        return [NodeDevicesCheck(client, registry, settings)]

    async with running_stack(real_cluster, None, namespaces=(TEAM,), extra=gate3, agent_node=NODE) as stack:
        await _give_node_metadata(stack.admin, SPEC)
        await _give_devices(stack.admin, SPEC)
        await _advertise_pools(stack.admin, SPEC)
        await asyncio.wait_for(stack.agent.ready.wait(), 60)
        yield Running(stack, real_cluster)


# --- reading ---------------------------------------------------------------------------------------


async def _node(admin: Client) -> dict[str, Any]:
    node = await admin.get(kinds.NODE, NODE)
    assert node is not None
    return node


def _counting(resources: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in resources.items() if capacity.is_counting_key(k)}


def _quantities(resources: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, raw in resources.items():
        value = parse(raw)
        assert value is not None, (key, raw)
        out[key] = int(value)
    return out


async def _wanted(admin: Client) -> dict[str, int]:
    """The counting keys the formulas give for the node's live ``Devices`` with its pools present."""
    raw = await admin.get(kinds.DEVICES, NODE)
    assert raw is not None
    facts = node_facts(await _node(admin))
    pools = {k: str(v) for k, v in render.device_plugin_resources(SPEC).items()}
    facts = type(facts)(
        name=facts.name,
        uid=facts.uid,
        labels=facts.labels,
        annotations=facts.annotations,
        capacity={**facts.capacity, **pools},
        allocatable=facts.allocatable,
    )
    return capacity.desired(facts, devices_facts(raw), manual=False)


def _counted(node: dict[str, Any], wanted: dict[str, int]) -> bool:
    status = node.get("status") or {}
    return all(
        _quantities(_counting(status.get(part) or {})) == wanted for part in ("capacity", "allocatable")
    )


def _owned_status_keys(node: dict[str, Any], manager: str) -> dict[str, set[str]]:
    """The ``capacity`` and ``allocatable`` keys ``manager`` owns on the Node's status."""
    out: dict[str, set[str]] = {"capacity": set(), "allocatable": set()}
    for entry in (node.get("metadata") or {}).get("managedFields") or ():
        if entry.get("manager") != manager or entry.get("subresource") != "status":
            continue
        status = ((entry.get("fieldsV1") or {}).get("f:status")) or {}
        for part in out:
            out[part] |= {k.removeprefix("f:") for k in status.get(f"f:{part}") or {} if k != "."}
    return out


# --- 1. counting -----------------------------------------------------------------------------------


async def test_the_agent_counts_the_real_node(running: Running) -> None:
    admin = running.admin
    wanted = await _wanted(admin)
    # Spec anchors: four sliceable T4 cards.
    assert wanted.get(SLICED_UNITS) == CARDS * M, wanted
    assert wanted.get(keys.sliced_resource(NVIDIA, "memory-mib")) == CARDS * 15360, wanted

    async def counted() -> dict[str, Any] | None:
        node = await _node(admin)
        return node if _counted(node, wanted) else None

    node = await eventually(counted, within=WITHIN)
    # The agent owns every one of them, in both maps.
    owned = _owned_status_keys(node, capacity.FIELD_MANAGER)
    assert owned == {"capacity": set(wanted), "allocatable": set(wanted)}, owned

    async def mirrored() -> dict[str, set[str]] | None:
        # The pools came into allocatable through the kubelet's status update (only capacity was
        # advertised): what kube-scheduler and the kubelet's admission count a Pod against.
        kubelet = _owned_status_keys(await _node(admin), KUBELET)
        return kubelet if set(render.device_plugin_resources(SPEC)) <= kubelet["allocatable"] else None

    await eventually(mirrored, within=WITHIN)


# --- 2. the kubelet's own writes --------------------------------------------------------------------


def _idle(stack: Stack) -> bool:
    """Every agent queue empty: nothing pending, delayed (fit window) or in flight."""
    agent = stack.agent
    return all(
        len(c.queue) == 0 and not c.queue.processing and c.queue.delayed == 0
        for c in (agent.nodefeature, agent.capacity, agent.fit)
    )


async def test_a_kubelet_status_update_leaves_them_and_wakes_no_write(running: Running) -> None:
    """The kubelet posts its status (a two-way strategic merge patch of what it computed: every capacity
    key mirrored into allocatable, its conditions' heartbeats). The counting keys stay as the agent wrote
    them, owned by it, and the agent — woken by that update — has nothing to write: no fight."""
    admin, stack = running.admin, running.stack
    wanted = await _wanted(admin)
    await eventually(lambda: _counted_now(admin, wanted), within=WITHIN)
    await eventually(lambda: _idle(stack), within=WITHIN)
    writes = stack.agent.steps.writes[capacity.FIELD_MANAGER]
    audit = _audit(running)
    # A node-level extended resource in capacity: the kubelet mirrors it into allocatable in its next
    # status update (within its 10 s sync) instead of waiting for its five-minute report. That update
    # changes a resource, so it wakes the agent's capacity reconciler.
    await _advertise_pools(admin, SPEC, {DONGLE: "1"})

    async def mirrored() -> dict[str, Any] | None:
        node = await _node(admin)
        return node if DONGLE in _owned_status_keys(node, KUBELET)["allocatable"] else None

    await eventually(mirrored, within=WITHIN)
    await eventually(lambda: _kubelet_posts(audit), within=WITHIN)  # the kubelet's own request
    await _no_write_since(running, writes, wanted)


def _audit(running: Running) -> AuditLog:
    assert running.cluster.audit_log is not None
    return AuditLog.from_now(running.cluster.audit_log)


def _kubelet_posts(audit: AuditLog, *, after_registration: bool = False) -> list[AuditEvent]:
    """The kubelet's status updates in the window (only those after it registered again, when asked)."""
    events = audit.writes(username=KUBELET_USER)
    if after_registration:
        starts = [i for i, e in enumerate(events) if (e.verb, e.resource_path) == ("create", "nodes")]
        events = events[starts[0] + 1 :] if starts else []
    return [e for e in events if (e.verb, e.resource_path, e.code) == ("patch", "nodes/status", 200)]


async def _no_write_since(running: Running, writes: int, wanted: dict[str, int]) -> None:
    """Once the agent's cache holds the Node as it is now, with every reconcile that woke run: the
    counting keys are as the agent wrote them, owned by it alone, and the agent wrote nothing since
    ``writes``."""
    admin, stack = running.admin, running.stack
    version = _version(await _node(admin))

    def seen_and_done() -> bool:
        cached = stack.agent.nodes.store.get(NODE)
        return cached is not None and _version(cached) >= version and _idle(stack)

    await eventually(seen_and_done, within=WITHIN)
    node = await _node(admin)
    assert _counted(node, wanted), _counting(node["status"]["capacity"])
    owned = _owned_status_keys(node, capacity.FIELD_MANAGER)
    assert owned == {"capacity": set(wanted), "allocatable": set(wanted)}, owned
    kubelet = _owned_status_keys(node, KUBELET)
    assert not (kubelet["capacity"] | kubelet["allocatable"]) & set(wanted), kubelet
    assert stack.agent.steps.writes[capacity.FIELD_MANAGER] == writes


async def _counted_now(admin: Client, wanted: dict[str, int]) -> bool:
    return _counted(await _node(admin), wanted)


def _version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def test_a_kubelet_restart_leaves_them(running: Running) -> None:
    """The restarted kubelet registers again (its create answered 409, "Node was previously registered"):
    it reconciles its default labels and the Node's extended resources, then posts its status at once.
    ``reconcileExtendedResource`` zeroes every extended resource only when the device manager lists no
    checkpoint file, and the kubelet starts its device manager (whose socket is such a file) before it
    registers whenever its runtime is up — which it must be for the kubelet to start at all: nothing is
    zeroed. The counting keys stay the agent's and the agent writes nothing."""
    admin, stack = running.admin, running.stack
    wanted = await _wanted(admin)
    await eventually(lambda: _counted_now(admin, wanted), within=WITHIN)
    await eventually(lambda: _idle(stack), within=WITHIN)
    writes = stack.agent.steps.writes[capacity.FIELD_MANAGER]
    audit = _audit(running)
    assert running.cluster.real_nodes is not None
    await asyncio.to_thread(running.cluster.real_nodes.nodes[0].restart_kubelet)
    await eventually(lambda: _kubelet_posts(audit, after_registration=True), within=WITHIN)
    await _no_write_since(running, writes, wanted)


# --- 3. a Node its kubelet registers anew ------------------------------------------------------------


async def test_a_node_its_kubelet_registers_anew_is_counted_again(running: Running) -> None:
    """The Node deleted, its kubelet restarted: the kubelet creates a new Node (a new uid) with only what
    it reports itself — no pool, no counting key, none of the labels NFD and the agent wrote. The garbage
    collector removes what the old Node owned (the Device Manager's NodeFeature and ``Devices``, the
    worker NodeFeature); NFD, the Device Manager and the device plugin give the new Node theirs again, and
    the agent counts it: its keys in capacity and allocatable, its NodeFeature owned by the new Node."""
    admin = running.admin
    wanted = await _wanted(admin)
    old = await _node(admin)
    await admin.delete(kinds.NODE, NODE)
    assert running.cluster.real_nodes is not None
    await asyncio.to_thread(running.cluster.real_nodes.nodes[0].restart_kubelet)

    async def registered() -> dict[str, Any] | None:
        node = await admin.get(kinds.NODE, NODE)
        return node if node is not None and node["metadata"]["uid"] != old["metadata"]["uid"] else None

    new = await eventually(registered, within=WITHIN)
    assert not _counting(new["status"].get("capacity") or {}), new["status"]
    dm_feature = keys.device_manager_nodefeature_name(NODE)

    async def collected() -> bool:
        return (
            await admin.get(kinds.DEVICES, NODE) is None
            and await admin.get(kinds.NODE_FEATURE, dm_feature, kinds.SYSTEM_NAMESPACE) is None
        )

    await eventually(collected, within=WITHIN)
    await _give_node_metadata(admin, SPEC)
    await _give_devices(admin, SPEC)
    await _advertise_pools(admin, SPEC, {DONGLE: "1"})

    async def counted_again() -> dict[str, Any] | None:
        node = await _node(admin)
        feature = await admin.get(
            kinds.NODE_FEATURE, keys.worker_nodefeature_name(NODE), kinds.SYSTEM_NAMESPACE
        )
        owners = [o.get("uid") for o in ((feature or {}).get("metadata") or {}).get("ownerReferences") or ()]
        return node if _counted(node, wanted) and owners == [new["metadata"]["uid"]] else None

    node = await eventually(counted_again, within=WITHIN)
    owned = _owned_status_keys(node, capacity.FIELD_MANAGER)
    assert owned == {"capacity": set(wanted), "allocatable": set(wanted)}, owned


# --- 4. a Pod of the chain on the real node ----------------------------------------------------------


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
#: A slice of 30 % of one card: ``<base>.sliced: 1`` and the agent's ``<base>.sliced.units``.
U30 = 30 * keys.UNITS_PER_PERCENT
SLICE = {SLICED: "1", SLICED_UNITS: str(U30)}


def _pause_image() -> str:
    return f"{PAUSE_IMAGE_NAME}:{build.OPTIONAL['pause'].version}"


def _pod(name: str, resources: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A Pod queued to the pool's LocalQueue (Kueue's Pod integration), running the pause image the node
    already holds."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": TEAM,
            "labels": {QUEUE_LABEL: keys.local_queue_name(POOL)},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": _pause_image(),
                    "imagePullPolicy": "Never",
                    "resources": {"requests": {"cpu": "10m", **resources}, "limits": dict(resources)},
                }
            ],
            **spec,
        },
    }


async def _workload_of(admin: Client, pod: str) -> dict[str, Any] | None:
    """The Workload Kueue's Pod integration made for ``pod``."""
    items, _ = await admin.list(kinds.WORKLOAD, namespace=TEAM)
    for wl in items:
        owners = (wl.get("metadata") or {}).get("ownerReferences") or ()
        if any(o.get("kind") == "Pod" and o.get("name") == pod for o in owners):
            return wl
    return None


def _gate3(wl: dict[str, Any] | None) -> dict[str, Any]:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == keys.NODE_DEVICES_CHECK:
            return dict(entry)
    return {}


async def _queue_ready(running: Running) -> None:
    """The chain settled on the real node as it is now: every controller of the stack idle (the agent's fit
    window included) at an instant when the pool's queue references Gate 3, is active and not stopped (no
    migration under way), its LocalQueue is in the team's namespace, and kube-controller-manager made the
    namespace's ``default`` ServiceAccount (a Pod needs it). An earlier step that re-registered the Node
    changes its flavors; a Pod admitted before the chain caught up would be drained by the migration."""
    admin, stack = running.admin, running.stack

    async def ready() -> bool:
        if not (stack.idle() and _idle(stack)):
            return False
        cq = await admin.get(kinds.CLUSTER_QUEUE, POOL)
        spec = (cq or {}).get("spec") or {}
        checks = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        lq = await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(POOL), TEAM)
        sa = await admin.get(SERVICE_ACCOUNT, "default", TEAM)
        return (
            keys.NODE_DEVICES_CHECK in {c.get("name") for c in checks}
            and condition(cq, "Active").get("status") == "True"
            and spec.get("stopPolicy", "None") == "None"
            and lq is not None
            and sa is not None
            and stack.idle()
        )

    await eventually(ready, within=WITHIN)


async def _started(admin: Client, name: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def running() -> dict[str, Any] | None:
        pod = await admin.get(kinds.POD, name, TEAM) or {}
        seen["pod"] = {"nodeName": (pod.get("spec") or {}).get("nodeName"), "status": pod.get("status")}
        status = pod.get("status") or {}
        ready = [c.get("ready") for c in status.get("containerStatuses") or ()]
        return pod if status.get("phase") == "Running" and ready == [True] else None

    try:
        return await eventually(running, within=WITHIN)
    except AssertionError as exc:  # say where it stopped: the Pod as last read, and its Workload
        wl = (await _workload_of(admin, name) or {}).get("status")
        raise AssertionError(f"{exc}\nPod {name}: {seen.get('pod')}\nWorkload: {wl}") from exc


async def test_a_pod_the_chain_admits_runs_on_the_real_node(running: Running) -> None:
    """A slice through the pool's LocalQueue: Kueue reserves it, Gate 3 says ``Ready``, Kueue admits and
    ungates it, kube-scheduler binds it to the real node and the kubelet admits and starts it — both count
    ``nvidia.com/gpu.sliced.units`` against the allocatable the agent wrote (a key at 0 or missing there
    and kube-scheduler would not bind it)."""
    admin = running.admin
    await _queue_ready(running)
    name = f"slice-{uuid.uuid4().hex[:6]}"
    await admin.create(kinds.POD, _pod(name, SLICE))
    pod = await _started(admin, name)
    assert pod["spec"]["nodeName"] == NODE
    wl = await _workload_of(admin, name)
    assert wl is not None
    assert condition(wl, "Admitted").get("status") == "True", wl.get("status")
    assert _gate3(wl).get("state") == "Ready", _gate3(wl)


# --- 5. Gate 3 and what the kubelet reports of a Pod -------------------------------------------------


async def test_gate3_frees_the_cards_of_a_pod_the_kubelet_ended(running: Running) -> None:
    """Three whole cards for a Pod the kubelet ends (``activeDeadlineSeconds``: phase ``Failed``,
    ``DeadlineExceeded``). Kueue marks its Workload finished but keeps its admission, so Gate 3 counts the
    Workload's Pods inflight — all but those the ledger holds, and a finished Pod is held: the next
    Workload asking for the same three cards (the fourth serves the running slice) is judged ``Ready``,
    and its Pod runs on the real node. The ledger is never written here (it shows every card free): only
    the kubelet's report frees the three cards."""
    admin = running.admin
    await _queue_ready(running)
    ended = f"ended-{uuid.uuid4().hex[:6]}"
    await admin.create(kinds.POD, _pod(ended, {NVIDIA: str(CARDS - 1)}, activeDeadlineSeconds=1))

    async def failed() -> dict[str, Any] | None:
        pod = await admin.get(kinds.POD, ended, TEAM) or {}
        status = pod.get("status") or {}
        return pod if status.get("phase") == "Failed" else None

    pod = await eventually(failed, within=WITHIN)
    assert pod["spec"]["nodeName"] == NODE
    assert pod["status"].get("reason") == "DeadlineExceeded", pod["status"]

    async def finished() -> dict[str, Any] | None:
        wl = await _workload_of(admin, ended)
        return wl if condition(wl, "Finished").get("status") == "True" else None

    wl = await eventually(finished, within=WITHIN)
    # Finished, yet still admitted: Gate 3 counts it inflight; only its Pod's phase says it holds nothing.
    assert wl["status"].get("admission") and condition(wl, "Admitted").get("status") == "True", wl["status"]
    assert _gate3(wl).get("state") == "Ready", _gate3(wl)
    next_one = f"next-{uuid.uuid4().hex[:6]}"
    await admin.create(kinds.POD, _pod(next_one, {NVIDIA: str(CARDS - 1)}))
    pod = await _started(admin, next_one)
    assert pod["spec"]["nodeName"] == NODE
    after = await _workload_of(admin, next_one)
    assert _gate3(after).get("state") == "Ready", _gate3(after)
