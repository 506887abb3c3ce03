"""Stage-4 chain benchmark: a cold controller start over a 5,000-node fleet, on the real control plane.

One run, printed as a table (never pass/fail; targets are printed next to what was reached):

1. **Fleet** — N Nodes (default 5,000) from a seeded table of shapes: ten accelerator models of six
   manufacturers (NVIDIA A10G/T4/H100/A100/L40S, Ascend 910B2, Hygon K100_AI, MetaX MXC500, Cambricon
   MLU370-X8, Moore Threads MTT S4000) on several CPU models and core counts, plus CPU-only nodes of
   several CPUs (amd64 and arm64). Each Node carries exactly what stages 1-3 leave on it: the
   simulator's NFD labels and CPU annotations (:mod:`gpustack_worker.simulate.render`), the Device
   Manager's NodeFeature labels, and the node agent's own labels and counting keys computed by the
   agent's pure functions (``nodefeature``, ``fit``, ``capacity``) — as if nfd-master had projected them.
   Accelerated nodes get their ``Devices`` object with its ledger, so InstanceType status views have
   something to count. Created with a bare admin client, 32 requests in flight, before the controller
   starts (setup, not measured). No topology profile on any Node: the controller labels them.
2. **Cold start** — ``gpustack-worker controller`` as a subprocess (its own RSS), authenticated as the
   controller ServiceAccount. Measured from its ``caches synced`` log line: seconds until the chain has
   converged — every expected ResourceFlavor (labels and selector, so every Node carries its profile),
   InstanceType (finalizer, ``phase=Active``, entrance), ClusterQueue (Kueue ``Active=True``, our
   ``TopologyReady=True``, resource groups = the expected plan), and LocalQueue in every non-system
   namespace. "Expected" is computed with the chain's own pure functions (``chain.nodes``,
   ``chain.flavors``, ``chain.pools``, ``chain.queues``) from the generated Nodes. *Converged* also
   waits for the last Node profile label and ``Devices`` mirror the fleet needs (the audit log's time of
   that write). The limits scale with N (:func:`converge_limit`, :func:`idle_limit`).
3. **Writes** — from the kube-apiserver audit log, requests by the controller's User-Agent
   (``gpustack-worker-controller/…``) per resource and verb, next to the objects the chain desires.
4. **Idle soak** — ``--quiet`` seconds of the converged chain (``--quiet 600`` at 5,000 Nodes is issue
   18's 10-minute soak): the controller's writes in the audit log (expected 0; its Lease renewals
   counted apart), its CPU seconds and RSS. Then three forced full resyncs (a live setting the chain
   does not read, flipped in the settings ConfigMap: every settings snapshot re-enqueues every key of
   every chain controller); writes counted the same way, expected 0.
5. **Raw apply rate** — after the controller stopped, the same API server's server-side-apply rate from
   a bare client on the first 2,000 Nodes at the controller's concurrency (its ``controller-workers``),
   at 8 and at 32 in flight: a label applied under another field manager (the write the controller
   issues most), a label on the ``Devices`` objects, and small ConfigMaps. The *cold ratio* is the least
   time the desired writes take at the raw rate of the same write with 8 in flight (Node labels and chain
   objects at the Node-label rate, ``Devices`` mirrors at the Devices-label rate), divided by the time
   from the controller's start to converged (issue 18: ≥ 0.8).

``nox -s bench`` runs it; ``--nodes``, ``--quiet`` and ``--dir`` change the scale, the quiet period and
keep the cluster's logs and audit log; ``--json PATH`` also writes the figures (``bench/summary.py``).
``--profile FILE`` runs the same cold start with the chain in this process under cProfile instead (no
table; the top functions are printed and the stats kept in FILE).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.api.devices_view import devices_facts
from gpustack_worker.chain import flavors, localqueues, managers, pools, queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.labelselector import parse_selector
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import parse_scenario
from gpustack_worker.simulate.scenario import MAX_NODES as SCENARIO_MAX_NODES
from gpustack_worker.topology import profiles as topo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from summary import write_json  # bench/ is not a package: its own directory on the path

if TYPE_CHECKING:
    from gpustack_worker.devcluster.audit import AuditEvent
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.devcluster.procs import ManagedProcess
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.simulate.scenario import NodeSpec

READY_SINCE: Final = "2026-01-01T00:00:00Z"
SETUP_CONCURRENCY: Final = 32
CONTROLLER_UA: Final = "gpustack-worker-controller/"
BENCH_IDENTITY: Final = "chain-bench"
#: A live setting the chain never reads: flipping it is a pure forced resync of every chain key.
RESYNC_SETTING: Final = "workload-fit-affinity"
TEAM_NAMESPACES: Final = ("team-a", "team-b")

# Targets (issues 9 and 18): printed next to the measured values, never asserted.
TARGET_CONVERGE_S: Final = 10.0
TARGET_RSS_MIB: Final = 200.0
TARGET_RATIO: Final = 0.8
#: The raw-rate client's requests in flight for the cold-start ratio (issue 18's reference concurrency).
RAW_CONCURRENCY: Final = 8
#: The raw rates are measured on this many Nodes at most (enough for a steady rate at any fleet size).
RAW_NODES: Final = 2000

# Limits that scale with the fleet, so a 20,000-Node run is not cut short by a limit sized for 5,000.
#: The cold start may take this long per Node before the bench gives up (5,000 Nodes: 1,200 s) …
CONVERGE_S_PER_NODE: Final = 0.24
#: … and never less than this.
CONVERGE_MIN_S: Final = 600.0
#: Waiting for the controller's CPU to go quiet: this long per Node, at least IDLE_MIN_S.
IDLE_S_PER_NODE: Final = 0.06
IDLE_MIN_S: Final = 600.0


def converge_limit(n_nodes: int) -> float:
    """Seconds after caches synced the bench waits for convergence before it reports "not converged"."""
    return max(CONVERGE_MIN_S, CONVERGE_S_PER_NODE * n_nodes)


def idle_limit(n_nodes: int) -> float:
    """Seconds the bench waits for the controller to go idle."""
    return max(IDLE_MIN_S, IDLE_S_PER_NODE * n_nodes)


# --- the fleet ---------------------------------------------------------------------------------------
_XEON_8259 = {"vendor": "Intel", "model": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "cores": 96}
_XEON_6348 = {"vendor": "Intel", "model": "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", "cores": 112}
_XEON_8480 = {"vendor": "Intel", "model": "Intel(R) Xeon(R) Platinum 8480+", "cores": 224}
_EPYC_7R32 = {"vendor": "AMD", "model": "AMD EPYC 7R32", "cores": 48}
_EPYC_7763 = {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 128}
_EPYC_9654 = {"vendor": "AMD", "model": "AMD EPYC 9654 96-Core Processor", "cores": 384}
_KUNPENG = {"vendor": "ARM", "model": "Kunpeng-920", "cores": 192}
_HYGON = {"vendor": "Hygon", "model": "Hygon C86 7285 32-core Processor", "cores": 64}
_A100_MIG: Final = {
    "kind": "mig",
    "cards": [6, 7],
    "profiles": [
        {"name": "1g.10gb", "memoryMiB": 9728, "computeSlices": 1, "memorySlices": 1},
        {"name": "3g.40gb", "memoryMiB": 40192, "computeSlices": 3, "memorySlices": 4},
        {"name": "7g.80gb", "memoryMiB": 80384, "computeSlices": 7, "memorySlices": 8},
    ],
}


def _cpu(base: dict[str, Any], cores: int | None = None) -> dict[str, Any]:
    return {**base, "cores": cores or base["cores"]}


def _acc(mfr: str, product: str, mib: int, count: int, **extra: Any) -> dict[str, Any]:
    return {"manufacturer": mfr, "product": product, "memoryMiB": mib, "count": count, **extra}


#: (weight, node template without name). Ten accelerator models, eight CPU models, several core counts.
SHAPES: Final[tuple[tuple[int, dict[str, Any]], ...]] = (
    # CPU-only nodes
    (8, {"cpu": _cpu(_XEON_8259), "memory": "384Gi"}),
    (5, {"cpu": _cpu(_XEON_8259, 48), "memory": "192Gi"}),
    (5, {"cpu": _cpu(_EPYC_7763), "memory": "512Gi"}),
    (3, {"cpu": _cpu(_EPYC_9654), "memory": "1536Gi"}),
    (4, {"cpu": _cpu(_KUNPENG), "arch": "arm64", "memory": "512Gi"}),
    (3, {"cpu": _cpu(_XEON_6348), "memory": "512Gi"}),
    # NVIDIA
    (
        7,
        {
            "cpu": _cpu(_EPYC_7R32),
            "memory": "192Gi",
            "accelerators": [_acc("nvidia", "NVIDIA A10G", 23028, 1)],
        },
    ),
    (
        5,
        {
            "cpu": _cpu(_EPYC_7R32, 192),
            "memory": "768Gi",
            "accelerators": [_acc("nvidia", "NVIDIA A10G", 23028, 4)],
        },
    ),
    (
        6,
        {
            "cpu": _cpu(_XEON_8259, 8),
            "memory": "32Gi",
            "accelerators": [_acc("nvidia", "Tesla T4", 15360, 1)],
        },
    ),
    (
        4,
        {
            "cpu": _cpu(_XEON_8259, 48),
            "memory": "192Gi",
            "accelerators": [_acc("nvidia", "Tesla T4", 15360, 4)],
        },
    ),
    (
        10,
        {
            "cpu": _cpu(_XEON_8480),
            "memory": "2048Gi",
            "accelerators": [
                _acc(
                    "nvidia",
                    "NVIDIA H100 80GB HBM3",
                    81559,
                    8,
                    cores=16896,
                    family="Hopper",
                    computeCapability="9.0",
                )
            ],
        },
    ),
    (
        8,
        {
            "cpu": _cpu(_EPYC_7763, 256),
            "memory": "1024Gi",
            "accelerators": [
                _acc(
                    "nvidia",
                    "NVIDIA A100-SXM4-80GB",
                    81920,
                    8,
                    cores=6912,
                    family="Ampere",
                    computeCapability="8.0",
                    partitioning=_A100_MIG,
                )
            ],
        },
    ),
    (
        5,
        {
            "cpu": _cpu(_EPYC_9654),
            "memory": "1536Gi",
            "accelerators": [_acc("nvidia", "NVIDIA L40S", 46068, 8)],
        },
    ),
    (
        3,
        {
            "cpu": _cpu(_XEON_6348),
            "memory": "512Gi",
            "accelerators": [_acc("nvidia", "NVIDIA L40S", 46068, 4)],
        },
    ),
    # Ascend, Hygon, MetaX, Cambricon, Moore Threads
    (
        6,
        {
            "cpu": _cpu(_KUNPENG),
            "arch": "arm64",
            "memory": "1536Gi",
            "accelerators": [_acc("ascend", "910B2", 65536, 8)],
        },
    ),
    (5, {"cpu": _cpu(_HYGON), "memory": "512Gi", "accelerators": [_acc("hygon", "K100_AI", 65536, 8)]}),
    (4, {"cpu": _cpu(_XEON_6348), "memory": "1024Gi", "accelerators": [_acc("metax", "MXC500", 65536, 8)]}),
    (4, {"cpu": _cpu(_HYGON), "memory": "512Gi", "accelerators": [_acc("cambricon", "MLU370-X8", 49152, 4)]}),
    (
        4,
        {
            "cpu": _cpu(_XEON_6348),
            "memory": "1024Gi",
            "accelerators": [_acc("mthreads", "MTT S4000", 49152, 8)],
        },
    ),
)


def fleet(n_nodes: int, seed: int = 0) -> list[NodeSpec]:
    """``n_nodes`` validated node specs named ``bench-00000``…, shapes drawn by weight."""
    rng = random.Random(seed)
    weights = [w for w, _ in SHAPES]
    nodes: list[dict[str, Any]] = []
    for i in range(n_nodes):
        _, shape = rng.choices(SHAPES, weights=weights)[0]
        node: dict[str, Any] = {"name": f"bench-{i:05d}", **shape}
        accs = [dict(a) for a in shape.get("accelerators", [])]
        for acc in accs:
            # A few cards with a pre-existing exclusive allocation, so the status views have work to do.
            acc["allocations"] = [
                {"card": c, "mode": "exclusive"}
                for c in range(acc["count"])
                if rng.random() < 0.2 and c not in (acc.get("partitioning") or {}).get("cards", ())
            ]
        if accs:
            node["accelerators"] = accs
        nodes.append(node)
    # A scenario holds at most MAX_NODES (a bound of the simulator's file format): larger fleets (20,000)
    # are validated in slices; the names are unique by construction, the draws above did not change.
    specs: list[NodeSpec] = []
    for start in range(0, len(nodes), SCENARIO_MAX_NODES):
        part = nodes[start : start + SCENARIO_MAX_NODES]
        specs += parse_scenario({"nodes": part}, f"chain-bench({n_nodes}, seed={seed})[{start}:]").nodes
    return specs


@dataclass
class NodeObjects:
    """What stages 1-3 leave behind for one node."""

    node: dict[str, Any]
    devices: dict[str, Any] | None
    devices_status: dict[str, Any] | None


def stage3(spec: NodeSpec) -> NodeObjects:
    """The Node with the NFD, Device Manager and node-agent labels projected, and its Devices."""
    node = render.render_node(spec, READY_SINCE)
    node["metadata"]["uid"] = f"uid-{spec.name}"  # only for the facts; the server assigns the real one
    devices = render.render_devices(spec, f"uid-{spec.name}")
    ledger = render.render_devices_status(spec)
    full_devices = None
    if devices is not None:
        full_devices = {**devices, "status": (ledger or {}).get("status", {})}
    labels = node["metadata"]["labels"]
    feature = render.render_node_feature(spec, f"uid-{spec.name}")
    if feature is not None:
        labels.update(feature["spec"]["labels"])
    n = node_facts(node)
    d = devices_facts(full_devices) if full_devices is not None else None
    labels.update(nodefeature.desired_labels(n, d, manual=False, mixed_on_node=True))
    labels.update(fit.desired(n, d, manual=False))
    counting = {k: str(v) for k, v in capacity.desired(n, d, manual=False).items()}
    node["status"]["capacity"].update(counting)
    node["status"]["allocatable"].update(counting)
    del node["metadata"]["uid"]
    return NodeObjects(node, devices, ledger)


# --- what the chain should converge to ---------------------------------------------------------------


@dataclass
class Expected:
    """The chain's desired objects for the fleet, computed with its own pure functions."""

    nodes: int
    flavors: dict[str, dict[str, Any]]
    types: dict[str, dict[str, Any]]
    #: Queue name → ((flavor name, nominalQuota), …) in plan order.
    plans: dict[str, tuple[tuple[str, int], ...]]
    topologies: set[str]
    #: Managed Nodes that do not carry their topology profile yet (one label write each).
    unprofiled: int = 0
    #: ``Devices`` objects of profiled Nodes: each carries a mirror of its Node's profile (one write each).
    mirrors: int = 0
    namespaces: list[str] = field(default_factory=list)

    @property
    def local_queues(self) -> set[tuple[str, str]]:
        return {(ns, keys.local_queue_name(q)) for ns in self.namespaces for q in self.types}

    def desired_writes(self) -> dict[str, int]:
        """One write per desired object or field set (the cold-start minimum), by resource path."""
        t = len(self.types)
        return {
            "nodes (profile label)": self.unprofiled,
            "devices (profile mirror)": self.mirrors,
            "topologies": len(self.topologies),
            "resourceflavors": len(self.flavors),
            "instancetypes (create)": t,
            "instancetypes (finalizer)": t,
            "instancetypes/status": t,
            "clusterqueues": t,
            "clusterqueues/status": t,
            "localqueues": len(self.local_queues),
            "admissionchecks": 2,
            "admissionchecks/status": 2,  # each check's Active condition
        }


