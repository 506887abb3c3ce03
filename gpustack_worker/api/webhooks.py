"""Our admission webhooks: the one source of their configuration, like :mod:`~gpustack_worker.api.rbac` is
of our RBAC.

The controller process serves them over HTTPS (:class:`gpustack_worker.runtime.webhook_server.WebhookServer`,
on every replica, leader or not: admission must work while a standby serves). The API server reaches it

* in a cluster — through the Service :data:`SERVICE_NAME` (port 443 → the pods' ``webhook`` port), with the
  chart's generated CA as ``caBundle`` (``chart/templates/webhook-validating.yaml`` is generated from this
  module by ``python -m gpustack_worker.api.webhookgen``);
* in the local control plane — by URL (``https://127.0.0.1:<port><path>``) with the dev cluster's CA
  (:mod:`gpustack_worker.devcluster.worker_webhooks`).

The TopologySource webhook runs on CREATE and UPDATE with ``failurePolicy: Fail`` and
``timeoutSeconds: 10``, as GPUStack registers its own: a source changes cluster-wide admission, so none is
stored unchecked while the webhook is down (docs/topology.md, "Admission webhook").

The Workload fit pin is a mutating webhook on ``kueue.x-k8s.io/v1beta2`` ``workloads``,
CREATE and UPDATE, ``failurePolicy: Ignore`` (it never denies; a Workload admitted while it is down is only
unpinned), ``timeoutSeconds: 10``, with the matchCondition :data:`WORKLOAD_FIT_MATCH` so the API server
calls it only for Workloads queued at an operator entrance (``gpustack-fnv64-…``). Its configuration
:data:`MUTATING_CONFIGURATION` (``chart/templates/webhook-mutating.yaml``) sorts before Kueue's
``kueue-mutating-webhook-configuration``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "ADMISSION_REGISTRATION_API",
    "CERT_SECRET",
    "CONTAINER_PORT",
    "MUTATING",
    "MUTATING_CONFIGURATION",
    "PORT_NAME",
    "SERVICE_NAME",
    "SERVICE_PORT",
    "TIMEOUT_SECONDS",
    "TOPOLOGY_SOURCE_PATH",
    "TOPOLOGY_SOURCE_WEBHOOK",
    "VALIDATING",
    "VALIDATING_CONFIGURATION",
    "WORKLOAD_FIT_MATCH",
    "WORKLOAD_FIT_PATH",
    "WORKLOAD_FIT_WEBHOOK",
    "ClientConfigFor",
    "Webhook",
    "mutating_configuration",
    "service_client_config",
    "url_client_config",
    "validating_configuration",
)

ADMISSION_REGISTRATION_API: Final = "admissionregistration.k8s.io/v1"
#: The ValidatingWebhookConfiguration holding every validating webhook of ours.
VALIDATING_CONFIGURATION: Final = "gpustack-worker-validating"
#: The TopologySource webhook: its name (what the API server quotes when it refuses) and URL path.
TOPOLOGY_SOURCE_WEBHOOK: Final = "topologysources.worker.gpustack.ai"
TOPOLOGY_SOURCE_PATH: Final = "/validate-worker-gpustack-ai-v1alpha1-topologysource"
#: The MutatingWebhookConfiguration holding every mutating webhook of ours (prefix ``gpustack-worker``).
MUTATING_CONFIGURATION: Final = "gpustack-worker-workload-fit"
#: The Workload fit pin (docs/admission.md, "The fit pin"): its name, URL path and matchCondition (CEL,
#: on the new object).
WORKLOAD_FIT_WEBHOOK: Final = "workload-fit.worker.gpustack.ai"
WORKLOAD_FIT_PATH: Final = "/mutate-kueue-x-k8s-io-v1beta2-workload-fit"
WORKLOAD_FIT_MATCH: Final = (
    f"has(object.spec.queueName) && object.spec.queueName.startsWith('{keys.LOCAL_QUEUE_PREFIX}')"
)
#: The chart's Service in front of the controller pods, its port, and the pods' named container port.
SERVICE_NAME: Final = "gpustack-worker-webhook"
SERVICE_PORT: Final = 443
PORT_NAME: Final = "webhook"
CONTAINER_PORT: Final = 9443
#: The chart's Secret with the serving certificate (tls.crt, tls.key) and its CA (ca.crt).
CERT_SECRET: Final = "gpustack-worker-webhook-certs"
#: The API server's deadline for one call (GPUStack's value for both webhooks).
TIMEOUT_SECONDS: Final = 10


@dataclass(frozen=True, slots=True)
class Webhook:
    """One webhook: the resource it guards, on which operations, at which path; what the API server does
    when it cannot be called (``failure_policy``), and the ``(name, CEL expression)`` matchConditions that
    must all hold for it to be called."""

    name: str
    path: str
    resource: Resource
    operations: tuple[str, ...]
    failure_policy: str = "Fail"
    match_conditions: tuple[tuple[str, str], ...] = ()


#: Every validating webhook of ours, in the order of the configuration.
VALIDATING: Final[tuple[Webhook, ...]] = (
    Webhook(TOPOLOGY_SOURCE_WEBHOOK, TOPOLOGY_SOURCE_PATH, kinds.TOPOLOGY_SOURCE, ("CREATE", "UPDATE")),
)

#: Every mutating webhook of ours, in the order of the configuration.
MUTATING: Final[tuple[Webhook, ...]] = (
    Webhook(
        WORKLOAD_FIT_WEBHOOK,
        WORKLOAD_FIT_PATH,
        kinds.WORKLOAD,
        ("CREATE", "UPDATE"),
        failure_policy="Ignore",
        match_conditions=(("gpustack-entrance-queue", WORKLOAD_FIT_MATCH),),
    ),
)

#: A webhook path → its ``clientConfig``.
ClientConfigFor: TypeAlias = Callable[[str], dict[str, Any]]


def url_client_config(base_url: str, ca_bundle: bytes) -> ClientConfigFor:
    """``clientConfig`` by URL (``base_url`` + path) with a PEM CA bundle (the local control plane)."""
    ca = base64.b64encode(ca_bundle).decode()
    base = base_url.rstrip("/")
    return lambda path: {"url": f"{base}{path}", "caBundle": ca}


def service_client_config(namespace: str, ca_bundle: str) -> ClientConfigFor:
    """``clientConfig`` through :data:`SERVICE_NAME` in ``namespace``; ``ca_bundle`` already base64."""
    return lambda path: {
        "service": {"namespace": namespace, "name": SERVICE_NAME, "port": SERVICE_PORT, "path": path},
        "caBundle": ca_bundle,
    }


def _webhook(hook: Webhook, client_config: ClientConfigFor, *, mutating: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": hook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config(hook.path),
        "failurePolicy": hook.failure_policy,
        "matchPolicy": "Equivalent",
        "rules": [
            {
                "apiGroups": [hook.resource.group],
                "apiVersions": [hook.resource.version],
                "operations": list(hook.operations),
                "resources": [hook.resource.plural],
                "scope": "Namespaced" if hook.resource.namespaced else "Cluster",
            }
        ],
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
    }
    if hook.match_conditions:
        doc["matchConditions"] = [{"name": n, "expression": e} for n, e in hook.match_conditions]
    if mutating:
        # Our patch does not depend on what later webhooks change; one call is enough.
        doc["reinvocationPolicy"] = "Never"
    return doc


def _meta(name: str, labels: Mapping[str, str] | Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels) if isinstance(labels, Mapping) else labels
    return meta


def validating_configuration(
    client_config: ClientConfigFor, *, labels: Mapping[str, str] | Any = None
) -> dict[str, Any]:
    """The ``ValidatingWebhookConfiguration`` :data:`VALIDATING_CONFIGURATION` with every webhook of
    :data:`VALIDATING`, reached through ``client_config``; ``labels`` as given (the chart passes a marker)."""
    return {
        "apiVersion": ADMISSION_REGISTRATION_API,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": _meta(VALIDATING_CONFIGURATION, labels),
        "webhooks": [_webhook(hook, client_config) for hook in VALIDATING],
    }


def mutating_configuration(
    client_config: ClientConfigFor, *, labels: Mapping[str, str] | Any = None
) -> dict[str, Any]:
    """The ``MutatingWebhookConfiguration`` :data:`MUTATING_CONFIGURATION` with every webhook of
    :data:`MUTATING`, reached through ``client_config``; ``labels`` as given."""
    return {
        "apiVersion": ADMISSION_REGISTRATION_API,
        "kind": "MutatingWebhookConfiguration",
        "metadata": _meta(MUTATING_CONFIGURATION, labels),
        "webhooks": [_webhook(hook, client_config, mutating=True) for hook in MUTATING],
    }
