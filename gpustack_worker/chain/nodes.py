"""What the Kueue chain reads from a Node: its hardware identity, as the stage-3 labels publish it.

Stage 4 never looks at device data directly: a Node's flavor membership is a pure function of the labels
the node agent, the Device Manager and NFD put on it (reference Appendix A.2), so the chain and the
scheduler always agree on what a Node is. Only managed Nodes (``gpustack.ai/managed=true``) with a
topology profile take part; anything else reads as ``None``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import identity, keys, manufacturers

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("CpuIdentity", "DeviceIdentity", "NodeHardware", "node_hardware")

#: Label suffixes the Device Manager publishes next to ``acceleratable.feature.gpustack.ai/<aKey>``.
_DEVICE_DESCRIPTOR_SUFFIXES: Final = (
    ".product",
    ".memory",
    ".cores",
    ".count",
    ".family",
    ".comcap",
    ".driver-version",
    ".runtime-version",
)
#: ``cpuDetail`` JSON field → the CPU detail annotation suffix it is read from (reference §3.2).
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

    @property
    def accelerated(self) -> bool:
        """Has at least one detected accelerator model."""
        return bool(self.devices)


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or "0"))
    except ValueError:
        return 0


def _devices(labels: Mapping[str, str]) -> tuple[DeviceIdentity, ...]:
    found: list[DeviceIdentity] = []
    for key, value in labels.items():
        if value != "true" or not key.startswith(keys.ACCELERATABLE_PREFIX):
            continue
        a_key = key[len(keys.ACCELERATABLE_PREFIX) :]
        if a_key.endswith(_DEVICE_DESCRIPTOR_SUFFIXES):
            continue
        mfr, sep, ident = a_key.partition("-")
        if not sep or not ident or manufacturers.get(mfr) is None:
            continue  # the bare manufacturer key, or an unknown manufacturer
        cards = _int(labels.get(keys.count_key(key)))
        if cards <= 0:
            continue
        found.append(
            DeviceIdentity(
                a_key=a_key,
                manufacturer=mfr,
                cards=cards,
                product=labels.get(f"{key}.product", ""),
                memory=labels.get(f"{key}.memory", ""),
                cores=labels.get(f"{key}.cores", ""),
                family=labels.get(f"{key}.family", ""),
            )
        )
    return tuple(sorted(found, key=lambda d: d.a_key))


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
        cores=_int(labels.get(keys.count_key(keys.general_key(g_key)))),
        product="" if name.startswith("@") else name,
        family=annotations.get(f"{keys.FEATURE_PREFIX}cpu-family", ""),
        detail=detail,
        cache=cache,
    )


def node_hardware(node: Mapping[str, Any]) -> NodeHardware | None:
    """The chain's view of a Node, or None when it is not managed, has no profile or no os/arch."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if labels.get(keys.MANAGED) != "true":
        return None
    profile = labels.get(keys.TOPOLOGY_PROFILE, "")
    os_, arch = labels.get(keys.OS, ""), labels.get(keys.ARCH, "")
    if not profile or not os_ or not arch:
        return None
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    return NodeHardware(
        name=str(meta.get("name", "")),
        os=os_,
        arch=arch,
        profile=profile,
        cpu=_cpu(labels, annotations),
        devices=_devices(labels),
        labels=labels,
    )
