"""Scenario node → the exact objects stages 1-2 would leave behind, as plain dicts.

Per node, in the layouts and keys the real components write (the table in docs/simulator.md, "What is
written, per node"):

* the **Node** — NFD's labels (hostname/os/arch, ``cpu-model.*``, PCI presence), the
  ``gpustack-cpu-info`` annotations, and a kubelet-like status: ``cpu``/``memory``/``pods``/
  ``ephemeral-storage`` plus the device plugin's pools, ``Ready=True``, no taints;
* the Device Manager's **NodeFeature** ``<node>-gpustack-device-manager`` with the accelerator labels;
* the **Devices** object: inventory in ``spec.groups`` (+ ``spec.interfaces`` for RDMA NICs) and the
  per-card ledger in ``status.groups``.

The device-plugin pools are computed from the same per-card facts the ledger uses
(:mod:`~gpustack_worker.simulate.cards`), over *healthy* cards only:

* ``<base>`` — one token per unpartitioned card; ``<base>.shared`` — 10 per unpartitioned card;
* ``<base>.sliced`` — Σ ``logicalSliced.count`` over unpartitioned cards of a slicing manufacturer;
* ``<base>.partitioned`` — the fungible partition token count, which we define as Σ over partitioned
  cards of ``physicalSliced.count`` (the most instances one card can hold, e.g. 7 on an A100 offering
  ``1g.10gb``): the device plugin advertises one token per instance slot it could ever serve.

A pool whose value is 0 is left out, like a plugin that never registered. The worker's own counting
keys (``.sliced.units`` …) are never rendered: they belong to the node agent.

Every function here is pure; :mod:`~gpustack_worker.simulate.apply` does the I/O.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import identity, keys, kinds
from gpustack_worker.api.normalize import fnv64a_hex, sanitize_label_value
from gpustack_worker.simulate import cards

if TYPE_CHECKING:
    from gpustack_worker.simulate import ledger
    from gpustack_worker.simulate.scenario import Accelerator, NodeSpec

__all__ = (
    "FIELD_MANAGER",
    "KUBELET_LABELS",
    "accelerator_id",
    "device_plugin_resources",
    "group_id",
    "node_annotations",
    "node_labels",
    "render_devices",
    "render_devices_status",
    "render_node",
    "render_node_feature",
    "render_node_metadata",
    "render_node_status",
    "render_plugin_status",
)

#: The labels a kubelet registers its Node with (hostname, os, arch): its own on a real node.
KUBELET_LABELS: Final = (keys.HOSTNAME, keys.OS, keys.ARCH)
#: Field manager of every simulator write.
FIELD_MANAGER: Final = "gpustack-simulator"
#: Kubelet's default ``maxPods`` is what the scenario defaults to; this is only the Ready message.
READY_MESSAGE: Final = "simulated by gpustack-simulator"

Obj = dict[str, Any]


@functools.lru_cache(maxsize=4096)
def _a_key(manufacturer: str, product: str) -> str:
    """``identity.accelerator_key``, remembered: a fleet has few models and every render asks often."""
    return identity.accelerator_key(manufacturer, product)


def group_id(acc: Accelerator) -> str:
    """``Devices`` group id: the aKey with its ``<mfr>-`` head removed."""
    mfr = cards.manufacturer_of(acc).name
    return _a_key(mfr, acc.product)[len(mfr) + 1 :]


def a_key(acc: Accelerator) -> str:
    """The accelerator model's aKey."""
    return _a_key(cards.manufacturer_of(acc).name, acc.product)


def accelerator_id(node: str, acc: Accelerator, position: int) -> str:
    """A deterministic, cluster-unique card id (``GPU-<fnv64 of node/manufacturer/product/position>``):
    the manufacturer is part of it because two manufacturers may sell products of the same name, and
    their cards on one node must not share an id (the ledger joins cards by id)."""
    mfr = cards.manufacturer_of(acc).name
    return f"GPU-{fnv64a_hex(f'{node}/{mfr}/{acc.product}/{position}')}"


# --- Node ----------------------------------------------------------------------------------------


