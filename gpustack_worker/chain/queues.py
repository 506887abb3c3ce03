"""The ClusterQueue of a pool: quota plan, admission checks and the stop-policy state machine (pure).

One controller owns every field the chain writes on a ClusterQueue (docs/chain.md, "The stop-policy
state machine of a queue"), so the stop policy is decided in one place and two field managers never
fight over it. Inputs are cached objects; the output
is the desired ClusterQueue body plus the ``TopologyReady`` condition and a requeue hint.

Plan: the live operator flavors matching the queue's selector (a flavor with a deletionTimestamp is
finalizing and left out), validated — at most 64 flavors, every flavor pins its profile and
references an existing Topology, no Node selected by two flavors, each flavor's capacity equals the Nodes
it selects × its per-node count, every pool Node is selected — then sorted by per-node count and name
into one resource group covering ``credits.gpustack.ai/<mfr>`` (nominal = capacity × 1,600,000) for an
accelerated pool or ``cpu`` (nominal = capacity) for a CPU pool. A refused plan keeps the last complete
plan and says why in ``TopologyReady``.

Ownership: a queue of our name that has resource groups but no ``topology.gpustack.ai/tas-queue``
annotation (an earlier release's, or someone else's) is never adopted — only ``TopologyReady=False/
UnsupportedExistingObject`` is reported on it.

Stop policy — one state machine, recorded on the queue (``topology.gpustack.ai/migration-phase`` and
``topology.gpustack.ai/migration-stop-policy``) so a new leader resumes from the object alone:

1. queue or InstanceType being deleted → ``HoldAndDrain`` (Kueue evicts, then drops its finalizer);
2. migration annotations the machine cannot follow (unknown phase or saved policy, one without the other)
   → ``InvalidMigrationState``: nothing is switched, restored or released;
3. no migration, a complete plan that drops no flavor Kueue may still use (a dropped flavor Kueue reports
   idle, an added flavor, a quota change) → the plan in place, with the base policy (``Hold`` when the
   type is ``inactive``; left to its owner while someone else's stop waits for the ``inactive``
   backfill; else ``None``);
4. a complete plan dropping a flavor Kueue reports reservation or usage on, or does not report →
   ``HoldAndDrain`` with the current groups, previous policy saved, phase ``draining``; once Kueue reports
   the queue stopped with no reserving Workload → the new plan, phase ``switched``; on the next decision
   → the base policy restored, both annotations removed. The hold is never taken over from someone
   else's stop that still waits for the ``inactive`` backfill (it would hide the stop from the backfill
   and lose it at the restore): the queue waits for the backfill first;
5. no live flavor while the queue still has groups → the same drain (only when
   ``instance-type-drain-when-no-flavors``; otherwise wait, unheld, for reservations to clear), then —
   once Kueue reports the held queue stopped with no reserving Workload — the groups emptied (phase
   ``switched``) and held ``HoldAndDrain`` until a flavor returns;
6. no groups and no plan → ``Hold`` marked ``topology.gpustack.ai/empty-plan-hold`` (a queue without
   resource groups admits everything under ``IgnoreUndeclared``) — only when the stop policy is the
   chain's: someone else's stop is left theirs and unmarked (the ``inactive`` backfill must see it), and
   an inactive type's ``Hold`` is the type's.

A refused plan keeps the last complete plan (minus finalizing flavors) and the current phase; when that
would leave no group on a queue that has groups, it goes through the drain of 5 instead — empty groups are
never written while Kueue may report a reservation.

A leaving node (:func:`_current_groups`): a finalizing flavor that selects no Node any more, whatever
profile the Node now carries, is taken out of the queue's groups before any of the above is decided — so
it leaves every write, in place, in any state, without Kueue's status, and is never a reason for
``HoldAndDrain`` (Kueue evicts what ran on it: its node is gone). Only a queue whose every flavor left and
that has no complete plan to replace them goes through the drain of 5.

Every decision that depends on Kueue (a dropped flavor idle, the queue stopped, its reserving Workloads)
reads Kueue's status through one view, :func:`_reported`, which gives a status only when Kueue wrote it
for the queue's current generation. Without one the queue is kept as it is — no hold started, no phase
changed — with ``TopologyReady=Unknown/AwaitingQueueStatus`` and a requeue (Kueue's status update also
wakes the queue): a status one generation old is neither "idle" nor "in use".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import pools
from gpustack_worker.runtime.quantity import format_integer, parse

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gpustack_worker.chain.nodes import NodeHardware

__all__ = (
    "MAX_FLAVORS_PER_GROUP",
    "STOP_POLICY_FIELD",
    "Condition",
    "Plan",
    "QueueDecision",
    "QueueInputs",
    "Refusal",
    "decide",
    "held_in_migration",
    "holding_workloads",
    "migration_problem",
    "plan_queue",
    "pool_nodes",
    "unsupported",
)

#: Kueue allows at most 64 flavors in one resource group.
MAX_FLAVORS_PER_GROUP: Final = 64
#: ``spec.stopPolicy`` as a managedFields path (whether the queue controller owns the stop policy).
STOP_POLICY_FIELD: Final = ("f:spec", "f:stopPolicy")
HOLD: Final = "Hold"
HOLD_AND_DRAIN: Final = "HoldAndDrain"
NONE: Final = "None"
#: Saved-policy value when the queue had no stop policy at all.
UNSET: Final = "unset"
PHASE_DRAINING: Final = "draining"
PHASE_SWITCHED: Final = "switched"
PHASES: Final = frozenset({PHASE_DRAINING, PHASE_SWITCHED})
#: Values ``topology.gpustack.ai/migration-stop-policy`` may hold: the stop policy the queue had before the
#: chain's drain (a plan switch, or a pool left without flavors), or ``unset`` when it had none.
SAVED_POLICIES: Final = frozenset({NONE, HOLD, HOLD_AND_DRAIN, UNSET})
#: The reason of Kueue's ``Active=False`` condition on a queue stopped by its stop policy.
ACTIVE_STOPPED: Final = "Stopped"
#: Requeue while Kueue still reports reservations on a draining queue (its status update also wakes us).
DRAIN_POLL_S: Final = 5.0
#: Requeue while waiting for reservations to clear on their own (drain-when-no-flavors=false).
WAIT_POLL_S: Final = 60.0
#: Requeue for refusals that resolve by themselves (a Topology or a flavor label still being written).
REFUSAL_POLL_S: Final = 30.0
CPU_RESOURCE: Final = "cpu"

Reason = Literal[
    "Ready",
    "MissingTopology",
    "NonConservedQuota",
    "OverlappingSelectors",
    "TooManyFlavors",
    "DuplicateCoveredResource",
    "AwaitingQueueStatus",
    "Migrating",
    "UnsupportedExistingObject",
    "InvalidMigrationState",
]


@dataclass(frozen=True, slots=True)
class Condition:
    """The ``TopologyReady`` condition (type fixed)."""

    status: Literal["True", "False", "Unknown"]
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    """A complete queue plan: the resource groups Kueue gets."""

    flavors: tuple[str, ...]
    groups: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a plan was refused."""

    reason: Reason
    message: str
    requeue_after: float | None = None


