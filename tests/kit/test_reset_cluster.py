"""The reset between modules leaves nothing behind, on the session's control plane.

A module-sized mess of every kind a module leaves: a scenario's Nodes, Devices and NodeFeatures; Kueue
queues and flavors (Kueue's finalizers on them) with a LocalQueue in a namespace of the test's; an
InstanceType and a ModelDeployment held by our finalizer; a webhook that refuses every ConfigMap write
(so it must go before anything it would refuse); the settings ConfigMap written; a baseline Node
relabelled and given capacity in its status; a baseline CRD annotated; a baseline ClusterRole deleted;
a baseline CRD deleted while an object of it holds a finalizer (it stays Terminating until that goes);
Pods bound to a Node no kubelet runs, one already Terminating (CI found them left by an earlier module).
After :func:`tests.kit.cluster.shared_baseline`, :func:`tests.kit.cluster.leftovers` is empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit import cluster as kit_cluster
from tests.kit import kueue

if TYPE_CHECKING:
    from gpustack_worker.devcluster.bootstrap import ApiBootstrap

pytestmark = pytest.mark.cluster

NS = "reset-mess"
NFD_NODE = "devcluster-nfd-master"


def _ok(api: ApiBootstrap, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    resp = api.request(method, path, body)
    assert resp.is_success, f"{method} {path}: {resp.status_code} {resp.text[:300]}"
    return dict(resp.json())


def _make_a_mess(api: ApiBootstrap) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    _ok(api, "POST", "/api/v1/namespaces", namespace)
    kueue_api = f"/apis/{kinds.CLUSTER_QUEUE.group}/{kinds.KUEUE_VERSION}"
    _ok(api, "POST", f"{kueue_api}/resourceflavors", kueue.resource_flavor("reset-flavor"))
    cpu_quota = kueue.resource_group("reset-flavor", {"cpu": "4"})
    queue = kueue.cluster_queue("reset-queue", kueue.queue_spec(cpu_quota))
    _ok(api, "POST", f"{kueue_api}/clusterqueues", queue)
    _ok(api, "POST", f"{kueue_api}/namespaces/{NS}/localqueues", kueue.local_queue("reset-lq", "reset-queue"))
    ours = f"/apis/{kinds.INSTANCE_TYPE.group}/{kinds.INSTANCE_TYPE.version}"
    instance_type = _ok(
        api,
        "POST",
        f"{ours}/instancetypes",
        {
            "apiVersion": kinds.INSTANCE_TYPE.api_version,
            "kind": kinds.INSTANCE_TYPE.kind,
            "metadata": {"name": "reset-type", "finalizers": ["gpustack.ai/controlled"]},
            "spec": {
                "acceleratable": False,
                "generalGroup": "generic",
                "os": "linux",
                "arch": "amd64",
                "unitResources": {"cpu": "1", "ram": "2Gi"},
                "localStorage": "10Gi",
            },
        },
    )
    assert instance_type["metadata"]["finalizers"]
    _ok(
        api,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "reset-refuses-configmaps"},
            "webhooks": [
                {
                    "name": "refuse.reset.test",
                    "clientConfig": {"url": "https://127.0.0.1:9/refuse"},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 1,
                }
            ],
        },
    )
    api.merge_patch(f"/api/v1/nodes/{NFD_NODE}", {"metadata": {"labels": {"reset.test/touched": "yes"}}})
    status = api.merge_patch(
        f"/api/v1/nodes/{NFD_NODE}/status", {"status": {"capacity": {"example.com/widget": "3"}}}
    )
    assert status.is_success, status.text
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    crd = f"{crds}/{kinds.DEVICES.plural}.{kinds.DEVICES.group}"
    assert api.merge_patch(crd, {"metadata": {"annotations": {"reset.test/touched": "yes"}}}).is_success
    _ok(api, "DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{rbac.AGENT.name}")
    # Pods bound to a Node no kubelet runs: one left as it is, one already deleted (Terminating: only a
    # kubelet would confirm it stopped).
    for name in ("reset-bound", "reset-terminating"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": NFD_NODE, "containers": [{"name": "c", "image": "example/c:1"}]},
        }
        _ok(api, "POST", f"/api/v1/namespaces/{NS}/pods", pod)
    terminating = f"/api/v1/namespaces/{NS}/pods/reset-terminating"
    _ok(api, "DELETE", terminating)
    assert _ok(api, "GET", terminating)["metadata"].get("deletionTimestamp")
    # A baseline CRD deleted while one of its objects holds a finalizer: it stays, Terminating.
    instance_types = f"{crds}/{kinds.INSTANCE_TYPE.plural}.{kinds.INSTANCE_TYPE.group}"
    _ok(api, "DELETE", instance_types)
    assert _ok(api, "GET", instance_types)["metadata"].get("deletionTimestamp")


async def test_a_reset_leaves_nothing_behind() -> None:
    cluster = kit_cluster.shared_baseline()
    assert kit_cluster.leftovers() == []  # the baseline itself, before the mess

    client = await Client.connect(str(cluster.kubeconfig))
    try:
        await apply_scenario(client, packaged_scenario("mixed-4"))
        settings = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gpustack-settings", "namespace": kinds.SYSTEM_NAMESPACE},
            "data": {"node-management-manual": "true"},
        }
        await client.create(kinds.CONFIG_MAP, settings)
        md = {
            "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
            "kind": kinds.MODEL_DEPLOYMENT.kind,
            "metadata": {
                "name": "reset-md",
                "namespace": "default",
                "finalizers": ["gpustack.ai/controlled"],
            },
            "spec": {
                "roles": [
                    {
                        "name": "server",
                        "kind": "Server",
                        "replicas": 1,
                        "size": 1,
                        "instanceType": "reset-type",
                        "template": {
                            "spec": {"containers": [{"name": "engine", "image": "example/engine:1"}]}
                        },
                    }
                ]
            },
        }
        await client.create(kinds.MODEL_DEPLOYMENT, md)
    finally:
        await client.close()
    api = cluster.bootstrap()
    try:
        _make_a_mess(api)
    finally:
        api.close()

    left = kit_cluster.leftovers()
    kinds_left = {line.split(": ", 1)[1].split("/")[1] for line in left}
    # the mess is there, of every sort
    assert {"nodes", "devices", "nodefeatures", "clusterqueues", "localqueues", "instancetypes"} <= kinds_left
    assert {"modeldeployments", "validatingwebhookconfigurations", "configmaps", "clusterroles"} <= kinds_left
    assert {"customresourcedefinitions", "namespaces", "resourceflavors", "pods"} <= kinds_left

    kit_cluster.shared_baseline()
    assert kit_cluster.leftovers() == []