def node_labels(node: NodeSpec) -> dict[str, str]:
    """Labels NFD (stage 1) and the scenario put on the Node; the DM's arrive via its NodeFeature."""
    labels = {keys.HOSTNAME: node.name, keys.OS: node.os, keys.ARCH: node.arch}
    labels[keys.NFD_CPU_VENDOR] = node.cpu.vendor
    if node.cpu.family is not None:
        labels[keys.NFD_CPU_FAMILY] = str(node.cpu.family)
    if node.cpu.id is not None:
        labels[keys.NFD_CPU_ID] = str(node.cpu.id)
    for acc in node.accelerators:
        labels[keys.pci_present(cards.manufacturer_of(acc).pci_vendor)] = "true"
    if not node.accelerators:
        labels[keys.ACCELERATABLE] = "false"  # the gpustack-cpu-info rule marks accelerator-less nodes
    labels.update(node.labels)
    return dict(sorted(labels.items()))


def node_annotations(node: NodeSpec) -> dict[str, str]:
    """``feature.gpustack.ai/cpu-name`` and the CPU detail annotations given in the scenario."""
    notes = {keys.CPU_NAME_ANNOTATION: node.cpu.model}
    for suffix, value in node.cpu.details.items():
        notes[f"{keys.FEATURE_PREFIX}cpu-{suffix}"] = value
    return dict(sorted(notes.items()))


def device_plugin_resources(node: NodeSpec) -> dict[str, int]:
    """The device plugins' pools per base resource name (zero pools left out)."""
    pools: dict[str, int] = {}
    for acc in node.accelerators:
        mfr = cards.manufacturer_of(acc)
        parted = cards.partitioned_positions(acc)
        unhealthy = set(acc.unhealthy)
        healthy = [pos for pos in range(acc.count) if pos not in unhealthy]
        whole = [pos for pos in healthy if pos not in parted]
        base = mfr.resource
        per_card_instances = (
            cards.card_geometry(acc.partitioning).max_instances if acc.partitioning is not None else 0
        )
        contributions = {
            base: len(whole),
            base + keys.SHARED_SUFFIX: keys.SHARES_PER_ACCELERATOR * len(whole),
            keys.sliced_resource(base): sum(cards.logical_slices(acc, pos) for pos in whole),
            keys.partitioned_resource(base): per_card_instances * sum(1 for p in healthy if p in parted),
        }
        for name, value in contributions.items():
            pools[name] = pools.get(name, 0) + value
    return {name: value for name, value in sorted(pools.items()) if value > 0}


def _resources(node: NodeSpec) -> dict[str, str]:
    base = {
        "cpu": str(node.cpu.cores),
        "memory": node.memory,
        "pods": str(node.pods),
        "ephemeral-storage": node.ephemeralStorage,
    }
    base.update({name: str(value) for name, value in device_plugin_resources(node).items()})
    return base


def render_node_status(node: NodeSpec, ready_since: str) -> Obj:
    """The Node's ``status`` (capacity = allocatable; Ready since ``ready_since``, RFC 3339)."""
    resources = _resources(node)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": READY_MESSAGE,
        "lastHeartbeatTime": ready_since,
        "lastTransitionTime": ready_since,
    }
    return {"capacity": resources, "allocatable": dict(resources), "conditions": [ready]}


def render_plugin_status(node: NodeSpec) -> Obj:
    """The part of a Node's ``status`` the device plugins make on a node a real kubelet reports for: their
    pools in ``capacity`` only, the documented way of advertising a node-level extended resource (the
    kubelet mirrors them into ``allocatable`` in its next status update); nothing the kubelet owns."""
    return {"capacity": {name: str(value) for name, value in device_plugin_resources(node).items()}}


def render_node_metadata(node: NodeSpec, *, kubelet: bool = False) -> Obj:
    """The Node as applied to the main resource (metadata only: a Node's ``spec`` stays empty). On a Node a
    kubelet reports for, the labels it registers with (:data:`KUBELET_LABELS`) stay its own."""
    labels = node_labels(node)
    for key in KUBELET_LABELS if kubelet else ():
        labels.pop(key, None)
    return {
        "apiVersion": kinds.NODE.api_version,
        "kind": kinds.NODE.kind,
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": node_annotations(node),
        },
    }


