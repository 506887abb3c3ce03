"""Kueue objects as the tests write them: Workloads, ClusterQueues, LocalQueues and ResourceFlavors, each
body built here once (issue 30) and returned as a plain dict for the caller to adjust.

A Workload is assembled from parts, since the tests vary each part and nothing else:
``workload(name, namespace, queue, pod_set(pod_spec(container(requests, limits))))``. The queue kinds take
their ``spec`` whole (what a test puts there is what it tests) and extra metadata fields as keywords.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import kinds, manufacturers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "IMAGE",
    "NVIDIA_GPU",
    "cluster_queue",
    "container",
    "gpu_container",
    "local_queue",
    "pod_set",
    "pod_spec",
    "queue_spec",
    "resource_flavor",
    "resource_group",
    "workload",
)

#: An image no node can pull: Workloads here are admitted by Kueue, and no kubelet runs their Pods.
IMAGE = "registry.invalid/x"
#: The extended resource NVIDIA's device plugin advertises whole cards under.
NVIDIA_GPU = manufacturers.MANUFACTURERS["nvidia"].resource


def container(
    requests: Mapping[str, str],
    limits: Mapping[str, str] | None = None,
    *,
    name: str = "c",
    image: str = IMAGE,
) -> dict[str, Any]:
    """A container asking for ``requests`` (and ``limits`` when given): what Kueue charges a queue."""
    resources: dict[str, Any] = {"requests": dict(requests)}
    if limits is not None:
        resources["limits"] = dict(limits)
    return {"name": name, "image": image, "resources": resources}


def gpu_container(gpus: int, *, cpu: str = "1") -> dict[str, Any]:
    """A container asking for ``gpus`` whole NVIDIA cards (requested and limited, as the device plugin
    requires) and ``cpu``."""
    cards = str(gpus)
    return container({"cpu": cpu, NVIDIA_GPU: cards}, {NVIDIA_GPU: cards})


def pod_spec(*containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Pod spec that never restarts (a Workload's Pods run once), with ``fields`` after the containers."""
    return {"restartPolicy": "Never", "containers": list(containers), **fields}


def pod_set(spec: dict[str, Any], *, count: int = 1, name: str = "main", **fields: Any) -> dict[str, Any]:
    """A PodSet of ``count`` Pods of ``spec``, with ``fields`` (``topologyRequest``, …) after the template."""
    return {"name": name, "count": count, "template": {"spec": spec}, **fields}


def workload(
    name: str, namespace: str, queue: str | None, *pod_sets: dict[str, Any], **metadata: Any
) -> dict[str, Any]:
    """A standalone Workload (no job owner) submitted to LocalQueue ``queue`` (no ``queueName`` when None,
    as in a Workload no queue has taken), with ``metadata`` fields after the name and namespace."""
    spec: dict[str, Any] = {} if queue is None else {"queueName": queue}
    spec["podSets"] = list(pod_sets)
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec,
    }


def resource_group(
    flavor: str, quotas: Mapping[str, str | int], *, covered: Sequence[str] | None = None
) -> dict[str, Any]:
    """A resource group of one flavor with a nominal quota of each resource in ``quotas``; it covers the
    quotas' resources unless ``covered`` says otherwise (Kueue refuses a mismatch)."""
    return {
        "coveredResources": list(quotas) if covered is None else list(covered),
        "flavors": [
            {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}
        ],
    }


def queue_spec(*groups: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A ClusterQueue spec open to every namespace with ``groups`` (none: a queue Kueue reserves nothing
    in, or everything under ``quotaCheckStrategy: IgnoreUndeclared``) and ``fields`` after them."""
    return {"namespaceSelector": {}, "resourceGroups": list(groups), **fields}


def cluster_queue(name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """A ClusterQueue of ``spec`` (often :func:`queue_spec`), with ``metadata`` fields after the name."""
    return {
        "apiVersion": kinds.CLUSTER_QUEUE.api_version,
        "kind": kinds.CLUSTER_QUEUE.kind,
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


def local_queue(name: str, cluster_queue: str, namespace: str | None = None) -> dict[str, Any]:
    """A LocalQueue pointing at ``cluster_queue``; without ``namespace`` the request path names it."""
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": kinds.LOCAL_QUEUE.api_version,
        "kind": kinds.LOCAL_QUEUE.kind,
        "metadata": metadata,
        "spec": {"clusterQueue": cluster_queue},
    }


def resource_flavor(name: str, spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """A ResourceFlavor (no ``spec`` when None: a flavor for every node), with ``metadata`` fields after
    the name."""
    body: dict[str, Any] = {
        "apiVersion": kinds.RESOURCE_FLAVOR.api_version,
        "kind": kinds.RESOURCE_FLAVOR.kind,
        "metadata": {"name": name, **metadata},
    }
    if spec is not None:
        body["spec"] = spec
    return body
