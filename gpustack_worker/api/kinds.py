"""Every kind the project reads or writes, declared once."""

from __future__ import annotations

from typing import Final

from gpustack_worker.runtime.resources import CONFIG_MAP as CONFIG_MAP  # the runtime's own kinds, re-exported
from gpustack_worker.runtime.resources import EVENT as EVENT
from gpustack_worker.runtime.resources import LEASE as LEASE
from gpustack_worker.runtime.resources import FieldHints, Resource

WORKER_GROUP: Final = "worker.gpustack.ai"
WORKER_VERSION: Final = "v1alpha1"
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"

# core / built-in
# Field hints (the schema's list/map types, quantity fields, defaults inside atomic values) for every kind
# a controller applies: the apply no-op check is exact only with them. Taken from the kinds' schemas
# (k8s.io/api core/v1, Kueue v0.19 and NFD v0.19 CRDs, ours) and checked against the real API server by
# tests/runtime/test_capture_cluster.py; for the CRD kinds, tests/api/test_kinds_hints_cluster.py compares
# them with the served schemas. Lists not declared are atomic, maps granular (the CRD defaults).
_CONDITIONS: Final = {"status.conditions": ("type",)}
NODE_HINTS: Final = FieldHints(
    keyed={**_CONDITIONS, "status.addresses": ("type",)},
    sets=("spec.podCIDRs",),
    quantities=("status.capacity.*", "status.allocatable.*"),
)
NODE: Final = Resource("", "v1", "Node", "nodes", namespaced=False, hints=NODE_HINTS)
NAMESPACE: Final = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
POD: Final = Resource("", "v1", "Pod", "pods", namespaced=True)
CSI_NODE: Final = Resource("storage.k8s.io", "v1", "CSINode", "csinodes", namespaced=False)
SECRET: Final = Resource("", "v1", "Secret", "secrets", namespaced=True)
CRD: Final = Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)

# ours
_PROFILES: Final = ("name",)
DEVICES_HINTS: Final = FieldHints(
    keyed={
        "spec.groups": ("id", "manufacturer"),
        "spec.groups[].accelerators": ("id",),
        "spec.groups[].acceleratorSlicedDetail.physical.profiles": _PROFILES,
        "spec.groups[].accelerators[].status.physicalSliced.profiles": _PROFILES,
        "spec.interfaces": ("name",),
        "status.groups": ("id", "manufacturer"),
        "status.groups[].accelerators": ("id",),
        "status.groups[].accelerators[].allocatedProfiles": _PROFILES,
        "status.groups[].accelerators[].remainingProfiles": _PROFILES,
    }
)
DEVICES: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "Devices", "devices", namespaced=False, hints=DEVICES_HINTS
)
TOPOLOGY_SOURCE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "TopologySource", "topologysources", namespaced=False
)
_VIEWS: Final = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")
INSTANCE_TYPE_HINTS: Final = FieldHints(
    keyed={
        "status.acceleratorPartitioned.allocatedProfiles": ("name",),
        "status.acceleratorPartitioned.remainingProfiles": ("name",),
        "status.detail.slicedDetail.physical.profiles": ("name",),
    },
    quantities=tuple(
        f"status.{view}.{field}" for view in _VIEWS for field in ("capacity", "onceMaxRequest", "remaining")
    ),
)
INSTANCE_TYPE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "InstanceType", "instancetypes", namespaced=False, hints=INSTANCE_TYPE_HINTS
)
NODE_MODEL_STORE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "NodeModelStore", "nodemodelstores", namespaced=False
)
# ModelDeployment: the placement controllers apply status (roles by name, conditions by type).
MODEL_DEPLOYMENT_HINTS: Final = FieldHints(
    keyed={**_CONDITIONS, "spec.roles": ("name",), "status.roles": ("name",)}
)
MODEL_DEPLOYMENT: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "ModelDeployment", "modeldeployments", True, hints=MODEL_DEPLOYMENT_HINTS
)

# NFD
# NodeFeature: labels and feature maps are granular maps of plain strings; instance elements are atomic.
NODE_FEATURE: Final = Resource(
    "nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures", namespaced=True, hints=FieldHints()
)
NODE_FEATURE_RULE: Final = Resource(
    "nfd.k8s-sigs.io", "v1alpha1", "NodeFeatureRule", "nodefeaturerules", namespaced=False
)

# Kueue (read and write only the storage version v1beta2)
# ResourceFlavor: nodeLabels is an atomic map of plain strings (never quantities); taints and
# tolerations are atomic lists.
RESOURCE_FLAVOR_HINTS: Final = FieldHints(atomic=("spec.nodeLabels",))
# ClusterQueue: resourceGroups is atomic (so is everything inside it, whatever the inner lists' types);
# the admission checks merge by name, their onFlavors as a set.
_QUOTA: Final = "spec.resourceGroups[].flavors[].resources[]"
# Both queues report usage per flavor and resource in status (Kueue writes it; declared for completeness).
_USAGE_KEYED: Final = {
    f"status.{usage}{inner}": ("name",)
    for usage in ("flavorsReservation", "flavorsUsage")
    for inner in ("", "[].resources")
}
_USAGE: Final = tuple(f"status.{usage}[].resources[]" for usage in ("flavorsReservation", "flavorsUsage"))
CLUSTER_QUEUE_HINTS: Final = FieldHints(
    keyed={**_CONDITIONS, **_USAGE_KEYED, "spec.admissionChecksStrategy.admissionChecks": ("name",)},
    sets=("spec.admissionChecksStrategy.admissionChecks[].onFlavors",),
    atomic=("spec.namespaceSelector",),
    quantities=(
        f"{_QUOTA}.nominalQuota",
        f"{_QUOTA}.borrowingLimit",
        f"{_QUOTA}.lendingLimit",
        "spec.fairSharing.weight",
        *(f"{usage}.{field}" for usage in _USAGE for field in ("total", "borrowed")),
    ),
)
LOCAL_QUEUE_HINTS: Final = FieldHints(
    keyed={**_CONDITIONS, **_USAGE_KEYED},
    quantities=(
        "spec.fairSharing.weight",
        "status.fairSharing.admissionFairSharingStatus.consumedResources.*",
        *(f"{usage}.total" for usage in _USAGE),
    ),
)
RESOURCE_FLAVOR: Final = Resource(
    KUEUE_GROUP, KUEUE_VERSION, "ResourceFlavor", "resourceflavors", False, hints=RESOURCE_FLAVOR_HINTS
)
CLUSTER_QUEUE: Final = Resource(
    KUEUE_GROUP, KUEUE_VERSION, "ClusterQueue", "clusterqueues", False, hints=CLUSTER_QUEUE_HINTS
)
LOCAL_QUEUE: Final = Resource(
    KUEUE_GROUP, KUEUE_VERSION, "LocalQueue", "localqueues", True, hints=LOCAL_QUEUE_HINTS
)
# Topology: levels is an atomic list; nothing else to declare.
TOPOLOGY: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "Topology", "topologies", False, hints=FieldHints())
ADMISSION_CHECK_HINTS: Final = FieldHints(keyed=_CONDITIONS)
ADMISSION_CHECK: Final = Resource(
    KUEUE_GROUP, KUEUE_VERSION, "AdmissionCheck", "admissionchecks", False, hints=ADMISSION_CHECK_HINTS
)
# Workload: the check controllers apply their own ``status.admissionChecks`` entry (a list keyed by name).
WORKLOAD_HINTS: Final = FieldHints(keyed={**_CONDITIONS, "status.admissionChecks": ("name",)})
WORKLOAD: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "Workload", "workloads", True, hints=WORKLOAD_HINTS)

#: The namespace the worker runs in and writes its namespaced objects (NodeFeatures) to.
SYSTEM_NAMESPACE: Final = "gpustack-system"
