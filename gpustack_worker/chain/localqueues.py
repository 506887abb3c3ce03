"""A LocalQueue for every operator ClusterQueue in every non-system Namespace (pure part).

Workloads name their queue through the ``kueue.x-k8s.io/queue-name`` *label* (63 characters at most)
while ClusterQueue names may be longer, so the LocalQueue is named ``gpustack-fnv64-<fnv64a(CQ name)>``
(always 31 characters) and records the full name in the ``schedule.gpustack.ai/queue`` annotation. The
ClusterQueue is its controller owner, so a
cluster's garbage collector removes it with the queue; the controller also prunes it itself (clusters
without a garbage collector, like the local control plane, and queues that are being deleted).

System namespaces get none: every ``kube-*`` namespace and the worker's own namespace (GPUStack does not
document its exact list; docs/chain.md, "Choices where GPUStack leaves the behaviour open"). Of the
others, those the
``local-queue-namespace-selector`` setting selects get them — by default every one but Kueue's and NFD's
(:data:`~gpustack_worker.api.settings.DEFAULT_LOCAL_QUEUE_NAMESPACE_SELECTOR`). :func:`gets_local_queues`
is that rule, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.runtime.labelselector import LabelSelector

__all__ = ("desired_local_queues", "gets_local_queues", "is_system_namespace", "local_queue_body")


def is_system_namespace(name: str, system_namespace: str) -> bool:
    """Namespaces that never get a LocalQueue."""
    return name.startswith("kube-") or name == system_namespace


def gets_local_queues(
    namespace: Mapping[str, Any], *, system_namespace: str, selector: LabelSelector | None = None
) -> bool:
    """Whether a Namespace gets the operator's LocalQueues: not a system one, not terminating, and
    selected by ``selector`` (the parsed ``local-queue-namespace-selector``; None selects every one)."""
    meta = namespace.get("metadata") or {}
    if is_system_namespace(str(meta.get("name", "")), system_namespace) or meta.get("deletionTimestamp"):
        return False
    return selector is None or selector.matches(meta.get("labels"))


def local_queue_body(namespace: str, queue: Mapping[str, Any]) -> dict[str, Any]:
    """The LocalQueue fronting ``queue`` in ``namespace``."""
    meta = queue.get("metadata") or {}
    cq = str(meta.get("name", ""))
    return {
        "apiVersion": kinds.LOCAL_QUEUE.api_version,
        "kind": kinds.LOCAL_QUEUE.kind,
        "metadata": {
            "name": keys.local_queue_name(cq),
            "namespace": namespace,
            "annotations": {keys.SCHEDULE_QUEUE_ANNOTATION: cq},
            "ownerReferences": [
                {
                    "apiVersion": kinds.CLUSTER_QUEUE.api_version,
                    "kind": kinds.CLUSTER_QUEUE.kind,
                    "name": cq,
                    "uid": str(meta.get("uid", "")),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"clusterQueue": cq},
    }


def desired_local_queues(
    namespace: Mapping[str, Any],
    queues: Iterable[Mapping[str, Any]],
    *,
    system_namespace: str,
    selector: LabelSelector | None = None,
) -> dict[str, dict[str, Any]]:
    """The LocalQueues one Namespace should hold, by name: none for system or terminating Namespaces, nor
    for one ``selector`` (the ``local-queue-namespace-selector`` setting) does not select."""
    if not gets_local_queues(namespace, system_namespace=system_namespace, selector=selector):
        return {}
    name = str((namespace.get("metadata") or {}).get("name", ""))
    out = {}
    for queue in queues:
        qmeta = queue.get("metadata") or {}
        labels: Mapping[str, str] = qmeta.get("labels") or {}
        if labels.get(keys.RESOURCE_TYPE) != keys.TYPE_INSTANCE_TYPES or qmeta.get("deletionTimestamp"):
            continue
        if not qmeta.get("uid"):
            continue  # not created yet: the owner reference needs its uid
        body = local_queue_body(name, queue)
        out[body["metadata"]["name"]] = body
    return out
