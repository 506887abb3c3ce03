"""``Devices``: one per node, named after it — the node's accelerator inventory and per-card ledger.

The Device Manager writes ``spec`` (what the node has: groups of identical cards, NICs) and
``status`` (the per-card allocation ledger); the worker only reads it and mirrors control labels from
the Node onto it (the topology profile). ``spec.interfaces`` is the project's own layout (GPUStack has
not published one): see docs/crds.md.

Counts, units, sizes and memory carry the physical bounds of :mod:`gpustack_worker.api.bounds`
(a card never has more than 1,600,000 units, more than 512 soft slices, more than 8 instances of a
partition profile, more than 4 TiB of VRAM), and the names that become label keys carry the label
syntax, so the API server refuses what it can. Rules across objects or sides (a ledger entry within its
card's ``logicalSliced.count``, unique card ids across groups, profiles the card offers) are checked
by every reader (:mod:`gpustack_worker.api.devices_check`). Partition profile names are the
manufacturer's spelling and are deliberately *not* constrained to the label alphabet (NVIDIA prints
``1g.10gb+me``); a reader reports and skips a profile whose published key would be invalid.
"""

from enum import IntEnum, StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema

from gpustack_worker.api import bounds, keys, kinds
from gpustack_worker.api.crds.common import (
    AGE_COLUMN,
    CrdModel,
    CrdNames,
    Int32,
    Int64,
    KubeObject,
    PrinterColumn,
    UInt32,
    cel,
    list_map,
)
from gpustack_worker.api.manufacturers import MANUFACTURERS

__all__ = (
    "Accelerator",
    "AcceleratorAllocation",
    "AcceleratorStatus",
    "AcceleratorTopology",
    "AllocationMode",
    "Devices",
    "DevicesAllocationGroup",
    "DevicesGroup",
    "DevicesSpec",
    "DevicesStatus",
    "NetworkInterface",
)


def _known_manufacturer(value: str) -> str:
    if value not in MANUFACTURERS:
        raise ValueError(f"unknown manufacturer {value!r}; expected one of {sorted(MANUFACTURERS)}")
    return value


#: A group id as the name normaliser builds it (:func:`~gpustack_worker.api.normalize.normalize_name`):
#: lowercase letters, digits and ``-_.``, alphanumeric at both ends; with its manufacturer it forms
#: ``aKey``, the name part of the fit labels.
GROUP_ID_PATTERN = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
#: A token that can be (part of) a label value.
LABEL_TOKEN_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
#: ``<manufacturer>-<id>`` must fit the 63-character name part of a label key.
_A_KEY_RULE = cel(
    f"size(self.manufacturer) + 1 + size(self.id) <= {bounds.MAX_NAME_PART}",
    f"<manufacturer>-<id> (the aKey) must be at most {bounds.MAX_NAME_PART} characters",
    fieldPath=".id",
)
#: A count of slices on one card (``SlicedResourceMaxSize``).
SliceCount = Annotated[Int32, Field(ge=0, le=bounds.MAX_SLICES_PER_CARD)]
#: Instances of one partition profile on one card.
ProfileInstances = Annotated[Int32, Field(ge=0, le=bounds.MAX_PROFILE_INSTANCES)]
#: Units of one card (``M``).
Units = Annotated[Int32, Field(ge=0, le=bounds.MAX_UNITS)]
#: Per-card memory in MiB.
CardMemoryMib = Annotated[Int64, Field(ge=0, le=bounds.MAX_CARD_MEMORY_MIB)]


#: A manufacturer id from the manufacturer table (:mod:`gpustack_worker.api.manufacturers`).
Manufacturer = Annotated[
    str,
    AfterValidator(_known_manufacturer),
    WithJsonSchema({"type": "string", "enum": sorted(MANUFACTURERS)}),
]


class Roce(CrdModel):
    """RoCE addressing of the NIC paired with a card."""

    ip: str | None = None
    subnet_mask: str | None = None
    gateway: str | None = None


class AcceleratorTopology(CrdModel):
    """Where a card sits on the host."""

    pci_bus_id: str | None = None
    """PCI address, e.g. 0000:04:00.0."""
    pci_root_id: str | None = None
    pci_class: str | None = None
    numa_affinity: str | None = None
    """NUMA node id(s) as the driver reports them."""
    cpu_affinity: str | None = None
    """CPU list, e.g. 0-13."""
    roce: Roce | None = None


