"""The thin I/O step: write what :mod:`~gpustack_worker.simulate.render` produced.

First one read of what exists: a paged LIST of the Nodes (and, only when the scenario has nodes
without accelerators, of the Device Manager NodeFeatures and the ``Devices``, by name), so no write is
preceded by a GET of its own. Then :data:`~.settings.SimulateSettings.simulate_apply_concurrency`
nodes are written at once (default 8), each node's writes in dependency order (the NodeFeature and
Devices are owned by the Node, so its uid must exist first):

1. **Node** — created with its status in one POST when missing (status is accepted on create); then,
   always, server-side apply of the metadata and of ``/status`` as ``gpustack-simulator``. Applying
   right after the create makes the simulator the owner of its fields from the first run, so a second
   run of the same file is a no-op on the server. SSA never touches fields other managers own: the
   node agent's counting keys in ``status.capacity`` and nfd-master's labels survive. If an admission
   plugin put ``node.kubernetes.io/not-ready`` on the new Node, it is removed (no kubelet ever will).
2. **NodeFeature** ``<node>-gpustack-device-manager`` — SSA; deleted when the node has no accelerators
   (and the LIST showed one).
3. **Devices** ``<node>`` — SSA of the object, then SSA of ``/status`` with the ledger; deleted when
   the node has no accelerators (and the LIST showed one).

The Ready condition keeps the transition time already on the Node, so re-applying does not move it.

A Node a kubelet reports for (``kubelet`` among its field managers: a dev cluster's real node standing in
for the scenario's node of that name, gpustack_worker/devcluster/real_nodes.py) keeps what the kubelet
owns: the labels it registers with, its conditions, addresses, CPU, memory, pods and taints. The simulator
writes what the other stage-1 and stage-2 components would on a real machine: the labels and annotations
NFD publishes, the device plugins' pools in ``status.capacity`` (the kubelet mirrors them into
``allocatable``, and leaves an extended resource no plugin of its own claims as it finds it), the Device
Manager's NodeFeature and the ``Devices`` ledger.
Nodes that are no longer in the file are left alone: the simulator only ever adds or updates.

Everything written was validated first (:mod:`~gpustack_worker.simulate.admission`), but the cluster
can still refuse a write the simulator cannot foresee (an admission webhook or policy, a quota, RBAC).
Then no further node is started, the nodes already being written finish (so the report is exactly
what the cluster holds), and :func:`apply_scenario` raises :class:`ApplyFailed`, naming the write that
failed and carrying the :class:`ApplyReport` of every write that succeeded, node by node in file order;
nothing is rolled back (a re-run after the cause is fixed converges, since every step is an idempotent
create-or-apply).
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.client import TRANSPORT_ERRORS, ApiError
from gpustack_worker.simulate import render
from gpustack_worker.simulate.settings import SimulateSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource
    from gpustack_worker.simulate.scenario import NodeSpec, Scenario

__all__ = (
    "KUBELET_MANAGER",
    "ApplyFailed",
    "ApplyReport",
    "Observed",
    "apply_node",
    "apply_scenario",
    "observe",
    "reported_by_kubelet",
)

_T = TypeVar("_T")

#: Taints an admission plugin or lifecycle controller adds to a Node no kubelet reports for.
_LIFECYCLE_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
#: The field manager a kubelet writes its Node as (its user agent's first word).
KUBELET_MANAGER: Final = "kubelet"
#: The default of ``simulate-apply-concurrency`` (the reason is on the setting).
DEFAULT_CONCURRENCY: Final = SimulateSettings().simulate_apply_concurrency


@dataclass(slots=True)
class ApplyReport:
    """What one run did, by object key (``Kind/name``).

    ``applied`` lists server-side applies that succeeded; one that changed nothing is listed too.
    ``step`` is the write in progress (``"server-side apply of NodeFeature/…"``) and ``done_nodes``
    the nodes whose every write succeeded, so a failure can say exactly where it stopped.
    """

    created: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: Every successful write, node by node in file order, each node's in the order they happened
    #: (``"created Node/gpu-a"``).
    writes: list[str] = field(default_factory=list)
    step: str = ""
    done_nodes: list[str] = field(default_factory=list)

    def record(self, verb: str, key: str) -> None:
        """Note one successful write: ``verb`` is ``created``, ``applied`` or ``deleted``."""
        {"created": self.created, "applied": self.applied, "deleted": self.deleted}[verb].append(key)
        self.writes.append(f"{verb} {key}")

    def extend(self, other: ApplyReport) -> None:
        """Append ``other``'s writes and finished nodes (one node's report into the run's)."""
        self.created += other.created
        self.applied += other.applied
        self.deleted += other.deleted
        self.writes += other.writes
        self.done_nodes += other.done_nodes


