"""What the Kueue chain reads from a Node: its hardware identity, as the stage-3 labels publish it.

Stage 4 never looks at device data directly: a Node's flavor membership is a pure function of the labels
the node agent, the Device Manager and NFD put on it, so the chain and the
scheduler always agree on what a Node is. Whether a Node is managed and whether it is accelerated are
the shared predicates of :mod:`gpustack_worker.api.node_class`, the ones the node agent decides its
``managed`` stamp, counting keys, fit labels and ``cpu-only`` label with.

Only what a flavor's ``spec.nodeLabels`` can select is read: a managed Node (exactly
``gpustack.ai/managed=true``) with a topology profile, ``kubernetes.io/os|arch`` and its
``general.feature.gpustack.ai/<gKey>=true`` label takes part, anything else reads as ``None``; a CPU
count or card count counts only in the canonical form the selector pins (``4``, not ``04``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import identity, keys, node_class

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("CpuIdentity", "DeviceIdentity", "NodeHardware", "node_hardware", "unprofiled_hardware")

#: ``cpuDetail`` JSON field → the suffix of the CPU detail annotation it is read from
#: (``feature.gpustack.ai/cpu-<suffix>``, which NFD's ``gpustack-cpu-info`` rule puts on the Node).
_CPU_DETAIL_FIELDS: Final = (
    ("physicalCores", "physical-cores"),
    ("threadsPerPhysicalCore", "threads-per-core"),
    ("logicalCores", "logical-cores"),
    ("stepping", "stepping"),
    ("clockSpeed", "hz"),
    ("maxClockSpeed", "boost-freq"),
    ("cacheLine", "cache-line"),
)
_CPU_CACHE_FIELDS: Final = (
    ("l1i", "cache-l1i"),
    ("l1d", "cache-l1d"),
    ("l2", "cache-l2"),
    ("l3", "cache-l3"),
)


@dataclass(frozen=True, slots=True)
class CpuIdentity:
    """The CPU side of a Node."""

    g_key: str
    manufacturer: str
    #: ``general.feature.gpustack.ai/<gKey>.count``: CPU capacity cores, rounded up (0 when absent).
    cores: int
    product: str
    family: str
    #: The raw CPU detail, as the ``note.gpustack.ai/cpuDetail`` JSON fields (strings, empty omitted).
    detail: tuple[tuple[str, str], ...]
    cache: tuple[tuple[str, str], ...]

    def detail_json(self, *, with_identity: bool) -> str:
        """``note.gpustack.ai/cpuDetail``: the CPU flavor form, or (``with_identity``) the accelerated
        form that adds the CPU's manufacturer, product and family."""
        doc: dict[str, Any] = dict(self.detail)
        if self.cache:
            doc["cache"] = dict(self.cache)
        if with_identity:
            identity_fields = (
                ("manufacturer", self.manufacturer),
                ("product", self.product),
                ("family", self.family),
            )
            doc.update({name: value for name, value in identity_fields if value})
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """One accelerator model on a Node, from the Device Manager's labels."""

    a_key: str
    manufacturer: str
    #: ``acceleratable.feature.gpustack.ai/<aKey>.count``: cards of this model on the node.
    cards: int
    product: str
    memory: str
    cores: str
    family: str


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """A managed, profiled Node as the chain sees it."""

    name: str
    os: str
    arch: str
    profile: str
    cpu: CpuIdentity
    devices: tuple[DeviceIdentity, ...]
    #: The Node's labels (for checking a flavor's ``nodeLabels`` selects it).
    labels: Mapping[str, str]
    #: The Device Manager's labels say an accelerator was detected
    #: (:func:`gpustack_worker.api.node_class.accelerated`); the CPU-flavor rule reads ``cpu_only``.
    accelerated: bool
    #: The Node carries ``feature.gpustack.ai/cpu-only=true``, which the agent publishes by
    #: :func:`gpustack_worker.api.node_class.cpu_only` and the CPU flavors pin when mixing is off.
    cpu_only: bool

    def cpu_member(self, *, mixed_on_node: bool) -> bool:
        """Whether the Node contributes its cores to a CPU flavor: it has cores, and (mixing off) it
        carries the ``cpu-only`` label the agent decided and the CPU flavor's selector pins — so the
        flavor counts exactly the Nodes it selects, at every instant
        (:func:`gpustack_worker.api.node_class.in_cpu_flavors`)."""
        return self.cpu.cores > 0 and node_class.in_cpu_flavors(self.labels, mixed_on_node=mixed_on_node)


