"""``NodeModelStore``: one per node, named after it and owned by it — the node-local model-weight cache.

Only its placement role matters to the chain: Pods with node-delivered weights get preferred
node-affinity terms for nodes whose store lists the digest ``Ready``. The worker writes ``spec``,
the model-manager plugin on the node writes ``status``.
"""

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from gpustack_worker.api import kinds
from gpustack_worker.api.crds.common import (
    AGE_COLUMN,
    CONDITIONS,
    READY_COLUMN,
    Condition,
    CrdModel,
    CrdNames,
    Int32,
    Int64,
    KubeObject,
    PrinterColumn,
    cel,
    list_map,
)

__all__ = (
    "NodeModelStore",
    "NodeModelStoreSpec",
    "NodeModelStoreStatus",
    "StoredModel",
)


class Watermarks(CrdModel):
    """Disk usage thresholds that start and stop eviction of unreferenced models."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.highPercent) || !has(self.lowPercent) || self.lowPercent < self.highPercent",
                    "lowPercent must be below highPercent",
                )
            ]
        }
    )

    high_percent: Int32 | None = Field(default=None, ge=2, le=95)
    low_percent: Int32 | None = Field(default=None, ge=1, le=94)


class Download(CrdModel):
    """Download throttling."""

    concurrency: Int32 | None = Field(default=None, ge=1, le=64)
    bytes_per_second: Int64 | None = Field(default=None, ge=0)
    """0 = unlimited."""


class Hub(CrdModel):
    """Where models are fetched from."""

    hugging_face_endpoint: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    ca_bundle_config_map: str | None = None
    """Name of a ConfigMap holding extra CA certificates."""


class Kubelet(CrdModel):
    """Kubelet eviction settings the store must stay clear of."""

    nodefs_available: str | None = None
    """nodefs.available eviction threshold, e.g. 10%."""
    imagefs_available: str | None = None
    image_gc_high_threshold_percent: Int32 | None = Field(
        default=None, ge=0, le=100, alias="imageGCHighThresholdPercent"
    )


class NodeModelStoreSpec(CrdModel):
    """Store policy, written by the worker."""

    watermarks: Watermarks | None = None
    download: Download | None = None
    hub: Hub | None = None
    kubelet: Kubelet | None = None


class StoreCapacity(CrdModel):
    """Disk usage of the store."""

    total_bytes: Int64 | None = Field(default=None, ge=0)
    stored_bytes: Int64 | None = Field(default=None, ge=0)
    used_percent: Int32 | None = Field(default=None, ge=0, le=100, multiple_of=5)
    """Rounded to a multiple of 5."""


class StoredModel(CrdModel):
    """One model (by content digest) in the store."""

    digest: str = Field(min_length=1, max_length=128)
    state: Literal["Downloading", "Ready", "Failed"]
    size_bytes: Int64 | None = Field(default=None, ge=0)
    downloaded_bytes: Int64 | None = Field(default=None, ge=0)
    source: Literal["Hub"] | None = None
    referenced: bool | None = None
    """Whether a Pod on the node currently uses the model."""
    last_used_time: datetime | None = None
    """Hour-truncated."""
    reason: (
        Literal[
            "InvalidRequest",
            "AccessDenied",
            "SourceUnavailable",
            "IntegrityMismatch",
            "InsufficientCapacity",
            "Canceled",
        ]
        | None
    ) = None
    message: str | None = Field(default=None, max_length=32768)
    retry_time: datetime | None = None


class NodeModelStoreStatus(CrdModel):
    """Store contents, written by the model-manager plugin on the node."""

    observed_generation: Int64 | None = None
    capacity: StoreCapacity | None = None
    models: list[StoredModel] | None = Field(
        default=None, max_length=256, json_schema_extra=list_map("digest")
    )
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=CONDITIONS)
    """Ready, CapacityLow."""


class NodeModelStore(KubeObject):
    """The model-weight cache of one node (name = node name)."""

    CRD = CrdNames(
        resource=kinds.NODE_MODEL_STORE,
        short_names=("nms",),
        printer_columns=(
            READY_COLUMN,
            PrinterColumn(
                name="Used",
                type="integer",
                json_path=".status.capacity.usedPercent",
                description="Percent of the store's disk in use",
            ),
            AGE_COLUMN,
        ),
    )

    spec: NodeModelStoreSpec = Field(default_factory=NodeModelStoreSpec)
    status: NodeModelStoreStatus | None = None
