"""When the chain writes: after its inputs are complete, not on every partial view (pure).

On a cold fleet no Node carries its ``topology.gpustack.ai/profile`` yet, and the topology controller
writes them one by one. Every flavor selects its profile, so each arriving profile changed a flavor's
``.capacity`` label, its queue's quota (or its ``NonConservedQuota`` message, which counts nodes) and its
InstanceType's status views: the chain rewrote each object about once a second for as long as the
labelling lasted (5,000 Nodes: 5,416 chain-object writes for 148 objects). The rule here is that a write
waits until what it is computed from is complete:

- a **pending** Node is a managed Node with everything a flavor selects except its profile
  (:func:`gpustack_worker.chain.nodes.unprofiled_hardware`): the topology controller labels every
  managed Node, so its profile is about to arrive. It already says which flavor *families* (identity
  without the profile) and which pools it will feed;
- a pending Node **holds back** those families' flavors (and the InstanceTypes authored from them), and
  its pools' ClusterQueue and InstanceType status, while profiles are still arriving: until
  ``chain-settle-seconds`` have passed both since the chain first saw it pending and since the last
  pending Node got its profile (:func:`held`). A Node whose profile never comes (a refused label write)
  therefore holds nothing back once the labelling has stopped for that long;
- the chain's **own writes** in flight — a flavor written and not yet in the chain's cache, a flavor pass
  still writing, an InstanceType whose queue the queue controller has not created yet — make the queue
  and the status wait too (:func:`wait`), at most ``chain-settle-seconds`` for one key.

Deferral never touches what the spec requires to happen at once: a queue write that changes the stop
policy or the migration annotations (a drain, a hold, a restore, deletion) is never deferred
(:func:`deferrable`), nor are an InstanceType's finalizer, teardown and ``inactive`` backfill; a held
Node's flavor is not rewritten, so no queue loses quota or drains because of a deferral.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

__all__ = ("OWN_WRITES_POLL_S", "Held", "deferrable", "held", "topology_on_its_way", "wait")

#: Recheck while the chain's own writes are in flight (their watch events also wake the key).
OWN_WRITES_POLL_S: Final = 1.0
#: The queue annotations that record a stop-policy decision (never deferred).
_STOP_ANNOTATIONS: Final = (keys.EMPTY_PLAN_HOLD, keys.MIGRATION_PHASE, keys.MIGRATION_STOP_POLICY)


@dataclass(frozen=True, slots=True)
class Held:
    """The pending Nodes that still hold back what they feed."""

    nodes: frozenset[str]
    #: Seconds until the first of them stops holding (None: none holds).
    recheck_after: float | None


NOTHING_HELD: Final = Held(frozenset(), None)


def held(pending: Mapping[str, float], *, last_arrival: float | None, now: float, settle: float) -> Held:
    """Which pending Nodes hold back their flavors, queues and status at ``now``.

    ``pending``: each pending Node's name → when the chain first saw it pending; ``last_arrival``: when a
    pending Node last got its profile (or stopped being pending); ``settle``: ``chain-settle-seconds``. A
    Node holds while ``now`` is less than ``settle`` after both (0 or less: nothing ever holds).
    """
    if settle <= 0 or not pending:
        return NOTHING_HELD
    nodes: set[str] = set()
    first: float | None = None
    for name, seen in pending.items():
        since = seen if last_arrival is None else max(seen, last_arrival)
        left = since + settle - now
        if left > 0:
            nodes.add(name)
            first = left if first is None else min(first, left)
    return Held(frozenset(nodes), first)


def wait(*, held_for: float | None, own_writes: bool, waited: float, settle: float) -> float | None:
    """Seconds to wait before writing a queue or an InstanceType status, or None to write now.

    ``held_for``: a pending Node of the pool holds it back for that long at most (:attr:`Held.
    recheck_after`; None: none does); ``own_writes``: the chain's own write this object is computed from
    is still in flight; ``waited``: how long this key has waited already (its own writes bound it).
    """
    if settle <= 0:
        return None
    if held_for is not None:
        return min(held_for, OWN_WRITES_POLL_S) if own_writes else held_for
    if own_writes and waited < settle:
        return min(OWN_WRITES_POLL_S, settle - waited)
    return None


def _stop_state(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    policy = (obj.get("spec") or {}).get("stopPolicy")
    return (policy, *(annotations.get(k) for k in _STOP_ANNOTATIONS))


def deferrable(body: Mapping[str, Any] | None, queue: Mapping[str, Any] | None) -> bool:
    """Whether the queue write ``body`` may wait for complete inputs: a first write (the queue does not
    exist yet), or one that keeps the queue's stop policy and stop annotations as they are (only the
    plan, its quotas or ``TopologyReady`` change). A body that omits ``spec.stopPolicy`` (left to another
    field manager) keeps it."""
    if body is None:
        return False
    if queue is None:
        return True
    if (queue.get("metadata") or {}).get("deletionTimestamp"):
        return False
    want = _stop_state(body)
    have = _stop_state(queue)
    if "stopPolicy" not in (body.get("spec") or {}):
        want, have = want[1:], have[1:]
    return want == have


def topology_on_its_way(flavors: Iterable[Mapping[str, Any]], topologies: Collection[str]) -> bool:
    """A flavor of ``flavors`` (the flavor cache) names a Topology that ``topologies`` (the names the
    Topology cache holds) does not: the topology controller creates a profile's Topology before any Node
    carries the profile, so it is about to arrive, and a queue or status written now would be written
    again a moment later. Counts as the chain's own writes in flight (:func:`wait`)."""
    return any(
        (ref := (flavor.get("spec") or {}).get("topologyName")) and str(ref) not in topologies
        for flavor in flavors
    )
