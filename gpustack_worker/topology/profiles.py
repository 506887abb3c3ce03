"""Hierarchy profiles: which levels a Node's topology has, and the Kueue Topology of each shape (pure).

The rule (docs/topology.md, "The profile rule"): among the TopologySources in effect (``Ready=True``, or
``Stale``: a failing source's last valid snapshot stays in effect until ``maxStaleness``; never one being
deleted) whose ``nodeSelector`` matches the Node, exactly one supplies the levels (Topograph tiers
normalised, then the longest prefix whose values are all non-empty on the Node); zero or several
matching sources fall back to the hostname-only hierarchy — an ambiguous inventory never invents a
tree. ``kubernetes.io/hostname`` is always the last level. The ordered key list is hashed into
``topology.gpustack.ai/profile`` and names the Kueue Topology ``gpustack-<profile>`` every Node of that
shape shares.

Only managed Nodes (``gpustack.ai/managed=true``) carry a profile: the chain reads no other Node.

What the assigner reads of a source is :func:`source_input` and nothing else: whether it is in effect, its
selector and its levels. The controllers that recompute profiles wake on a source event exactly when that
value changes (:func:`wakes_profiles`), so a change the assigner would see — ``Stale`` → ``Expired`` or
→ ``OwnershipConflict`` included, which moves no ``Ready`` status — always wakes them, and a change it
would not see (a status counter, a message) never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.api import keys, kinds, node_class, validation
from gpustack_worker.runtime import conditions
from gpustack_worker.topology import levels as lv
from gpustack_worker.topology import sources as src
from gpustack_worker.topology.selector import compile_selector
from gpustack_worker.topology.spec_check import level_limit_errors

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = (
    "OUT_OF_EFFECT",
    "Assignment",
    "ReadySource",
    "SourceInput",
    "in_effect",
    "node_assignment",
    "ready_in_effect",
    "ready_source",
    "source_input",
    "topology_body",
    "topology_drift",
    "topology_problems",
    "wakes_profiles",
)


@dataclass(frozen=True, slots=True)
class SourceInput:
    """Everything the profile assigner takes from one TopologySource, and nothing else."""

    #: ``Ready=True`` or ``Ready=False/Stale``, and not being deleted.
    in_effect: bool
    #: ``spec.nodeSelector`` as canonical JSON ("" when the source is not in effect).
    selector: str
    #: ``spec.levels`` with Topograph tiers normalised (() when the source is not in effect).
    levels: tuple[str, ...]


#: A source the assigner ignores: absent, being deleted, or neither Ready nor Stale. Its selector and
#: levels are left out on purpose — they cannot change any profile while it is out of effect.
OUT_OF_EFFECT: Final = SourceInput(False, "", ())


def ready_in_effect(status: str | None, reason: str | None) -> bool:
    """Whether a source whose ``Ready`` condition says (status, reason) is in effect: ``Ready=True``, or
    ``Stale`` (its last valid snapshot stays in effect until ``maxStaleness``, so a broken revision
    changes no profile meanwhile — GPUStack leaves this open; docs/topology.md, "The profile rule",
    gives the reason for keeping it)."""
    return status == "True" or reason == src.STALE


def source_input(source: Mapping[str, Any] | None) -> SourceInput:
    """What the profile assigner reads of ``source`` (None: the source is gone)."""
    if source is None or (source.get("metadata") or {}).get("deletionTimestamp"):
        return OUT_OF_EFFECT
    ready = conditions.find((source.get("status") or {}).get("conditions"), src.READY)
    if ready is None or not ready_in_effect(ready.get("status"), ready.get("reason")):
        return OUT_OF_EFFECT
    spec = source.get("spec") or {}
    if level_limit_errors(spec):
        # Levels no Kueue Topology could hold are never used, whatever Ready says: a status written by a
        # release before the limit (or not yet rewritten) must not give a Node a profile without a Topology.
        return OUT_OF_EFFECT
    levels = spec.get("levels")
    return SourceInput(
        True,
        orjson.dumps(spec.get("nodeSelector"), option=orjson.OPT_SORT_KEYS).decode(),
        lv.normalize_tiers([str(x) for x in levels] if isinstance(levels, list | tuple) else ()),
    )


def in_effect(source: Mapping[str, Any] | None) -> bool:
    """Whether the profile assigner uses ``source`` at all."""
    return source_input(source).in_effect


def wakes_profiles(_event: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """The watch predicate of the controllers that recompute profiles from sources: pass a source event
    (a create and a delete included) exactly when what the assigner reads of the source changed."""
    return source_input(old) != source_input(new)


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


def ready_source(name: str, found: SourceInput) -> ReadySource | None:
    """The assigner's view of a source from its :func:`source_input` (None when out of effect)."""
    if not found.in_effect:
        return None
    return ReadySource(name, compile_selector(orjson.loads(found.selector)), found.levels)


HOSTNAME_ONLY: Final = Assignment(lv.HOSTNAME_ONLY_LEVELS, "", "no Ready TopologySource selects the Node")


def node_assignment(labels: Mapping[str, str], sources: Iterable[ReadySource]) -> Assignment | None:
    """The hierarchy of a Node with these labels (None: an unmanaged Node carries no profile)."""
    if not node_class.is_managed(labels):
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


def topology_problems(body: Mapping[str, Any]) -> list[str]:
    """Why Kueue's API server would refuse this generated Topology (its CRD's limits: at most
    ``KUEUE_TOPOLOGY_LEVELS_MAX`` levels, each ``nodeLabel`` a qualified key of at most
    ``KUEUE_LEVEL_LABEL_MAX`` characters, and the name and labels), as ``path: rule``; empty when
    accepted. The sources' level limit keeps this empty; the create path checks it anyway, so a body
    that slipped through is reported once and never sent to loop on a 422."""
    return [f"{path}: {rule}" for path, rule in validation.object_problems(body)]


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