def _devices(labels: Mapping[str, str]) -> tuple[DeviceIdentity, ...]:
    return tuple(
        DeviceIdentity(
            a_key=d.a_key,
            manufacturer=d.manufacturer,
            cards=d.cards,
            product=labels.get(keys.descriptor_key(d.key, "product"), ""),
            memory=labels.get(keys.descriptor_key(d.key, "memory"), ""),
            cores=labels.get(keys.descriptor_key(d.key, "cores"), ""),
            family=labels.get(keys.descriptor_key(d.key, "family"), ""),
        )
        for d in node_class.device_labels(labels)
    )


def _cpu(labels: Mapping[str, str], annotations: Mapping[str, str]) -> CpuIdentity:
    g_key = identity.general_key(labels, annotations)
    name = annotations.get(keys.CPU_NAME_ANNOTATION, "")
    detail = tuple(
        (field, annotations[f"{keys.FEATURE_PREFIX}cpu-{suffix}"])
        for field, suffix in _CPU_DETAIL_FIELDS
        if annotations.get(f"{keys.FEATURE_PREFIX}cpu-{suffix}")
    )
    cache = tuple(
        (field, annotations[f"{keys.FEATURE_PREFIX}cpu-{suffix}"])
        for field, suffix in _CPU_CACHE_FIELDS
        if annotations.get(f"{keys.FEATURE_PREFIX}cpu-{suffix}")
    )
    return CpuIdentity(
        g_key=g_key,
        manufacturer=identity.cpu_manufacturer(labels),
        cores=node_class.label_count(labels.get(keys.count_key(keys.general_key(g_key)))),
        product="" if name.startswith("@") else name,
        family=annotations.get(f"{keys.FEATURE_PREFIX}cpu-family", ""),
        detail=detail,
        cache=cache,
    )


def node_hardware(node: Mapping[str, Any]) -> NodeHardware | None:
    """The chain's view of a Node, or None when it is not managed, has no profile, no os/arch, or no
    ``true`` CPU-key label (``keys.cpu_key_label``: every flavor's selector pins it, so no flavor could
    select the Node)."""
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    profile = labels.get(keys.TOPOLOGY_PROFILE, "")
    return _hardware(node, profile) if profile else None


def unprofiled_hardware(node: Mapping[str, Any]) -> NodeHardware | None:
    """The chain's view of a managed Node that does not carry its topology profile yet (``profile`` is
    ""), or None when it carries one or would not take part once it does. The topology controller labels
    every managed Node, so such a Node's profile is about to arrive: what it feeds is not complete yet
    (:mod:`gpustack_worker.chain.settle`)."""
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(keys.TOPOLOGY_PROFILE):
        return None
    return _hardware(node, "")


def _hardware(node: Mapping[str, Any], profile: str) -> NodeHardware | None:
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if not node_class.is_managed(labels):
        return None
    os_, arch = labels.get(keys.OS, ""), labels.get(keys.ARCH, "")
    if not os_ or not arch:
        return None
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    cpu = _cpu(labels, annotations)
    if labels.get(keys.cpu_key_label(cpu.g_key, cpu.manufacturer)) != "true":
        return None
    return NodeHardware(
        name=str(meta.get("name", "")),
        os=os_,
        arch=arch,
        profile=profile,
        cpu=cpu,
        devices=_devices(labels),
        labels=labels,
        accelerated=node_class.accelerated(labels),
        cpu_only=labels.get(keys.CPU_ONLY) == "true",
    )