def render_node(node: NodeSpec, ready_since: str) -> Obj:
    """The full Node for the creating POST (status is accepted on create)."""
    body = render_node_metadata(node)
    body["spec"] = {}
    body["status"] = render_node_status(node, ready_since)
    return body


# --- the Device Manager's NodeFeature ------------------------------------------------------------


def _owner(node: str, node_uid: str) -> list[Obj]:
    return [{"apiVersion": kinds.NODE.api_version, "kind": kinds.NODE.kind, "name": node, "uid": node_uid}]


def render_node_feature(node: NodeSpec, node_uid: str) -> Obj | None:
    """``<node>-gpustack-device-manager`` with the Device Manager's accelerator labels (the manufacturer
    key and each model's ``<aKey>`` key with its descriptors and card count); None for accelerator-less
    nodes."""
    if not node.accelerators:
        return None
    labels: dict[str, str] = {keys.ACCELERATABLE: "true"}
    for acc in node.accelerators:
        mfr_key = keys.accelerator_key(cards.manufacturer_of(acc).name)
        model = keys.accelerator_key(a_key(acc))
        labels[mfr_key] = "true"
        if acc.driverVersion:
            labels[keys.descriptor_key(mfr_key, "driver-version")] = acc.driverVersion
        if acc.runtimeVersion:
            labels[keys.descriptor_key(mfr_key, "runtime-version")] = acc.runtimeVersion
        labels[model] = "true"
        labels[keys.descriptor_key(model, "product")] = acc.product
        labels[keys.descriptor_key(model, "memory")] = identity.memory_quantity(acc.memoryMiB)
        if acc.cores is not None:
            labels[keys.descriptor_key(model, "cores")] = str(acc.cores)
        labels[keys.count_key(model)] = str(acc.count)
        if acc.family:
            labels[keys.descriptor_key(model, "family")] = acc.family
        if acc.computeCapability:
            labels[keys.descriptor_key(model, "comcap")] = acc.computeCapability
    return {
        "apiVersion": kinds.NODE_FEATURE.api_version,
        "kind": kinds.NODE_FEATURE.kind,
        "metadata": {
            "name": keys.device_manager_nodefeature_name(node.name),
            "namespace": kinds.SYSTEM_NAMESPACE,
            "labels": {keys.NFD_NODE_NAME: node.name},
            "ownerReferences": _owner(node.name, node_uid),
        },
        "spec": {"labels": {k: sanitize_label_value(v) for k, v in sorted(labels.items())}},
    }


# --- Devices -------------------------------------------------------------------------------------


def _profiles(geometry: ledger.CardGeometry) -> list[Obj]:
    capacity = geometry.capacity()
    return [
        {
            "name": p.name,
            "memoryMib": p.memory_mib,
            "computeSlices": p.compute_slices,
            "memorySlices": p.memory_slices,
            "count": capacity[p.name],
            "placements": [{"start": s, "length": p.memory_slices} for s in p.placements],
        }
        for p in geometry.profiles
    ]


def _indexes(node: NodeSpec) -> list[list[int]]:
    """Logical card indexes: numbered per manufacturer across the node's entries, as its SMI does."""
    next_index: dict[str, int] = {}
    result: list[list[int]] = []
    for acc in node.accelerators:
        start = next_index.get(acc.manufacturer, 0)
        result.append(list(range(start, start + acc.count)))
        next_index[acc.manufacturer] = start + acc.count
    return result


