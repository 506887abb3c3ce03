"""``TopologySource``: which Nodes a topology inventory describes, their ordered level keys and the
one inventory arm (read Node labels, a ConfigMap snapshot, or an HTTPS webhook).

Every rule CEL can state lives in the schema (``x-kubernetes-validations``, enforced by the API server
only — a controller must still be able to parse a source that predates a rule); the validating webhook
(``topology/admission.py``) and the reconciler check all of them, including the ones CEL cannot
(namespace of references, selector parsing, URL parsing; ``topology/spec_check.py``): see docs/crds.md
and docs/topology.md.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.crds.common import (
    AGE_COLUMN,
    CONDITIONS,
    DNS1123_SUBDOMAIN,
    QUALIFIED_NAME,
    READY_COLUMN,
    Condition,
    CrdModel,
    CrdNames,
    Int32,
    Int64,
    KubeObject,
    LabelSelector,
    NamespacedName,
    PositiveDuration,
    PrinterColumn,
    cel,
)
from gpustack_worker.api.topology_limits import (
    KUEUE_LEVEL_LABEL_MAX,
    KUEUE_TOPOLOGY_LEVELS_MAX,
    SOURCE_LEVELS_MAX,
)

__all__ = (
    "FORBIDDEN_WRITE_PREFIXES",
    "LEVELS_LIMIT_REASON",
    "TopologySource",
    "TopologySourceConfigMap",
    "TopologySourceNodeLabels",
    "TopologySourceSpec",
    "TopologySourceStatus",
    "TopologySourceWebhook",
)

#: Domains (and their subdomains) an ``additionalWritePrefix`` may not name.
FORBIDDEN_WRITE_PREFIXES = (
    "kubernetes.io",
    "k8s.io",
    "topology.gpustack.ai",
    "feature.gpustack.ai",
    "fabric.topograph.run",
    "accelerator.topograph.run",
)
_FORBIDDEN_LIST = "[" + ", ".join(f"'{d}'" for d in FORBIDDEN_WRITE_PREFIXES) + "]"
#: Why a source holds at most ``SOURCE_LEVELS_MAX`` levels (the webhook's and the reconciler's message; the
#: API server's schema refusal, ``Too many: 16: must have at most 15 items``, comes first and skips CEL, so
#: a CEL rule could never say it).
LEVELS_LIMIT_REASON = (
    f"{keys.HOSTNAME} is always appended as the finest level and a Kueue Topology holds at most "
    f"{KUEUE_TOPOLOGY_LEVELS_MAX} levels"
)
#: A level key: a qualified label key that also fits Kueue's ``Topology.spec.levels[].nodeLabel``.
LevelKey = Annotated[str, Field(max_length=KUEUE_LEVEL_LABEL_MAX, pattern=QUALIFIED_NAME)]
#: Exactly one DNS-1123 subdomain followed by a single ``/``.
WRITE_PREFIX_PATTERN = DNS1123_SUBDOMAIN.removesuffix("$") + "/$"


class TopologySourceNodeLabels(CrdModel):
    """Read-only arm: consume the Node labels as they are, never write. Always ``{}``."""


class TopologySourceConfigMap(CrdModel):
    """Snapshot read from a ConfigMap key in the worker namespace."""

    config_map_ref: NamespacedName
    """The ConfigMap (must be in the worker namespace)."""
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """Data key holding the snapshot."""
    max_staleness: PositiveDuration
    """How long the last valid snapshot stays in effect after reads start failing."""


class TopologySourceWebhook(CrdModel):
    """Snapshot fetched by an authenticated HTTPS GET."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.bearerTokenSecretRef) != has(self.tlsClientCertificateSecretRef)",
                    "exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef must be set",
                ),
                cel(
                    "duration(self.timeout) <= duration(self.pollInterval)",
                    "timeout must not exceed pollInterval",
                    fieldPath=".timeout",
                ),
            ]
        }
    )

    url: str = Field(max_length=2048, pattern=r"^https://[^/?#@\s:][^/?#@\s]*([/?][^#\s]*)?$")
    """Absolute https URL with a host, no userinfo, no fragment."""
    poll_interval: PositiveDuration
    """Requeue period after each attempt."""
    timeout: PositiveDuration
    """Per-request deadline; at most pollInterval."""
    max_staleness: PositiveDuration
    """How long the last valid snapshot stays in effect after fetches start failing."""
    ca_bundle_config_map_ref: NamespacedName | None = None
    """ConfigMap whose ca.crt replaces the system roots."""
    bearer_token_secret_ref: NamespacedName | None = None
    """Secret whose key token is sent as Authorization: Bearer."""
    tls_client_certificate_secret_ref: NamespacedName | None = None
    """Secret with tls.crt and tls.key for mutual TLS."""


