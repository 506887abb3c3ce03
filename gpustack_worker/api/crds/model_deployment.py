"""``ModelDeployment``: the part of a model deployment the scheduling chain reads.

Each role renders ``replicas`` independent pod groups of ``size`` Pods (one Kueue Workload each) from
the role's pod template; ``topology.requiredLevel`` becomes the ``podset-required-topology``
annotation. ``model`` carries only what placement reads: the content digests of the weights and who
delivers them (``Node``: the node's model store, so Pods prefer nodes holding the digests; ``Engine``:
the engine fetches them itself). Everything else the wider product keeps here (engines, model sources,
sliced-percentage resources whose JSON names are unconfirmed) is deliberately left out: see docs/crds.md.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.crds.common import (
    AGE_COLUMN,
    CONDITIONS,
    DNS1123_LABEL,
    Condition,
    CrdModel,
    CrdNames,
    Int32,
    Int64,
    KubeObject,
    LabelKey,
    PrinterColumn,
    Quantity,
    cel,
    list_map,
)

__all__ = (
    "DIGEST_PATTERN",
    "MAX_ARTIFACTS",
    "MAX_ROLES",
    "ModelArtifact",
    "ModelDelivery",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelDeploymentStatus",
    "Role",
    "RoleKind",
    "RoleResources",
    "RoleStatus",
    "RoleTopology",
    "SetHold",
)

#: Roles become the PodSets of a Workload, and Kueue caps a Workload at 8 PodSets.
MAX_ROLES = 8

#: A Pod template, kept verbatim (the API server validates it when the Pods are created).
PodTemplate = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


class RoleKind(StrEnum):
    """What a role does in a (possibly disaggregated) deployment."""

    SERVER = "Server"
    PREFILL = "Prefill"
    DECODE = "Decode"


class RoleTopology(CrdModel):
    """Topology constraint of each replica."""

    required_level: LabelKey | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    f"self != '{keys.HOSTNAME}'",
                    f"{keys.HOSTNAME} is implicit; request a coarser level, e.g. topology.kubernetes.io/zone",
                )
            ]
        },
    )
    """Label key of the level one replica's Pods must share, e.g. topology.kubernetes.io/zone."""


class RoleResources(CrdModel):
    """The accelerator half of a role's per-Pod request (host resources come from the InstanceType)."""

    accelerator: Quantity | None = None
    """Whole accelerators per Pod."""
    accelerator_partitioned_profile: str | None = Field(default=None, max_length=63)
    """Partition profile per Pod, e.g. 3g.40gb."""


class Role(CrdModel):
    """One role: replicas x size Pods from one template."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)
    """Role name; also the Kueue PodSet name."""
    kind: RoleKind = RoleKind.SERVER
    replicas: Int32 = Field(default=1, ge=1, le=1024)
    """Independent instances; each is one Kueue pod group (one Workload)."""
    size: Int32 = Field(
        default=1,
        ge=1,
        le=64,
        json_schema_extra={"x-kubernetes-validations": [cel("self == oldSelf", "size is immutable")]},
    )
    """Pods per instance (they share fate and one topology domain)."""
    instance_type: str | None = Field(default=None, min_length=1, max_length=253)
    """InstanceType (pool) the Pods are queued to."""
    resources: RoleResources | None = None
    topology: RoleTopology | None = None
    template: PodTemplate
    """Pod template of every Pod of the role."""


#: A content digest as the model stores list it: ``sha256:`` and 64 lowercase hex digits.
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
#: Artifacts per model (each node-delivered one adds a preferred node-affinity term to every Pod).
MAX_ARTIFACTS = 16


class ModelArtifact(CrdModel):
    """One artifact of the model's weights, by content digest."""

    digest: str = Field(pattern=DIGEST_PATTERN, max_length=71)
    source: Literal["Hub", "Claim"] = "Hub"
    """``Hub``: fetched from the model hub (the node store may deliver it); ``Claim``: a volume claim."""