def _group_spec(node: NodeSpec, acc: Accelerator, indexes: list[int]) -> Obj:
    mfr = cards.manufacturer_of(acc)
    parted = cards.partitioned_positions(acc)
    geometry = cards.card_geometry(acc.partitioning) if acc.partitioning is not None else None
    accelerators: list[Obj] = []
    for pos, index in enumerate(indexes):
        physical: Obj = {"count": 0}
        if geometry is not None and pos in parted:
            physical = {"profiles": _profiles(geometry), "count": geometry.max_instances}
        accelerators.append(
            {
                "id": accelerator_id(node.name, acc, pos),
                "index": index,
                "status": {
                    "unhealthy": pos in acc.unhealthy,
                    "logicalSliced": {
                        "coresPercentageOvercommit": mfr.overcommittable,
                        "count": cards.logical_slices(acc, pos),
                    },
                    "physicalSliced": physical,
                },
            }
        )
    physical_detail: Obj = {"count": 0}
    if geometry is not None and parted:
        per_card = geometry.capacity()
        physical_detail = {
            "profiles": [
                {"name": p.name, "count": per_card[p.name] * len(parted), "memoryMib": p.memory_mib}
                for p in geometry.profiles
            ],
            "count": geometry.max_instances * len(parted),
        }
    group: Obj = {
        "id": group_id(acc),
        "manufacturer": mfr.name,
        "name": acc.product,
        "memory": acc.memoryMiB,
    }
    optional = {
        "cores": acc.cores,
        "driverVersion": acc.driverVersion,
        "runtimeVersion": acc.runtimeVersion,
        "computeCapability": acc.computeCapability,
        "family": acc.family,
    }
    group.update({k: v for k, v in optional.items() if v is not None})
    group["accelerators"] = accelerators
    group["acceleratorSlicedDetail"] = {
        "logical": {
            "coresPercentageOvercommit": mfr.overcommittable,
            "count": sum(cards.logical_slices(acc, pos) for pos in range(acc.count)),
        },
        "physical": physical_detail,
    }
    return group


def _interfaces(node: NodeSpec) -> list[Obj]:
    return [nic.model_dump(exclude_none=True) for nic in node.rdma]


def render_devices(node: NodeSpec, node_uid: str) -> Obj | None:
    """``Devices/<node>`` without status (the main resource ignores it); None without accelerators."""
    if not node.accelerators:
        return None
    labels = {keys.OS: node.os, keys.ARCH: node.arch}
    labels.update({keys.accelerator_key(a_key(acc)): "true" for acc in node.accelerators})
    spec: Obj = {
        "groups": [
            _group_spec(node, acc, idx) for acc, idx in zip(node.accelerators, _indexes(node), strict=True)
        ]
    }
    if node.rdma:
        spec["interfaces"] = _interfaces(node)
    return {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": kinds.DEVICES.kind,
        "metadata": {
            "name": node.name,
            "labels": dict(sorted(labels.items())),
            "ownerReferences": _owner(node.name, node_uid),
        },
        "spec": spec,
    }


def _named_counts(counts: dict[str, int]) -> list[Obj]:
    return [{"name": name, "count": n} for name, n in counts.items()]


def _card_status(card_id: str, index: int, entry: ledger.CardLedger) -> Obj:
    out: Obj = {
        "id": card_id,
        "index": index,
        "mode": int(entry.mode),
        "allocated": entry.allocated,
        "remaining": entry.remaining,
        "allocatedSlices": entry.allocated_slices,
    }
    if entry.allocated_profiles:
        out["allocatedProfiles"] = _named_counts(entry.allocated_profiles)
    if entry.remaining_profiles:
        out["remainingProfiles"] = _named_counts(entry.remaining_profiles)
    return out


def render_devices_status(node: NodeSpec) -> Obj | None:
    """The ``/status`` body of ``Devices/<node>``: one ledger group per published accelerator entry."""
    if not node.accelerators:
        return None
    groups: list[Obj] = []
    for acc, indexes in zip(node.accelerators, _indexes(node), strict=True):
        if not acc.ledgerPublished:
            continue
        groups.append(
            {
                "id": group_id(acc),
                "manufacturer": cards.manufacturer_of(acc).name,
                "accelerators": [
                    _card_status(accelerator_id(node.name, acc, pos), index, cards.card_ledger(acc, pos))
                    for pos, index in enumerate(indexes)
                ],
            }
        )
    return {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": kinds.DEVICES.kind,
        "metadata": {"name": node.name},
        "status": {"groups": groups},
    }
