"""How many levels a TopologySource may declare, derived from what a Kueue ``Topology`` can hold.

Every source's levels become a Kueue ``Topology`` with ``kubernetes.io/hostname`` appended as the finest
level (every hierarchy ends at the node, so Kueue's topology assignment names the nodes whose cards
Gate 3 then judges), so a source can only declare what fits next to that implicit level. Kueue
v0.19.2 (``apis/kueue/v1beta2/topology_types.go``, ``TopologySpec.Levels``) has
``+kubebuilder:validation:MaxItems=16``, and each ``TopologyLevel.nodeLabel``
``+kubebuilder:validation:MaxLength=316`` (a label key may be 317 characters: a 253-character prefix, the
``/`` and a 63-character name). A source beyond either limit could never become a Topology: the worker
refuses it (admission, the CRD schema, the reconciler, ``plan``) instead of dropping a declared level,
which would invent a different tree than the admin declared (docs/topology.md, "Level limits").
"""

from __future__ import annotations

from typing import Final

__all__ = ("KUEUE_LEVEL_LABEL_MAX", "KUEUE_TOPOLOGY_LEVELS_MAX", "SOURCE_LEVELS_MAX")

#: Kueue ``Topology.spec.levels`` MaxItems.
KUEUE_TOPOLOGY_LEVELS_MAX: Final = 16
#: Kueue ``Topology.spec.levels[].nodeLabel`` MaxLength (characters).
KUEUE_LEVEL_LABEL_MAX: Final = 316
#: ``TopologySource.spec.levels`` at most: Kueue's limit less the implicit ``kubernetes.io/hostname``.
SOURCE_LEVELS_MAX: Final = KUEUE_TOPOLOGY_LEVELS_MAX - 1
