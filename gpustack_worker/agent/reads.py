"""What each of the agent's reconcilers reads of a Node, and which Node changes therefore wake it.

The three outputs land on the same Node (the NodeFeature's labels come back through nfd-master), so
every write of one reconciler is a Node event for all three. Most of those events are echoes of a
sibling's write: the capacity controller's counting keys in ``status.capacity``/``allocatable``, the fit
controller's labels. A reconciler whose output cannot depend on a sibling's keys has nothing to do for
such an event, so a Node update wakes it only when the update changed something it reads:

============================  ================================================================
reconciler                    reads every part of :class:`~gpustack_worker.agent.facts.NodeFacts` but
============================  ================================================================
``agent-nodefeature``         the counting keys and the fit labels
``agent-capacity``            the fit labels
``agent-fit``                 the counting keys
============================  ================================================================

A reconciler keeps its *own* keys: a value someone else wiped or changed must wake it (drift is
re-applied). Why the left-out keys are not inputs: the NodeFeature's labels come from the Node's
identity labels and annotations, its CPU capacity and ``Devices``; the counting keys from ``Devices``
and the device plugin's bare pools (``<base>.sliced``, which are not counting keys); the fit labels from
``Devices`` and the managed stamp; the input checks (:mod:`gpustack_worker.agent.validate`) read the
identity labels, CPU capacity and the bare pools. ``tests/agent/test_reads.py`` holds each reconciler's
desired output and the checks' findings fixed while the left-out keys change.

The change of an update is computed once (:func:`node_change`: the keys whose value differs) and each
reconciler's test looks only at those keys, so an event costs one comparison of the two objects' facts,
not a filtered copy of them per reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpustack_worker.agent import capacity, fit

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.agent.facts import NodeFacts

__all__ = ("NodeChange", "node_change", "wakes_capacity", "wakes_fit", "wakes_nodefeature")


@dataclass(frozen=True, slots=True)
class NodeChange:
    """What differs between two versions of a Node's facts."""

    #: The name or uid differ (a different object).
    identity: bool
    #: Label keys added, removed or changed.
    labels: frozenset[str]
    #: Annotation keys added, removed or changed.
    annotations: frozenset[str]
    #: ``status.capacity`` or ``status.allocatable`` keys added, removed or changed.
    resources: frozenset[str]


_NONE: frozenset[str] = frozenset()


def _changed(old: Mapping[str, str], new: Mapping[str, str]) -> frozenset[str]:
    if old is new or old == new:
        return _NONE
    return frozenset(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def node_change(old: NodeFacts, new: NodeFacts) -> NodeChange:
    """The keys that differ between ``old`` and ``new``."""
    return NodeChange(
        identity=old.name != new.name or old.uid != new.uid,
        labels=_changed(old.labels, new.labels),
        annotations=_changed(old.annotations, new.annotations),
        resources=_changed(old.capacity, new.capacity) | _changed(old.allocatable, new.allocatable),
    )


def _common(change: NodeChange) -> bool:
    return change.identity or bool(change.annotations)


def wakes_nodefeature(change: NodeChange) -> bool:
    """Whether the NodeFeature reconciler reads something ``change`` touched (not counting keys or fit
    labels only)."""
    return (
        _common(change)
        or any(not fit.is_fit_label(k) for k in change.labels)
        or any(not capacity.is_counting_key(k) for k in change.resources)
    )


def wakes_capacity(change: NodeChange) -> bool:
    """Whether the capacity reconciler reads something ``change`` touched (not fit labels only)."""
    return _common(change) or bool(change.resources) or any(not fit.is_fit_label(k) for k in change.labels)


def wakes_fit(change: NodeChange) -> bool:
    """Whether the fit reconciler reads something ``change`` touched (not counting keys only)."""
    return (
        _common(change)
        or bool(change.labels)
        or any(not capacity.is_counting_key(k) for k in change.resources)
    )