class LogicalSliced(CrdModel):
    """Soft (time/VRAM) slicing capability of one card."""

    cores_percentage_overcommit: bool | None = None
    """Whether compute is time-shared, so each slice may claim 100 % of cores."""
    count: SliceCount = 0
    """Max soft slices this card can host; 0 when the card's partition mode is enabled."""


class Placement(CrdModel):
    """A legal placement on an empty card, in memory-slice units."""

    start: Int32 = Field(ge=0)
    length: Int32 = Field(ge=1)


class PhysicalProfile(CrdModel):
    """One hardware partition profile a card supports."""

    name: str = Field(min_length=1, max_length=63)
    """Manufacturer spelling, e.g. 1g.5gb or T-Head 4g48gb."""
    memory_mib: CardMemoryMib | None = None
    compute_slices: Int32 | None = Field(default=None, ge=1, le=7)
    memory_slices: Int32 | None = Field(default=None, ge=1, le=8)
    count: ProfileInstances = 0
    """Max instances of this profile per card."""
    placements: list[Placement] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )


class PhysicalSliced(CrdModel):
    """Hardware partitioning capability of one card."""

    profiles: list[PhysicalProfile] | None = Field(
        default=None, max_length=bounds.MAX_PROFILES_PER_CARD, json_schema_extra=list_map("name")
    )
    count: ProfileInstances = 0
    """Largest per-profile count (7 on an A100), 0 without profiles."""


class AcceleratorStatus(CrdModel):
    """Per-card capability as detected (spec side)."""

    unhealthy: bool = False
    logical_sliced: LogicalSliced | None = None
    physical_sliced: PhysicalSliced | None = None


