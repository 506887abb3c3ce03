"""Capacity flavors: one Kueue ResourceFlavor per (key, os, arch, count, topology profile) group of Nodes.

Pure part of the NodeFlavor controller. A flavor is the finest grain and independent of the grouping
settings (so regrouping the pools never rewrites a flavor): always the CPU key, plus the accelerator key
when accelerated. Its ``spec.nodeLabels`` pin the feature key, full
``kubernetes.io/os|arch`` and ``topology.gpustack.ai/profile``; eligibility is by labels, so it carries a
blanket ``{operator: Exists}`` toleration; ``spec.topologyName`` references the profile's Kueue Topology.

The per-node count is part of the selector (``<key>.count``), so two flavors of one queue never select
the same Node. ``instance-type-mixed-on-node=false`` keeps accelerated Nodes out of CPU flavors and adds
``feature.gpustack.ai/cpu-only=true`` to the CPU flavors' selector.

The CPU part of the selector is :func:`gpustack_worker.api.keys.cpu_key_label`: ``general.…/<gKey>=true``
for a named CPU, ``general.…/<gKey>.bare=true`` for a bare-manufacturer gKey (``amd``, ``generic``), whose
plain label every Node of that manufacturer carries — the agent publishes the same label, so the selector
selects exactly the contributors. Every key is built by :mod:`gpustack_worker.api.keys`, which shortens
an over-long name part the same way for the agent, the Device Manager and this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpustack_worker.chain.nodes import CpuIdentity, DeviceIdentity, NodeHardware

__all__ = (
    "FLAVOR_RESOURCE_TYPE",
    "Family",
    "FlavorIdentity",
    "FlavorPlan",
    "desired_flavors",
    "flavor_body",
    "flavor_topology_drift",
    "immutable_spec_changed",
    "name_collisions",
    "node_families",
    "plan_flavors",
)

#: ``resource.gpustack.ai/type`` of operator-owned flavors.
FLAVOR_RESOURCE_TYPE: Final = keys.TYPE_NODES

#: A flavor's identity without its topology profile: (gKey, aKey or "", os, arch, per-node count). A Node
#: whose profile has not arrived yet already says which families it will feed, not which flavors.
Family = tuple[str, str, str, str, int]


@dataclass(frozen=True, slots=True)
class FlavorPlan:
    """One group of Nodes sharing hardware identity and topology profile."""

    name: str
    os: str
    arch: str
    profile: str
    #: Per-node count: CPU cores, or cards of the accelerator model.
    count: int
    #: The first contributing Node's identity (every contributor shares the flavor's identity).
    cpu: CpuIdentity
    device: DeviceIdentity | None
    #: Contributing Node names, sorted.
    nodes: tuple[str, ...]

    @property
    def accelerated(self) -> bool:
        return self.device is not None

    @property
    def capacity(self) -> int:
        """Contributing nodes × per-node count."""
        return len(self.nodes) * self.count

    @property
    def own_key(self) -> str:
        """The flavor's feature key: ``acceleratable.…/<aKey>`` or ``general.…/<gKey>``."""
        if self.device is not None:
            return keys.accelerator_key(self.device.a_key)
        return keys.general_key(self.cpu.g_key)

    @property
    def manufacturer(self) -> str:
        """The device manufacturer, or the CPU manufacturer of a CPU flavor."""
        return self.device.manufacturer if self.device is not None else self.cpu.manufacturer

    @property
    def family(self) -> Family:
        a_key = self.device.a_key if self.device is not None else ""
        return (self.cpu.g_key, a_key, self.os, self.arch, self.count)


def node_families(node: NodeHardware, *, mixed_on_node: bool) -> frozenset[Family]:
    """The families of the flavors ``node`` contributes to (:func:`plan_flavors`' grouping, profile aside)."""
    found: set[Family] = set()
    if node.cpu_member(mixed_on_node=mixed_on_node):
        found.add((node.cpu.g_key, "", node.os, node.arch, node.cpu.cores))
    for device in node.devices:
        found.add((node.cpu.g_key, device.a_key, node.os, node.arch, device.cards))
    return frozenset(found)


#: A flavor's whole identity: its family plus the topology profile. Flavors are grouped by this, never by
#: the name built from it, so a name builder that ever gave two identities one name could not merge them.
FlavorIdentity = tuple[str, str, str, str, int, str]