class ModelDelivery(CrdModel):
    """What placement reads of the model: the weights' digests and who delivers them."""

    artifacts: list[ModelArtifact] | None = Field(
        default=None, max_length=MAX_ARTIFACTS, json_schema_extra=list_map("digest")
    )
    delivery: Literal["Node", "Engine"] | None = None
    """``Node``: the node's model store delivers hub artifacts; ``Engine``: the engine fetches them.
    Unset: the ``model-artifact-delivery-mode`` setting decides."""


class ModelDeploymentSpec(CrdModel):
    """The roles; the set of role names is fixed after creation."""

    model: ModelDelivery | None = None
    """The model's weights as placement sees them."""

    roles: list[Role] = Field(
        min_length=1,
        max_length=MAX_ROLES,
        json_schema_extra={
            **list_map("name"),
            "x-kubernetes-validations": [
                cel(
                    "self.all(r, oldSelf.exists(o, o.name == r.name))"
                    " && oldSelf.all(o, self.exists(r, r.name == o.name))",
                    "roles cannot be added or removed after creation",
                )
            ],
        },
    )


class RoleStatus(CrdModel):
    """Progress of one role."""

    name: str = Field(min_length=1, max_length=63)
    replicas: Int32 | None = Field(default=None, ge=0)
    """Replica groups that exist."""
    admitted_replicas: Int32 | None = Field(default=None, ge=0)
    """Replica groups whose Workload is admitted."""
    ready_replicas: Int32 | None = Field(default=None, ge=0)
    """Replica groups whose Pods are all ready."""
    message: str | None = Field(default=None, max_length=32768)
    """Why replicas are pending (Kueue's message, with role and replica)."""


class SetHold(CrdModel):
    """The joint check's hold on a multi-group set (docs/admission.md): written only by the check."""

    since: datetime | None = None
    """When the last retry restarted the 30-minute clock (absent: it runs from the oldest Pending entry)."""
    parked_at: datetime | None = None
    """When the set was parked: its Workloads are deactivated. Absent while the set is not parked."""
    parked_generation: Int64 | None = None
    """The generation the set was parked at: a spec change (a new generation) retries it."""
    retry: str | None = Field(default=None, max_length=253)
    """The last value of the retry annotation the check acted on: a different value retries a parked set."""


class ModelDeploymentStatus(CrdModel):
    """Progress of the deployment."""

    observed_generation: Int64 | None = None
    roles: list[RoleStatus] | None = Field(
        default=None, max_length=MAX_ROLES, json_schema_extra=list_map("name")
    )
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=CONDITIONS)
    hold: SetHold | None = None
    """The joint check's parking state (its field manager owns it; see docs/admission.md)."""


class ModelDeployment(KubeObject):
    """A model deployment as the scheduling chain sees it."""

    CRD = CrdNames(
        resource=kinds.MODEL_DEPLOYMENT,
        short_names=("md",),
        printer_columns=(
            PrinterColumn(
                name="Roles", type="string", json_path=".spec.roles[*].name", description="The role names"
            ),
            PrinterColumn(
                name="Ready",
                type="string",
                json_path=".status.roles[*].readyReplicas",
                description="Replica groups whose Pods are all ready, one number per entry of status.roles",
            ),
            PrinterColumn(
                name="Rendered",
                type="string",
                json_path='.status.conditions[?(@.type=="Rendered")].reason',
                description="Rendered when every role renders its Pods; else why not, e.g."
                " InstanceTypeNotFound (a role names an InstanceType that does not exist)",
            ),
            PrinterColumn(
                name="InstanceTypes",
                type="string",
                json_path=".spec.roles[*].instanceType",
                description="The InstanceType each role names, one per entry of spec.roles",
                priority=1,
            ),
            PrinterColumn(
                name="Quota",
                type="string",
                json_path='.status.conditions[?(@.type=="QuotaReserved")].reason',
                description="The joint check's QuotaReserved reason for a multi-group set: Reserved, Waiting"
                " or Parked",
            ),
            PrinterColumn(
                name="Parked",
                type="date",
                json_path=".status.hold.parkedAt",
                description="When the joint check parked the set",
                priority=1,
            ),
            AGE_COLUMN,
        ),
    )

    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus | None = None