@dataclass(frozen=True, slots=True)
class QueueInputs:
    """Everything the decision reads, from the cache and the settings."""

    instance_type: Mapping[str, Any] | None
    queue: Mapping[str, Any] | None
    flavors: Sequence[Mapping[str, Any]]
    nodes: Sequence[NodeHardware]
    topologies: frozenset[str]
    active_checks: frozenset[str]
    #: Whether our field manager owns ``spec.stopPolicy`` on the cached queue (False: someone else set it).
    owns_stop_policy: bool = True
    aware: bool = False
    mixed_on_node: bool = True
    derived_from_node: bool = True
    drain_when_no_flavors: bool = True


@dataclass(frozen=True, slots=True)
class QueueDecision:
    """What to do with the queue."""

    #: The body to apply (None: write nothing — e.g. no InstanceType and no queue).
    body: dict[str, Any] | None
    #: Only a stop-policy patch (the queue is being deleted; never re-create it).
    drain_only: bool = False
    condition: Condition | None = None
    requeue_after: float | None = None
    notes: list[str] = field(default_factory=list)


# --- the plan ---------------------------------------------------------------------------------------
def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _live(obj: Mapping[str, Any]) -> bool:
    return not (obj.get("metadata") or {}).get("deletionTimestamp")


def pool_nodes(
    pool: pools.PoolIdentity,
    nodes: Iterable[NodeHardware],
    *,
    mixed_on_node: bool,
    selector: Mapping[str, str] | None = None,
) -> list[str]:
    """Managed, profiled Nodes that belong to the pool (the mixing rule applied; with ``selector``, the
    CPU rule of the queue's flavor selector, :func:`pools.in_scope`, which the grouping setting decides)."""
    chosen = []
    for node in nodes:
        if node.os != pool.os or node.arch != pool.arch:
            continue
        if selector is not None:
            if not pools.in_scope(selector, node.cpu.g_key):
                continue
        elif pool.general_group not in ("", pools.GENERIC) and node.cpu.g_key != pool.general_group:
            continue
        if pool.acceleratable:
            if any(d.a_key == pool.accelerator_group for d in node.devices):
                chosen.append(node.name)
        elif node.cpu_member(mixed_on_node=mixed_on_node):
            chosen.append(node.name)
    return sorted(chosen)


def _count(flavor: Mapping[str, Any]) -> int:
    selector: Mapping[str, str] = (flavor.get("spec") or {}).get("nodeLabels") or {}
    for key, value in selector.items():
        if key.endswith(".count"):
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _capacity(flavor: Mapping[str, Any]) -> int | None:
    for key, value in _labels(flavor).items():
        if key.endswith(".capacity"):
            try:
                return int(value)
            except ValueError:
                return None
    return None


