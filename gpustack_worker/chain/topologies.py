"""Node topology profiles and the Kueue Topologies they need (pure part).

Until TopologySources land (the topology issue), every managed Node gets the hostname-only hierarchy:
``topology.gpustack.ai/profile = fnv64(kubernetes.io/hostname)`` (reference §2.1.2), and the worker
applies that profile's Kueue Topology ``gpustack-<profile>`` with the single level
``kubernetes.io/hostname``. Every flavor therefore pins a profile and references a Topology from the
start, so every queue is topology-aware (TAS) from the start. An unmanaged Node carries no profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("HOSTNAME_LEVELS", "desired_node_profile", "topology_body")

#: The fallback hierarchy: the host alone.
HOSTNAME_LEVELS: Final = (keys.HOSTNAME,)


def desired_node_profile(node: Mapping[str, Any]) -> str | None:
    """The profile a Node should carry (None: carry none)."""
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(keys.MANAGED) != "true":
        return None
    return keys.topology_profile(list(HOSTNAME_LEVELS))


def topology_body(levels: Sequence[str]) -> dict[str, Any]:
    """The Kueue Topology for an ordered level list (coarsest first, ending at the hostname)."""
    profile = keys.topology_profile(list(levels))
    return {
        "apiVersion": kinds.TOPOLOGY.api_version,
        "kind": kinds.TOPOLOGY.kind,
        "metadata": {
            "name": keys.topology_name(profile),
            "labels": {keys.RESOURCE_TYPE: keys.TYPE_TOPOLOGY, keys.TOPOLOGY_PROFILE: profile},
        },
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }
