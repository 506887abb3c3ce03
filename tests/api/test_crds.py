"""The CRD models parse the reference's own example objects and keep their JSON shape."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from gpustack_worker.api import kinds
from gpustack_worker.api.crds import (
    ALL_KINDS,
    Devices,
    InstanceType,
    ModelDeployment,
    NodeModelStore,
    TopologySource,
)
from gpustack_worker.api.crds.common import parse_duration, parse_quantity
from gpustack_worker.api.crds.devices import (
    AcceleratorAllocation,
    AllocationMode,
    DevicesGroup,
    NetworkInterface,
)
from gpustack_worker.api.crds.model_deployment import Role
from gpustack_worker.api.crds.node_model_store import Kubelet
from gpustack_worker.api.crds.topology_source import TopologySourceWebhook

# Reference §8.1: `device-manager detect` output for an AMD RX 7800 XT, verbatim.
AMD_RX_7800_XT = """
- id: radeon-rx-7800-xt
  manufacturer: amd
  name: AMD Radeon RX 7800 XT
  memory: 16368
  cores: 60
  driverVersion: 6.16.13
  runtimeVersion: "7.2"
  computeCapability: gfx1101
  family: GC 11.0.0
  accelerators:
    - id: GPU-5c88007d760374f3
      index: 0
      physicalIndexes: [1, 128]
      topology: {pciBusId: "0000:04:00.0", numaAffinity: "0", cpuAffinity: 0-13}
      status:
        unhealthy: false
        logicalSliced: {coresPercentageOvercommit: true, count: 128}
"""

# Reference §6.4: the configMap source example.
CONFIGMAP_SOURCE = """
apiVersion: worker.gpustack.ai/v1alpha1
kind: TopologySource
metadata: {name: data-center}
spec:
  nodeSelector: {}
  levels: [topology.gpustack.ai/region, topology.gpustack.ai/zone, topology.gpustack.ai/rack]
  configMap:
    configMapRef: {namespace: gpustack-system, name: topology-inventory}
    key: snapshot.yaml
    maxStaleness: 10m
"""

# Reference §6.5: the webhook source example.
WEBHOOK_SOURCE = """
apiVersion: worker.gpustack.ai/v1alpha1
kind: TopologySource
metadata: {name: inventory-service}
spec:
  nodeSelector: {}
  levels: [topology.gpustack.ai/region, topology.gpustack.ai/zone, topology.gpustack.ai/rack]
  webhook:
    url: https://topology-inventory.gpustack-system.svc/snapshot
    pollInterval: 1m
    timeout: 10s
    maxStaleness: 5m
    caBundleConfigMapRef: {namespace: gpustack-system, name: topology-inventory-ca}
    bearerTokenSecretRef: {namespace: gpustack-system, name: topology-inventory-token}
"""

# Reference §6.3 and §6.2: read-only sources.
NODE_LABELS_SOURCE = """
apiVersion: worker.gpustack.ai/v1alpha1
kind: TopologySource
metadata: {name: cloud-zones}
spec:
  nodeSelector:
    matchLabels: {node-role.kubernetes.io/worker: ""}
  levels: [topology.kubernetes.io/region, topology.kubernetes.io/zone]
  nodeLabels: {}
"""
TOPOGRAPH_SOURCE = """
apiVersion: worker.gpustack.ai/v1alpha1
kind: TopologySource
metadata: {name: topograph}
spec:
  nodeSelector: {}
  levels:
    - topology.kubernetes.io/region
    - topology.kubernetes.io/zone
    - fabric.topograph.run/tier-2
    - fabric.topograph.run/tier-1
  nodeLabels: {}