def _profile(node: dict[str, Any]) -> str | None:
    """The profile the topology controller gives a Node when no TopologySource exists (hostname-only)."""
    assignment = topo.node_assignment(node["metadata"].get("labels") or {}, [])
    return assignment.profile if assignment is not None else None


def with_profile(node: dict[str, Any]) -> dict[str, Any]:
    """The Node as it looks once the controller labelled its topology profile."""
    profile = _profile(node)
    labels = dict(node["metadata"]["labels"])
    if profile is not None:
        labels[keys.TOPOLOGY_PROFILE] = profile
    return {**node, "metadata": {**node["metadata"], "labels": labels}}


def local_queue_namespaces(
    namespaces: list[dict[str, Any]], settings: WorkerSettings | None = None, *, system_namespace: str = ""
) -> list[str]:
    """The names of the Namespaces that get the operator's LocalQueues under ``settings`` (default: the
    defaults), by the chain's own rule (:func:`localqueues.gets_local_queues`)."""
    selector = parse_selector((settings or WorkerSettings()).local_queue_namespace_selector)
    system = system_namespace or kinds.SYSTEM_NAMESPACE
    return sorted(
        str(n["metadata"]["name"])
        for n in namespaces
        if localqueues.gets_local_queues(n, system_namespace=system, selector=selector)
    )


