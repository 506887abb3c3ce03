"""The ClusterQueue of a pool: quota plan, admission checks and the stop-policy state machine (pure).

One controller owns every field the chain writes on a ClusterQueue (scheduling-chain "The InstanceType
lifecycle" and "Queue quota and draining", reference §3.2, §5.7 and Appendix A.5), so the stop policy is
decided in one place and two field managers never fight over it. Inputs are cached objects; the output
is the desired ClusterQueue body plus the ``TopologyReady`` condition and a requeue hint.

Plan (A.5): the live operator flavors matching the queue's selector (a flavor with a deletionTimestamp is
finalizing and is dropped in place), validated — at most 64 flavors, every flavor pins its profile and
references an existing Topology, no Node selected by two flavors, each flavor's capacity equals the Nodes
it selects × its per-node count, every pool Node is selected — then sorted by per-node count and name
into one resource group covering ``credits.gpustack.ai/<mfr>`` (nominal = capacity × 1,600,000) for an
accelerated pool or ``cpu`` (nominal = capacity) for a CPU pool. A refused plan keeps the last complete
plan and says why in ``TopologyReady``.

Stop policy, in order:

1. queue or InstanceType being deleted → ``HoldAndDrain`` (Kueue evicts, then drops its finalizer);
2. a complete, non-empty plan → the plan, and the base policy (``Hold`` when the type is ``inactive`` or
   someone else stopped the queue, else ``None``) — this also *restores* a drained queue, dropping the
   saved policy and phase annotations;
3. no live flavor while the queue still carries quota → drain: ``HoldAndDrain`` (only when
   ``instance-type-drain-when-no-flavors``; otherwise wait for reservations to clear), save the previous
   policy, and empty the groups once Kueue reports no reserving Workload for the current generation;
   the emptied queue stays ``HoldAndDrain`` until a flavor returns;
4. no groups and no plan → ``Hold`` marked ``topology.gpustack.ai/empty-plan-hold`` (a queue without
   resource groups admits everything under ``IgnoreUndeclared``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import pools
from gpustack_worker.runtime.quantity import format_integer

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gpustack_worker.chain.nodes import NodeHardware

__all__ = (
    "MAX_FLAVORS_PER_GROUP",
    "Condition",
    "Plan",
    "QueueDecision",
    "QueueInputs",
    "Refusal",
    "decide",
    "plan_queue",
    "pool_nodes",
)

#: Kueue allows at most 64 flavors in one resource group.
MAX_FLAVORS_PER_GROUP: Final = 64
HOLD: Final = "Hold"
HOLD_AND_DRAIN: Final = "HoldAndDrain"
NONE: Final = "None"
#: Saved-policy value when the queue had no stop policy at all.
UNSET: Final = "unset"
PHASE_DRAINING: Final = "draining"
PHASE_SWITCHED: Final = "switched"
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


def pool_nodes(pool: pools.PoolIdentity, nodes: Iterable[NodeHardware], *, mixed_on_node: bool) -> list[str]:
    """Managed, profiled Nodes that belong to the pool (the mixing rule applied)."""
    chosen = []
    for node in nodes:
        if node.os != pool.os or node.arch != pool.arch:
            continue
        if pool.general_group not in ("", pools.GENERIC) and node.cpu.g_key != pool.general_group:
            continue
        if pool.acceleratable:
            if any(d.a_key == pool.accelerator_group for d in node.devices):
                chosen.append(node.name)
        elif node.cpu.cores > 0 and (mixed_on_node or not node.accelerated):
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
    """The complete plan for a queue, or why none can be made (reference Appendix A.5)."""
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
    missing = sorted(set(pool_nodes(pool, nodes, mixed_on_node=mixed_on_node)) - set(selected_by) - replacing)
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


# --- the decision -----------------------------------------------------------------------------------
def _status_current(queue: Mapping[str, Any]) -> bool:
    """Kueue wrote the queue's status for its current generation."""
    generation = (queue.get("metadata") or {}).get("generation")
    for cond in (queue.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Active":
            return bool(cond.get("observedGeneration") == generation)
    return False


def _reserving(queue: Mapping[str, Any]) -> int:
    status = queue.get("status") or {}
    return int(status.get("reservingWorkloads") or 0) + int(status.get("admittedWorkloads") or 0)


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
        # Isolation: no cohort, so nothing to borrow or reclaim (scheduling-chain "Stage 4").
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


def decide(inp: QueueInputs) -> QueueDecision:
    """The desired ClusterQueue for one InstanceType (keyed by the shared name)."""
    it, queue = inp.instance_type, inp.queue
    if it is None or not _live(it) or (queue is not None and not _live(queue)):
        if queue is None:
            return QueueDecision(None)
        return QueueDecision(
            {"spec": {"stopPolicy": HOLD_AND_DRAIN}},
            drain_only=True,
            notes=["queue or InstanceType being deleted: HoldAndDrain so Kueue evicts and releases it"],
        )
    pool = pools.identity_of(it)
    name = _name(it)
    labels = {**pools.schedule_labels(pool, aware=inp.aware), keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES}
    spec = (queue or {}).get("spec") or {}
    current_groups: list[Mapping[str, Any]] = list(spec.get("resourceGroups") or ())
    current_policy = str(spec.get("stopPolicy") or NONE)
    saved = _annotations(queue or {}).get(keys.MIGRATION_STOP_POLICY)
    inactive = bool((it.get("spec") or {}).get("inactive", False))
    foreign_stop = not inp.owns_stop_policy and current_policy in (HOLD, HOLD_AND_DRAIN) and queue is not None
    # Someone else stopped the queue: leave their stop policy theirs (omit the field) until the InstanceType
    # controller has back-filled ``inactive``; re-owning it earlier would hide the stop from the backfill.
    base: str | None = HOLD if inactive else (None if foreign_stop else NONE)
    checks = _checks(pool, inp)

    outcome = plan_queue(
        pool,
        pools.flavor_selector(labels),
        inp.flavors,
        inp.nodes,
        inp.topologies,
        mixed_on_node=inp.mixed_on_node,
    )
    if isinstance(outcome, Refusal):
        condition = Condition("False", outcome.reason, outcome.message)
        # Keep the last complete plan — minus finalizing flavors: dropping them is the update Kueue waits
        # for before it releases them (a flavor replaced under the same name would otherwise deadlock).
        finalizing = {_name(f) for f in inp.flavors if not _live(f)}
        current_groups = _without_flavors(current_groups, finalizing)
        if current_groups:
            policy = HOLD_AND_DRAIN if saved is not None else base
            annotations = _keep_annotations(queue, {keys.TAS_QUEUE: "true"})
            return QueueDecision(
                _body(name, labels, annotations, current_groups, policy, checks),
                condition=condition,
                requeue_after=outcome.requeue_after,
            )
        return _held_empty(name, labels, queue, saved, checks, condition, outcome.requeue_after)

    if outcome.groups:
        notes = ["restored the stop policy saved by the drain"] if saved is not None else []
        return QueueDecision(
            _body(name, labels, {keys.TAS_QUEUE: "true"}, outcome.groups, base, checks),
            condition=Condition("True", "Ready", f"{len(outcome.flavors)} topology-aware flavor(s)"),
            notes=notes,
        )

    # No live flavor.
    if not current_groups:
        return _held_empty(
            name,
            labels,
            queue,
            saved,
            checks,
            Condition("True", "Ready", "no flavor yet: held until one exists"),
            None,
        )
    assert queue is not None
    saved_policy = (
        saved if saved is not None else (str(spec.get("stopPolicy")) if spec.get("stopPolicy") else UNSET)
    )
    if not _status_current(queue):
        condition = Condition(
            "Unknown", "AwaitingQueueStatus", "waiting for Kueue to report the queue's current generation"
        )
        policy = HOLD_AND_DRAIN if inp.drain_when_no_flavors or saved is not None else current_policy
        annotations = {keys.TAS_QUEUE: "true"}
        if policy == HOLD_AND_DRAIN:
            annotations |= {keys.MIGRATION_STOP_POLICY: saved_policy, keys.MIGRATION_PHASE: PHASE_DRAINING}
        return QueueDecision(
            _body(name, labels, annotations, current_groups, policy, checks),
            condition=condition,
            requeue_after=DRAIN_POLL_S,
        )
    drained = {keys.MIGRATION_STOP_POLICY: saved_policy}
    if _reserving(queue) == 0:
        return QueueDecision(
            _body(name, labels, drained | {keys.MIGRATION_PHASE: PHASE_SWITCHED}, (), HOLD_AND_DRAIN, checks),
            condition=Condition(
                "True", "Ready", "no live flavor: groups emptied, held until a flavor returns"
            ),
            notes=["emptied the resource groups after every reservation cleared"],
        )
    if inp.drain_when_no_flavors:
        return QueueDecision(
            _body(
                name,
                labels,
                drained | {keys.MIGRATION_PHASE: PHASE_DRAINING, keys.TAS_QUEUE: "true"},
                current_groups,
                HOLD_AND_DRAIN,
                checks,
            ),
            condition=Condition("True", "Ready", f"no live flavor: draining {_reserving(queue)} workload(s)"),
            requeue_after=DRAIN_POLL_S,
        )
    return QueueDecision(
        _body(
            name,
            labels,
            {keys.TAS_QUEUE: "true"},
            current_groups,
            current_policy if saved is None else HOLD_AND_DRAIN,
            checks,
        ),
        condition=Condition(
            "True", "Ready", f"no live flavor: waiting for {_reserving(queue)} workload(s) to finish"
        ),
        requeue_after=WAIT_POLL_S,
    )


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


def _keep_annotations(queue: Mapping[str, Any] | None, extra: Mapping[str, str]) -> dict[str, str]:
    current = _annotations(queue or {})
    kept = {k: current[k] for k in (keys.MIGRATION_STOP_POLICY, keys.MIGRATION_PHASE) if k in current}
    return {**kept, **extra}


def _held_empty(
    name: str,
    labels: Mapping[str, str],
    queue: Mapping[str, Any] | None,
    saved: str | None,
    checks: Sequence[str],
    condition: Condition,
    requeue_after: float | None,
) -> QueueDecision:
    """No resource groups: a drained queue stays HoldAndDrain; anything else is Hold, marked."""
    if saved is not None:
        annotations = _keep_annotations(queue, {})
        return QueueDecision(
            _body(name, labels, annotations, (), HOLD_AND_DRAIN, checks),
            condition=condition,
            requeue_after=requeue_after,
        )
    return QueueDecision(
        _body(name, labels, {keys.EMPTY_PLAN_HOLD: "true"}, (), HOLD, checks),
        condition=condition,
        requeue_after=requeue_after,
    )