def plan_queue(
    pool: pools.PoolIdentity,
    selector: Mapping[str, str],
    flavors: Iterable[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    topologies: frozenset[str],
    *,
    mixed_on_node: bool,
) -> Plan | Refusal:
    """The complete plan for a queue, or why none can be made (the rules: this module's docstring)."""
    matching = pools.flavors_of(selector, flavors)
    live = [f for f in matching if _live(f)]
    # Nodes of a flavor being replaced (finalizing): the queue must let go of the old flavor before Kueue
    # releases it and the replacement can be created, so those nodes are not "missing" meanwhile.
    replacing = {
        n.name
        for f in matching
        if not _live(f)
        for n in nodes
        if all(n.labels.get(k) == v for k, v in ((f.get("spec") or {}).get("nodeLabels") or {}).items())
    }
    if len(live) > MAX_FLAVORS_PER_GROUP:
        return Refusal(
            "TooManyFlavors",
            f"{len(live)} flavors exceed Kueue's limit of {MAX_FLAVORS_PER_GROUP} in one resource group",
        )
    selected_by: dict[str, str] = {}
    covered: set[str] = set()
    for flavor in live:
        name = _name(flavor)
        spec = flavor.get("spec") or {}
        node_labels: Mapping[str, str] = spec.get("nodeLabels") or {}
        profile = _labels(flavor).get(keys.TOPOLOGY_PROFILE, "")
        topology = str(spec.get("topologyName") or "")
        if not profile or node_labels.get(keys.TOPOLOGY_PROFILE) != profile:
            return Refusal(
                "MissingTopology", f"flavor {name} does not pin a topology profile", REFUSAL_POLL_S
            )
        if topology != keys.topology_name(profile):
            return Refusal(
                "MissingTopology",
                f"flavor {name} does not reference Topology {keys.topology_name(profile)}",
                REFUSAL_POLL_S,
            )
        if topology not in topologies:
            return Refusal(
                "MissingTopology", f"Topology {topology} of flavor {name} does not exist", REFUSAL_POLL_S
            )
        chosen = [n.name for n in nodes if all(n.labels.get(k) == v for k, v in node_labels.items())]
        for node in chosen:
            other = selected_by.setdefault(node, name)
            if other != name:
                return Refusal(
                    "OverlappingSelectors", f"node {node} is selected by flavors {other} and {name}"
                )
        count = _count(flavor)
        if count <= 0 or _capacity(flavor) != len(chosen) * count:
            return Refusal(
                "NonConservedQuota",
                f"flavor {name} declares capacity {_capacity(flavor)} "
                f"but selects {len(chosen)} node(s) × {count}",
                REFUSAL_POLL_S,
            )
        covered.add(_resource(pool, flavor))
    if len(covered) > 1:
        return Refusal("DuplicateCoveredResource", f"flavors cover different resources: {sorted(covered)}")
    pooled = pool_nodes(pool, nodes, mixed_on_node=mixed_on_node, selector=selector)
    missing = sorted(set(pooled) - set(selected_by) - replacing)
    if missing:
        return Refusal(
            "NonConservedQuota",
            f"{len(missing)} pool node(s) not selected by any flavor: {', '.join(missing[:5])}",
            REFUSAL_POLL_S,
        )
    ordered = sorted(live, key=lambda f: (_count(f), _name(f)))
    if not ordered:
        return Plan((), ())
    resource = covered.pop()
    scale = keys.UNITS_PER_ACCELERATOR if pool.acceleratable else 1
    group = {
        "coveredResources": [resource],
        "flavors": [
            {
                "name": _name(f),
                "resources": [
                    {"name": resource, "nominalQuota": format_integer((_capacity(f) or 0) * scale)}
                ],
            }
            for f in ordered
        ],
    }
    return Plan(tuple(_name(f) for f in ordered), (group,))


def _quota(flavor: Mapping[str, Any], scale: int) -> str:
    return format_integer((_capacity(flavor) or 0) * scale)


def _resource(pool: pools.PoolIdentity, flavor: Mapping[str, Any]) -> str:
    if pool.acceleratable:
        return keys.credits_resource(_annotations(flavor).get(f"{keys.NOTE_PREFIX}manufacturer", ""))
    return CPU_RESOURCE


# --- what Kueue reports ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Reported:
    """Kueue's status of the queue, written for the queue's current generation.

    The only view of Kueue's status the decision has: :func:`_reported` gives it, or nothing while Kueue
    has not caught up with the generation (an older status describes resource groups and a stop policy
    the queue no longer has, so reading it — even as "everything in use" — would act on a queue that is
    gone). Every decision that depends on Kueue first asks for it and waits (``AwaitingQueueStatus``)
    without it.
    """

    active: Mapping[str, Any]
    status: Mapping[str, Any]

    def stopped(self) -> bool:
        """Kueue reports the queue stopped by its stop policy (``Active=False``, reason ``Stopped``: Kueue
        lists that reason first whenever a stop policy is set)."""
        return self.active.get("status") == "False" and self.active.get("reason") == ACTIVE_STOPPED

    def workloads(self) -> int:
        """Workloads holding quota in the queue (Kueue counts admitted ones among the reserving ones)."""
        counts = [self.status.get("reservingWorkloads") or 0, self.status.get("admittedWorkloads") or 0]
        # An unreadable count may hide a reservation: it counts as one.
        return max(c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else 1 for c in counts)

    def idle(self, flavor: str) -> bool:
        """Kueue reports ``flavor`` with every reserved and admitted total at zero.

        Kueue lists every flavor of the resource groups it knows in both ``flavorsReservation`` and
        ``flavorsUsage``, zero totals included; a flavor missing from either list (or an unreadable total)
        may be in use.
        """
        for field_name in ("flavorsReservation", "flavorsUsage"):
            entry = next((f for f in self.status.get(field_name) or () if f.get("name") == flavor), None)
            if entry is None:
                return False
            for resource in entry.get("resources") or ():
                if parse(resource.get("total") or "0") != 0:  # None (unreadable) may be in use
                    return False
        return True

    def in_use(self, dropped: Sequence[str]) -> list[str]:
        """The ``dropped`` flavors Kueue does not report idle."""
        return [f for f in dropped if not self.idle(f)]


def _reported(queue: Mapping[str, Any] | None) -> _Reported | None:
    """Kueue's status of ``queue`` when its ``Active`` condition was written for the current generation,
    else None."""
    if queue is None:
        return None
    generation = (queue.get("metadata") or {}).get("generation")
    status = queue.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Active":
            if generation is not None and cond.get("observedGeneration") == generation:
                return _Reported(cond, status)
            return None
    return None


def holding_workloads(queue: Mapping[str, Any] | None) -> int | None:
    """Workloads holding quota in ``queue`` as Kueue reports it for the queue's current generation; None
    while Kueue has not reported on that generation (``cleanup`` waits on it after its ``HoldAndDrain``)."""
    reported = _reported(queue)
    return None if reported is None else reported.workloads()


def _flavor_names(groups: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(f.get("name", "")) for g in groups for f in g.get("flavors") or ()]


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _checks(pool: pools.PoolIdentity, inp: QueueInputs) -> list[str]:
    names = []
    if keys.JOINT_CHECK in inp.active_checks:
        names.append(keys.JOINT_CHECK)
    if pool.acceleratable and inp.derived_from_node and keys.NODE_DEVICES_CHECK in inp.active_checks:
        names.append(keys.NODE_DEVICES_CHECK)
    return sorted(names)


def _body(
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    groups: Sequence[Mapping[str, Any]],
    stop_policy: str | None,
    checks: Sequence[str],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        # Isolation: no cohort, so nothing to borrow or reclaim. Every card family of a pool is in this
        # one queue, so there is no borrowing between queues to broker.
        "preemption": {
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "Never",
        },
    }
    if stop_policy is not None:
        spec["stopPolicy"] = stop_policy
    # Always explicit, also when empty: an omitted field is only released by our apply, and another
    # manager co-owning the list (Kueue's finalizer update rewrites it) would keep it — and with it the
    # flavors Kueue then never lets go of.
    spec["resourceGroups"] = [dict(g) for g in groups]
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": kinds.CLUSTER_QUEUE.api_version,
        "kind": kinds.CLUSTER_QUEUE.kind,
        "metadata": metadata,
        "spec": spec,
    }