def expected_chain(objs: list[NodeObjects], settings: WorkerSettings, *, profiled: bool = False) -> Expected:
    aware = settings.instance_type_aware_cpu_manufacturer
    mixed = settings.instance_type_mixed_on_node
    hardware: list[NodeHardware] = [h for o in objs if (h := node_hardware(with_profile(o.node))) is not None]
    plans = flavors.plan_flavors(hardware, mixed_on_node=mixed)
    bodies = {p.name: flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in plans}
    topology = keys.topology_name(keys.topology_profile([keys.HOSTNAME]))
    types: dict[str, dict[str, Any]] = {}
    if settings.instance_type_derived_from_node:
        for p in plans:
            body = pools.derived_instance_type(p, aware=aware)
            types.setdefault(body["metadata"]["name"], body)
    queue_plans: dict[str, tuple[tuple[str, int], ...]] = {}
    for name, it in types.items():
        pool = pools.identity_of(it)
        labels = {**pools.schedule_labels(pool, aware=aware), keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES}
        outcome = queues.plan_queue(
            pool,
            pools.flavor_selector(labels),
            list(bodies.values()),
            hardware,
            frozenset({topology}),
            mixed_on_node=mixed,
        )
        if isinstance(outcome, queues.Refusal):
            raise SystemExit(f"the generated fleet has no complete plan for {name}: {outcome.message}")
        queue_plans[name] = tuple(
            (fl["name"], int(parse(str(fl["resources"][0]["nominalQuota"])) or 0))
            for group in outcome.groups
            for fl in group["flavors"]
        )
    wanted = [(_profile(o.node), o.node["metadata"]["labels"]) for o in objs]
    unprofiled = len(
        [1 for want, labels in wanted if want is not None and labels.get(keys.TOPOLOGY_PROFILE) != want]
    )
    mirrors = sum(1 for (want, _), o in zip(wanted, objs, strict=True) if want is not None and o.devices)
    return Expected(
        nodes=len(hardware),
        flavors=bodies,
        types=types,
        plans=queue_plans,
        topologies={topology},
        unprofiled=0 if profiled else unprofiled,
        mirrors=mirrors,
    )


# --- setup -------------------------------------------------------------------------------------------


async def create_fleet(admin: Client, objs: list[NodeObjects], *, profiled: bool = False) -> None:
    """Nodes (status included on create), then Devices and their ledgers; 32 requests in flight. With
    ``profiled``, each Node's topology profile is applied under the controller's own field manager, as if
    an earlier controller run had labelled it."""
    gate = asyncio.Semaphore(SETUP_CONCURRENCY)

    async def one(o: NodeObjects) -> None:
        async with gate:
            created = await admin.create(kinds.NODE, o.node)
            profile = _profile(o.node) if profiled else None
            if profile is not None:
                name = o.node["metadata"]["name"]
                label = {"name": name, "labels": {keys.TOPOLOGY_PROFILE: profile}}
                body = {"apiVersion": "v1", "kind": "Node", "metadata": label}
                await admin.apply(kinds.NODE, body, field_manager=managers.NODE_TOPOLOGY)
            if o.devices is None or o.devices_status is None:
                return
            devices = orjson.loads(orjson.dumps(o.devices))
            uid = str(created["metadata"]["uid"])
            for owner in devices["metadata"].get("ownerReferences") or ():
                owner["uid"] = uid
            await admin.apply(kinds.DEVICES, devices, field_manager=render.FIELD_MANAGER, force=True)
            await admin.apply(
                kinds.DEVICES,
                o.devices_status,
                field_manager=render.FIELD_MANAGER,
                force=True,
                subresource="status",
            )

    await asyncio.gather(*(one(o) for o in objs))


# --- the controller process --------------------------------------------------------------------------


def _proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS of ``pid`` in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_idle(pid: int, *, window: float = 3.0, busy: float = 0.05, limit: float = 600.0) -> float:
    """Wait until the process used less than ``busy`` of a core over ``window`` seconds; returns the
    seconds waited (the controller has no "idle" signal of its own, its CPU use is the tell)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        before = _cpu_seconds(pid)
        await asyncio.sleep(window)
        if _cpu_seconds(pid) - before < busy * window:
            break
    else:
        print(f"  (the controller did not go idle within {limit:.0f} s: still over {busy:.0%} of a core)")
    return time.monotonic() - start


def log_time(path: Path, event: str) -> dt.datetime | None:
    """Timestamp of the first JSON log line of ``event`` in the process log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if event not in line:
            continue
        with contextlib.suppress(orjson.JSONDecodeError):
            doc = orjson.loads(line)
            if doc.get("event") == event and doc.get("timestamp"):
                return dt.datetime.fromisoformat(str(doc["timestamp"]).replace("Z", "+00:00"))
    return None


