"""What each of the agent's reconcilers reads of a Node, and which Node changes therefore wake it.

The three outputs land on the same Node (the NodeFeature's labels come back through nfd-master), so
every write of one reconciler is a Node event for all three. Most of those events are echoes: the
capacity controller's counting keys in ``status.capacity``/``allocatable``, the fit controller's labels,
and nfd-master's projection of the worker NodeFeature (its keys, ``gpustack.ai/managed`` and nfd-master's
own ``feature-labels`` annotation listing what it projected). A reconciler whose output cannot depend on
such keys has nothing to do for such an event, so a Node update wakes it only when the update changed
something it reads:

============================  ================================================================
reconciler                    reads every part of :class:`~gpustack_worker.agent.facts.NodeFacts` but
============================  ================================================================
``agent-nodefeature``         the counting keys and the fit labels
``agent-capacity``            the fit labels
``agent-fit``                 the counting keys
every reconciler              the worker NodeFeature's own keys on the Node
                              (:func:`~gpustack_worker.agent.nodefeature.is_published_label`), and
                              ``gpustack.ai/managed`` and the ``feature-labels`` annotation except
                              through what the agent makes of them (below)
============================  ================================================================

A reconciler keeps its *own* keys: a value someone else wiped or changed must wake it (drift is
re-applied). Why the left-out keys are not inputs: the NodeFeature's labels come from the Node's
identity labels and annotations, its CPU capacity and ``Devices``; the counting keys from ``Devices``
and the device plugin's bare pools (``<base>.sliced``, which are not counting keys); the fit labels from
``Devices`` and the managed stamp; the input checks (:mod:`gpustack_worker.agent.validate`) read the
identity labels, CPU capacity and the bare pools. The worker NodeFeature's keys are written through the
NodeFeature and never read back from the Node (its reconciler reads its own ``spec.labels``).

``gpustack.ai/managed`` and whether nfd-master projected it are read only through three answers: does the
agent stamp the node (:func:`~gpustack_worker.agent.managed.stamps_managed`), does it count it
(:func:`~gpustack_worker.agent.managed.is_managed`), and what do the checks find
(:func:`~gpustack_worker.agent.validate.check_managed`). :attr:`NodeChange.managed` says whether those
answers differ, under the ``node-management-manual`` setting of the moment (a settings change wakes every
reconciler for every node anyway). So nfd-master's first projection of a node — ``managed`` absent →
``true``, now listed as projected — wakes nobody: the agent already treated the node as managed.

``tests/agent/test_reads.py`` holds each reconciler's desired output and the checks' findings fixed while
the left-out keys change, and checks the predicates are sound for any mix of changes.

The change of an update is computed once (:func:`node_change`: the keys whose value differs) and each
reconciler's test looks only at those keys, so an event costs one comparison of the two objects' facts,
not a filtered copy of them per reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpustack_worker.agent import capacity, fit, managed, validate
from gpustack_worker.agent.nodefeature import is_published_label
from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.agent.facts import NodeFacts

__all__ = (
    "NodeChange",
    "managed_reading",
    "node_change",
    "wakes_capacity",
    "wakes_fit",
    "wakes_nodefeature",
)


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
    #: What the agent makes of ``gpustack.ai/managed`` differs (:func:`managed_reading`).
    managed: bool = False


_NONE: frozenset[str] = frozenset()


def _changed(old: Mapping[str, str], new: Mapping[str, str]) -> frozenset[str]:
    if old is new or old == new:
        return _NONE
    return frozenset(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def managed_reading(node: NodeFacts, *, manual: bool) -> tuple[bool, bool, tuple[validate.Finding, ...]]:
    """Everything the agent makes of ``gpustack.ai/managed`` on ``node``: whether it stamps it, whether it
    counts it, and the checks' findings on it."""
    label = managed.managed_label(node)
    return (
        managed.stamps_managed(node, manual=manual),
        managed.is_managed(node, manual=manual),
        tuple(validate.check_managed(label)),
    )


def node_change(old: NodeFacts, new: NodeFacts, *, manual: bool) -> NodeChange:
    """The keys that differ between ``old`` and ``new``, and whether the managed reading differs under the
    ``node-management-manual`` setting ``manual``."""
    labels = _changed(old.labels, new.labels)
    annotations = _changed(old.annotations, new.annotations)
    moved = keys.MANAGED in labels or keys.NFD_FEATURE_LABELS_ANNOTATION in annotations
    return NodeChange(
        identity=old.name != new.name or old.uid != new.uid,
        labels=labels,
        annotations=annotations,
        resources=_changed(old.capacity, new.capacity) | _changed(old.allocatable, new.allocatable),
        managed=moved and managed_reading(old, manual=manual) != managed_reading(new, manual=manual),
    )


def _read_label(key: str) -> bool:
    """A label key some reconciler reads as such (``managed`` is read through :attr:`NodeChange.managed`)."""
    return key != keys.MANAGED and not is_published_label(key)


def _common(change: NodeChange) -> bool:
    return (
        change.identity
        or change.managed
        or any(k != keys.NFD_FEATURE_LABELS_ANNOTATION for k in change.annotations)
    )


def wakes_nodefeature(change: NodeChange) -> bool:
    """Whether the NodeFeature reconciler reads something ``change`` touched (not counting keys or fit
    labels only)."""
    return (
        _common(change)
        or any(_read_label(k) and not fit.is_fit_label(k) for k in change.labels)
        or any(not capacity.is_counting_key(k) for k in change.resources)
    )


def wakes_capacity(change: NodeChange) -> bool:
    """Whether the capacity reconciler reads something ``change`` touched (not fit labels only)."""
    return (
        _common(change)
        or bool(change.resources)
        or any(_read_label(k) and not fit.is_fit_label(k) for k in change.labels)
    )


def wakes_fit(change: NodeChange) -> bool:
    """Whether the fit reconciler reads something ``change`` touched (not counting keys only)."""
    return (
        _common(change)
        or any(_read_label(k) for k in change.labels)
        or any(not capacity.is_counting_key(k) for k in change.resources)
    )
