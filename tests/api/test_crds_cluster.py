"""Our CRDs on a real API server: one valid object of each kind is stored, and the schema / CEL rules
reject what the reference forbids (reference §2)."""

from __future__ import annotations

import copy
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from gpustack_worker.api import kinds
from gpustack_worker.api.crds import Devices, InstanceType, ModelDeployment, NodeModelStore, TopologySource
from gpustack_worker.runtime.client import ApiError, Client
from tests.kit import models

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.resources import Resource

pytestmark = pytest.mark.cluster

NS = "default"
_SUFFIX = uuid.uuid4().hex[:8]


def _name(stem: str) -> str:
    return f"crdtest-{stem}-{_SUFFIX}"


def _devices() -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": _name("devices")},
        "spec": {
            "groups": [
                {
                    "id": "radeon-rx-7800-xt",
                    "manufacturer": "amd",
                    "name": "AMD Radeon RX 7800 XT",
                    "memory": 16368,
                    "cores": 60,
                    "runtimeVersion": "7.2",
                    "accelerators": [
                        {
                            "id": "GPU-5c88007d760374f3",
                            "index": 0,
                            "physicalIndexes": [1, 128],
                            "topology": {
                                "pciBusId": "0000:04:00.0",
                                "numaAffinity": "0",
                                "cpuAffinity": "0-13",
                            },
                            "status": {
                                "unhealthy": False,
                                "logicalSliced": {"coresPercentageOvercommit": True, "count": 128},
                            },
                        }
                    ],
                }
            ],
            "interfaces": [
                {"name": "ib0", "rdma": True, "state": "Active", "linkLayer": "InfiniBand", "distance": "PIX"}
            ],
        },
    }


def _topology_source(**spec: Any) -> dict[str, Any]:
    base = {
        "nodeSelector": {},
        "levels": ["topology.gpustack.ai/region", "topology.gpustack.ai/zone", "topology.gpustack.ai/rack"],
    }
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "TopologySource",
        "metadata": {"name": _name("toposrc")},
        "spec": {**base, **spec},
    }


CONFIG_MAP_ARM = {
    "configMapRef": {"namespace": "gpustack-system", "name": "topology-inventory"},
    "key": "snapshot.yaml",
    "maxStaleness": "10m",
}
REF = {"namespace": "gpustack-system", "name": "topology-inventory-token"}
WEBHOOK_ARM = {
    "url": "https://topology-inventory.gpustack-system.svc/snapshot",
    "pollInterval": "1m",
    "timeout": "10s",
    "maxStaleness": "5m",
    "bearerTokenSecretRef": REF,
}


def _instance_type(**spec: Any) -> dict[str, Any]:
    base = {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "4", "ram": "16Gi"},
        "localStorage": "100Gi",
    }
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": _name("instype")},
        "spec": {**base, **spec},
    }


def _node_model_store(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "NodeModelStore",
        "metadata": {"name": _name("nms")},
        "spec": {"watermarks": {"highPercent": 90, "lowPercent": 80}, "download": {"concurrency": 4}, **spec},
    }


def _role(name: str = "server", **fields: Any) -> dict[str, Any]:
    template = models.template(container="server", image="example.com/server:1")
    return models.role(name, template=template, **fields)


def _model_deployment(*roles: dict[str, Any]) -> dict[str, Any]:
    return models.model_deployment(_name("md"), NS, *(roles or [_role()]))


@pytest_asyncio.fixture(loop_scope="session")
async def client(devcluster: DevCluster) -> AsyncIterator[Client]:
    c = await Client.connect(str(devcluster.kubeconfig))
    try:
        yield c
    finally:
        await c.close()