# --- the decision -----------------------------------------------------------------------------------
def unsupported(queue: Mapping[str, Any]) -> bool:
    """A queue with resource groups the chain never filled (no ``tas-queue`` annotation): created by an
    earlier release or by someone else. Never adopted: its spec is not touched."""
    groups = (queue.get("spec") or {}).get("resourceGroups") or ()
    return bool(groups) and _annotations(queue).get(keys.TAS_QUEUE) != "true"


def migration_problem(annotations: Mapping[str, str]) -> str | None:
    """Why the queue's migration annotations cannot be followed, or None when they can (absent, or a
    known phase with a known saved policy)."""
    phase = annotations.get(keys.MIGRATION_PHASE)
    saved = annotations.get(keys.MIGRATION_STOP_POLICY)
    if phase is None and saved is None:
        return None
    if phase is not None and phase not in PHASES:
        return f"unknown {keys.MIGRATION_PHASE} {phase!r} (expected one of {', '.join(sorted(PHASES))})"
    if saved is not None and saved not in SAVED_POLICIES:
        return (
            f"unknown {keys.MIGRATION_STOP_POLICY} {saved!r} "
            f"(expected one of {', '.join(sorted(SAVED_POLICIES))})"
        )
    if saved is None:
        return f"{keys.MIGRATION_PHASE} {phase!r} without a saved {keys.MIGRATION_STOP_POLICY}"
    if phase is None:
        return f"{keys.MIGRATION_STOP_POLICY} {saved!r} without a {keys.MIGRATION_PHASE}"
    return None


@dataclass(frozen=True, slots=True)
class _Queue:
    """The decision's view of one queue: who it is, what it holds now, and its stop-policy facts."""

    name: str
    labels: Mapping[str, str]
    checks: Sequence[str]
    obj: Mapping[str, Any] | None
    groups: Sequence[Mapping[str, Any]]
    #: ``spec.stopPolicy`` as stored (None: unset).
    stored_policy: str | None
    #: The stop policy without a migration: ``Hold`` when the type is inactive, None (leave the field to its
    #: owner) while someone else's stop waits for the ``inactive`` backfill, else ``None``.
    base: str | None
    phase: str | None
    saved: str | None
    drain_when_no_flavors: bool
    #: Kueue's status for the current generation, or None until Kueue reports it (the one view of it).
    reported: _Reported | None

    def body(
        self, annotations: Mapping[str, str], groups: Sequence[Mapping[str, Any]], policy: str | None
    ) -> dict[str, Any]:
        return _body(self.name, self.labels, annotations, groups, policy, self.checks)

    def placed(
        self, groups: Sequence[Mapping[str, Any]], condition: Condition, notes: Sequence[str] = ()
    ) -> QueueDecision:
        """``groups`` with the base policy and no migration annotations (in place, or restored)."""
        return QueueDecision(
            self.body({keys.TAS_QUEUE: "true"}, groups, self.base), condition=condition, notes=list(notes)
        )

    def awaiting(self) -> QueueDecision:
        """Kueue has not reported the current generation: the queue as it is — its groups, no hold started,
        no migration state changed (a running migration keeps its hold) — until it does (Kueue's status
        update wakes the queue; the requeue is the fallback)."""
        if self.phase is not None:
            return self.hold(self.groups, self.phase, _awaiting(), DRAIN_POLL_S)
        if not self.groups:
            return self.held_empty(_awaiting(), DRAIN_POLL_S)
        return QueueDecision(
            self.body({keys.TAS_QUEUE: "true"}, self.groups, self.base),
            condition=_awaiting(),
            requeue_after=DRAIN_POLL_S,
        )

    def hold(
        self,
        groups: Sequence[Mapping[str, Any]],
        phase: str,
        condition: Condition,
        requeue_after: float | None,
        notes: Sequence[str] = (),
    ) -> QueueDecision:
        """``HoldAndDrain`` with ``groups``, the saved policy and ``phase`` recorded on the queue.

        While someone else's stop waits for the ``inactive`` backfill, the stop policy is left to its owner:
        taking it over would hide the stop from the backfill (and lose it when the migration restores the
        base policy). Their ``HoldAndDrain`` already drains, so the migration goes on under it; their
        ``Hold`` does not, so nothing changes until the backfill (which wakes the queue again).
        """
        if self.base is None and self.stored_policy != HOLD_AND_DRAIN:
            current = _annotations(self.obj or {})
            kept = {k: current[k] for k in (keys.MIGRATION_STOP_POLICY, keys.MIGRATION_PHASE) if k in current}
            if self.groups:
                kept[keys.TAS_QUEUE] = "true"
            return QueueDecision(
                self.body(kept, self.groups, None),
                condition=Condition(
                    "False",
                    "Migrating",
                    "the queue was stopped by someone else: waiting for the InstanceType to record it as "
                    "inactive before holding it HoldAndDrain",
                ),
                requeue_after=DRAIN_POLL_S,
            )
        saved = self.saved if self.saved is not None else (self.stored_policy or UNSET)
        annotations = {keys.MIGRATION_STOP_POLICY: saved, keys.MIGRATION_PHASE: phase}
        if groups:
            annotations[keys.TAS_QUEUE] = "true"
        return QueueDecision(
            self.body(annotations, groups, HOLD_AND_DRAIN if self.base is not None else None),
            condition=condition,
            requeue_after=requeue_after,
            notes=list(notes),
        )

    def held_empty(self, condition: Condition, requeue_after: float | None) -> QueueDecision:
        """No resource groups (a queue without them admits everything under ``IgnoreUndeclared``): a
        migrated or drained queue stays HoldAndDrain; someone else's stop is left theirs, unmarked (the
        ``inactive`` backfill must see it, and the groups that arrive must not release it); an inactive
        type's ``Hold`` is the type's; only otherwise is it the chain's ``Hold``, marked
        ``topology.gpustack.ai/empty-plan-hold``."""
        if self.phase is not None:
            return self.hold((), self.phase, condition, requeue_after)
        if self.base != NONE:
            return QueueDecision(
                self.body({}, (), self.base), condition=condition, requeue_after=requeue_after
            )
        return QueueDecision(
            self.body({keys.EMPTY_PLAN_HOLD: "true"}, (), HOLD),
            condition=condition,
            requeue_after=requeue_after,
        )


def _awaiting() -> Condition:
    return Condition(
        "Unknown", "AwaitingQueueStatus", "waiting for Kueue to report the queue's current generation"
    )


