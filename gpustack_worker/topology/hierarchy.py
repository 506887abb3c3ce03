"""Is a set of Nodes' level values one tree? (docs/topology.md, "The source contract")

:func:`hierarchy_errors` checks the two rules every inventory must keep, whether the values come from
the Node labels (the read-only ``nodeLabels`` arm) or from a snapshot's node entries (the writing arms):

* **child without parent** — a Node with a value for level ``i`` must have a value for every coarser
  level ``j < i``; a missing *finer* suffix is fine (that Node gets a shorter profile);
* **one parent chain per value** — a value of level ``i`` must sit under the same parent tuple (the
  values of levels ``0..i-1``) on every Node: ``rack-01`` in ``zone-a`` on one Node and in ``zone-b``
  on another is two racks under one name, so Kueue would pool capacity that is not together.

An empty value counts as missing. Keys outside ``levels`` are ignored. Pure and deterministic: Nodes
are visited by name, levels in order, and every message names the node, the key and the value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("format_parents", "hierarchy_errors")


def format_parents(levels: Sequence[str], values: Sequence[str]) -> str:
    """A parent tuple as ``(key=value, key=value)``; ``()`` for the top level."""
    return "(" + ", ".join(f"{k}={v}" for k, v in zip(levels, values, strict=True)) + ")"


def hierarchy_errors(levels: Sequence[str], nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every break of the tree rules among ``nodes`` (node name → its level values), ``levels`` already
    normalised coarsest first. Empty when the values form one tree."""
    errors: list[str] = []
    # (level index, value) -> the first parent tuple seen for it and the node that showed it
    first_seen: dict[tuple[int, str], tuple[tuple[str, ...], str]] = {}
    # (level index, value, parent tuple) already reported, so a contradiction is named once
    reported: set[tuple[int, str, tuple[str, ...]]] = set()
    for node in sorted(nodes):
        labels = nodes[node]
        values = [labels.get(key) or "" for key in levels]
        for i, (key, value) in enumerate(zip(levels, values, strict=True)):
            if not value:
                continue
            missing = [levels[j] for j in range(i) if not values[j]]
            if missing:
                errors.append(
                    f"node {node}: {key}={value} has no parent {', '.join(missing)} "
                    "(child without parent: every coarser level must be set too)"
                )
                continue
            parents = tuple(values[:i])
            seen = first_seen.setdefault((i, value), (parents, node))
            if seen[0] != parents and (i, value, parents) not in reported:
                reported.add((i, value, parents))
                errors.append(
                    f"node {node}: {key}={value} is under {format_parents(levels[:i], parents)} but node "
                    f"{seen[1]} has it under {format_parents(levels[:i], seen[0])} "
                    "(one value may have only one parent chain)"
                )
    return errors
