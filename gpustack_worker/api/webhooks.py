"""Our admission webhooks: the one source of their configuration, like :mod:`~gpustack_worker.api.rbac` is
of our RBAC.

The controller process serves them over HTTPS (:class:`gpustack_worker.runtime.webhook_server.WebhookServer`,
on every replica, leader or not: admission must work while a standby serves). The API server reaches it

* in a cluster — through the Service :data:`SERVICE_NAME` (port 443 → the pods' ``webhook`` port), with the
  chart's generated CA as ``caBundle`` (``chart/templates/webhook-validating.yaml`` is generated from this
  module by ``python -m gpustack_worker.api.webhookgen``);
* in the local control plane — by URL (``https://127.0.0.1:<port><path>``) with the dev cluster's CA
  (:mod:`gpustack_worker.devcluster.worker_webhooks`).

Reference §2.1: the TopologySource webhook runs on CREATE and UPDATE with ``failurePolicy: Fail`` and
``timeoutSeconds: 10``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "ADMISSION_REGISTRATION_API",
    "CERT_SECRET",
    "CONTAINER_PORT",
    "PORT_NAME",
    "SERVICE_NAME",
    "SERVICE_PORT",
    "TIMEOUT_SECONDS",
    "TOPOLOGY_SOURCE_PATH",
    "TOPOLOGY_SOURCE_WEBHOOK",
    "VALIDATING",
    "VALIDATING_CONFIGURATION",
    "ClientConfigFor",
    "Webhook",
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
#: The chart's Service in front of the controller pods, its port, and the pods' named container port.
SERVICE_NAME: Final = "gpustack-worker-webhook"
SERVICE_PORT: Final = 443
PORT_NAME: Final = "webhook"
CONTAINER_PORT: Final = 9443
#: The chart's Secret with the serving certificate (tls.crt, tls.key) and its CA (ca.crt).
CERT_SECRET: Final = "gpustack-worker-webhook-certs"
#: The API server's deadline for one call (reference §2.1).
TIMEOUT_SECONDS: Final = 10


@dataclass(frozen=True, slots=True)
class Webhook:
    """One validating webhook: the resource it guards, on which operations, at which path."""

    name: str
    path: str
    resource: Resource
    operations: tuple[str, ...]


#: Every validating webhook of ours, in the order of the configuration.
VALIDATING: Final[tuple[Webhook, ...]] = (
    Webhook(TOPOLOGY_SOURCE_WEBHOOK, TOPOLOGY_SOURCE_PATH, kinds.TOPOLOGY_SOURCE, ("CREATE", "UPDATE")),
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


def _webhook(hook: Webhook, client_config: ClientConfigFor) -> dict[str, Any]:
    return {
        "name": hook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config(hook.path),
        "failurePolicy": "Fail",
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


def validating_configuration(
    client_config: ClientConfigFor, *, labels: Mapping[str, str] | Any = None
) -> dict[str, Any]:
    """The ``ValidatingWebhookConfiguration`` :data:`VALIDATING_CONFIGURATION` with every webhook of
    :data:`VALIDATING`, reached through ``client_config``; ``labels`` as given (the chart passes a marker)."""
    meta: dict[str, Any] = {"name": VALIDATING_CONFIGURATION}
    if labels is not None:
        meta["labels"] = dict(labels) if isinstance(labels, Mapping) else labels
    return {
        "apiVersion": ADMISSION_REGISTRATION_API,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [_webhook(hook, client_config) for hook in VALIDATING],
    }
