"""Helpers for the topology tests that run against the real control plane: a poller, object builders
(a Workload with an optional required topology level, a snapshot ConfigMap and a configMap
TopologySource) and a decoder of Kueue's ``topologyAssignment`` into plain (domain, pod count) pairs."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import yaml

from gpustack_worker.api import keys, kinds

# Kueue's topologyAssignment decoder is Gate 3's own (what the tests read is what the check reads).
from gpustack_worker.placement.gate3 import Domain, decode_topology_assignment
from tests.kit import kueue
from tests.stack import condition, eventually

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "SNAPSHOT_KEY",
    "Domain",
    "apply_object",
    "condition",
    "decode_topology_assignment",
    "eventually",
    "release_as_owner",
    "snapshot_config_map",
    "snapshot_text",
    "topology_assignments",
    "topology_source",
    "workload",
)

#: The ConfigMap data key the builders put a snapshot under.
SNAPSHOT_KEY = "snapshot.yaml"


async def apply_object(client: Client, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
    """Create ``body``, or replace the live object's ``data``/``spec`` with it when it exists (the rest of
    the live object, its status and resourceVersion included, is kept)."""
    meta = body["metadata"]
    live = await client.get(resource, meta["name"], meta.get("namespace"))
    if live is None:
        return await client.create(resource, body, namespace=meta.get("namespace"))
    merged = dict(live)
    for field in ("data", "spec"):
        if field in body:
            merged[field] = body[field]
    merged["metadata"] = {**live["metadata"], "labels": meta.get("labels", live["metadata"].get("labels"))}
    return await client.replace(resource, merged)


def workload(
    name: str,
    namespace: str,
    queue: str,
    *,
    gpus: int = 1,
    count: int = 1,
    cpu: str = "1",
    required_level: str | None = None,
) -> dict[str, Any]:
    """A standalone Kueue Workload (no job owner) submitted to the LocalQueue the chain makes for
    ClusterQueue ``queue``: one PodSet of ``count`` Pods, each requesting ``gpus`` NVIDIA GPUs and ``cpu``,
    with ``topologyRequest.required`` set to ``required_level`` (a level label key) when given."""
    extra = {} if required_level is None else {"topologyRequest": {"required": required_level}}
    pods = kueue.pod_set(kueue.pod_spec(kueue.gpu_container(gpus, cpu=cpu)), count=count, **extra)
    return kueue.workload(name, namespace, keys.local_queue_name(queue), pods)


def snapshot_text(revision: str, nodes: Mapping[str, Mapping[str, str]]) -> str:
    """A topology snapshot document (reference §6.4): node name → {level key → value}."""
    doc = {
        "apiVersion": keys.SNAPSHOT_API_VERSION,
        "revision": revision,
        "nodes": {node: dict(labels) for node, labels in nodes.items()},
    }
    return yaml.safe_dump(doc, sort_keys=True)


def snapshot_config_map(
    name: str,
    revision: str,
    nodes: Mapping[str, Mapping[str, str]],
    *,
    namespace: str = kinds.SYSTEM_NAMESPACE,
    key: str = SNAPSHOT_KEY,
) -> dict[str, Any]:
    """The ConfigMap holding a snapshot under ``key`` (a configMap source must reference the worker
    namespace)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: snapshot_text(revision, nodes)},
    }


def topology_source(
    name: str,
    levels: Sequence[str],
    *,
    config_map: str,
    match_labels: Mapping[str, str] | None = None,
    namespace: str = kinds.SYSTEM_NAMESPACE,
    key: str = SNAPSHOT_KEY,
    max_staleness: str = "10m",
) -> dict[str, Any]:
    """A configMap TopologySource over the Nodes matching ``match_labels`` (all Nodes when ``None``)."""
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": "TopologySource",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": dict(match_labels)} if match_labels else {},
            "levels": list(levels),
            "configMap": {
                "configMapRef": {"namespace": namespace, "name": config_map},
                "key": key,
                "maxStaleness": max_staleness,
            },
        },
    }


def topology_assignments(wl: Mapping[str, Any]) -> dict[str, tuple[tuple[str, ...], list[Domain]]]:
    """Every PodSet's decoded ``topologyAssignment`` of an admitted Workload, by PodSet name (PodSets
    without one are left out)."""
    out = {}
    admission = ((wl.get("status") or {}).get("admission")) or {}
    for psa in admission.get("podSetAssignments") or ():
        if psa.get("topologyAssignment"):
            out[str(psa.get("name"))] = decode_topology_assignment(psa["topologyAssignment"])
    return out


async def release_as_owner(admin: Client, wl: dict[str, Any]) -> None:
    """Unset an evicted Workload's quota reservation, as Kueue's job integration does once the job stopped
    (``admission`` removed, ``QuotaReserved`` and ``Admitted`` False); Kueue then requeues it."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = wl["metadata"].get("generation", 1)
    kept = [c for c in wl["status"].get("conditions") or () if c["type"] not in ("QuotaReserved", "Admitted")]
    released = [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": "released by the test, as the job integration does once the job stopped",
            "lastTransitionTime": now,
            "observedGeneration": generation,
        }
        for kind, reason in (("QuotaReserved", "Pending"), ("Admitted", "NoReservation"))
    ]
    await admin.patch(
        kinds.WORKLOAD,
        wl["metadata"]["name"],
        {"status": {"admission": None, "conditions": [*kept, *released]}},
        namespace=wl["metadata"]["namespace"],
        subresource="status",
    )
