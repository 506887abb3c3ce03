"""The topology package's field managers and pruning owners, spelled once.

The Node profile label, its mirror on the Node's ``Devices`` and the generated Kueue Topologies are one
controller's (the profile assigner); the NodeFeatures of writing TopologySources and their status are the
source reconciler's.
"""

from __future__ import annotations

from typing import Final

__all__ = ("NODE_TOPOLOGY", "OWNER_TOPOLOGIES", "SOURCE", "SOURCE_STATUS")

#: Node ``topology.gpustack.ai/profile``, the same label on the Node's ``Devices``, the Kueue Topologies.
NODE_TOPOLOGY: Final = "gpustack-node-topology"
#: A writing source's NodeFeatures ``gpustack-topology-<hash>``.
SOURCE: Final = "gpustack-topology-source"
#: ``TopologySource.status``.
SOURCE_STATUS: Final = "gpustack-topology-source-status"

#: Pruning owner (``worker.gpustack.ai/managed-by``) of the generated Kueue Topologies.
OWNER_TOPOLOGIES: Final = "topology-profiles"