def decide(inp: QueueInputs) -> QueueDecision:
    """The desired ClusterQueue for one InstanceType (keyed by the shared name)."""
    it, queue = inp.instance_type, inp.queue
    if it is None:
        if queue is None or unsupported(queue):
            return QueueDecision(None)
        return _deleting()
    if queue is not None and unsupported(queue):
        return QueueDecision(
            None,
            condition=Condition(
                "False",
                "UnsupportedExistingObject",
                f"ClusterQueue {_name(queue)} has resource groups but no {keys.TAS_QUEUE} annotation "
                "(created by an earlier release or by someone else): it is not adopted or modified; "
                "delete it so the chain creates a fresh one",
            ),
        )
    if not _live(it) or (queue is not None and not _live(queue)):
        return _deleting()
    pool = pools.identity_of(it)
    name = _name(it)
    labels = {**pools.schedule_labels(pool, aware=inp.aware), keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES}
    spec = (queue or {}).get("spec") or {}
    stored = str(spec["stopPolicy"]) if spec.get("stopPolicy") else None
    annotations = _annotations(queue or {})
    inactive = bool((it.get("spec") or {}).get("inactive", False))
    foreign_stop = queue is not None and not inp.owns_stop_policy and stored in (HOLD, HOLD_AND_DRAIN)
    # Someone else stopped the queue: leave their stop policy theirs (omit the field) until the InstanceType
    # controller has back-filled ``inactive``; re-owning it earlier would hide the stop from the backfill.
    base: str | None = HOLD if inactive else (None if foreign_stop else NONE)
    outcome = plan_queue(
        pool,
        pools.flavor_selector(labels),
        inp.flavors,
        inp.nodes,
        inp.topologies,
        mixed_on_node=inp.mixed_on_node,
    )
    q = _Queue(
        name=name,
        labels=labels,
        checks=_checks(pool, inp),
        obj=queue,
        groups=_current_groups(list(spec.get("resourceGroups") or ()), inp, outcome),
        stored_policy=stored,
        base=base,
        phase=annotations.get(keys.MIGRATION_PHASE),
        saved=annotations.get(keys.MIGRATION_STOP_POLICY),
        drain_when_no_flavors=inp.drain_when_no_flavors,
        reported=_reported(queue),
    )
    problem = migration_problem(annotations)
    if problem is not None:
        return _invalid(q, problem, owns_stop_policy=inp.owns_stop_policy)
    if isinstance(outcome, Refusal):
        return _refused(q, outcome, inp.flavors)
    if not outcome.groups:
        return _no_live_flavor(q)
    return _planned(q, outcome)


def _deleting() -> QueueDecision:
    return QueueDecision(
        {"spec": {"stopPolicy": HOLD_AND_DRAIN}},
        drain_only=True,
        notes=["queue or InstanceType being deleted: HoldAndDrain so Kueue evicts and releases it"],
    )


def _invalid(q: _Queue, problem: str, *, owns_stop_policy: bool) -> QueueDecision:
    """Annotations the state machine cannot follow: nothing is switched, restored or released — the spec
    and the annotations stay as they are until someone repairs or removes them."""
    current = _annotations(q.obj or {})
    kept = {
        k: current[k]
        for k in (keys.TAS_QUEUE, keys.EMPTY_PLAN_HOLD, keys.MIGRATION_STOP_POLICY, keys.MIGRATION_PHASE)
        if k in current
    }
    return QueueDecision(
        q.body(kept, q.groups, q.stored_policy if owns_stop_policy else None),
        condition=Condition(
            "False",
            "InvalidMigrationState",
            f"{problem}: the queue is kept as it is; repair the annotation, or remove both "
            f"{keys.MIGRATION_PHASE} and {keys.MIGRATION_STOP_POLICY} to end the migration",
        ),
    )


def _refused(q: _Queue, refusal: Refusal, flavors: Sequence[Mapping[str, Any]]) -> QueueDecision:
    """Keep the last complete plan — minus finalizing flavors: dropping them is the update Kueue waits for
    before it releases them (a flavor replaced under the same name would otherwise deadlock).

    When that would leave no group on a queue that has groups, the refusal goes through the no-live-flavor
    drain instead: the groups stay until Kueue reports, for the current generation, no Workload reserving
    quota — never an empty queue under reservations on flavors Kueue would then let go of.
    """
    condition = Condition("False", refusal.reason, refusal.message)
    finalizing = {_name(f) for f in flavors if not _live(f)}
    kept = _without_flavors(q.groups, finalizing)
    if not kept:
        if not q.groups:
            return q.held_empty(condition, refusal.requeue_after)
        drained = _no_live_flavor(q)
        if drained.condition is not None and drained.condition.reason != "AwaitingQueueStatus":
            condition = Condition(
                "False",
                refusal.reason,
                f"{refusal.message}; every flavor is finalizing: {drained.condition.message}",
            )
            return replace(drained, condition=condition, requeue_after=_sooner(drained, refusal))
        return drained
    if q.phase is not None:
        return q.hold(kept, q.phase, condition, refusal.requeue_after)
    return QueueDecision(
        q.body({keys.TAS_QUEUE: "true"}, kept, q.base),
        condition=condition,
        requeue_after=refusal.requeue_after,
    )