class Accelerator(CrdModel):
    """One card."""

    id: str = Field(min_length=1, max_length=256)
    """Universally unique card id, e.g. GPU-e0587d2e-…."""
    index: UInt32
    """Logical index from 0."""
    physical_indexes: list[UInt32] | None = Field(
        default=None, max_length=64, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Device-character indexes."""
    topology: AcceleratorTopology | None = None
    status: AcceleratorStatus | None = None


class LogicalSlicedDetail(CrdModel):
    """Group aggregate of soft slicing."""

    cores_percentage_overcommit: bool | None = None
    count: Int32 = Field(default=0, ge=0, le=bounds.MAX_SLICES_PER_CARD * bounds.MAX_ACCELERATORS_PER_GROUP)
    """Sum of per-card logical counts."""


#: Instances of one profile summed over a model's cards.
_GROUP_INSTANCES = bounds.MAX_PROFILE_INSTANCES * bounds.MAX_ACCELERATORS_PER_GROUP


class ProfileSum(CrdModel):
    """A partition profile summed over the group's cards."""

    name: str = Field(min_length=1, max_length=63)
    count: Int32 = Field(default=0, ge=0, le=_GROUP_INSTANCES)
    memory_mib: CardMemoryMib | None = None


class PhysicalSlicedDetail(CrdModel):
    """Group aggregate of hardware partitioning."""

    profiles: list[ProfileSum] | None = Field(
        default=None, max_length=bounds.MAX_PROFILES_PER_CARD, json_schema_extra=list_map("name")
    )
    count: Int32 = Field(default=0, ge=0, le=_GROUP_INSTANCES)


class AcceleratorSlicedDetail(CrdModel):
    """Group aggregate of per-card slicing capability."""

    logical: LogicalSlicedDetail | None = None
    physical: PhysicalSlicedDetail | None = None


class DevicesGroup(CrdModel):
    """Identical cards of one model on the node."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_A_KEY_RULE]})

    id: str = Field(min_length=1, max_length=63, pattern=GROUP_ID_PATTERN)
    """Group id: the normalised product name with a leading manufacturer name stripped (``a10g``)."""
    manufacturer: Manufacturer
    name: str = Field(min_length=1, max_length=256)
    """Raw product name, e.g. NVIDIA A10G."""
    memory: CardMemoryMib
    """Per-card VRAM in MiB."""
    cores: UInt32 | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    compute_capability: str | None = None
    family: str | None = None
    accelerators: list[Accelerator] | None = Field(
        default=None, max_length=bounds.MAX_ACCELERATORS_PER_GROUP, json_schema_extra=list_map("id")
    )
    accelerator_sliced_detail: AcceleratorSlicedDetail | None = None


class PortState(StrEnum):
    """Port state of a NIC (the InfiniBand port states; Ethernet reports Active/Down)."""

    ACTIVE = "Active"
    DOWN = "Down"
    INIT = "Init"
    ARMED = "Armed"
    UNKNOWN = "Unknown"


class NetworkInterface(CrdModel):
    """One NIC and its RDMA link (project layout, docs/crds.md)."""

    name: str = Field(min_length=1, max_length=64)
    """Interface name, e.g. ib0 or eth1."""
    rdma: bool = False
    """An RDMA device is bound to this interface."""
    state: PortState | None = None
    link_layer: Literal["InfiniBand", "Ethernet"] | None = None
    numa_affinity: str | None = Field(
        default=None, max_length=bounds.MAX_LABEL_VALUE, pattern=LABEL_TOKEN_PATTERN
    )
    """NUMA node id(s); part of the ``rdma.numa`` label value, so a label-value token (e.g. 0, 0-1)."""
    distance: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None = None
    """PCIe path class to the nearest accelerator, as nvidia-smi topo prints it."""


class DevicesSpec(CrdModel):
    """The detected inventory (same shape as device-manager detect prints)."""

    groups: list[DevicesGroup] | None = Field(
        default=None, max_length=bounds.MAX_GROUPS, json_schema_extra=list_map("id", "manufacturer")
    )
    interfaces: list[NetworkInterface] | None = Field(
        default=None, max_length=bounds.MAX_INTERFACES, json_schema_extra=list_map("name")
    )


class AllocationMode(IntEnum):
    """How a card is currently allocated; serialized as a number."""

    NONE = 0
    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4
    VISIBILITY = 5


class ProfileCount(CrdModel):
    """Instances of one partition profile (any scope: InstanceType views sum them over a pool)."""

    name: str = Field(min_length=1, max_length=63)
    count: Int32 = Field(default=0, ge=0)


class CardProfileCount(CrdModel):
    """Instances of one partition profile on one card (a ledger entry)."""

    name: str = Field(min_length=1, max_length=63)
    count: ProfileInstances = 0


class AcceleratorAllocation(CrdModel):
    """One card's ledger entry (units: one whole card = 1,600,000)."""

    id: str = Field(min_length=1, max_length=256)
    index: UInt32 = 0
    mode: AllocationMode = AllocationMode.NONE
    allocated: Units = 0
    """Allocated units (0..1,600,000)."""
    remaining: Units = 0
    """Remaining units (0..1,600,000)."""
    allocated_slices: SliceCount | None = None
    """Logical slices currently on the card (at most its logicalSliced.count; checked by readers)."""
    allocated_profiles: list[CardProfileCount] | None = Field(
        default=None, max_length=bounds.MAX_PROFILES_PER_CARD, json_schema_extra=list_map("name")
    )
    remaining_profiles: list[CardProfileCount] | None = Field(
        default=None, max_length=bounds.MAX_PROFILES_PER_CARD, json_schema_extra=list_map("name")
    )
    allocated_physical_profile: str | None = None
    """Per-Pod annotation transport only; empty in the aggregated status."""
    allocated_physical_placements: list[Placement] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )


class DevicesAllocationGroup(CrdModel):
    """The ledger of one group."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_A_KEY_RULE]})

    id: str = Field(min_length=1, max_length=63, pattern=GROUP_ID_PATTERN)
    manufacturer: Manufacturer
    accelerators: list[AcceleratorAllocation] | None = Field(
        default=None, max_length=bounds.MAX_ACCELERATORS_PER_GROUP, json_schema_extra=list_map("id")
    )


class DevicesStatus(CrdModel):
    """The per-accelerator allocation ledger."""

    groups: list[DevicesAllocationGroup] | None = Field(
        default=None, max_length=bounds.MAX_GROUPS, json_schema_extra=list_map("id", "manufacturer")
    )


class Devices(KubeObject):
    """Accelerator inventory and allocation ledger of one node (name = node name)."""

    CRD = CrdNames(
        resource=kinds.DEVICES,
        short_names=("devs",),
        printer_columns=(
            PrinterColumn(
                name="Profile",
                type="string",
                json_path=".metadata.labels." + keys.TOPOLOGY_PROFILE.replace(".", "\\."),
                description="Topology profile mirrored from the node",
                priority=1,
            ),
            AGE_COLUMN,
        ),
    )

    spec: DevicesSpec = Field(default_factory=DevicesSpec)
    status: DevicesStatus | None = None