class ApplyFailed(Exception):
    """A write the cluster refused (or a connection lost) part-way; ``report`` says what was written."""

    def __init__(self, step: str, cause: Exception, report: ApplyReport) -> None:
        super().__init__(f"{step} failed: {cause}")
        self.step = step
        self.cause = cause
        self.report = report


@dataclass(frozen=True, slots=True)
class Observed:
    """What exists before the run, read once by :func:`observe` (so no write needs a GET first).

    ``nodes`` holds, per scenario node that exists, the parts of the Node the writes depend on (uid,
    taints, the Ready condition). ``features`` and ``devices`` are the names of the Device Manager
    NodeFeatures and ``Devices`` present, or None when they were not listed (no scenario node lacks
    accelerators, so nothing may need deleting).
    """

    nodes: Mapping[str, dict[str, Any]]
    features: frozenset[str] | None = None
    devices: frozenset[str] | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_since(existing: Mapping[str, Any] | None) -> str:
    for cond in ((existing or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return str(cond["lastTransitionTime"])
    return _now()


def _slim_nodes(wanted: frozenset[str]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """A LIST page converter keeping, of the scenario's Nodes only, what :func:`apply_node` reads."""

    def convert(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in items:
            meta = item.get("metadata") or {}
            if meta.get("name") not in wanted:
                continue
            conditions = (item.get("status") or {}).get("conditions") or []
            fields = meta.get("managedFields") or ()
            managers = sorted({str(e["manager"]) for e in fields if e.get("manager")})
            out.append(
                {
                    "metadata": {
                        "name": meta["name"],
                        "uid": meta.get("uid"),
                        "managedFields": [{"manager": m} for m in managers],
                    },
                    "spec": {"taints": (item.get("spec") or {}).get("taints") or []},
                    "status": {"conditions": [c for c in conditions if c.get("type") == "Ready"]},
                }
            )
        return out

    return convert


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [str((item.get("metadata") or {}).get("name")) for item in items]


async def _list(
    client: Client,
    resource: Resource,
    convert: Callable[[list[dict[str, Any]]], list[_T]],
    namespace: str | None = None,
) -> list[_T]:
    out: list[_T] = []
    async for page, _rv in client.list_pages(resource, convert=convert, namespace=namespace):
        out.extend(page)
    return out


async def observe(client: Client, scenario: Scenario, report: ApplyReport | None = None) -> Observed:
    """Read what the writes of ``scenario`` depend on: one paged LIST per kind, never a GET per object."""
    report = report if report is not None else ApplyReport()
    report.step = "list of Nodes"
    wanted = frozenset(spec.name for spec in scenario.nodes)
    nodes = await _list(client, kinds.NODE, _slim_nodes(wanted))
    if all(spec.accelerators for spec in scenario.nodes):
        return Observed({n["metadata"]["name"]: n for n in nodes})
    report.step = f"list of NodeFeatures in {kinds.SYSTEM_NAMESPACE}"
    features = await _list(client, kinds.NODE_FEATURE, _names, kinds.SYSTEM_NAMESPACE)
    report.step = "list of Devices"
    devices = await _list(client, kinds.DEVICES, _names)
    return Observed({n["metadata"]["name"]: n for n in nodes}, frozenset(features), frozenset(devices))


async def _ensure_namespace(client: Client, report: ApplyReport) -> None:
    report.step = f"read of Namespace/{kinds.SYSTEM_NAMESPACE}"
    if await client.get(kinds.NAMESPACE, kinds.SYSTEM_NAMESPACE) is not None:
        return
    report.step = f"create of Namespace/{kinds.SYSTEM_NAMESPACE}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kinds.SYSTEM_NAMESPACE}}
    try:
        await client.create(kinds.NAMESPACE, body)
    except ApiError as exc:
        if exc.status != 409:  # created concurrently: fine
            raise
        return
    report.record("created", f"Namespace/{kinds.SYSTEM_NAMESPACE}")


async def _strip_lifecycle_taints(client: Client, node: Mapping[str, Any]) -> None:
    taints = (node.get("spec") or {}).get("taints") or []
    doomed = [i for i, t in enumerate(taints) if t.get("key") in _LIFECYCLE_TAINTS]
    if not doomed:
        return
    ops: list[dict[str, Any]] = []
    for i in reversed(doomed):
        ops += [{"op": "test", "path": f"/spec/taints/{i}", "value": taints[i]}]
        ops += [{"op": "remove", "path": f"/spec/taints/{i}"}]
    await client.patch(kinds.NODE, node["metadata"]["name"], ops, patch_type="json")


async def _delete_if_present(
    client: Client,
    resource: Resource,
    name: str,
    namespace: str | None,
    present: frozenset[str] | None,
    report: ApplyReport,
) -> None:
    """Delete a stale object the LIST showed (a steady state issues no request at all)."""
    if present is not None and name not in present:
        return
    report.step = f"delete of {resource.kind}/{name}"
    if await client.delete(resource, name, namespace):
        report.record("deleted", f"{resource.kind}/{name}")


def reported_by_kubelet(node: Mapping[str, Any] | None) -> bool:
    """Whether a kubelet writes this Node (it is a real machine's, not only the simulator's)."""
    fields = ((node or {}).get("metadata") or {}).get("managedFields") or ()
    return any(entry.get("manager") == KUBELET_MANAGER for entry in fields)


async def apply_node(client: Client, spec: NodeSpec, report: ApplyReport, observed: Observed) -> None:
    """Create or update one node's Node, DM NodeFeature and Devices, given what :func:`observe` read."""
    node_key = f"Node/{spec.name}"
    existing = observed.nodes.get(spec.name)
    ready_since = _ready_since(existing)
    kubelet = reported_by_kubelet(existing)
    if existing is None:
        report.step = f"create of {node_key}"
        existing = await client.create(kinds.NODE, render.render_node(spec, ready_since))
        report.record("created", node_key)
    if not kubelet:  # a real node's taints are its kubelet's and its lifecycle's
        report.step = f"removal of lifecycle taints from {node_key}"
        await _strip_lifecycle_taints(client, existing)
    manager = render.FIELD_MANAGER
    report.step = f"server-side apply of {node_key}"
    metadata = render.render_node_metadata(spec, kubelet=kubelet)
    await client.apply(kinds.NODE, metadata, field_manager=manager, force=True)
    status = {
        "apiVersion": kinds.NODE.api_version,
        "kind": kinds.NODE.kind,
        "metadata": {"name": spec.name},
        "status": (
            render.render_plugin_status(spec) if kubelet else render.render_node_status(spec, ready_since)
        ),
    }
    report.step = f"server-side apply of {node_key}/status"
    await client.apply(kinds.NODE, status, field_manager=manager, force=True, subresource="status")
    report.record("applied", node_key)

    uid = str(existing["metadata"]["uid"])
    feature = render.render_node_feature(spec, uid)
    devices = render.render_devices(spec, uid)
    ledger = render.render_devices_status(spec)
    if feature is None or devices is None or ledger is None:
        nf_name = keys.device_manager_nodefeature_name(spec.name)
        ns = kinds.SYSTEM_NAMESPACE
        await _delete_if_present(client, kinds.NODE_FEATURE, nf_name, ns, observed.features, report)
        await _delete_if_present(client, kinds.DEVICES, spec.name, None, observed.devices, report)
        report.done_nodes.append(spec.name)
        return
    feature_key = f"NodeFeature/{feature['metadata']['name']}"
    report.step = f"server-side apply of {feature_key}"
    await client.apply(kinds.NODE_FEATURE, feature, field_manager=manager, force=True)
    report.record("applied", feature_key)
    devices_key = f"Devices/{spec.name}"
    report.step = f"server-side apply of {devices_key}"
    await client.apply(kinds.DEVICES, devices, field_manager=manager, force=True)
    report.record("applied", devices_key)
    report.step = f"server-side apply of {devices_key}/status"
    await client.apply(kinds.DEVICES, ledger, field_manager=manager, force=True, subresource="status")
    report.record("applied", f"{devices_key}/status")
    report.done_nodes.append(spec.name)


async def apply_scenario(
    client: Client, scenario: Scenario, *, concurrency: int | None = None
) -> ApplyReport:
    """Apply every node of ``scenario``, ``concurrency`` nodes at once (default: the setting
    ``simulate-apply-concurrency``); nodes missing from the file are not touched.

    Raises :class:`ApplyFailed` (with the report so far) when a request fails for good: the API
    server refuses it, or the client gives up retrying a transport error. No node is started after
    the first failure; the nodes in progress finish, so the report is what the cluster holds.
    """
    report = ApplyReport()
    try:
        await _ensure_namespace(client, report)
        observed = await observe(client, scenario, report)
    except (ApiError, *TRANSPORT_ERRORS) as exc:
        raise ApplyFailed(report.step, exc, report) from exc
    per_node = [ApplyReport() for _ in scenario.nodes]
    failures: list[tuple[str, Exception]] = []
    todo: Iterator[tuple[int, NodeSpec]] = iter(enumerate(scenario.nodes))

    async def worker() -> None:
        for i, spec in todo:  # one iterator shared by the workers: each node is taken once
            if failures:
                return
            try:
                await apply_node(client, spec, per_node[i], observed)
            except (ApiError, *TRANSPORT_ERRORS) as exc:
                failures.append((per_node[i].step, exc))
                return

    width = max(1, min(concurrency or DEFAULT_CONCURRENCY, len(scenario.nodes)))
    async with asyncio.TaskGroup() as group:
        for _ in range(width):
            group.create_task(worker())
    for one in per_node:
        report.extend(one)
    if failures:
        step, cause = failures[0]
        report.step = step
        raise ApplyFailed(step, cause, report) from cause
    report.step = ""
    return report