def _sooner(decision: QueueDecision, refusal: Refusal) -> float | None:
    waits = [w for w in (decision.requeue_after, refusal.requeue_after) if w is not None]
    return min(waits) if waits else None


def _no_live_flavor(q: _Queue) -> QueueDecision:
    """The complete plan is empty: never an empty queue that admits — drain, empty the groups, stay held."""
    if not q.groups:
        message = (
            "no live flavor: held until a flavor returns"
            if q.phase
            else "no flavor yet: held until one exists"
        )
        return q.held_empty(Condition("True", "Ready", message), None)
    holding = q.drain_when_no_flavors or q.phase is not None
    if q.reported is None:
        return q.awaiting()
    count = q.reported.workloads()
    # Held: emptied only once Kueue reports the queue stopped, so nothing is admitted between its report
    # and the emptying write.
    if count == 0 and (q.reported.stopped() or not holding):
        return q.hold(
            (),
            PHASE_SWITCHED,
            Condition("True", "Ready", "no live flavor: groups emptied, held until a flavor returns"),
            None,
            notes=["emptied the resource groups after every reservation cleared"],
        )
    if holding:
        return q.hold(
            q.groups,
            PHASE_DRAINING,
            Condition(
                "False",
                "Migrating",
                f"no live flavor: draining {count} workload(s)"
                if count
                else "no live flavor: waiting for Kueue to report the queue stopped",
            ),
            DRAIN_POLL_S,
        )
    return QueueDecision(
        q.body({keys.TAS_QUEUE: "true"}, q.groups, q.base),
        condition=Condition("True", "Ready", f"no live flavor: waiting for {count} workload(s) to finish"),
        requeue_after=WAIT_POLL_S,
    )


def _planned(q: _Queue, plan: Plan) -> QueueDecision:
    """A complete, non-empty plan: in place, or the HoldAndDrain migration (docs/topology.md, "The
    migration state machine")."""
    ready = Condition("True", "Ready", f"{len(plan.flavors)} topology-aware flavor(s)")
    dropped = sorted(set(_flavor_names(q.groups)) - set(plan.flavors))
    if q.phase is None and not dropped:  # added flavors and quota changes need nothing from Kueue
        return q.placed(plan.groups, ready)
    if q.reported is None:
        return q.awaiting()
    reported = q.reported
    count = reported.workloads()

    def draining(detail: str) -> QueueDecision:
        condition = Condition(
            "False",
            "Migrating",
            f"dropping {len(dropped)} flavor(s) that may be in use ({_listed(dropped)}): "
            f"held HoldAndDrain, {count} workload(s) reserve quota; {detail}",
        )
        return q.hold(q.groups, PHASE_DRAINING, condition, DRAIN_POLL_S)

    restored = [f"restored the stop policy saved by the migration ({q.saved})"] if q.saved else []
    if q.phase is None:
        if not reported.in_use(dropped):
            return q.placed(plan.groups, ready)
        return draining("switching once Kueue reports none")
    if q.phase == PHASE_DRAINING:
        if not dropped:  # nothing left to drop (the old flavors came back): end the migration
            return q.placed(plan.groups, ready, restored)
        if not reported.stopped():
            return draining("waiting for Kueue to report the queue stopped")
        if count:
            return draining("switching once Kueue reports none")
        return q.hold(
            plan.groups,
            PHASE_SWITCHED,
            Condition(
                "False",
                "Migrating",
                f"switched to {len(plan.flavors)} topology-aware flavor(s); the stop policy is restored once "
                "Kueue reports the new generation",
            ),
            DRAIN_POLL_S,
            notes=[f"switched the flavor plan after the queue drained (dropped {_listed(dropped)})"],
        )
    # Switched: Kueue has seen the new plan (or the emptied queue waits for a flavor that has now returned).
    if reported.in_use(dropped):
        return draining("a flavor dropped after the switch is still in use")
    return q.placed(plan.groups, ready, restored)


def _current_groups(
    groups: list[Mapping[str, Any]], inp: QueueInputs, outcome: Plan | Refusal
) -> list[Mapping[str, Any]]:
    """The queue's groups as every decision reads them: the one rule for a leaving node (docs/chain.md,
    "A leaving node drops its flavor in place").

    A flavor whose nodes left (:func:`_left`) is taken out of the groups before anything is decided, so
    every write omits it — whatever the migration phase, a refusal, an invalid annotation, or Kueue's
    status (read or not, current or not) — and it is never a dropped flavor that "may be in use": a
    Workload on it lost its node and must move regardless, and Kueue evicts it (TAS node failure
    handling), not a hold of ours. When the leaving flavors are all the queue has, a complete plan
    replaces them (its flavors are added ones, which need nothing from Kueue); without one they stay, and
    the no-live-flavor drain (or the refusal's) keeps them until Kueue reports no reservation — never an
    empty queue under reservations.
    """
    planned = outcome.groups if isinstance(outcome, Plan) else None
    left = _left(groups, inp.flavors, inp.nodes, planned)
    kept = _without_flavors(groups, left)
    if kept or not left:
        return kept
    if isinstance(outcome, Plan) and outcome.groups:
        return list(outcome.groups)
    return groups


