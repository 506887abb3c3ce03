"""The ingest transform: what is kept, what is stripped, and that the result is immutable."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.runtime.frozen import FrozenDict, thaw
from gpustack_worker.runtime.transform import LAST_APPLIED, make_transform

MANAGER = "gpustack-worker/node-agent"

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-node-1",
        "uid": "u",
        "resourceVersion": "7",
        "labels": {"kubernetes.io/hostname": "gpu-node-1", "nvidia.com/gpu.product": "NVIDIA-H100"},
        "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
        "managedFields": [
            {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}, "time": "t"},
            {
                "manager": MANAGER,
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "t",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}},
            },
        ],
    },
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    "status": {
        "capacity": {"cpu": "64", "pods": "110"},
        "allocatable": {"cpu": "63", "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "images": [{"names": ["registry/cuda:12"], "sizeBytes": 1}],
        "nodeInfo": {"kubeletVersion": "v1.35.4"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
    },
}
CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "namespace": "ns", "managedFields": [{"manager": "kubectl"}]},
    "data": {"k": "v"},
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            NODE,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "gpu-node-1",
                    "uid": "u",
                    "resourceVersion": "7",
                    "labels": NODE["metadata"]["labels"],
                    "annotations": {"keep": "me"},
                    "managedFields": [
                        {
                            "manager": MANAGER,
                            "operation": "Apply",
                            "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}},
                        }
                    ],
                },
                "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"cpu": "64", "pods": "110"},
                    "allocatable": {"cpu": "63", "pods": "110"},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                },
            },
        ),
        (
            CONFIGMAP,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "ns"},
                "data": {"k": "v"},
            },
        ),
    ],
    ids=["gpu-node", "configmap-foreign-managers-dropped"],
)
def test_transform_keeps_only_what_reconcilers_read(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    out = make_transform([MANAGER])(copy.deepcopy(obj))
    assert thaw(out) == expected


def test_projection_is_immutable_and_interned() -> None:
    a = make_transform()(copy.deepcopy(NODE))
    b = make_transform()(copy.deepcopy(NODE))
    assert isinstance(a, FrozenDict)
    with pytest.raises(TypeError):
        a["metadata"]["labels"]["x"] = "y"
    with pytest.raises(TypeError):
        a.update({})
    assert isinstance(a["spec"]["taints"], tuple)
    # equal label strings from two objects are the same interned object
    assert (
        a["metadata"]["labels"]["nvidia.com/gpu.product"] is b["metadata"]["labels"]["nvidia.com/gpu.product"]
    )


def test_transform_says_whose_managed_fields_it_keeps() -> None:
    transform = make_transform([MANAGER, "other"])
    assert transform.field_managers == {MANAGER, "other"}
    assert make_transform().field_managers == frozenset()
    kept = transform(copy.deepcopy(NODE))["metadata"]["managedFields"]
    assert [e["manager"] for e in kept] == [MANAGER]  # kubelet's entry is not among those kept