def log_field(path: Path, event: str, key: str) -> str | None:
    """Field ``key`` of the first JSON log line of ``event``."""
    for line in path.read_text(errors="replace").splitlines():
        if event in line:
            with contextlib.suppress(orjson.JSONDecodeError):
                doc = orjson.loads(line)
                if doc.get("event") == event and key in doc:
                    return str(doc[key])
    return None


def reconcile_stats(address: str) -> dict[str, tuple[float, float]]:
    """Per chain and topology controller: (reconciles, seconds spent in reconciles), from the process's
    /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    count: dict[str, float] = collections.defaultdict(float)
    busy: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in (
            "controller_runtime_reconcile_total",
            "controller_runtime_reconcile_time_seconds_sum",
        ):
            continue
        labels, _, value = rest.rpartition("} ")
        ctl = next(
            (p.split("=", 1)[1].strip('"') for p in labels.split(",") if p.startswith("controller=")), ""
        )
        if name == "controller_runtime_reconcile_total":
            count[ctl] += float(value)
        else:
            busy[ctl] += float(value)
    return {c: (count[c], busy[c]) for c in sorted(count) if c.startswith(("chain-", "topology-"))}


def start_controller(cluster: DevCluster, kubeconfig: Path) -> ManagedProcess:
    from gpustack_worker.devcluster.procs import ManagedProcess

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    proc = ManagedProcess(
        "controller",
        [
            sys.executable,
            "-m",
            "gpustack_worker",
            "controller",
            f"--kubeconfig={kubeconfig}",
            "--metrics-bind=127.0.0.1:0",
            f"--identity={BENCH_IDENTITY}",
        ],
        cluster.dir / "logs" / "controller.log",
        env,
    )
    proc.start()
    cluster.procs["controller"] = proc  # stopped with the cluster whatever happens
    return proc


# --- convergence -------------------------------------------------------------------------------------


def _cond(obj: dict[str, Any], type_: str) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return ""


def _contains(have: Any, want: dict[str, Any]) -> bool:
    return all((have or {}).get(k) == v for k, v in want.items())


async def missing(admin: Client, exp: Expected) -> dict[str, int]:
    """What is not converged yet, by kind (empty: converged)."""
    out: collections.Counter[str] = collections.Counter()
    live_flavors = {f["metadata"]["name"]: f for f in (await admin.list(kinds.RESOURCE_FLAVOR))[0]}
    for name, body in exp.flavors.items():
        f = live_flavors.get(name)
        if (
            f is None
            or not _contains(f["metadata"].get("labels"), body["metadata"]["labels"])
            or f["spec"].get("nodeLabels") != body["spec"]["nodeLabels"]
        ):
            out["resourceflavors"] += 1
    ours = {n for n, f in live_flavors.items() if (f["metadata"].get("labels") or {}).get(keys.RESOURCE_TYPE)}
    out["resourceflavors (unexpected)"] += len(ours - set(exp.flavors))
    live_topologies = {t["metadata"]["name"] for t in (await admin.list(kinds.TOPOLOGY))[0]}
    out["topologies"] += len(exp.topologies - live_topologies)
    live_types = {t["metadata"]["name"]: t for t in (await admin.list(kinds.INSTANCE_TYPE))[0]}
    for name in exp.types:
        it = live_types.get(name)
        status = (it or {}).get("status") or {}
        if (
            it is None
            or keys.FINALIZER_CONTROLLED not in (it["metadata"].get("finalizers") or ())
            or status.get("phase") != "Active"
            or status.get("entrance") != keys.local_queue_name(name)
        ):
            out["instancetypes"] += 1
    live_queues = {q["metadata"]["name"]: q for q in (await admin.list(kinds.CLUSTER_QUEUE))[0]}
    for name, plan in exp.plans.items():
        q = live_queues.get(name)
        if q is None or _cond(q, "Active") != "True" or _cond(q, keys.TOPOLOGY_READY) != "True":
            out["clusterqueues"] += 1
            continue
        got = tuple(
            (fl["name"], int(parse(str(fl["resources"][0]["nominalQuota"])) or 0))
            for group in q["spec"].get("resourceGroups") or ()
            for fl in group.get("flavors") or ()
        )
        if got != plan:
            out["clusterqueues"] += 1
    live_lq = {
        (q["metadata"]["namespace"], q["metadata"]["name"]) for q in (await admin.list(kinds.LOCAL_QUEUE))[0]
    }
    out["localqueues"] += len(exp.local_queues - live_lq)
    return {k: v for k, v in out.items() if v}


# --- audit -------------------------------------------------------------------------------------------


def by_kind(events: list[AuditEvent]) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((e.resource_path, e.verb) for e in events)


def repeated_writes(events: list[AuditEvent]) -> list[str]:
    """Each write of an object written more than once with the same verb (Nodes and Devices aside: a
    profile label and its mirror are one write each by construction; an InstanceType's create and its
    finalizer patch are two desired writes), in order, with its body when the audit log kept it."""
    twice = _written_twice(events)
    return [
        f"{e.received.time()} {e.verb} {e.resource_path} {e.namespace}/{e.name} code={e.code}"
        + (f" body={json.dumps(e.request_object, sort_keys=True)}" if e.request_object is not None else "")
        for e in events
        if _write_key(e) in twice
    ]


def _write_key(e: AuditEvent) -> tuple[str, str, str, str]:
    return (e.verb, e.resource_path, e.namespace, e.name)


def _written_twice(events: list[AuditEvent]) -> set[tuple[str, str, str, str]]:
    """(verb, resource path, namespace, name) of the chain objects written more than once that way."""
    chain = [e for e in events if e.resource_path.split("/")[0] not in ("nodes", "devices", "leases")]
    return {key for key, n in collections.Counter(map(_write_key, chain)).items() if n > 1}


def is_lease(e: AuditEvent) -> bool:
    return e.resource == "leases"


def profiles_written_at(events: list[AuditEvent], exp: Expected) -> dt.datetime | None:
    """When (the server's time) the controller had written the profile label of ``exp.unprofiled``
    distinct Nodes and the profile mirror of ``exp.mirrors`` distinct ``Devices`` (successful writes
    among ``events``, in log order); None while it has not. The earliest time when nothing is needed."""
    nodes: set[str] = set()
    devices: set[str] = set()
    if exp.unprofiled == 0 and exp.mirrors == 0:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    for e in events:
        if e.code is None or e.code >= 400:
            continue
        if e.resource_path == "nodes":
            nodes.add(e.name)
        elif e.resource_path == "devices":
            devices.add(e.name)
        else:
            continue
        if len(nodes) >= exp.unprofiled and len(devices) >= exp.mirrors:
            return e.received
    return None


# --- raw apply rate ----------------------------------------------------------------------------------


async def raw_apply_rate(client: Client, bodies: list[tuple[Any, dict[str, Any]]], concurrency: int) -> float:
    """Server-side applies per second of ``bodies`` at ``concurrency`` requests in flight."""
    gate = asyncio.Semaphore(concurrency)

    async def one(resource: Any, body: dict[str, Any]) -> None:
        async with gate:
            await client.apply(resource, body, field_manager="chain-bench-raw", force=True)

    start = time.perf_counter()
    await asyncio.gather(*(one(r, b) for r, b in bodies))
    return len(bodies) / (time.perf_counter() - start)


def _node_label(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"bench.gpustack.ai/raw": value}},
    }


def _devices_label(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": kinds.DEVICES.kind,
        "metadata": {"name": name, "labels": {"bench.gpustack.ai/raw": value}},
    }


def _configmap(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"raw-{i:05d}", "namespace": TEAM_NAMESPACES[0]},
        "data": {"k": str(i)},
    }


def clientgo_label_rates(
    kubeconfig: Path, nodes: list[str], devices: list[str], out: Path
) -> tuple[float, float]:
    """client-go's server-side-apply rates (8 in flight) of one label on ``nodes`` and on ``devices``
    (bench/clientgo, built by ``clientgo_build``); (0, 0) when the writer cannot be built."""
    from clientgo_build import ensure_writer

    from gpustack_worker.devcluster.build import BuildError

    try:
        binary = ensure_writer()
    except BuildError as exc:
        print(f"client-go reference writer not built: {exc}")
        return 0.0, 0.0
    rates = []
    for what, names, extra in (
        ("nodes", nodes, ["-kind=nodelabel"]),
        (
            "devices",
            devices,
            [
                "-kind=label",
                f"-gvr={kinds.DEVICES.group}/{kinds.DEVICES.version}/{kinds.DEVICES.plural}",
                f"-objkind={kinds.DEVICES.kind}",
            ],
        ),
    ):
        names_file = out / f"clientgo-{what}.txt"
        names_file.write_text("\n".join(names) + "\n")
        proc = subprocess.run(
            [str(binary), f"-kubeconfig={kubeconfig}", f"-names={names_file}", "-label=bench.gpustack.ai/raw",
             "-value=cg", "-manager=chain-bench-clientgo", f"-concurrency={RAW_CONCURRENCY}", *extra],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"client-go writer failed on {what}: {proc.stdout}{proc.stderr}")
            rates.append(0.0)
            continue
        rates.append(float(json.loads(proc.stdout.strip().splitlines()[-1])["writes_per_s"]))
    return rates[0], rates[1]


# --- profiling ---------------------------------------------------------------------------------------


async def profile_in_process(
    kubeconfig: Path, admin: Client, exp: Expected, limit_s: float, out: Path
) -> None:
    """The same cold start with the chain in this process under cProfile (until converged or
    ``limit_s``); prints the top functions and leaves the stats in ``out`` (``python -m pstats``)."""
    import cProfile
    import pstats

    from gpustack_worker.chain.controller import Chain
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.manager import Manager
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import SettingsSource
    from gpustack_worker.runtime.telemetry import configure_logging
    from gpustack_worker.topology.controller import Topology

    configure_logging("WARNING")  # as in the process, and no console rendering inside the profile
    client = await Client.connect(str(kubeconfig), user_agent=f"{CONTROLLER_UA}{BENCH_IDENTITY}")
    settings = SettingsSource(client, model=WorkerSettings, env={}, post_events=False)
    manager = Manager(settings=settings)
    registry = manager.add_registry(InformerRegistry(client, options=settings.current.informer_options()))
    chain = Chain(client, settings, registry)
    topology = Topology(client, settings, registry)
    for controller in (*topology.controllers, *chain.controllers):
        manager.add_controller(controller)
    chain.start_keys()
    topology.start_keys()
    stop = asyncio.Event()
    profiler = cProfile.Profile()
    profiler.enable()
    started = time.monotonic()
    task = asyncio.create_task(manager.run(stop))
    try:
        await manager.synced.wait()
        synced = time.monotonic()
        print(f"profile: caches synced after {synced - started:.1f} s")
        left: dict[str, int] = {"?": 1}
        while left and time.monotonic() - synced < limit_s:
            await asyncio.sleep(2.0)
            left = await missing(admin, exp)
        print(
            f"profile: {'converged' if not left else f'not converged ({left})'} "
            f"{time.monotonic() - synced:.1f} s after sync; client writes {client.writes}"
        )
    finally:
        profiler.disable()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)
        await client.close()
    profiler.dump_stats(out)
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


# --- the run -----------------------------------------------------------------------------------------


@dataclass
class Row:
    what: str
    measured: str
    target: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The figures as numbers, for ``--json`` (bench/summary.py).
    figures: dict[str, float | int | str | None] = field(default_factory=dict)

    def add(self, what: str, measured: str, target: str = "") -> None:
        self.rows.append(Row(what, measured, target))

    def print(self) -> None:
        w1 = max(len(r.what) for r in self.rows)
        w2 = max(len(r.measured) for r in self.rows)
        w3 = max(len(r.target) for r in self.rows)
        print()
        print(f"| {'measure'.ljust(w1)} | {'measured'.ljust(w2)} | {'target'.ljust(w3)} |")
        print(f"|{'-' * (w1 + 2)}|{'-' * (w2 + 2)}|{'-' * (w3 + 2)}|")
        for r in self.rows:
            print(f"| {r.what.ljust(w1)} | {r.measured.ljust(w2)} | {r.target.ljust(w3)} |")
        for note in self.notes:
            print(f"- {note}")


def _span(events: list[AuditEvent]) -> float:
    if len(events) < 2:
        return 0.0
    return (events[-1].received - events[0].received).total_seconds()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def set_setting(admin: Client, value: str) -> None:
    from gpustack_worker.runtime.settings import DEFAULT_CONFIGMAP

    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": kinds.SYSTEM_NAMESPACE},
        "data": {RESYNC_SETTING: value},
    }
    await admin.apply(kinds.CONFIG_MAP, body, field_manager="chain-bench", force=True)


async def bench_cluster(
    n_nodes: int,
    seed: int,
    quiet_s: float,
    directory: Path,
    report: Report,
    *,
    profile: Path | None = None,
    profile_limit_s: float = 300.0,
    profiled: bool = False,
) -> None:
    from gpustack_worker.devcluster.audit import AuditLog
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

    settings = WorkerSettings()
    workers = settings.controller_workers
    fig = report.figures
    t = time.perf_counter()
    specs = fleet(n_nodes, seed)
    objs = [stage3(s) for s in specs]
    exp = expected_chain(objs, settings, profiled=profiled)
    accelerated = sum(o.devices is not None for o in objs)
    fleet_s = time.perf_counter() - t
    print(
        f"fleet: {n_nodes} nodes ({accelerated} accelerated, {n_nodes - accelerated} CPU-only), "
        f"{len(exp.flavors)} flavors, {len(exp.types)} InstanceTypes/queues expected "
        f"(computed in {fleet_s:.1f} s)"
    )
    fig["accelerated nodes"] = accelerated
    fig["bench: fleet and expected chain computed, s"] = fleet_s

    audit_path = directory / "audit.log"
    cluster = DevCluster(
        directory,
        with_nfd=False,
        audit_log=audit_path,
        # Kueue objects' write bodies: an object written twice shows what changed between the writes.
        audit_request_bodies=(kinds.CLUSTER_QUEUE.group,),
        log=lambda m: print(f"  [devcluster] {m}"),
    )
    cluster.start()
    audit = AuditLog(audit_path)
    admin = await Client.connect(str(cluster.kubeconfig))
    limit_s = converge_limit(n_nodes)
    idle_s = idle_limit(n_nodes)
    try:
        for ns in TEAM_NAMESPACES:
            await admin.create(
                kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
        await set_setting(admin, "true")
        t = time.perf_counter()
        await create_fleet(admin, objs, profiled=profiled)
        setup_s = time.perf_counter() - t
        print(f"setup: {n_nodes} Nodes + {accelerated} Devices (with ledgers) created in {setup_s:.1f} s")
        exp.namespaces = local_queue_namespaces((await admin.list(kinds.NAMESPACE))[0])
        kubeconfig = cluster.service_account_kubeconfig(rbac.CONTROLLER.name)
        if profile is not None:
            await profile_in_process(kubeconfig, admin, exp, profile_limit_s, profile)
            return

        # --- cold start ---------------------------------------------------------------------------
        started = _now()
        proc = start_controller(cluster, kubeconfig)
        assert proc.pid is not None
        pid = proc.pid
        log_path = proc.log_path
        synced_at = None
        deadline = time.monotonic() + limit_s
        while synced_at is None:
            if not proc.alive() or time.monotonic() > deadline:
                raise SystemExit(f"controller exited or did not sync in {limit_s:.0f} s:\n{proc.log_tail()}")
            await asyncio.sleep(0.1)
            synced_at = log_time(log_path, "caches synced")
        leader_at = None
        chain_at = None  # every chain object as expected (polled)
        written_at = None  # every Node profile and Devices mirror written (the audit log's own time)
        last_print = time.monotonic()
        left: dict[str, int] = {}
        while (chain_at is None or written_at is None) and (_now() - synced_at).total_seconds() < limit_s:
            if not proc.alive():
                raise SystemExit(f"controller exited:\n{proc.log_tail()}")
            if chain_at is None:
                left = await missing(admin, exp)
                if not left:
                    chain_at = _now()
            if chain_at is not None:
                # Only now: it scans the whole audit log, and the labels are usually done by then.
                written_at = profiles_written_at(audit.writes(CONTROLLER_UA, started), exp)
                left = {} if written_at is not None else {"Node profiles or Devices mirrors": 1}
            if time.monotonic() - last_print > 15:
                last_print = time.monotonic()
                print(f"  +{(_now() - synced_at).total_seconds():.0f} s after sync, not yet: {left}")
            if chain_at is None or written_at is None:
                # The audit log's own time is the figure, so its scan need not run often.
                await asyncio.sleep(0.5 if chain_at is None else 2.0)
        converged_at = max(chain_at, written_at) if chain_at and written_at else None
        leader_at = log_time(log_path, "became leader")
        idle_wait = await wait_idle(pid, limit=idle_s)
        mem = _proc_status(pid)
        cpu_used = _cpu_seconds(pid)
        address = log_field(log_path, "serving health and metrics", "address")
        reconciles = reconcile_stats(address) if address else {}
        settled = _now()
        cold = [e for e in audit.writes(CONTROLLER_UA, started) if e.received <= settled]
        chain_writes = [e for e in cold if not is_lease(e)]

        print(f"controller: caches synced {(synced_at - started).total_seconds():.1f} s after start")
        if leader_at is not None:
            print(f"controller: leader {(leader_at - synced_at).total_seconds():.2f} s after sync")
        if converged_at is None:
            print(f"controller: NOT converged after {limit_s:.0f} s; missing {left}")
        else:
            print(
                f"controller: converged {(converged_at - synced_at).total_seconds():.1f} s after sync; "
                f"idle {idle_wait:.0f} s later; CPU {cpu_used:.1f} s"
            )
        desired = exp.desired_writes()
        print("\nwrites by the controller (audit log), cold start until idle:")
        for (resource, verb), n in sorted(by_kind(cold).items()):
            print(f"  {resource:28s} {verb:7s} {n:6d}")
        print("reconciles per controller (count, seconds inside reconciles), cold start until idle:")
        for ctl, (runs, busy) in reconciles.items():
            print(f"  {ctl:28s} {runs:8.0f} {busy:8.1f} s")
        print("objects desired (one write each):")
        for what, n in desired.items():
            print(f"  {what:28s} {n:6d}")
        again = repeated_writes(cold)
        print(f"chain objects written more than once: {len(again)}")
        for line in again[:40]:
            print(f"  {line}")

        # --- idle soak: a quiet period, then three forced resyncs --------------------------------
        quiet_from = _now()
        quiet_cpu_from = _cpu_seconds(pid)
        print(f"\nquiet: {quiet_s:.0f} s of a converged chain (the idle soak) from {quiet_from:%H:%M:%S}")
        await asyncio.sleep(quiet_s)
        quiet_cpu = _cpu_seconds(pid) - quiet_cpu_from
        quiet_to = _now()
        mem_quiet = _proc_status(pid)
        quiet = [e for e in audit.writes(CONTROLLER_UA, quiet_from) if e.received <= quiet_to]
        resync_from = _now()
        resync_cpu = []
        for i in range(3):
            before = _cpu_seconds(pid)
            await set_setting(admin, "false" if i % 2 == 0 else "true")
            await asyncio.sleep(1.0)
            await wait_idle(pid, limit=idle_s)
            resync_cpu.append(_cpu_seconds(pid) - before)
        resynced = audit.writes(CONTROLLER_UA, resync_from)
        updates = log_path.read_text(errors="replace").count('"settings updated"')
        mem_after = _proc_status(pid)
        proc.stop()

        # --- a restart over the converged chain (a cold start with nothing to do) ----------------
        restarted = _now()
        log_path.rename(log_path.with_suffix(".first.log"))
        proc = start_controller(cluster, kubeconfig)
        assert proc.pid is not None
        resynced_at = None
        deadline = time.monotonic() + limit_s
        while resynced_at is None and proc.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            resynced_at = log_time(log_path, "caches synced")
        restart_idle = await wait_idle(proc.pid, limit=idle_s)
        restart_mem = _proc_status(proc.pid)
        restart_cpu = _cpu_seconds(proc.pid)
        restart_writes = [e for e in audit.writes(CONTROLLER_UA, restarted) if not is_lease(e)]
        proc.stop()
        for label, events in (("quiet", quiet), ("resyncs", resynced)):
            print(f"{label}: {dict(by_kind(events))}")

        # --- raw apply rate ----------------------------------------------------------------------
        raw_n = min(n_nodes, RAW_NODES)
        names = [o.node["metadata"]["name"] for o in objs[:raw_n]]
        node_rate = await raw_apply_rate(admin, [(kinds.NODE, _node_label(n, "1")) for n in names], workers)
        node_rate_8 = await raw_apply_rate(
            admin, [(kinds.NODE, _node_label(n, "8")) for n in names], RAW_CONCURRENCY
        )
        node_rate_32 = await raw_apply_rate(
            admin, [(kinds.NODE, _node_label(n, "2")) for n in names], SETUP_CONCURRENCY
        )
        cm_rate = await raw_apply_rate(
            admin, [(kinds.CONFIG_MAP, _configmap(i)) for i in range(raw_n)], workers
        )
        # The Devices mirrors are custom-resource applies, which cost the server about twice a Node
        # label's: their least time is taken at the raw rate of the same write.
        device_names = [o.node["metadata"]["name"] for o in objs if o.devices is not None][:raw_n]
        devices_rate_8 = await raw_apply_rate(
            admin, [(kinds.DEVICES, _devices_label(n, "8")) for n in device_names], RAW_CONCURRENCY
        )
        # The same two writes from client-go (bench/clientgo, 8 in flight, no client rate limit, HTTP/2
        # as client-go negotiates it): the reference a Go controller would be held to (issue 28).
        cg_node_rate_8, cg_devices_rate_8 = await asyncio.to_thread(
            clientgo_label_rates, cluster.kubeconfig, names, device_names, directory
        )

        # --- the table ---------------------------------------------------------------------------
        node_writes = [e for e in chain_writes if e.resource == "nodes"]
        other = [e for e in chain_writes if e.resource != "nodes"]
        our_node_rate = len(node_writes) / _span(node_writes) if _span(node_writes) else 0.0
        our_rate = len(chain_writes) / _span(chain_writes) if _span(chain_writes) else 0.0
        n_desired = sum(desired.values())
        per_node_kinds = sorted({e.resource_path for e in chain_writes if e.resource == "nodes"})
        sync_s = (synced_at - started).total_seconds()
        chain_s = (chain_at - synced_at).total_seconds() if chain_at is not None else None
        converge_s = (converged_at - synced_at).total_seconds() if converged_at is not None else None
        total_s = (converged_at - started).total_seconds() if converged_at is not None else None
        n_mirrors = desired["devices (profile mirror)"]
        least_s = (
            (n_desired - n_mirrors) / node_rate_8 + (n_mirrors / devices_rate_8 if n_mirrors else 0.0)
            if node_rate_8 and devices_rate_8
            else None
        )
        cold_ratio = least_s / total_s if least_s is not None and total_s else None
        cg_least_s = (
            (n_desired - n_mirrors) / cg_node_rate_8 + (n_mirrors / cg_devices_rate_8 if n_mirrors else 0.0)
            if cg_node_rate_8 and cg_devices_rate_8
            else None
        )
        cg_ratio = cg_least_s / total_s if cg_least_s is not None and total_s else None
        report.add("nodes / accelerated / CPU-only", f"{n_nodes} / {accelerated} / {n_nodes - accelerated}")
        report.add(
            "chain objects desired",
            f"{len(exp.flavors)} flavors, {len(exp.types)} InstanceTypes + queues, "
            f"{len(exp.local_queues)} LocalQueues, 1 Topology, 2 checks",
        )
        report.add("setup (Nodes + Devices, 32 in flight; not measured)", f"{setup_s:.1f} s")
        fig["setup (Nodes + Devices, 32 in flight), s"] = setup_s
        report.add("controller start → caches synced", f"{sync_s:.1f} s")
        fig["controller start → caches synced, s"] = sync_s
        report.add(
            "caches synced → chain objects converged",
            f"{chain_s:.1f} s" if chain_s is not None else f"not converged in {limit_s:.0f} s ({left})",
            f"≤ {TARGET_CONVERGE_S:.0f} s",
        )
        fig["caches synced → chain objects converged, s"] = chain_s
        report.add(
            "caches synced → converged (+ every Node profile and Devices mirror written)",
            f"{converge_s:.1f} s" if converge_s is not None else f"not converged in {limit_s:.0f} s ({left})",
        )
        fig["caches synced → converged, s"] = converge_s
        fig["controller start → converged, s"] = total_s
        report.add(
            "API writes issued / objects desired (cold start)",
            f"{len(chain_writes)} / {n_desired}",
            "writes = objects desired",
        )
        fig["writes issued (cold start, excl. Lease)"] = len(chain_writes)
        fig["writes desired"] = n_desired
        objects_again = len(_written_twice(chain_writes))
        report.add("  chain objects written more than once (bodies printed above)", str(objects_again), "0")
        fig["chain objects written more than once"] = objects_again
        report.add(
            "  of which per-Node writes (Node profile label)",
            f"{len(node_writes)} / {desired['nodes (profile label)']} ({', '.join(per_node_kinds) or '-'})",
        )
        fig["Node profile writes"] = len(node_writes)
        n_chain_desired = n_desired - desired["nodes (profile label)"]
        report.add(
            "  chain-object writes (Devices mirrors included) / desired", f"{len(other)} / {n_chain_desired}"
        )
        fig["chain-object writes (Devices mirrors included)"] = len(other)
        fig["chain-object writes desired"] = n_chain_desired
        for (resource, verb), n in sorted(by_kind(other).items()):
            report.add(f"    {resource} {verb}", str(n))
            fig[f"writes: {resource} {verb}"] = n
        leases = [e for e in cold if is_lease(e)]
        report.add("  Lease writes (leader election; not counted above)", str(len(leases)))
        report.add(
            "controller RSS after convergence (VmRSS / VmHWM)",
            f"{mem.get('VmRSS', 0) / 1024:.0f} / {mem.get('VmHWM', 0) / 1024:.0f} MiB",
            f"≤ {TARGET_RSS_MIB:.0f} MiB",
        )
        fig["controller VmRSS after convergence, MiB"] = mem.get("VmRSS", 0) / 1024
        fig["controller VmHWM after convergence, MiB"] = mem.get("VmHWM", 0) / 1024
        report.add(
            "controller RSS after the resyncs (VmRSS / VmHWM)",
            f"{mem_after.get('VmRSS', 0) / 1024:.0f} / {mem_after.get('VmHWM', 0) / 1024:.0f} MiB",
        )
        fig["controller VmHWM after the resyncs, MiB"] = mem_after.get("VmHWM", 0) / 1024
        report.add("controller CPU until idle after convergence", f"{cpu_used:.1f} s")
        fig["controller CPU until idle, s"] = cpu_used
        for ctl, (runs, busy) in reconciles.items():
            report.add(f"  reconciles {ctl} (time inside them)", f"{runs:.0f} ({busy:.0f} s)")
            fig[f"reconciles {ctl}"] = int(runs)
        quiet_writes = [e for e in quiet if not is_lease(e)]
        quiet_leases = [e for e in quiet if is_lease(e)]
        report.add(
            f"idle soak {quiet_s:.0f} s: writes in the audit log (excl. Lease)",
            f"{len(quiet_writes)} {dict(by_kind(quiet_writes)) or ''}".strip(),
            "0",
        )
        fig["idle soak: seconds"] = quiet_s
        fig["idle soak: writes (excl. Lease)"] = len(quiet_writes)
        report.add(f"idle soak {quiet_s:.0f} s: Lease writes (renewals)", str(len(quiet_leases)))
        fig["idle soak: Lease writes"] = len(quiet_leases)
        report.add(
            f"idle soak {quiet_s:.0f} s: controller CPU",
            f"{quiet_cpu:.2f} s ({quiet_cpu / quiet_s:.2%} of a core)" if quiet_s else f"{quiet_cpu:.2f} s",
        )
        fig["idle soak: controller CPU, s"] = quiet_cpu
        report.add(
            "idle soak: controller RSS at its end (VmRSS / VmHWM)",
            f"{mem_quiet.get('VmRSS', 0) / 1024:.0f} / {mem_quiet.get('VmHWM', 0) / 1024:.0f} MiB",
        )
        fig["idle soak: controller VmRSS at the end, MiB"] = mem_quiet.get("VmRSS", 0) / 1024
        resync_writes = sum(not is_lease(e) for e in resynced)
        report.add(
            f"writes over 3 forced resyncs (excl. Lease; {updates} settings snapshots seen)",
            str(resync_writes),
            "0",
        )
        fig["writes over 3 forced resyncs (excl. Lease)"] = resync_writes
        report.add("CPU per full resync", " / ".join(f"{c:.1f}" for c in resync_cpu) + " s")
        fig["CPU per full resync (mean), s"] = sum(resync_cpu) / len(resync_cpu)
        report.add(
            "restart over the converged chain: writes (excl. Lease)",
            f"{len(restart_writes)} {dict(by_kind(restart_writes)) or ''}".strip(),
            "0",
        )
        fig["restart: writes (excl. Lease)"] = len(restart_writes)
        report.add(
            "restart: start → synced, idle after, CPU, VmHWM",
            f"{(resynced_at - restarted).total_seconds():.1f} s, {restart_idle:.0f} s, {restart_cpu:.1f} s, "
            f"{restart_mem.get('VmHWM', 0) / 1024:.0f} MiB"
            if resynced_at is not None
            else "did not sync",
        )
        if resynced_at is not None:
            fig["restart: start → synced, s"] = (resynced_at - restarted).total_seconds()
        fig["restart: CPU until idle, s"] = restart_cpu
        fig["restart: VmHWM, MiB"] = restart_mem.get("VmHWM", 0) / 1024
        report.add(f"raw SSA rate, Node label, {workers} in flight (bare client)", f"{node_rate:.0f} /s")
        report.add(f"raw SSA rate, Node label, {RAW_CONCURRENCY} in flight", f"{node_rate_8:.0f} /s")
        report.add(f"raw SSA rate, Node label, {SETUP_CONCURRENCY} in flight", f"{node_rate_32:.0f} /s")
        report.add(f"raw SSA rate, small ConfigMap, {workers} in flight", f"{cm_rate:.0f} /s")
        report.add(f"raw SSA rate, Devices label, {RAW_CONCURRENCY} in flight", f"{devices_rate_8:.0f} /s")
        fig[f"raw SSA rate, Devices label, {RAW_CONCURRENCY} in flight, /s"] = devices_rate_8
        fig[f"raw SSA rate, Node label, {workers} in flight, /s"] = node_rate
        fig[f"raw SSA rate, Node label, {RAW_CONCURRENCY} in flight, /s"] = node_rate_8
        fig[f"raw SSA rate, Node label, {SETUP_CONCURRENCY} in flight, /s"] = node_rate_32
        fig[f"raw SSA rate, small ConfigMap, {workers} in flight, /s"] = cm_rate
        report.add(
            f"least time of the desired writes at the raw rate ({RAW_CONCURRENCY} in flight)",
            f"{least_s:.1f} s" if least_s is not None else "n/a",
        )
        fig["least time of the desired writes at the raw rate, s"] = least_s
        report.add(
            "cold ratio: that least time / controller start → converged",
            f"{cold_ratio:.2f}" if cold_ratio is not None else "n/a",
            f"≥ {TARGET_RATIO}",
        )
        fig["cold ratio (least time at the raw rate / start → converged)"] = cold_ratio
        report.add(
            f"client-go raw SSA rate, {RAW_CONCURRENCY} in flight: Node label / Devices label",
            f"{cg_node_rate_8:.0f} /s / {cg_devices_rate_8:.0f} /s",
        )
        fig[f"client-go raw SSA rate, Node label, {RAW_CONCURRENCY} in flight, /s"] = cg_node_rate_8
        fig[f"client-go raw SSA rate, Devices label, {RAW_CONCURRENCY} in flight, /s"] = cg_devices_rate_8
        report.add(
            "cold ratio against client-go: least time at client-go's raw rates / start → converged",
            f"{cg_ratio:.2f} ({cg_least_s:.1f} s)" if cg_ratio is not None and cg_least_s else "n/a",
            "≥ 0.7",
        )
        fig["cold ratio against client-go's raw rates"] = cg_ratio
        report.add(
            "our Node-label write rate (first→last profile write)",
            f"{our_node_rate:.0f} /s over {_span(node_writes):.1f} s",
        )
        fig["our Node-label write rate, /s"] = our_node_rate
        report.add(
            f"ratio to the raw Node-label rate ({RAW_CONCURRENCY} in flight, as node-profile-workers)",
            f"{our_node_rate / node_rate_8:.2f}" if node_rate_8 and node_writes else "n/a (no Node writes)",
        )
        fig["Node-label rate / raw (same concurrency)"] = (
            our_node_rate / node_rate_8 if node_rate_8 and node_writes else None
        )
        report.add(
            f"our overall write rate (first→last write) / raw Node-label rate ({RAW_CONCURRENCY} in flight)",
            f"{our_rate:.0f} /s over {_span(chain_writes):.1f} s = {our_rate / node_rate_8:.2f}"
            if node_rate_8
            else "n/a",
        )
        fig["our overall write rate, /s"] = our_rate
        bench_mem = _proc_status(os.getpid())
        report.add(
            "bench process itself (VmHWM; holds the fleet and the audit log)",
            f"{bench_mem.get('VmHWM', 0) / 1024:.0f} MiB",
        )
        fig["bench process VmHWM, MiB"] = bench_mem.get("VmHWM", 0) / 1024
        fig["load average at the end"] = os.getloadavg()[0]
        report.notes.append(
            f"controller-workers={workers} per controller, node-profile-workers="
            f"{settings.node_profile_workers} (each reconcile writes the Node and its Devices at once); "
            f"the raw rates use {workers}, {RAW_CONCURRENCY} (the cold ratio's reference) and "
            f"{SETUP_CONCURRENCY} requests in flight, on the first {raw_n} Nodes (and Devices)"
        )
        report.notes.append(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
        report.notes.append(
            f"chain-settle-seconds={settings.chain_settle_seconds:g} (the chain writes a flavor, queue or "
            "InstanceType status once the profiles it is computed from have arrived; docs/chain.md)"
        )
    finally:
        await admin.close()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="fleet RNG seed (default: %(default)s)")
    parser.add_argument("--quiet", type=float, default=60.0, help="quiet period, s (default: %(default)s)")
    parser.add_argument("--dir", default=None, help="keep the cluster state, logs and audit log here")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    parser.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="instead of the table: run the chain in-process under cProfile, stats to FILE",
    )
    parser.add_argument(
        "--profile-limit", type=float, default=300.0, help="profiling stops after this many s after sync"
    )
    parser.add_argument(
        "--profiled",
        action="store_true",
        help="Nodes created with their topology profile already (no per-Node write for the controller)",
    )
    args = parser.parse_args(argv)
    report = Report()
    profile = Path(args.profile).resolve() if args.profile else None
    with contextlib.ExitStack() as stack:
        if args.dir:
            directory = Path(args.dir)
            directory.mkdir(parents=True, exist_ok=True)
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chain-bench-")))
        asyncio.run(
            bench_cluster(
                args.nodes,
                args.seed,
                args.quiet,
                directory,
                report,
                profile=profile,
                profile_limit_s=args.profile_limit,
                profiled=args.profiled,
            )
        )
    if report.rows:
        report.print()
    if args.json is not None and report.figures:
        write_json(args.json, "chain", args.nodes, report.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