def _left(
    groups: Sequence[Mapping[str, Any]],
    flavors: Sequence[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    planned: Sequence[Mapping[str, Any]] | None = None,
) -> set[str]:
    """The flavors of ``groups`` whose nodes left: finalizing (the flavor controller deleted them; Kueue
    keeps them with ``resource-in-use`` while a queue references them) and selecting no Node any more,
    whatever topology profile the Node now carries — or whose hardware is still selected under another
    profile while the plan (``planned``, the complete plan's groups) gives no flavor of that hardware more
    quota than the queue holds now: the other profile's nodes were served all along, and nothing of the
    finalizing flavor's moved there. A finalizing flavor whose hardware is selected elsewhere and whose
    capacity reappears there (a flavor of that hardware new to the queue or grown, or no complete plan to
    tell) is the old flavor of a live hierarchy change (its nodes stayed, re-advertised by the new
    flavors), and one whose full selector still selects Nodes is being replaced under its name: both
    follow the migration rule."""
    names = set(_flavor_names(groups))
    by_name = {_name(f): f for f in flavors}
    quotas: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]] | None = None  # read on first need
    out = set()
    for flavor in flavors:
        name = _name(flavor)
        if name not in names or _live(flavor):
            continue
        selector: Mapping[str, str] = (flavor.get("spec") or {}).get("nodeLabels") or {}
        if any(all(n.labels.get(k) == v for k, v in selector.items()) for n in nodes):
            continue  # replaced under its name
        hardware = _hardware(flavor)
        if not any(all(n.labels.get(k) == v for k, v in hardware.items()) for n in nodes):
            out.add(name)
            continue
        if planned is None:
            continue  # no complete plan to tell a leaving from a move: the migration rule
        quotas = quotas or (_quotas(planned), _quotas(groups))
        if not _gains(*quotas, by_name, hardware):
            out.add(name)
    return out


def _hardware(flavor: Mapping[str, Any]) -> dict[str, str]:
    """A flavor's node selector without its topology-profile pin: the hardware it serves."""
    selector: Mapping[str, str] = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return {k: v for k, v in selector.items() if k != keys.TOPOLOGY_PROFILE}


def _quotas(groups: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each flavor's nominal quota per resource in ``groups``."""
    out: dict[str, dict[str, Any]] = {}
    for group in groups:
        for flavor in group.get("flavors") or ():
            quota = {str(r.get("name", "")): r.get("nominalQuota") for r in flavor.get("resources") or ()}
            out[str(flavor.get("name", ""))] = quota
    return out


def _gains(
    planned: Mapping[str, Mapping[str, Any]],
    held: Mapping[str, Mapping[str, Any]],
    flavors: Mapping[str, Mapping[str, Any]],
    hardware: Mapping[str, str],
) -> bool:
    """Whether the plan's quotas (``planned``, :func:`_quotas`) give a flavor of ``hardware`` more than the
    queue holds now (``held``): a flavor new to the queue (or not in the cache yet, so of unknown
    hardware), or a resource's quota grown (or unreadable)."""
    for name, quota in planned.items():
        known = flavors.get(name)
        if known is not None and _hardware(known) != hardware:
            continue
        now = held.get(name)
        if now is None:
            return True
        for resource, value in quota.items():
            after, before = parse(value), parse(now.get(resource, "0"))
            if after is None or before is None or after > before:
                return True
    return False


def _without_flavors(groups: Sequence[Mapping[str, Any]], names: set[str]) -> list[Mapping[str, Any]]:
    """``groups`` without the flavors ``names`` (a group left with no flavor is dropped)."""
    if not names:
        return list(groups)
    out: list[Mapping[str, Any]] = []
    for group in groups:
        kept = [f for f in group.get("flavors") or () if f.get("name") not in names]
        if kept:
            out.append({**group, "flavors": kept})
    return out


def held_in_migration(queue: Mapping[str, Any]) -> tuple[str] | None:
    """``(phase,)`` while the queue is held ``HoldAndDrain`` with a known migration phase recorded on it,
    else None: what ``gpustack_clusterqueues_held_in_migration`` counts (an alert fires on a long hold)."""
    phase = _annotations(queue).get(keys.MIGRATION_PHASE)
    spec = queue.get("spec") or {}
    if phase not in PHASES or spec.get("stopPolicy") != HOLD_AND_DRAIN:
        return None
    return (str(phase),)


#: What :func:`held_in_migration` may answer (exported at zero).
MIGRATION_HOLD_STATES: Final = tuple((phase,) for phase in sorted(PHASES))