def _flavor_name(identity: FlavorIdentity) -> str:
    g_key, a_key, os, arch, count, profile = identity
    if a_key:
        return keys.device_flavor_name(g_key, a_key, os, arch, count, profile)
    return keys.cpu_flavor_name(g_key, os, arch, count, profile)


def _grouped(
    nodes: Iterable[NodeHardware], *, mixed_on_node: bool
) -> dict[FlavorIdentity, list[tuple[NodeHardware, DeviceIdentity | None]]]:
    groups: dict[FlavorIdentity, list[tuple[NodeHardware, DeviceIdentity | None]]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        if node.cpu_member(mixed_on_node=mixed_on_node):
            cpu = (node.cpu.g_key, "", node.os, node.arch, node.cpu.cores, node.profile)
            groups.setdefault(cpu, []).append((node, None))
        for device in node.devices:
            dev = (node.cpu.g_key, device.a_key, node.os, node.arch, device.cards, node.profile)
            groups.setdefault(dev, []).append((node, device))
    return groups


def name_collisions(nodes: Iterable[NodeHardware], *, mixed_on_node: bool) -> dict[str, list[FlavorIdentity]]:
    """Flavor names the builders give to more than one identity, with those identities (sorted).

    Empty by construction (``keys.name_part`` keeps ``_``/``-``/``.``/case twins apart, the tag keeps
    shortened names apart): a non-empty result is a builder defect or a hash-tag collision, and
    :func:`plan_flavors` refuses every identity named here."""
    by_name: dict[str, list[FlavorIdentity]] = {}
    for identity in _grouped(nodes, mixed_on_node=mixed_on_node):
        by_name.setdefault(_flavor_name(identity), []).append(identity)
    return {name: sorted(ids) for name, ids in sorted(by_name.items()) if len(ids) > 1}


def plan_flavors(nodes: Iterable[NodeHardware], *, mixed_on_node: bool) -> list[FlavorPlan]:
    """Group managed, profiled Nodes into flavors (sorted by name), one flavor per identity.

    Nodes are grouped by identity (:data:`FlavorIdentity`) and each group is then named. A name two
    identities would share carries neither: writing it for one would declare the other's nodes under a
    selector that does not select them (the queue's ``NonConservedQuota``), and choosing one by order
    would make a name depend on which nodes exist. :func:`name_collisions` says which were refused;
    their pools' queues report the nodes no flavor selects."""
    groups = _grouped(nodes, mixed_on_node=mixed_on_node)
    named = {identity: _flavor_name(identity) for identity in groups}
    taken: dict[str, int] = {}
    for name in named.values():
        taken[name] = taken.get(name, 0) + 1
    plans = []
    for identity, members in groups.items():
        name = named[identity]
        if taken[name] > 1:
            continue
        first, first_device = members[0]
        plans.append(
            FlavorPlan(
                name=name,
                os=first.os,
                arch=first.arch,
                profile=first.profile,
                count=identity[4],
                cpu=first.cpu,
                device=first_device,
                nodes=tuple(n.name for n, _ in members),
            )
        )
    return sorted(plans, key=lambda p: p.name)


def node_labels(plan: FlavorPlan, *, mixed_on_node: bool) -> dict[str, str]:
    """``spec.nodeLabels``: the selector that pins a workload to exactly this group's Nodes."""
    labels = {
        keys.MANAGED: "true",
        keys.OS: plan.os,
        keys.ARCH: plan.arch,
        # exactly the Nodes of this CPU key: a bare-manufacturer key pins its own ``.bare`` label
        keys.cpu_key_label(plan.cpu.g_key, plan.cpu.manufacturer): "true",
        keys.count_key(plan.own_key): str(plan.count),
        keys.TOPOLOGY_PROFILE: plan.profile,
    }
    if plan.device is not None:
        labels[plan.own_key] = "true"
    elif not mixed_on_node:
        labels[keys.CPU_ONLY] = "true"
    return labels


def _notes(plan: FlavorPlan, *, aware: bool) -> dict[str, str]:
    device = plan.device
    notes = {
        "acceleratable": "true" if device is not None else "false",
        "generalGroup": plan.cpu.g_key,
        "acceleratorGroup": device.a_key if device is not None else "",
        "manufacturer": plan.manufacturer,
        "product": device.product if device is not None else plan.cpu.product,
        "family": device.family if device is not None else plan.cpu.family,
        "memory": device.memory if device is not None else "",
        "cores": device.cores if device is not None else str(plan.count),
        "topologyProfile": plan.profile,
    }
    if device is None or aware:
        notes["cpuDetail"] = plan.cpu.detail_json(with_identity=device is not None)
    # Empty notes are left out rather than written as "" (GPUStack does not document whether it writes
    # them on CPU flavors; docs/chain.md, "Choices where GPUStack leaves the behaviour open").
    return {f"{keys.NOTE_PREFIX}{k}": v for k, v in notes.items() if v}


def flavor_body(plan: FlavorPlan, *, mixed_on_node: bool, aware: bool) -> dict[str, Any]:
    """The ResourceFlavor this controller applies for ``plan``."""
    labels = {
        keys.RESOURCE_TYPE: FLAVOR_RESOURCE_TYPE,
        keys.OS: plan.os,
        keys.ARCH: plan.arch,
        keys.ACCELERATABLE: "true" if plan.accelerated else "false",
        keys.general_key(plan.cpu.g_key): "true",
        keys.count_key(plan.own_key): str(plan.count),
        keys.capacity_key(plan.own_key): str(plan.capacity),
        keys.TOPOLOGY_PROFILE: plan.profile,
    }
    if plan.device is not None:
        labels[plan.own_key] = "true"
    return {
        "apiVersion": kinds.RESOURCE_FLAVOR.api_version,
        "kind": kinds.RESOURCE_FLAVOR.kind,
        "metadata": {"name": plan.name, "labels": labels, "annotations": _notes(plan, aware=aware)},
        "spec": {
            "nodeLabels": node_labels(plan, mixed_on_node=mixed_on_node),
            "tolerations": [{"operator": "Exists"}],
            "topologyName": keys.topology_name(plan.profile),
        },
    }


def desired_flavors(
    nodes: Iterable[NodeHardware], *, mixed_on_node: bool, aware: bool
) -> dict[str, dict[str, Any]]:
    """Every ResourceFlavor the cluster's managed Nodes call for, by name."""
    return {
        plan.name: flavor_body(plan, mixed_on_node=mixed_on_node, aware=aware)
        for plan in plan_flavors(nodes, mixed_on_node=mixed_on_node)
    }


def flavor_nodes(flavor: Mapping[str, Any], nodes: Iterable[NodeHardware]) -> list[str]:
    """Names of the Nodes a live flavor's ``spec.nodeLabels`` select."""
    selector: Mapping[str, str] = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return sorted(n.name for n in nodes if all(n.labels.get(k) == v for k, v in selector.items()))


def flavor_topology_drift(desired: Mapping[str, Any], cached: Mapping[str, Any]) -> dict[str, Any]:
    """The generated topology fields of a cached flavor that differ from the desired ones: its
    ``spec.topologyName`` and the profile pinned in ``spec.nodeLabels`` (Kueue makes both immutable; a
    difference is drift to report, never to patch). Empty when there is none."""
    want, have = desired.get("spec") or {}, cached.get("spec") or {}
    drift: dict[str, Any] = {}
    if want.get("topologyName") != have.get("topologyName"):
        drift["topologyName"] = {"desired": want.get("topologyName"), "found": have.get("topologyName")}
    want_profile = (want.get("nodeLabels") or {}).get(keys.TOPOLOGY_PROFILE)
    have_profile = (have.get("nodeLabels") or {}).get(keys.TOPOLOGY_PROFILE)
    if want_profile != have_profile:
        drift[keys.TOPOLOGY_PROFILE] = {"desired": want_profile, "found": have_profile}
    return drift


def immutable_spec_changed(desired: Mapping[str, Any], cached: Mapping[str, Any]) -> bool:
    """Kueue forbids changing a TAS flavor's ``nodeLabels``, ``tolerations`` and ``topologyName``."""
    want, have = desired.get("spec") or {}, cached.get("spec") or {}
    return any(
        _plain(want.get(k)) != _plain(have.get(k)) for k in ("nodeLabels", "tolerations", "topologyName")
    )


def _plain(value: Any) -> Any:
    """Frozen cache values (mappings, tuples) as plain JSON values, for comparison."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
