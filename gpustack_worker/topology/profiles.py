"""Hierarchy profiles: which levels a Node's topology has, and the Kueue Topology of each shape (pure).

Reference §2.1.2 and "Hierarchy profiles": among the TopologySources in effect (``Ready=True``, or
``Stale``: a failing source's last valid snapshot stays in effect until ``maxStaleness``) whose
``nodeSelector`` matches the Node, exactly one supplies the levels (Topograph tiers normalised, then the
longest prefix whose values are all non-empty on the Node); zero or several matching sources fall back
to the hostname-only hierarchy — an ambiguous inventory never invents a tree. ``kubernetes.io/hostname``
is always the last level. The ordered key list is hashed into ``topology.gpustack.ai/profile`` and
names the Kueue Topology ``gpustack-<profile>`` every Node of that shape shares.

Only managed Nodes (``gpustack.ai/managed=true``) carry a profile: the chain reads no other Node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.topology import levels as lv

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = (
    "Assignment",
    "ReadySource",
    "node_assignment",
    "topology_body",
    "topology_drift",
)


@dataclass(frozen=True, slots=True)
class ReadySource:
    """A TopologySource in effect, as the profile assigner reads it."""

    name: str
    matches: Callable[[Mapping[str, str]], bool]
    #: ``spec.levels`` with Topograph tiers normalised (coarsest first, no hostname).
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """A Node's hierarchy: the ordered levels (ending at the hostname), their profile, and why."""

    levels: tuple[str, ...]
    #: The source that supplied the levels ("" for the hostname-only fallback).
    source: str
    #: Why the fallback was taken ("" when a source supplied the levels).
    fallback: str = ""

    @property
    def profile(self) -> str:
        return lv.profile_of(self.levels)


HOSTNAME_ONLY: Final = Assignment(lv.HOSTNAME_ONLY_LEVELS, "", "no Ready TopologySource selects the Node")


def node_assignment(labels: Mapping[str, str], sources: Iterable[ReadySource]) -> Assignment | None:
    """The hierarchy of a Node with these labels (None: an unmanaged Node carries no profile)."""
    if labels.get(keys.MANAGED) != "true":
        return None
    matching = [s for s in sources if s.matches(labels)]
    if not matching:
        return HOSTNAME_ONLY
    if len(matching) > 1:
        names = ", ".join(sorted(s.name for s in matching))
        return Assignment(
            lv.HOSTNAME_ONLY_LEVELS, "", f"several Ready TopologySources select the Node: {names}"
        )
    source = matching[0]
    return Assignment(lv.profile_levels(source.levels, labels), source.name)


def topology_body(levels: Sequence[str]) -> dict[str, Any]:
    """The Kueue Topology for an ordered level list (coarsest first, ending at the hostname)."""
    profile = lv.profile_of(levels)
    return {
        "apiVersion": kinds.TOPOLOGY.api_version,
        "kind": kinds.TOPOLOGY.kind,
        "metadata": {
            "name": keys.topology_name(profile),
            "labels": {keys.RESOURCE_TYPE: keys.TYPE_TOPOLOGY, keys.TOPOLOGY_PROFILE: profile},
        },
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def topology_drift(desired: Mapping[str, Any], cached: Mapping[str, Any] | None) -> str | None:
    """Why an existing Topology of the generated name cannot be ours as it is (its levels are immutable in
    Kueue: drift is reported, never patched), or None."""
    if cached is None:
        return None
    want = [lvl.get("nodeLabel") for lvl in (desired.get("spec") or {}).get("levels") or ()]
    have = [lvl.get("nodeLabel") for lvl in (cached.get("spec") or {}).get("levels") or ()]
    if want != have:
        return f"immutable level drift: Topology has levels {have}, profile needs {want}"
    return None