async def _create_then_delete(client: Client, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
    namespace = body["metadata"].get("namespace")
    try:
        return await client.create(resource, body, namespace)
    finally:
        await client.delete(resource, body["metadata"]["name"], namespace)


@pytest.mark.parametrize(
    ("resource", "model", "body"),
    [
        (kinds.DEVICES, Devices, _devices()),
        (kinds.TOPOLOGY_SOURCE, TopologySource, _topology_source(configMap=CONFIG_MAP_ARM)),
        (kinds.TOPOLOGY_SOURCE, TopologySource, _topology_source(webhook=WEBHOOK_ARM)),
        (
            kinds.TOPOLOGY_SOURCE,
            TopologySource,
            _topology_source(nodeLabels={}, levels=["topology.kubernetes.io/zone"]),
        ),
        (kinds.INSTANCE_TYPE, InstanceType, _instance_type()),
        (
            kinds.INSTANCE_TYPE,
            InstanceType,
            _instance_type(
                acceleratable=False, acceleratorGroup=None, unitResources={"cpu": "1", "ram": "2Gi"}
            ),
        ),
        (kinds.NODE_MODEL_STORE, NodeModelStore, _node_model_store()),
        (
            kinds.MODEL_DEPLOYMENT,
            ModelDeployment,
            _model_deployment(_role(topology={"requiredLevel": "topology.kubernetes.io/zone"})),
        ),
    ],
    ids=[
        "devices",
        "toposrc-configmap",
        "toposrc-webhook",
        "toposrc-nodelabels",
        "instype",
        "instype-cpu",
        "nms",
        "md",
    ],
)
async def test_valid_object_is_stored_as_sent(
    client: Client, resource: Resource, model: type[Any], body: dict[str, Any]
) -> None:
    body = copy.deepcopy(body)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    stored = await _create_then_delete(client, resource, body)
    parsed = model.model_validate(stored)
    assert parsed.metadata.uid
    # Nothing was pruned: every field we sent comes back (defaults may add fields, never drop them).
    _assert_subset(body["spec"], stored["spec"])


def _assert_subset(sent: Any, stored: Any, path: str = "spec") -> None:
    if isinstance(sent, dict):
        assert isinstance(stored, dict), path
        for key, value in sent.items():
            assert key in stored, f"{path}.{key} was pruned"
            _assert_subset(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list):
        assert len(sent) == len(stored), path
        for i, (a, b) in enumerate(zip(sent, stored, strict=True)):
            _assert_subset(a, b, f"{path}[{i}]")
    else:
        assert sent == stored, path


async def test_server_applies_role_and_group_defaults_only(client: Client) -> None:
    stored = await _create_then_delete(client, kinds.MODEL_DEPLOYMENT, _model_deployment())
    (role,) = stored["spec"]["roles"]
    assert (role["kind"], role["replicas"], role["size"]) == ("Server", 1, 1)
    it = await _create_then_delete(client, kinds.INSTANCE_TYPE, _instance_type())
    assert it["spec"]["generalGroup"] == "generic"
    assert "inactive" not in it["spec"]  # zero-value defaults are not served
    devices = await _create_then_delete(client, kinds.DEVICES, _devices())
    assert "mode" not in str(devices["spec"])


INVALID: list[tuple[str, Resource, dict[str, Any], str]] = [
    (
        "toposrc-two-arms",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(nodeLabels={}, configMap=CONFIG_MAP_ARM),
        "exactly one of nodeLabels",
    ),
    ("toposrc-no-arm", kinds.TOPOLOGY_SOURCE, _topology_source(), "exactly one of nodeLabels"),
    (
        "toposrc-prefix-with-nodelabels",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(nodeLabels={}, additionalWritePrefix="topology.example.com/"),
        "forbidden with nodeLabels",
    ),
    (
        "toposrc-reserved-prefix",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(configMap=CONFIG_MAP_ARM, additionalWritePrefix="a.k8s.io/"),
        "reserved prefix",
    ),
    (
        "toposrc-prefix-no-slash",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(configMap=CONFIG_MAP_ARM, additionalWritePrefix="topology.example.com"),
        "additionalWritePrefix",
    ),
    (
        "toposrc-hostname-level",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(nodeLabels={}, levels=["topology.kubernetes.io/zone", "kubernetes.io/hostname"]),
        "appended implicitly",
    ),
    (
        "toposrc-duplicate-level",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(nodeLabels={}, levels=["a.io/x", "a.io/x"]),
        "must not repeat",
    ),
    (
        "toposrc-17-levels",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(nodeLabels={}, levels=[f"a.io/l{i}" for i in range(17)]),
        "levels",
    ),
    (
        "toposrc-two-credentials",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(webhook={**WEBHOOK_ARM, "tlsClientCertificateSecretRef": REF}),
        "exactly one of bearerTokenSecretRef",
    ),
    (
        "toposrc-no-credential",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(webhook={k: v for k, v in WEBHOOK_ARM.items() if k != "bearerTokenSecretRef"}),
        "exactly one of bearerTokenSecretRef",
    ),
    (
        "toposrc-timeout-over-poll",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(webhook={**WEBHOOK_ARM, "timeout": "2m"}),
        "timeout must not exceed pollInterval",
    ),
    (
        "toposrc-http-url",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(webhook={**WEBHOOK_ARM, "url": "http://inventory/snapshot"}),
        "url",
    ),
    (
        "toposrc-userinfo-url",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(webhook={**WEBHOOK_ARM, "url": "https://u:p@inventory/x"}),
        "url",
    ),
    (
        "toposrc-zero-staleness",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(configMap={**CONFIG_MAP_ARM, "maxStaleness": "0s"}),
        "greater than zero",
    ),
    (
        "toposrc-bad-duration",
        kinds.TOPOLOGY_SOURCE,
        _topology_source(configMap={**CONFIG_MAP_ARM, "maxStaleness": "10"}),
        "maxStaleness",
    ),
    ("md-size-65", kinds.MODEL_DEPLOYMENT, _model_deployment(_role(size=65)), "size"),
    ("md-replicas-1025", kinds.MODEL_DEPLOYMENT, _model_deployment(_role(replicas=1025)), "replicas"),
    (
        "md-hostname-level",
        kinds.MODEL_DEPLOYMENT,
        _model_deployment(_role(topology={"requiredLevel": "kubernetes.io/hostname"})),
        "implicit",
    ),
    ("md-duplicate-role", kinds.MODEL_DEPLOYMENT, _model_deployment(_role(), _role()), "Duplicate value"),
    ("md-no-template", kinds.MODEL_DEPLOYMENT, _model_deployment({"name": "server"}), "template"),
    (
        "instype-no-accelerator-group",
        kinds.INSTANCE_TYPE,
        _instance_type(acceleratorGroup=None),
        "acceleratorGroup is required",
    ),
    (
        "instype-cpu-only-cpu-2",
        kinds.INSTANCE_TYPE,
        _instance_type(acceleratable=False, unitResources={"cpu": "2", "ram": "2Gi"}),
        "CPU-only",
    ),
    ("instype-display-65", kinds.INSTANCE_TYPE, _instance_type(displayName="x" * 65), "displayName"),
    (
        "devices-unknown-manufacturer",
        kinds.DEVICES,
        {**_devices(), "spec": {"groups": [{"id": "x", "manufacturer": "acme", "name": "X", "memory": 1}]}},
        "manufacturer",
    ),
    (
        "devices-bad-port-state",
        kinds.DEVICES,
        {**_devices(), "spec": {"interfaces": [{"name": "ib0", "state": "Up"}]}},
        "state",
    ),
    (
        "nms-low-above-high",
        kinds.NODE_MODEL_STORE,
        _node_model_store(watermarks={"highPercent": 50, "lowPercent": 60}),
        "lowPercent must be below highPercent",
    ),
    (
        "nms-concurrency-65",
        kinds.NODE_MODEL_STORE,
        _node_model_store(download={"concurrency": 65}),
        "concurrency",
    ),
]


@pytest.mark.parametrize(
    ("resource", "body", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
async def test_invalid_object_is_rejected(
    client: Client, resource: Resource, body: dict[str, Any], message: str
) -> None:
    body = copy.deepcopy(body)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(ApiError) as err:
        await _create_then_delete(client, resource, body)
    assert err.value.status == 422, err.value
    assert message in str(err.value), err.value


async def test_role_size_and_role_set_are_immutable(client: Client) -> None:
    body = _model_deployment(_role(size=2))
    created = await client.create(kinds.MODEL_DEPLOYMENT, body, NS)
    name = created["metadata"]["name"]
    try:
        with pytest.raises(ApiError, match="size is immutable"):
            await client.patch(
                kinds.MODEL_DEPLOYMENT, name, {"spec": {"roles": [_role(size=3)]}}, namespace=NS
            )
        with pytest.raises(ApiError, match="cannot be added or removed"):
            await client.patch(
                kinds.MODEL_DEPLOYMENT,
                name,
                {"spec": {"roles": [_role(size=2), _role(name="decode", kind="Decode")]}},
                namespace=NS,
            )
        scaled = await client.patch(
            kinds.MODEL_DEPLOYMENT, name, {"spec": {"roles": [_role(size=2, replicas=3)]}}, namespace=NS
        )
        assert scaled["spec"]["roles"][0]["replicas"] == 3
    finally:
        await client.delete(kinds.MODEL_DEPLOYMENT, name, NS)


async def test_instance_type_identity_is_immutable_but_display_name_is_not(client: Client) -> None:
    created = await client.create(kinds.INSTANCE_TYPE, _instance_type())
    name = created["metadata"]["name"]
    try:
        for patch, message in (
            ({"spec": {"os": "windows"}}, "os is immutable"),
            ({"spec": {"acceleratorGroup": "nvidia-t4"}}, "acceleratorGroup is immutable"),
            ({"spec": {"unitResources": {"cpu": "8"}}}, "unitResources is immutable"),
        ):
            with pytest.raises(ApiError, match=message):
                await client.patch(kinds.INSTANCE_TYPE, name, patch)
        edited = await client.patch(
            kinds.INSTANCE_TYPE, name, {"spec": {"displayName": "A10G", "inactive": True}}
        )
        assert (edited["spec"]["displayName"], edited["spec"]["inactive"]) == ("A10G", True)
    finally:
        await client.delete(kinds.INSTANCE_TYPE, name)


async def test_status_is_a_subresource(client: Client) -> None:
    body = _topology_source(configMap=CONFIG_MAP_ARM)
    body["status"] = {"sourceKind": "Webhook"}
    created = await client.create(kinds.TOPOLOGY_SOURCE, body)
    name = created["metadata"]["name"]
    try:
        assert "status" not in created or "sourceKind" not in created["status"]
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "Observed",
            "lastTransitionTime": "2025-01-02T03:04:05Z",
        }
        patched = await client.patch(
            kinds.TOPOLOGY_SOURCE,
            name,
            {
                "status": {
                    "sourceKind": "ConfigMap",
                    "lastSuccessfulRevision": "inventory-42",
                    "conditions": [condition],
                }
            },
            subresource="status",
        )
        source = TopologySource.model_validate(patched)
        assert source.status is not None and source.status.source_kind == "ConfigMap"
        with pytest.raises(ApiError) as err:
            await client.patch(
                kinds.TOPOLOGY_SOURCE,
                name,
                {"status": {"conditions": [{**condition, "status": "Maybe"}]}},
                subresource="status",
            )
        assert err.value.status == 422
    finally:
        await client.delete(kinds.TOPOLOGY_SOURCE, name)


async def test_model_built_objects_are_accepted(client: Client) -> None:
    """What controllers send (``model.dump()``) is what the CRD accepts."""
    md = ModelDeployment.model_validate(_model_deployment(_role(replicas=3, size=8)))
    stored = await _create_then_delete(client, kinds.MODEL_DEPLOYMENT, md.dump())
    assert ModelDeployment.model_validate(stored).spec.roles[0].size == 8
    nms = NodeModelStore.model_validate({"metadata": {"name": _name("nms-built")}})
    stored = await _create_then_delete(client, kinds.NODE_MODEL_STORE, nms.dump())
    assert stored["metadata"]["name"] == _name("nms-built")
