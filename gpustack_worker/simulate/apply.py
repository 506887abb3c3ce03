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
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.simulate import render

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource
    from gpustack_worker.simulate.scenario import NodeSpec, Scenario

__all__ = ("ApplyReport", "apply_node", "apply_scenario")

#: Taints an admission plugin or lifecycle controller adds to a Node no kubelet reports for.
_LIFECYCLE_TAINTS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


@dataclass(slots=True)
class ApplyReport:
    """What one run did, by object key (``Kind/name``)."""

    created: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_since(existing: dict[str, Any] | None) -> str:
    for cond in ((existing or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return str(cond["lastTransitionTime"])
    return _now()


async def _ensure_namespace(client: Client, report: ApplyReport) -> None:
    if await client.get(kinds.NAMESPACE, kinds.SYSTEM_NAMESPACE) is not None:
        return
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kinds.SYSTEM_NAMESPACE}}
    try:
        await client.create(kinds.NAMESPACE, body)
    except ApiError as exc:
        if exc.status != 409:  # created concurrently: fine
            raise
    report.created.append(f"Namespace/{kinds.SYSTEM_NAMESPACE}")


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
    if await client.get(resource, name, namespace) is None:
        return
    if await client.delete(resource, name, namespace):
        report.deleted.append(f"{resource.kind}/{name}")


async def apply_node(client: Client, spec: NodeSpec, report: ApplyReport) -> None:
    """Create or update one node's Node, DM NodeFeature and Devices."""
    existing = await client.get(kinds.NODE, spec.name)
    ready_since = _ready_since(existing)
    if existing is None:
        existing = await client.create(kinds.NODE, render.render_node(spec, ready_since))
        report.created.append(f"Node/{spec.name}")
        await _strip_lifecycle_taints(client, existing)
    else:
        await _strip_lifecycle_taints(client, existing)
    manager = render.FIELD_MANAGER
    await client.apply(kinds.NODE, render.render_node_metadata(spec), field_manager=manager, force=True)
    status = {
        "apiVersion": kinds.NODE.api_version,
        "kind": kinds.NODE.kind,
        "metadata": {"name": spec.name},
        "status": render.render_node_status(spec, ready_since),
    }
    await client.apply(kinds.NODE, status, field_manager=manager, force=True, subresource="status")
    report.applied.append(f"Node/{spec.name}")

    uid = str(existing["metadata"]["uid"])
    feature = render.render_node_feature(spec, uid)
    devices = render.render_devices(spec, uid)
    ledger = render.render_devices_status(spec)
    if feature is None or devices is None or ledger is None:
        nf_name = keys.device_manager_nodefeature_name(spec.name)
        await _delete_if_present(client, kinds.NODE_FEATURE, nf_name, kinds.SYSTEM_NAMESPACE, report)
        await _delete_if_present(client, kinds.DEVICES, spec.name, None, report)
        return
    await client.apply(kinds.NODE_FEATURE, feature, field_manager=manager, force=True)
    report.applied.append(f"NodeFeature/{feature['metadata']['name']}")
    await client.apply(kinds.DEVICES, devices, field_manager=manager, force=True)
    await client.apply(kinds.DEVICES, ledger, field_manager=manager, force=True, subresource="status")
    report.applied.append(f"Devices/{spec.name}")


async def apply_scenario(client: Client, scenario: Scenario) -> ApplyReport:
    """Apply every node of ``scenario`` in file order; nodes missing from the file are not touched."""
    report = ApplyReport()
    await _ensure_namespace(client, report)
    for spec in scenario.nodes:
        await apply_node(client, spec, report)
    return report