class TopologySourceSpec(CrdModel):
    """Selected Nodes, the level hierarchy and exactly one inventory arm."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "[has(self.nodeLabels), has(self.configMap), has(self.webhook)].filter(x, x).size() == 1",
                    "exactly one of nodeLabels, configMap and webhook must be set",
                ),
                cel(
                    "!(has(self.nodeLabels) && has(self.additionalWritePrefix))",
                    "additionalWritePrefix is forbidden with nodeLabels (that arm never writes)",
                    fieldPath=".additionalWritePrefix",
                ),
            ]
        }
    )

    node_selector: LabelSelector
    """Nodes this source may describe; {} selects all."""
    levels: list[LevelKey] = Field(
        min_length=1,
        max_length=SOURCE_LEVELS_MAX,
        description=(
            f"Ordered label keys, coarsest first, at most {SOURCE_LEVELS_MAX} ({keys.HOSTNAME} is appended "
            f"implicitly and a Kueue Topology holds at most {KUEUE_TOPOLOGY_LEVELS_MAX} levels)."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "atomic",
            "x-kubernetes-validations": [
                cel("self.all(l, self.filter(m, m == l).size() == 1)", "levels must not repeat"),
                cel(
                    f"!self.exists(l, l == '{keys.HOSTNAME}')",
                    f"{keys.HOSTNAME} is always appended implicitly and must not be listed",
                ),
            ],
        },
    )
    additional_write_prefix: str | None = Field(
        default=None,
        max_length=254,
        pattern=WRITE_PREFIX_PATTERN,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    f"!{_FORBIDDEN_LIST}.exists(d, self == d + '/' || self.endsWith('.' + d + '/'))",
                    "additionalWritePrefix must not be (a subdomain of) a reserved prefix: "
                    + ", ".join(FORBIDDEN_WRITE_PREFIXES),
                )
            ]
        },
    )
    """One extra admin-owned label prefix snapshots may write, e.g. topology.example.com/."""
    node_labels: TopologySourceNodeLabels | None = None
    config_map: TopologySourceConfigMap | None = None
    webhook: TopologySourceWebhook | None = None


class TopologySourceStatus(CrdModel):
    """What the reconciler observed and applied."""

    observed_generation: Int64 | None = None
    source_kind: Literal["", "NodeLabels", "ConfigMap", "Webhook"] | None = None
    """NodeLabels, ConfigMap or Webhook (empty when no arm is set)."""
    last_successful_revision: str | None = None
    """Revision of the last applied snapshot (writing arms)."""
    last_successful_refresh_time: datetime | None = None
    """Time of the last successful apply: the staleness clock."""
    selected_nodes: Int32 | None = Field(default=None, ge=0)
    mutated_nodes: Int32 | None = Field(default=None, ge=0)
    """NodeFeatures created, updated or deleted in the latest reconcile."""
    conflicted_nodes: Int32 | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=CONDITIONS)
    """Ready, Valid, OwnershipConflict."""


class TopologySource(KubeObject):
    """A declaration of a topology inventory for a set of Nodes."""

    CRD = CrdNames(
        resource=kinds.TOPOLOGY_SOURCE,
        short_names=("toposrc",),
        printer_columns=(
            PrinterColumn(name="Kind", type="string", json_path=".status.sourceKind"),
            PrinterColumn(name="Revision", type="string", json_path=".status.lastSuccessfulRevision"),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )

    spec: TopologySourceSpec
    status: TopologySourceStatus | None = None
