"""The TopologySource admission webhook on the real API server: served in-process with the dev cluster's
serving certificate, registered by URL, and in force — invalid sources are refused with a message naming
the field, valid ones (reference §6.3-6.5) are stored.

The API server runs the CRD's schema and CEL rules before validating webhooks, so the refusals that
prove the webhook is called are rules only it checks: references outside the worker namespace, a
selector with an invalid label key, a URL with userinfo in its path part. The configuration is removed
in teardown (``failurePolicy: Fail`` would otherwise refuse every TopologySource write of later tests).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds, webhooks
from tests.kit.webhooks import webhooks_served

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    import httpx

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.webhook_server import WebhookServer

pytestmark = pytest.mark.cluster

NS = kinds.SYSTEM_NAMESPACE
_SUFFIX = uuid.uuid4().hex[:6]
COLLECTION = kinds.TOPOLOGY_SOURCE.collection_path()
DENIED_BY = f'admission webhook "{webhooks.TOPOLOGY_SOURCE_WEBHOOK}" denied the request'
#: Selects no Node of any other test (these sources must not take part in anyone's profiles).
NOBODY = {"matchLabels": {"admission-test.gpustack.ai/never": "true"}}


def _name(stem: str) -> str:
    return f"admission-{stem}-{_SUFFIX}"


def _source(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"nodeSelector": NOBODY, "levels": ["topology.gpustack.ai/zone"], **spec}
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": name},
        "spec": body,
    }


def _ref(name: str, namespace: str = NS) -> dict[str, str]:
    return {"namespace": namespace, "name": name}


CONFIG_MAP = {"configMapRef": _ref("topology-inventory"), "key": "snapshot.yaml", "maxStaleness": "10m"}
WEBHOOK = {
    "url": "https://topology-inventory.gpustack-system.svc/snapshot",
    "pollInterval": "1m",
    "timeout": "10s",
    "maxStaleness": "5m",
    "caBundleConfigMapRef": _ref("topology-inventory-ca"),
    "bearerTokenSecretRef": _ref("topology-inventory-token"),
}


@pytest.fixture(scope="module")
async def served(
    devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[WebhookServer]:
    """Our webhook server on 127.0.0.1, registered in the API server and called by it."""
    async with webhooks_served(devcluster, tmp_path_factory.mktemp("webhook-certs"), namespace=NS) as server:
        yield server


@pytest.fixture
def api(devcluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = devcluster.bootstrap()
    try:
        yield client
    finally:
        client.close()


async def _call(
    api: ApiBootstrap, method: str, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    return await asyncio.to_thread(api.request, method, path, body)


async def _refused(api: ApiBootstrap, source: dict[str, Any]) -> dict[str, Any]:
    resp = await _call(api, "POST", COLLECTION, source)
    assert resp.status_code == 403, resp.text
    status: dict[str, Any] = resp.json()
    assert status["reason"] == "Forbidden"
    assert status["message"].startswith(
        f"{DENIED_BY}: TopologySource {source['metadata']['name']} is invalid: "
    )
    gone = await _call(api, "GET", f"{COLLECTION}/{source['metadata']['name']}")
    assert gone.status_code == 404  # nothing stored
    return status


def _fields(status: dict[str, Any]) -> list[str]:
    return [c["field"] for c in status["details"]["causes"]]


async def test_config_map_in_another_namespace_is_refused(served: WebhookServer, api: ApiBootstrap) -> None:
    arm = {**CONFIG_MAP, "configMapRef": _ref("topology-inventory", "default")}
    status = await _refused(api, _source(_name("cm-ns"), configMap=arm))
    assert (
        "spec.configMap.configMapRef.namespace: must be the worker namespace gpustack-system (is default)"
        in (status["message"])
    )
    assert _fields(status) == ["spec.configMap.configMapRef.namespace"]
    assert served.answered[(webhooks.TOPOLOGY_SOURCE_PATH, 200)] >= 1


async def test_every_webhook_only_rule_is_named_in_one_refusal(
    served: WebhookServer, api: ApiBootstrap
) -> None:
    arm = {
        **WEBHOOK,
        "caBundleConfigMapRef": _ref("ca", "kube-system"),
        "bearerTokenSecretRef": _ref("token", "default"),
    }
    selector = {
        "matchLabels": {"bad key!": "x"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": []}],
    }
    status = await _refused(api, _source(_name("many"), nodeSelector=selector, webhook=arm))
    assert _fields(status) == [
        "spec.nodeSelector.matchLabels[bad key!]",
        "spec.nodeSelector.matchExpressions[0].values",
        "spec.webhook.caBundleConfigMapRef.namespace",
        "spec.webhook.bearerTokenSecretRef.namespace",
    ]
    for field in _fields(status):
        assert f"{field}: " in status["message"]


async def test_a_webhook_arm_with_both_credentials_is_refused(
    served: WebhookServer, api: ApiBootstrap
) -> None:
    # The CRD's CEL rule states this one too and runs first, so the API server refuses it before calling
    # the webhook; spec_check refuses it as well (tests/topology/test_spec_check.py).
    arm = {**WEBHOOK, "tlsClientCertificateSecretRef": _ref("client-cert")}
    resp = await _call(api, "POST", COLLECTION, _source(_name("both"), webhook=arm))
    assert resp.status_code == 422, resp.text
    assert "exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef" in resp.json()["message"]


@pytest.mark.parametrize(
    ("stem", "spec"),
    [
        (
            "node-labels",  # §6.3
            {
                "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
                "levels": ["topology.kubernetes.io/region", "topology.kubernetes.io/zone"],
                "nodeLabels": {},
            },
        ),
        (
            "config-map",  # §6.4
            {
                "levels": [
                    "topology.gpustack.ai/region",
                    "topology.gpustack.ai/zone",
                    "topology.gpustack.ai/rack",
                ],
                "configMap": CONFIG_MAP,
                "additionalWritePrefix": "topology.example.com/",
            },
        ),
        ("webhook", {"webhook": WEBHOOK}),  # §6.5
        (
            "topograph",  # §6.2
            {
                "nodeSelector": {},
                "levels": [
                    "topology.kubernetes.io/region",
                    "topology.kubernetes.io/zone",
                    "fabric.topograph.run/tier-2",
                    "fabric.topograph.run/tier-1",
                ],
                "nodeLabels": {},
            },
        ),
    ],
)
async def test_reference_examples_are_admitted(
    served: WebhookServer, api: ApiBootstrap, stem: str, spec: dict[str, Any]
) -> None:
    source = _source(_name(stem))
    source["spec"].update(spec)
    before = served.answered.get((webhooks.TOPOLOGY_SOURCE_PATH, 200), 0)
    counted = _webhook_metrics()
    resp = await _call(api, "POST", f"{COLLECTION}?dryRun=All", source)
    assert resp.status_code == 201, resp.text
    assert served.answered[(webhooks.TOPOLOGY_SOURCE_PATH, 200)] == before + 1  # the webhook was asked
    # ... and counted as controller-runtime counts it (controller_runtime_webhook_*{webhook=<path>})
    assert _webhook_metrics() == (counted[0] + 1, counted[1] + 1, 0.0)


def _webhook_metrics() -> tuple[float, float, float]:
    """(requests answered 200, latency observations, in flight) of the TopologySource webhook."""
    from prometheus_client import REGISTRY

    path = {"webhook": webhooks.TOPOLOGY_SOURCE_PATH}
    ok = {**path, "code": "200"}
    return (
        REGISTRY.get_sample_value("controller_runtime_webhook_requests_total", ok) or 0.0,
        REGISTRY.get_sample_value("controller_runtime_webhook_latency_seconds_count", path) or 0.0,
        REGISTRY.get_sample_value("controller_runtime_webhook_requests_in_flight", path) or 0.0,
    )


async def test_updates_are_validated_and_metadata_edits_pass(
    served: WebhookServer, api: ApiBootstrap
) -> None:
    name = _name("update")
    resp = await _call(api, "POST", COLLECTION, _source(name, nodeLabels={}))
    assert resp.status_code == 201, resp.text
    try:
        stored = resp.json()
        broken = {**stored, "spec": {**stored["spec"], "nodeSelector": {"matchLabels": {"-bad": "x"}}}}
        refused = await _call(api, "PUT", f"{COLLECTION}/{name}", broken)
        assert refused.status_code == 403, refused.text
        assert "spec.nodeSelector.matchLabels[-bad]" in refused.json()["message"]
        relabelled = {**stored, "metadata": {**stored["metadata"], "labels": {"team": "infra"}}}
        ok = await _call(api, "PUT", f"{COLLECTION}/{name}", relabelled)
        assert ok.status_code == 200, ok.text
        assert ok.json()["metadata"]["labels"] == {"team": "infra"}
        assert ok.json()["spec"] == stored["spec"]
    finally:
        deleted = await _call(api, "DELETE", f"{COLLECTION}/{name}")
        assert deleted.status_code == 200, deleted.text