"""


def test_devices_example_round_trips() -> None:
    groups = yaml.safe_load(AMD_RX_7800_XT)
    devices = Devices.model_validate(
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Devices",
            "metadata": {"name": "node-a"},
            "spec": {"groups": groups},
        }
    )
    assert devices.spec.groups is not None
    (group,) = devices.spec.groups
    assert (group.id, group.manufacturer, group.memory, group.runtime_version) == (
        "radeon-rx-7800-xt",
        "amd",
        16368,
        "7.2",
    )
    assert group.accelerators is not None
    card = group.accelerators[0]
    assert card.physical_indexes == [1, 128]
    assert card.topology is not None and card.topology.pci_bus_id == "0000:04:00.0"
    assert card.status is not None and card.status.logical_sliced is not None
    assert card.status.logical_sliced.count == 128
    assert devices.dump()["spec"]["groups"] == groups


@pytest.mark.parametrize(
    ("text", "arm"),
    [
        (CONFIGMAP_SOURCE, "configMap"),
        (WEBHOOK_SOURCE, "webhook"),
        (NODE_LABELS_SOURCE, "nodeLabels"),
        (TOPOGRAPH_SOURCE, "nodeLabels"),
    ],
    ids=["configmap-6.4", "webhook-6.5", "nodelabels-6.3", "topograph-6.2"],
)
def test_topology_source_examples_round_trip(text: str, arm: str) -> None:
    body = yaml.safe_load(text)
    source = TopologySource.model_validate(body)
    assert [a for a in ("node_labels", "config_map", "webhook") if getattr(source.spec, a) is not None] == [
        {"nodeLabels": "node_labels", "configMap": "config_map", "webhook": "webhook"}[arm]
    ]
    assert source.dump() == body


def test_parsing_tolerates_server_fields() -> None:
    body = yaml.safe_load(CONFIGMAP_SOURCE)
    body["metadata"].update(
        uid="0b7c",
        resourceVersion="42",
        generation=3,
        managedFields=[{"manager": "kubectl"}],
        creationTimestamp="2025-01-02T03:04:05Z",
    )
    body["spec"]["futureField"] = {"x": 1}
    body["status"] = {
        "sourceKind": "ConfigMap",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Observed",
                "lastTransitionTime": "2025-01-02T03:04:05Z",
            }
        ],
        "somethingNew": 1,
    }
    source = TopologySource.model_validate(body)
    assert source.metadata.generation == 3
    assert source.status is not None and source.status.conditions is not None
    assert source.status.conditions[0].reason == "Observed"


@pytest.mark.parametrize("model", ALL_KINDS, ids=lambda m: m.__name__)
def test_api_version_and_kind_come_from_the_kind_table(model: type[BaseModel]) -> None:
    resource = {
        "Devices": kinds.DEVICES,
        "TopologySource": kinds.TOPOLOGY_SOURCE,
        "InstanceType": kinds.INSTANCE_TYPE,
        "NodeModelStore": kinds.NODE_MODEL_STORE,
        "ModelDeployment": kinds.MODEL_DEPLOYMENT,
    }[model.__name__]
    assert model.CRD.resource is resource  # type: ignore[attr-defined]
    assert model.model_fields["api_version"].alias == "apiVersion"


@pytest.mark.parametrize(
    ("model", "field", "alias"),
    [
        (Kubelet, "image_gc_high_threshold_percent", "imageGCHighThresholdPercent"),
        (TopologySourceWebhook, "tls_client_certificate_secret_ref", "tlsClientCertificateSecretRef"),
        (TopologySourceWebhook, "ca_bundle_config_map_ref", "caBundleConfigMapRef"),
        (DevicesGroup, "accelerator_sliced_detail", "acceleratorSlicedDetail"),
        (NetworkInterface, "link_layer", "linkLayer"),
        (NetworkInterface, "numa_affinity", "numaAffinity"),
        (AcceleratorAllocation, "allocated_slices", "allocatedSlices"),
        (Role, "instance_type", "instanceType"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_json_names(model: type[BaseModel], field: str, alias: str) -> None:
    assert model.model_fields[field].alias == alias


def test_allocation_mode_is_a_number() -> None:
    entry = AcceleratorAllocation.model_validate(
        {"id": "GPU-1", "index": 0, "mode": 3, "remaining": 1_600_000}
    )
    assert entry.mode is AllocationMode.SLICED
    assert entry.dump()["mode"] == 3
    with pytest.raises(ValidationError):
        AcceleratorAllocation.model_validate({"id": "GPU-1", "mode": 6})


def test_unknown_manufacturer_is_rejected() -> None:
    with pytest.raises(ValidationError):
        DevicesGroup.model_validate({"id": "x", "manufacturer": "acme", "name": "Acme X", "memory": 1})


def _role(**fields: Any) -> dict[str, Any]:
    return {"name": "server", "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}, **fields}


def test_role_defaults() -> None:
    role = Role.model_validate(_role())
    assert (role.kind, role.replicas, role.size) == ("Server", 1, 1)


@pytest.mark.parametrize(
    "fields",
    [
        {"size": 65},
        {"size": 0},
        {"replicas": 0},
        {"replicas": 1025},
        {"name": "Server"},
        {"kind": "Encode"},
        {"topology": {"requiredLevel": "not a key"}},
    ],
    ids=[
        "size-65",
        "size-0",
        "replicas-0",
        "replicas-1025",
        "name-uppercase",
        "kind-unknown",
        "level-not-key",
    ],
)
def test_role_bounds(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Role.model_validate(_role(**fields))


def test_model_deployment_and_instance_type_dump() -> None:
    md = ModelDeployment.model_validate(
        {"metadata": {"name": "m", "namespace": "default"}, "spec": {"roles": [_role(replicas=3, size=8)]}}
    )
    body = md.dump()
    assert (body["apiVersion"], body["kind"]) == ("worker.gpustack.ai/v1alpha1", "ModelDeployment")
    assert body["spec"]["roles"][0]["size"] == 8
    it = InstanceType.model_validate(
        {
            "metadata": {"name": "gpustack--nvidia-a10g-linux-amd64"},
            "spec": {
                "acceleratable": True,
                "acceleratorGroup": "nvidia-a10g",
                "os": "linux",
                "arch": "amd64",
                "unitResources": {"cpu": "4", "ram": "16Gi"},
                "localStorage": "100Gi",
            },
            "status": {"accelerator": {"capacity": 4, "remaining": "3", "onceMaxRequest": "1"}},
        }
    )
    assert it.spec.general_group == "generic"
    assert it.status is not None and it.status.accelerator is not None
    assert it.status.accelerator.capacity == "4"
    nms = NodeModelStore.model_validate({"metadata": {"name": "node-a"}})
    assert nms.dump() == {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "NodeModelStore",
        "metadata": {"name": "node-a"},
        "spec": {},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", timedelta(minutes=10)),
        ("1m", timedelta(minutes=1)),
        ("10s", timedelta(seconds=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
        ("0s", timedelta()),
    ],
    ids=["10m", "1m", "10s", "1h30m", "fraction", "ms", "zero"],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["10", "-1s", "", "1d", "m"], ids=["no-unit", "negative", "empty", "days", "no-number"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_zero_duration_is_rejected_by_the_model() -> None:
    body = yaml.safe_load(CONFIGMAP_SOURCE)
    body["spec"]["configMap"]["maxStaleness"] = "0s"
    with pytest.raises(ValidationError, match="greater than zero"):
        TopologySource.model_validate(body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16Gi", Decimal(16 * 2**30)),
        ("24Gi", Decimal(24 * 2**30)),
        ("100Gi", Decimal(100 * 2**30)),
        ("500m", Decimal("0.5")),
        ("1.5k", Decimal(1500)),
        ("1e3", Decimal(1000)),
        ("2", Decimal(2)),
        (4, Decimal(4)),
    ],
    ids=["16Gi", "24Gi", "100Gi", "milli", "kilo-fraction", "exponent", "plain", "int"],
)
def test_parse_quantity(text: str | int, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "1GB", "Gi", "1.2.3"], ids=["empty", "GB", "no-number", "two-dots"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)
