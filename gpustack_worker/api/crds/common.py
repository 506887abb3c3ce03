"""Building blocks shared by every CRD model: the base class, object metadata, conditions, selectors
and the Kubernetes scalar types (Quantity, Duration, fixed-width integers).

The models serve two masters. Controllers parse server objects with them (``Devices.model_validate``),
so they ignore fields they do not know (the server adds ``managedFields``, newer writers add fields).
:mod:`gpustack_worker.api.crdgen` turns them into OpenAPI v3 schemas, so every constraint that the API
server should enforce is declared on the model once: per-field bounds as pydantic constraints (checked
on both sides), cross-field rules as CEL ``x-kubernetes-validations`` (checked by the server).

The model modules do not use ``from __future__ import annotations``: pydantic evaluates field
annotations at class creation, so their imports are runtime imports.
"""

import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from gpustack_worker.runtime import quantity
from gpustack_worker.runtime.resources import Resource

__all__ = (
    "Condition",
    "CrdModel",
    "CrdNames",
    "Int32",
    "Int64",
    "KubeObject",
    "LabelKey",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NamespacedName",
    "ObjectMeta",
    "PositiveDuration",
    "PrinterColumn",
    "Quantity",
    "UInt32",
    "UInt64",
    "cel",
    "list_map",
    "parse_duration",
    "parse_quantity",
)

# --- integers ---------------------------------------------------------------------------------------
# Kubernetes spells fixed-width integers as ``type: integer`` plus ``format``; unsigned Go types add
# ``minimum: 0`` so the server rejects what the Go reader could not decode.
Int32 = Annotated[int, Field(json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
UInt32 = Annotated[int, Field(ge=0, json_schema_extra={"format": "int32"})]
UInt64 = Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})]

# --- Quantity ---------------------------------------------------------------------------------------
#: The apimachinery ``resource.Quantity`` grammar, as controller-gen emits it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
    r"|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)


def _quantity_text(value: object) -> object:
    """The server may hand back a bare number for an int-or-string field; keep the text form."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _check_quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return value


def parse_quantity(value: str | int) -> Decimal:
    """The exact numeric value of a quantity (``16Gi`` → 17179869184, ``500m`` → 0.5)."""
    text = _check_quantity(str(value))
    parsed = quantity.parse(text)
    if parsed is None:  # pragma: no cover - the pattern already accepted it
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    return parsed


Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

# --- Duration ---------------------------------------------------------------------------------------
#: ``metav1.Duration`` text: Go ``time.ParseDuration`` units, without sign (negative is never valid here).
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
_DURATION = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_DURATION_UNIT = {
    "ns": timedelta(microseconds=0.001),
    "us": timedelta(microseconds=1),
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
}


def parse_duration(value: str) -> timedelta:
    """A Go duration string (``1m30s``, ``10m``, ``1.5h``) as a timedelta."""
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a duration such as 10s, 5m or 1h30m")
    return sum(
        (float(n) * _DURATION_UNIT[u] for n, u in _DURATION_PART.findall(value)),
        start=timedelta(),
    )


def _check_positive_duration(value: str) -> str:
    if parse_duration(value) <= timedelta():
        raise ValueError(f"duration {value!r} must be greater than zero")
    return value


PositiveDuration = Annotated[
    str,
    AfterValidator(_check_positive_duration),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": 64,
            "pattern": DURATION_PATTERN,
            "x-kubernetes-validations": [
                {"rule": "duration(self) > duration('0s')", "message": "must be greater than zero"}
            ],
        }
    ),
]


# --- schema extension helpers -----------------------------------------------------------------------
def cel(rule: str, message: str, **extra: str) -> JsonDict:
    """One ``x-kubernetes-validations`` entry (``extra`` e.g. ``fieldPath``, ``reason``)."""
    return {"rule": rule, "message": message, **extra}


def list_map(*keys: str) -> JsonDict:
    """Schema extensions for a list that merges per element by ``keys`` (server-side apply)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


# --- base classes -----------------------------------------------------------------------------------
class CrdModel(BaseModel):
    """Base of every object inside a CRD: camelCase JSON names, snake_case Python, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )

    def dump(self) -> dict[str, Any]:
        """The JSON body the API server expects: aliases, no unset optionals."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OwnerReference(CrdModel):
    """``metav1.OwnerReference``."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(CrdModel):
    """The part of ``metav1.ObjectMeta`` controllers read; in the CRD schema it is just ``type: object``
    (the API server validates metadata itself)."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)

    def dump(self) -> dict[str, Any]:
        """Like :meth:`CrdModel.dump` but without empty collections (they would clear server state)."""
        return {k: v for k, v in super().dump().items() if v not in ({}, [], "")}


class PrinterColumn(BaseModel):
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str = Field(serialization_alias="jsonPath")
    description: str = ""
    priority: int = 0


class CrdNames(BaseModel):
    """What the CRD says about a kind beyond its schema: plural, short names, categories, printer columns."""

    resource: Resource
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("gpustack",)
    printer_columns: tuple[PrinterColumn, ...] = ()


#: The ``Ready`` condition's status, for printer columns.
READY_COLUMN = PrinterColumn(
    name="Ready",
    type="string",
    json_path='.status.conditions[?(@.type=="Ready")].status',
    description="Status of the Ready condition",
)
AGE_COLUMN = PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp")


class KubeObject(CrdModel):
    """A top-level object of one of our kinds. Subclasses set ``CRD`` and declare ``spec``/``status``."""

    CRD: ClassVar[CrdNames]

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def model_post_init(self, context: Any, /) -> None:
        """Fill apiVersion/kind from the kind descriptor so built objects can be sent as they are."""
        if not self.api_version:
            self.api_version = self.CRD.resource.api_version
        if not self.kind:
            self.kind = self.CRD.resource.kind

    def dump(self) -> dict[str, Any]:
        body = super().dump()
        body["metadata"] = self.metadata.dump()
        return body


# --- shared value types -----------------------------------------------------------------------------
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
    r"[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(CrdModel):
    """The shared condition (``gpustack.ai/v1`` ``Condition``, shaped like ``metav1.Condition``)."""

    type: str = Field(max_length=316, pattern=CONDITION_TYPE_PATTERN)
    """Condition type in CamelCase, e.g. Ready."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    last_transition_time: datetime
    """When the status last changed."""
    observed_generation: Int64 | None = Field(default=None, ge=0)
    """The metadata.generation the condition was computed from."""
    reason: str | None = Field(default=None, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    """Machine-readable CamelCase reason for the last transition."""
    message: str | None = Field(default=None, max_length=32768)
    """Human-readable detail."""


#: ``conditions`` list field settings: a list-map keyed by type.
CONDITIONS = list_map("type")

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A qualified label key: optional DNS-subdomain prefix and ``/``, then a 1..63-char name.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


#: A qualified label key (``topology.gpustack.ai/rack``).
LabelKey = Annotated[str, Field(max_length=317, pattern=QUALIFIED_NAME)]


class NamespacedName(CrdModel):
    """A reference to a namespaced object (ConfigMap or Secret)."""

    namespace: str = Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)
    name: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)


class LabelSelectorRequirement(CrdModel):
    """``metav1.LabelSelectorRequirement``."""

    key: str = Field(max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = Field(default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"})


class LabelSelector(CrdModel):
    """``metav1.LabelSelector``; ``{}`` selects everything."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
