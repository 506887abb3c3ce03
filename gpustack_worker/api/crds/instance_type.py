"""``InstanceType``: one schedulable pool, the user-facing face of a ClusterQueue of the same name.

``spec`` is the pool identity plus the per-card unit resources; ``status`` is what the
worker observes: hardware descriptors (``status.detail``, the newest layout — older versions kept them
in ``spec``, see docs/crds.md), the entrance LocalQueue, the phase and four capacity views. The
immutability that GPUStack's update webhook enforces is expressed as CEL transition rules.
"""

from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from gpustack_worker.api import kinds
from gpustack_worker.api.crds.common import (
    AGE_COLUMN,
    CrdModel,
    CrdNames,
    KubeObject,
    PrinterColumn,
    Quantity,
    cel,
    list_map,
)
from gpustack_worker.api.crds.devices import AcceleratorSlicedDetail, ProfileCount

__all__ = (
    "CapacityView",
    "CpuDetail",
    "InstanceType",
    "InstanceTypeAcceleratorCPU",
    "InstanceTypeDetail",
    "InstanceTypeSpec",
    "InstanceTypeStatus",
    "PartitionedCapacityView",
    "UnitResources",
)

#: Fields GPUStack's update webhook keeps immutable and that may be absent.
_IMMUTABLE_OPTIONAL = ("acceleratorGroup", "generalGroup")
#: Immutable required fields.
_IMMUTABLE_REQUIRED = ("acceleratable", "os", "arch", "unitResources", "localStorage")


def _immutable(field: str, required: bool) -> JsonDict:
    rule = f"self.{field} == oldSelf.{field}"
    if not required:
        rule = f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || {rule})"
    return cel(rule, f"{field} is immutable", fieldPath=f".{field}")


class UnitResources(CrdModel):
    """Host resources granted per accelerator (or per CPU unit for a CPU pool)."""

    cpu: str = Field(max_length=16, pattern=r"^[1-9][0-9]*$")
    """Unitless integer CPU count."""
    ram: str = Field(max_length=24, pattern=r"^[1-9][0-9]*Gi$")
    """Memory as <int>Gi."""


class InstanceTypeSpec(CrdModel):
    """The pool identity; everything but displayName, description and inactive is immutable."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!self.acceleratable || (has(self.acceleratorGroup) && self.acceleratorGroup != '')",
                    "acceleratorGroup is required when acceleratable is true",
                    fieldPath=".acceleratorGroup",
                ),
                cel(
                    "self.acceleratable || self.unitResources.cpu == '1'",
                    "a CPU-only instance type must have unitResources.cpu '1'",
                    fieldPath=".unitResources.cpu",
                ),
                *(_immutable(f, False) for f in _IMMUTABLE_OPTIONAL),
                *(_immutable(f, True) for f in _IMMUTABLE_REQUIRED),
            ]
        }
    )

    display_name: str | None = Field(default=None, max_length=64)
    """Admin-editable display name; derived types get the flavor product or CPU-only."""
    description: str | None = Field(default=None, max_length=1024)
    inactive: bool = False
    """True stops admission (queue StopPolicy Hold); any stop of the queue back-fills true."""
    accelerator_group: str | None = Field(default=None, max_length=63)
    """aKey, e.g. nvidia-a10g; required when acceleratable."""
    general_group: str = Field(default="generic", max_length=63)
    """gKey, or the literal generic."""
    acceleratable: bool
    os: str = Field(min_length=1, max_length=63)
    arch: str = Field(min_length=1, max_length=63)
    unit_resources: UnitResources
    local_storage: str = Field(max_length=24, pattern=r"^[1-9][0-9]*Gi$")
    """Local storage as <int>Gi; derived types get 100Gi."""


class CpuDetail(CrdModel):
    """CPU descriptors (all strings, as NFD annotates them)."""

    physical_cores: str | None = None
    threads_per_physical_core: str | None = None
    logical_cores: str | None = None
    stepping: str | None = None
    clock_speed: str | None = None
    max_clock_speed: str | None = None
    cache_line: str | None = None
    cache: dict[str, str] | None = None
    """Cache sizes by level: l1i, l1d, l2, l3."""


class InstanceTypeAcceleratorCPU(CpuDetail):
    """The host CPU paired with an accelerated pool."""

    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None


class InstanceTypeDetail(CpuDetail):
    """Observed hardware descriptors, from the matching flavor notes and Devices."""

    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None
    memory: str | None = None
    """Per-card VRAM, e.g. 24Gi."""
    cores: str | None = None
    compute_capability: str | None = None
    sliced_detail: AcceleratorSlicedDetail | None = None
    cpu: InstanceTypeAcceleratorCPU | None = None


class CapacityView(CrdModel):
    """One admission view: the largest single request that fits, what is left, the total."""

    once_max_request: Quantity | None = None
    remaining: Quantity | None = None
    capacity: Quantity | None = None


class PartitionedCapacityView(CapacityView):
    """The partitioned view adds per-profile instance counts."""

    allocated_profiles: list[ProfileCount] | None = Field(default=None, json_schema_extra=list_map("name"))
    remaining_profiles: list[ProfileCount] | None = Field(default=None, json_schema_extra=list_map("name"))


class InstanceTypeStatus(CrdModel):
    """What the worker observes about the pool."""

    detail: InstanceTypeDetail | None = None
    entrance: str | None = None
    """LocalQueue name, gpustack-fnv64-<16hex>."""
    phase: Literal["Active", "Inactive", "Draining"] | None = None
    phase_message: str | None = None
    accelerator: CapacityView | None = None
    """Whole free accelerators (exclusive view)."""
    accelerator_shared: CapacityView | None = None
    """Ownership slots (shared view)."""
    accelerator_sliced: CapacityView | None = None
    """VRAM-percent units, 100 per card (sliced view)."""
    accelerator_partitioned: PartitionedCapacityView | None = None
    """Partition instances (partitioned view)."""
    cpu: CapacityView | None = None
    """CPU cores of a CPU pool."""
    accelerator_summary: str | None = Field(default=None, max_length=128)
    """The four views as ``onceMaxRequest/remaining`` pairs (EX SH SL PT), for ``kubectl get``."""


class InstanceType(KubeObject):
    """A schedulable pool; the name equals the backing ClusterQueue's name."""

    CRD = CrdNames(
        resource=kinds.INSTANCE_TYPE,
        short_names=("instype",),
        printer_columns=(
            PrinterColumn(name="Display", type="string", json_path=".spec.displayName"),
            PrinterColumn(name="Phase", type="string", json_path=".status.phase"),
            PrinterColumn(name="Entrance", type="string", json_path=".status.entrance"),
            PrinterColumn(
                name="Accelerator(EX/SH/SL/PT)", type="string", json_path=".status.acceleratorSummary"
            ),
            PrinterColumn(name="Accelerator", type="string", json_path=".spec.acceleratorGroup", priority=1),
            AGE_COLUMN,
        ),
    )

    spec: InstanceTypeSpec
    status: InstanceTypeStatus | None = None
