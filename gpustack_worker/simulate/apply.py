"""The thin I/O step: write what :mod:`~gpustack_worker.simulate.render` produced.

Per node, in dependency order (the NodeFeature and Devices are owned by the Node, so its uid must
exist first):

1. **Node** — created with its status in one POST when missing (status is accepted on create); then,
   always, server-side apply of the metadata and of ``/status`` as ``gpustack-simulator``. Applying
   right after the create makes the simulator the owner of its fields from the first run, so a second
   run of the same file is a no-op on the server. SSA never touches fields other managers own: the
   node agent's counting keys in ``status.capacity`` and nfd-master's labels survive. If an admission
   plugin put ``node.kubernetes.io/not-ready`` on the new Node, it is removed (no kubelet ever will).
2. **NodeFeature** ``<node>-gpustack-device-manager`` — SSA; deleted when the node has no accelerators.
3. **Devices** ``<node>`` — SSA of the object, then SSA of ``/status`` with the ledger; deleted when
   the node has no accelerators.

The Ready condition keeps the transition time already on the Node, so re-applying does not move it.
Nodes that are no longer in the file are left alone: the simulator only ever adds or updates.

Everything written was validated first (:mod:`~gpustack_worker.simulate.admission`), but the cluster
can still refuse a write the simulator cannot foresee (an admission webhook or policy, a quota, RBAC).
Then :func:`apply_scenario` raises :class:`ApplyFailed`, naming the write that failed and carrying
the :class:`ApplyReport` of every write that succeeded before it; nothing is rolled back (a re-run
after the cause is fixed converges, since every step is an idempotent create-or-apply).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.client import TRANSPORT_ERRORS, ApiError
from gpustack_worker.simulate import render

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource
    from gpustack_worker.simulate.scenario import NodeSpec, Scenario

__all__ = ("ApplyFailed", "ApplyReport", "apply_node", "apply_scenario")

#: Taints an admission plugin or lifecycle controller adds to a Node no kubelet reports for.
_LIFECYCLE_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


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
    #: Every successful write in the order it happened (``"created Node/gpu-a"``).
    writes: list[str] = field(default_factory=list)
    step: str = ""
    done_nodes: list[str] = field(default_factory=list)

    def record(self, verb: str, key: str) -> None:
        """Note one successful write: ``verb`` is ``created``, ``applied`` or ``deleted``."""
        {"created": self.created, "applied": self.applied, "deleted": self.deleted}[verb].append(key)
        self.writes.append(f"{verb} {key}")


class ApplyFailed(Exception):
    """A write the cluster refused (or a connection lost) part-way; ``report`` says what was written."""

    def __init__(self, step: str, cause: Exception, report: ApplyReport) -> None:
        super().__init__(f"{step} failed: {cause}")
        self.step = step
        self.cause = cause
        self.report = report


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_since(existing: dict[str, Any] | None) -> str:
    for cond in ((existing or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return str(cond["lastTransitionTime"])
    return _now()


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


async def _strip_lifecycle_taints(client: Client, node: dict[str, Any]) -> None:
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
    client: Client, resource: Resource, name: str, namespace: str | None, report: ApplyReport
) -> None:
    """Delete a stale object, reading first so a steady state issues no write at all."""
    report.step = f"read of {resource.kind}/{name}"
    if await client.get(resource, name, namespace) is None:
        return
    report.step = f"delete of {resource.kind}/{name}"
    if await client.delete(resource, name, namespace):
        report.record("deleted", f"{resource.kind}/{name}")


async def apply_node(client: Client, spec: NodeSpec, report: ApplyReport) -> None:
    """Create or update one node's Node, DM NodeFeature and Devices."""
    node_key = f"Node/{spec.name}"
    report.step = f"read of {node_key}"
    existing = await client.get(kinds.NODE, spec.name)
    ready_since = _ready_since(existing)
    if existing is None:
        report.step = f"create of {node_key}"
        existing = await client.create(kinds.NODE, render.render_node(spec, ready_since))
        report.record("created", node_key)
    report.step = f"removal of lifecycle taints from {node_key}"
    await _strip_lifecycle_taints(client, existing)
    manager = render.FIELD_MANAGER
    report.step = f"server-side apply of {node_key}"
    await client.apply(kinds.NODE, render.render_node_metadata(spec), field_manager=manager, force=True)
    status = {
        "apiVersion": kinds.NODE.api_version,
        "kind": kinds.NODE.kind,
        "metadata": {"name": spec.name},
        "status": render.render_node_status(spec, ready_since),
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
        await _delete_if_present(client, kinds.NODE_FEATURE, nf_name, kinds.SYSTEM_NAMESPACE, report)
        await _delete_if_present(client, kinds.DEVICES, spec.name, None, report)
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


async def apply_scenario(client: Client, scenario: Scenario) -> ApplyReport:
    """Apply every node of ``scenario`` in file order; nodes missing from the file are not touched.

    Raises :class:`ApplyFailed` (with the report so far) when a request fails for good: the API
    server refuses it, or the client gives up retrying a transport error.
    """
    report = ApplyReport()
    try:
        await _ensure_namespace(client, report)
        for spec in scenario.nodes:
            await apply_node(client, spec, report)
    except (ApiError, *TRANSPORT_ERRORS) as exc:
        raise ApplyFailed(report.step, exc, report) from exc
    report.step = ""
    return report
