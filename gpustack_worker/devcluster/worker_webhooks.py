"""Our own admission webhooks, registered in the local control plane by URL.

In a cluster the chart registers :func:`gpustack_worker.api.webhooks.validating_configuration` and
:func:`~gpustack_worker.api.webhooks.mutating_configuration` behind the ``gpustack-worker-webhook``
Service. Here there is no Service network: a controller process (or a test) serves the webhooks on
127.0.0.1 with the dev cluster's serving certificate (valid for 127.0.0.1), and :func:`register` installs
the same two configurations with ``clientConfig.url`` pointing at it and the dev cluster's CA as
``caBundle``.

``failurePolicy: Fail`` means every TopologySource write is refused while nothing answers at that URL:
call :func:`unregister` when the server stops (it removes both configurations). The Workload fit pin is
``failurePolicy: Ignore``: a server that does not serve its path (404) or is gone only leaves Workloads
unpinned. :func:`served` is a readiness check — the API server
really calls the webhook: a dry-run create of a TopologySource that only the webhook can refuse (a
ConfigMap reference outside the worker namespace, which the CRD's schema and CEL rules accept) comes
back refused by ``topologysources.worker.gpustack.ai`` naming the field. :func:`wait_served` polls it.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds, webhooks

if TYPE_CHECKING:
    from gpustack_worker.devcluster.bootstrap import ApiBootstrap

__all__ = (
    "PROBE_NAME",
    "configuration",
    "configurations",
    "probe_source",
    "register",
    "served",
    "unregister",
    "wait_served",
)

_COLLECTION: Final = f"/apis/{webhooks.ADMISSION_REGISTRATION_API}/validatingwebhookconfigurations"
_MUTATING_COLLECTION: Final = f"/apis/{webhooks.ADMISSION_REGISTRATION_API}/mutatingwebhookconfigurations"
_LABELS: Final = {"app.kubernetes.io/name": "gpustack-worker"}
PROBE_NAME: Final = "devcluster-worker-webhook-probe"
#: The field only our webhook refuses in :func:`probe_source`.
_PROBE_FIELD: Final = "spec.configMap.configMapRef.namespace"


def configuration(base_url: str, ca_bundle: bytes) -> dict[str, Any]:
    """Our ValidatingWebhookConfiguration calling ``base_url`` (``https://127.0.0.1:<port>``)."""
    return webhooks.validating_configuration(webhooks.url_client_config(base_url, ca_bundle), labels=_LABELS)


def configurations(base_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Every configuration of ours calling ``base_url``: the validating one, then the mutating one."""
    client_config = webhooks.url_client_config(base_url, ca_bundle)
    return [
        webhooks.validating_configuration(client_config, labels=_LABELS),
        webhooks.mutating_configuration(client_config, labels=_LABELS),
    ]


def _collection(doc: dict[str, Any]) -> str:
    return _MUTATING_COLLECTION if doc["kind"] == "MutatingWebhookConfiguration" else _COLLECTION


def _put(api: ApiBootstrap, doc: dict[str, Any]) -> str:
    """Create ``doc``, or replace the one already there; returns its name."""
    name = str(doc["metadata"]["name"])
    collection = _collection(doc)
    resp = api.request("POST", collection, doc)
    if resp.status_code == 409:
        current = api.request("GET", f"{collection}/{name}")
        current.raise_for_status()
        body = copy.deepcopy(doc)
        body["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
        resp = api.request("PUT", f"{collection}/{name}", body)
    if not resp.is_success:
        raise RuntimeError(f"registering {doc['kind']} {name}: HTTP {resp.status_code}: {resp.text[:500]}")
    return name


def register(api: ApiBootstrap, base_url: str, ca_bundle: bytes) -> str:
    """Create our configurations (validating and mutating), or replace those already there; returns the
    validating one's name (:data:`~gpustack_worker.api.webhooks.VALIDATING_CONFIGURATION`)."""
    validating, mutating = configurations(base_url, ca_bundle)
    name = _put(api, validating)
    _put(api, mutating)
    return name


def _delete(api: ApiBootstrap, collection: str, kind: str, name: str) -> bool:
    resp = api.request("DELETE", f"{collection}/{name}")
    if resp.status_code == 404:
        return False
    if not resp.is_success:
        raise RuntimeError(f"deleting {kind} {name}: HTTP {resp.status_code}: {resp.text[:500]}")
    return True


def unregister(api: ApiBootstrap) -> bool:
    """Delete our configurations; whether the validating one was there (the mutating one goes too)."""
    mutating = webhooks.MUTATING_CONFIGURATION
    try:
        return _delete(api, _COLLECTION, "ValidatingWebhookConfiguration", webhooks.VALIDATING_CONFIGURATION)
    finally:
        _delete(api, _MUTATING_COLLECTION, "MutatingWebhookConfiguration", mutating)


def probe_source() -> dict[str, Any]:
    """A TopologySource the schema accepts and our webhook refuses (its ConfigMap is in ``default``)."""
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": PROBE_NAME},
        "spec": {
            "nodeSelector": {},
            "levels": ["topology.gpustack.ai/zone"],
            "configMap": {
                "configMapRef": {"namespace": "default", "name": "inventory"},
                "key": "snapshot.yaml",
                "maxStaleness": "10m",
            },
        },
    }


def served(api: ApiBootstrap) -> bool:
    """Whether the API server calls our webhook right now (one dry-run create, nothing stored)."""
    resp = api.request("POST", f"{kinds.TOPOLOGY_SOURCE.collection_path()}?dryRun=All", probe_source())
    return (
        resp.status_code == 403
        and webhooks.TOPOLOGY_SOURCE_WEBHOOK in resp.text
        and _PROBE_FIELD in resp.text
    )


def wait_served(api: ApiBootstrap, timeout: float = 60.0) -> None:
    """Poll :func:`served` until true; RuntimeError after ``timeout`` seconds.

    Blocking: never call it on the event loop that runs the webhook server (the API server's call could
    not be answered) — use ``asyncio.to_thread``.
    """
    deadline = time.monotonic() + timeout
    while not served(api):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the API server does not call {webhooks.TOPOLOGY_SOURCE_WEBHOOK} after {timeout:.0f}s"
            )
        time.sleep(0.2)
