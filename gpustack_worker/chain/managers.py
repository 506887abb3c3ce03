"""The chain's field managers and pruning owners, spelled once.

Every controller applies under its own field manager (the two admission checks' verdict controllers
write under their check's name, as GPUStack's do);
objects a controller creates and later prunes carry its owner stamp (``worker.gpustack.ai/managed-by``).
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "AUTHOR",
    "FLAVOR",
    "INSTANCE_TYPE",
    "LOCAL_QUEUE",
    "OWNER_FLAVORS",
    "OWNER_LOCAL_QUEUES",
    "QUEUE",
)

#: ResourceFlavors.
FLAVOR: Final = "gpustack-node-flavor"
#: The create-only author of derived InstanceTypes.
AUTHOR: Final = "gpustack-instancetype-author"
#: InstanceType finalizer, ``spec.inactive`` backfill and ``status``.
INSTANCE_TYPE: Final = "gpustack-instancetype"
#: Everything the chain writes on a ClusterQueue (spec, labels, annotations, ``TopologyReady``).
QUEUE: Final = "gpustack-queue"
#: LocalQueues.
LOCAL_QUEUE: Final = "gpustack-localqueue"

#: Pruning owners (``worker.gpustack.ai/managed-by`` values).
OWNER_FLAVORS: Final = "chain-flavors"
OWNER_LOCAL_QUEUES: Final = "chain-localqueues"
