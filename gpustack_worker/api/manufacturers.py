"""The accelerator manufacturer table: vendor ids, resource names, and the slice counts GPUStack documents.

One row per manufacturer the Device Manager knows. The worker itself reads per-card slice counts from
the `Devices` ledger (the ledger is the truth); the ``logical_slices``/``overcommittable`` columns are
the defaults a Device Manager records, used by the simulator and by documentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ("MANUFACTURERS", "Manufacturer", "by_resource", "get", "publish_profile_name")


@dataclass(frozen=True, slots=True)
class Manufacturer:
    """One manufacturer row."""

    #: Lowercase manufacturer id, as in `Devices.spec.groups[].manufacturer` and in `aKey`.
    name: str
    #: PCI vendor id NFD reports under ``feature.node.kubernetes.io/pci-<id>.present``.
    pci_vendor: str
    #: The device plugin's base extended-resource name (``<base>``).
    resource: str
    #: Default RuntimeClass name, or ``""`` where the manufacturer has none.
    runtime: str
    #: Hardware partition kind segment of ``<base>.partitioned.<kind>-<profile>``, ``""`` when none.
    partition_kind: str
    #: Logical slices per accelerator the Device Manager records (0 = no logical slicing).
    logical_slices: int
    #: Whether compute is time-shared, so each slice may claim a full 100 % of cores.
    overcommittable: bool
    #: Whether partition profile names are printed without a separator between the two numbers
    #: (T-Head's ``4g48gb``); such names are published with a ``.`` added (``4g.48gb``).
    joins_profile_geometry: bool = False


# Spec table: NVIDIA 128 (time-shared), Ascend 63 (time-shared), Cambricon 16, Hygon 4 (hard CU
# partition), MThreads 16, MetaX 16. AMD follows the recorded detect output (128, overcommittable).
# Iluvatar and T-Head slice counts are not given by the spec: see docs/simulator.md.
MANUFACTURERS: dict[str, Manufacturer] = {
    m.name: m
    for m in (
        Manufacturer("amd", "1002", "amd.com/gpu", "amd", "", 128, True),
        Manufacturer("ascend", "19e5", "huawei.com/npu", "ascend", "", 63, True),
        Manufacturer("cambricon", "cabc", "cambricon.com/mlu", "cambricon", "", 16, False),
        Manufacturer("hygon", "1d94", "hygon.com/dcu", "hygon", "", 4, False),
        Manufacturer("iluvatar", "1e3e", "iluvatar.com/gpu", "iluvatar", "", 0, False),
        Manufacturer("metax", "9999", "metax-tech.com/gpu", "metax", "", 16, False),
        Manufacturer("mthreads", "1ed5", "mthreads.com/gpu", "mthreads", "", 16, False),
        Manufacturer("nvidia", "10de", "nvidia.com/gpu", "nvidia", "mig", 128, True),
        Manufacturer("thead", "1ded", "alibabacloud.com/ppu", "", "mig", 16, False, True),
    )
}

_RESOURCE_INDEX = {m.resource: m for m in MANUFACTURERS.values()}
_JOINED_GEOMETRY = re.compile(r"^(\d+g)(\d+gb)$")


def get(name: str) -> Manufacturer | None:
    """The row for manufacturer ``name`` (case-insensitive), or None when unknown."""
    return MANUFACTURERS.get(name.lower())


def by_resource(resource: str) -> Manufacturer | None:
    """The row whose base resource is ``resource``."""
    return _RESOURCE_INDEX.get(resource)


def publish_profile_name(manufacturer: Manufacturer, profile: str) -> str:
    """The published partition profile name: a separator is added only for manufacturers that print
    their two-number geometry without one (keyed on manufacturer, not on the shape)."""
    if manufacturer.joins_profile_geometry:
        m = _JOINED_GEOMETRY.match(profile)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return profile
