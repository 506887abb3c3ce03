"""What the chain's informers hold (pure): the label selector of each kind the chain caches by label.

The chain's controllers decide from their caches, not from everything of a kind on the cluster: a
ResourceFlavor, a Kueue Topology or a ClusterQueue whose ``resource.gpustack.ai/type`` label is not the
chain's is not in the cache, so no decision reads it. The informers (``chain/controller.py``) are built
with these selectors, and ``plan --from-cluster`` filters what it listed with the same ones
(:func:`held`), so both feed the decisions the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys
from gpustack_worker.runtime.labelselector import parse_selector

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("FLAVORS", "QUEUES", "TOPOLOGIES", "held")

#: The flavor cache: the chain's ResourceFlavors (finalizing ones included).
FLAVORS: Final = f"{keys.RESOURCE_TYPE}={keys.TYPE_NODES}"
#: The Topology cache: the generated Kueue Topologies (read-only in the chain).
TOPOLOGIES: Final = f"{keys.RESOURCE_TYPE}={keys.TYPE_TOPOLOGY}"
#: The queue cache: the pools' ClusterQueues.
QUEUES: Final = f"{keys.RESOURCE_TYPE}={keys.TYPE_INSTANCE_TYPES}"


def held(objects: Iterable[Mapping[str, Any]], selector: str) -> list[Mapping[str, Any]]:
    """The objects an informer built with ``selector`` holds, in their order."""
    parsed = parse_selector(selector)
    return [o for o in objects if parsed.matches((o.get("metadata") or {}).get("labels") or {})]
