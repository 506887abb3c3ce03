"""Every kind the project reads or writes, declared once."""

from __future__ import annotations

from typing import Final

from gpustack_worker.runtime.resources import CONFIG_MAP as CONFIG_MAP  # the runtime's own kinds, re-exported
from gpustack_worker.runtime.resources import EVENT as EVENT
from gpustack_worker.runtime.resources import LEASE as LEASE
from gpustack_worker.runtime.resources import Resource

WORKER_GROUP: Final = "worker.gpustack.ai"
WORKER_VERSION: Final = "v1alpha1"
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"

# core / built-in
NODE: Final = Resource("", "v1", "Node", "nodes", namespaced=False)
NAMESPACE: Final = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
SECRET: Final = Resource("", "v1", "Secret", "secrets", namespaced=True)
CRD: Final = Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)

# ours
DEVICES: Final = Resource(WORKER_GROUP, WORKER_VERSION, "Devices", "devices", namespaced=False)
TOPOLOGY_SOURCE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "TopologySource", "topologysources", namespaced=False
)
INSTANCE_TYPE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "InstanceType", "instancetypes", namespaced=False
)
NODE_MODEL_STORE: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "NodeModelStore", "nodemodelstores", namespaced=False
)
MODEL_DEPLOYMENT: Final = Resource(
    WORKER_GROUP, WORKER_VERSION, "ModelDeployment", "modeldeployments", namespaced=True
)

# NFD
NODE_FEATURE: Final = Resource("nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures", namespaced=True)
NODE_FEATURE_RULE: Final = Resource(
    "nfd.k8s-sigs.io", "v1alpha1", "NodeFeatureRule", "nodefeaturerules", namespaced=False
)

# Kueue (read and write only the storage version v1beta2)
RESOURCE_FLAVOR: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "ResourceFlavor", "resourceflavors", False)
CLUSTER_QUEUE: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "ClusterQueue", "clusterqueues", False)
LOCAL_QUEUE: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "LocalQueue", "localqueues", True)
TOPOLOGY: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "Topology", "topologies", False)
ADMISSION_CHECK: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "AdmissionCheck", "admissionchecks", False)
WORKLOAD: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "Workload", "workloads", True)

#: The namespace the worker runs in and writes its namespaced objects (NodeFeatures) to.
SYSTEM_NAMESPACE: Final = "gpustack-system"
