"""One TopologySource's reconcile decision (pure): its NodeFeatures, its status and its finalizer.

The rules are docs/topology.md, "The source contract". Inputs are cached objects plus what the thin step read
(the snapshot bytes of a writing arm, or why reading failed) and the clock; the output says which
NodeFeatures to apply and delete, the conditions, the status fields and when to look again.

- **nodeLabels** (read-only): check the hierarchy the selected Nodes' labels form (no child without its
  parent, no child value under two parent tuples); never write anything. A source switched from a writing
  arm first deletes the NodeFeatures it owns and drops its finalizer.
- **configMap / webhook** (writing): decode and validate the complete snapshot before anything changes;
  one NodeFeature per described Node with exactly that Node's writable labels; Nodes omitted from the
  snapshot, and Nodes another writing source also selects (ownership conflict), lose theirs. The
  ``Ready``/``Valid`` message says how many selected Nodes the snapshot leaves out, and names a few
  (:func:`coverage`; the reason stays ``Observed``, GPUStack's reason for an applied snapshot).
- **failures** of a writing arm (the spec, the read, the snapshot): a source that never succeeded owns
  nothing; otherwise the last valid NodeFeatures stay, ``Ready=False/Stale``, until ``maxStaleness``
  after the last good state, then they are removed (``Expired``).
- **deletion**: every owned NodeFeature is deleted, then the finalizer is dropped.

The staleness clock. ``status.lastSuccessfulRefreshTime`` is the time of the last successful apply. A
webhook source polls, so each successful poll moves it, and it expires ``maxStaleness`` after its last
good answer. A configMap source is read when something changes, not on a timer, so a quiet hour must not
count against it (and a converged source must issue no write): its clock moves only when a new revision
is applied or it recovers, and the last good state is the later of that time and the moment the current
failure began (the ``Valid`` condition's ``lastTransitionTime``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from gpustack_worker.runtime.conditions import Condition, find
from gpustack_worker.topology import hierarchy, snapshot
from gpustack_worker.topology import levels as lv
from gpustack_worker.topology.nodefeatures import nodefeature_body
from gpustack_worker.topology.spec_check import level_limit_errors, parse_duration, spec_errors

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from gpustack_worker.topology.field_error import FieldError

__all__ = (
    "CONFLICT_RETRY_S",
    "Fetched",
    "ReadFailed",
    "SourceDecision",
    "SourceInputs",
    "arm_of",
    "coverage",
    "decide",
    "is_writing",
    "lapsed_state",
    "listed",
)

READY: Final = "Ready"
VALID: Final = "Valid"
OWNERSHIP_CONFLICT: Final = "OwnershipConflict"
#: The Ready reason while a failing writing source's last valid snapshot is still in effect.
STALE: Final = "Stale"
#: The Ready reason once that snapshot's NodeFeatures were removed at ``maxStaleness``.
EXPIRED: Final = "Expired"
#: What :func:`lapsed_state` may answer (the label values of ``gpustack_topologysources_stale_or_expired``).
LAPSED_STATES: Final = ((STALE,), (EXPIRED,))
#: How many Node names a condition message lists before "and N more".
NAMES_SHOWN: Final = 3
#: How soon a source in an ownership conflict looks again: one minute, as GPUStack's sources retry a
#: conflict (a webhook source's poll interval, when shorter, comes first).
CONFLICT_RETRY_S: Final = 60.0
#: The reason for a spec the admission webhook would have refused (it was created while the webhook was
#: not registered, or predates a rule): the same checks run here, reported like any other failure.
INVALID_SPEC: Final = "InvalidSpec"
#: The reason for levels no Kueue Topology could hold (more than ``SOURCE_LEVELS_MAX``, or a key longer
#: than Kueue's ``nodeLabel``): a source stored before the limit, or while the webhook was not registered.
#: Unlike any other failure it never leaves a snapshot in effect (``Stale``): no Node may get a profile
#: whose Topology cannot be created, so the source owns nothing until its levels are fixed.
LEVEL_LIMIT_EXCEEDED: Final = "LevelLimitExceeded"

Arm = Literal["", "NodeLabels", "ConfigMap", "Webhook"]
_Status = Literal["True", "False", "Unknown"]
#: (status, reason, message) of one condition.
_Cond = tuple[_Status, str, str]
_ARMS: Final[tuple[tuple[str, Arm], ...]] = (
    ("nodeLabels", "NodeLabels"),
    ("configMap", "ConfigMap"),
    ("webhook", "Webhook"),
)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A writing arm's snapshot as read (not yet decoded), and when it was read (a webhook answer reused
    within its poll interval keeps the time it was fetched)."""

    raw: bytes | str
    at: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """Why a writing arm's snapshot could not be read: ``ConfigMapReadFailed``, ``SnapshotKeyMissing``
    or ``WebhookReadFailed``."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class SourceInputs:
    """Everything one source's decision reads."""

    source: Mapping[str, Any]
    #: The worker (system) namespace: references must point into it, NodeFeatures are written there.
    namespace: str
    #: Node name → labels, for every Node the source's ``nodeSelector`` matches.
    selected: Mapping[str, Mapping[str, str]]
    #: The snapshot of a writing arm (None for nodeLabels, no arm, or a source being deleted).
    read: Fetched | ReadFailed | None
    #: NodeFeature name → cached object, for every NodeFeature labelled with this source's UID.
    owned: Mapping[str, Mapping[str, Any]]
    #: Node name → the other writing sources that also select it (overlapping writers).
    conflicts: Mapping[str, Sequence[str]]
    now: dt.datetime


@dataclass(slots=True)
class SourceDecision:
    """What to do for one source."""

    kind: Arm
    #: NodeFeature name → desired body.
    apply: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Owned NodeFeature names to delete.
    delete: list[str] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    #: Status fields besides ``conditions`` and ``mutatedNodes`` (the step counts its writes).
    status: dict[str, Any] = field(default_factory=dict)
    #: True: ensure the finalizer; False: ensure it is gone; None: the object is being deleted and
    #: still owns NodeFeatures (drop it later).
    finalizer: bool | None = False
    requeue_after: float | None = None
    #: No status to write (the source is being deleted).
    deleting: bool = False
    #: Selected Nodes the applied snapshot does not describe (a writing source; sorted): they get none of
    #: its labels. Said in the ``Ready``/``Valid`` message (:func:`coverage`), read by ``plan``.
    undescribed: list[str] = field(default_factory=list)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def arm_of(spec: Mapping[str, Any]) -> Arm:
    """The arm a spec sets ("" when none; the first when several — admission forbids that)."""
    for field_name, kind in _ARMS:
        if spec.get(field_name) is not None:
            return kind
    return ""


def is_writing(source: Mapping[str, Any]) -> bool:
    """Whether the source publishes NodeFeatures (a configMap or webhook arm)."""
    return arm_of(source.get("spec") or {}) in ("ConfigMap", "Webhook")


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _format_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _three(
    gen: int | None,
    ready: _Cond,
    valid: _Cond,
    conflict: _Cond,
) -> list[Condition]:
    return [
        Condition(type_, status, reason, message, observed_generation=gen)
        for type_, (status, reason, message) in (
            (READY, ready),
            (VALID, valid),
            (OWNERSHIP_CONFLICT, conflict),
        )
    ]


def decide(inp: SourceInputs) -> SourceDecision:
    """The decision for one TopologySource."""
    source = inp.source
    meta = _meta(source)
    spec: Mapping[str, Any] = source.get("spec") or {}
    kind = arm_of(spec)
    owned = sorted(inp.owned)
    if meta.get("deletionTimestamp"):
        return SourceDecision(kind, delete=owned, finalizer=False if not owned else None, deleting=True)
    gen = meta.get("generation")
    base: dict[str, Any] = {
        "observedGeneration": gen,
        "sourceKind": kind,
        "selectedNodes": len(inp.selected),
        "conflictedNodes": 0,
    }
    status = dict(source.get("status") or {})
    for key in ("lastSuccessfulRevision", "lastSuccessfulRefreshTime"):
        if status.get(key):
            base[key] = status[key]
    errors = spec_errors(spec, namespace=inp.namespace)

    if kind != "" and (limits := level_limit_errors(spec)):
        return _level_limit(kind, gen, base, limits, errors, owned)
    if kind == "":
        msg = "no inventory arm is set: exactly one of nodeLabels, configMap and webhook is required"
        return SourceDecision(
            kind,
            delete=owned,
            status=base,
            conditions=_three(
                gen,
                ("False", "PendingInventoryAdapter", msg),
                ("Unknown", "PendingInventoryAdapter", msg),
                ("False", "NoConflict", "the source writes nothing"),
            ),
        )
    if kind == "NodeLabels":
        return _read_only(inp, kind, gen, base, [str(e) for e in errors], owned)
    return _writing(inp, kind, gen, base, [str(e) for e in errors], owned)


def _read_only(
    inp: SourceInputs, kind: Arm, gen: int | None, base: dict[str, Any], errors: list[str], owned: list[str]
) -> SourceDecision:
    read_only: _Cond = ("False", "ReadOnly", "a nodeLabels source only reads Node labels")
    if errors:
        msg = _summary(errors)
        conditions = _three(gen, ("False", INVALID_SPEC, msg), ("False", INVALID_SPEC, msg), read_only)
        return SourceDecision(kind, delete=owned, status=base, conditions=conditions)
    levels = lv.normalize_tiers(inp.source["spec"].get("levels") or ())
    found = hierarchy.hierarchy_errors(
        levels, {n: {k: labels[k] for k in levels if k in labels} for n, labels in inp.selected.items()}
    )
    if found:
        msg = _summary(found)
        conditions = _three(
            gen, ("False", "InvalidHierarchy", msg), ("False", "InvalidHierarchy", msg), read_only
        )
    else:
        msg = f"{len(inp.selected)} selected node(s) form a valid hierarchy"
        conditions = _three(gen, ("True", "Observed", msg), ("True", "Observed", msg), read_only)
    return SourceDecision(kind, delete=owned, status=base, conditions=conditions)


def _level_limit(
    kind: Arm,
    gen: int | None,
    base: dict[str, Any],
    limits: Sequence[FieldError],
    errors: Sequence[FieldError],
    owned: list[str],
) -> SourceDecision:
    """Levels no Kueue Topology could hold: not Ready, owning nothing (never ``Stale``), whatever else."""
    first = [str(e) for e in limits]
    msg = _summary([*first, *(str(e) for e in errors if str(e) not in first)])
    failed: _Cond = ("False", LEVEL_LIMIT_EXCEEDED, msg)
    if kind == "NodeLabels":
        conflict: _Cond = ("False", "ReadOnly", "a nodeLabels source only reads Node labels")
        return SourceDecision(
            kind, delete=owned, status=base, conditions=_three(gen, failed, failed, conflict)
        )
    conflict = ("False", "NoConflict", "no snapshot is applied")
    conditions = _three(gen, failed, failed, conflict)
    return SourceDecision(kind, delete=owned, status=base, conditions=conditions, finalizer=True)


def listed(names: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """``a, b, c and 9 more``: the first ``shown`` names, then how many were left out."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def coverage(revision: str, selected: Collection[str], described: Collection[str]) -> str:
    """What an applied snapshot covers of the selected Nodes, in words (the ``Ready``/``Valid`` message):
    ``revision 'r' describes 3 of 12 selected node(s); 9 selected node(s) not in it get none of its
    labels: a, b, c and 6 more`` — never just the described count while more Nodes are selected."""
    missing = sorted(n for n in selected if n not in described)
    count = len(selected) - len(missing)
    said = f"revision {revision!r} describes {count} of {len(selected)} selected node(s)"
    if not missing:
        return said
    return f"{said}; {len(missing)} selected node(s) not in it get none of its labels: {listed(missing)}"


def _summary(errors: Sequence[str]) -> str:
    more = len(errors) - 1
    return errors[0] + (f" (and {more} more)" if more > 0 else "")


def _max_staleness(spec: Mapping[str, Any], kind: Arm) -> float | None:
    arm = spec.get("configMap" if kind == "ConfigMap" else "webhook") or {}
    try:
        return parse_duration(str(arm.get("maxStaleness", "")))
    except ValueError:
        return None


def _poll_interval(spec: Mapping[str, Any], kind: Arm) -> float | None:
    if kind != "Webhook":
        return None
    try:
        poll = parse_duration(str((spec.get("webhook") or {}).get("pollInterval", "")))
    except ValueError:
        return None
    # A non-positive interval (an InvalidSpec the webhook would refuse) is no timer: a 0 here would
    # win every _sooner() and turn the Stale deadline's requeue into "done".
    return poll if poll > 0 else None


def _sooner(*delays: float | None) -> float | None:
    known = [d for d in delays if d is not None]
    return max(min(known), 0.0) if known else None


def _writing(
    inp: SourceInputs, kind: Arm, gen: int | None, base: dict[str, Any], errors: list[str], owned: list[str]
) -> SourceDecision:
    source = inp.source
    spec: Mapping[str, Any] = source["spec"]
    poll = _poll_interval(spec, kind)
    failure: tuple[str, str] | None = None
    labels_by_node: dict[str, dict[str, str]] = {}
    revision = ""
    if errors:
        failure = (INVALID_SPEC, _summary(errors))
    elif isinstance(inp.read, ReadFailed):
        failure = (inp.read.reason, inp.read.message)
    elif inp.read is None:
        failure = ("ConfigMapReadFailed" if kind == "ConfigMap" else "WebhookReadFailed", "nothing was read")
    else:
        try:
            snap = snapshot.decode(inp.read.raw)
            labels_by_node = snapshot.validate(
                snap,
                levels=spec.get("levels") or (),
                selected=inp.selected,
                write_prefix=spec.get("additionalWritePrefix") or None,
            )
            revision = snap.revision
        except snapshot.SnapshotError as exc:
            failure = ("SnapshotInvalid", str(exc))
    if failure is not None:
        return _failed(inp, kind, gen, base, failure, owned, poll)

    meta = _meta(source)
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    conflicted = sorted(n for n in inp.selected if inp.conflicts.get(n))
    desired = {
        body["metadata"]["name"]: body
        for node, labels in sorted(labels_by_node.items())
        if node not in inp.conflicts or not inp.conflicts[node]
        for body in (nodefeature_body(name, uid, node, labels, namespace=inp.namespace),)
    }
    status = dict(source.get("status") or {})
    valid_before = find(status.get("conditions"), VALID)
    recovering = not valid_before or valid_before.get("status") != "True"
    status_out = {**base, "lastSuccessfulRevision": revision, "conflictedNodes": len(conflicted)}
    fetched_at = inp.read.at if isinstance(inp.read, Fetched) and inp.read.at else inp.now
    if (
        kind == "Webhook"
        or recovering
        or status.get("lastSuccessfulRevision") != revision
        or not status.get("lastSuccessfulRefreshTime")
    ):
        status_out["lastSuccessfulRefreshTime"] = _format_time(fetched_at)
    undescribed = sorted(n for n in inp.selected if n not in labels_by_node)
    described = coverage(revision, inp.selected, labels_by_node)
    if conflicted:
        others = sorted({s for n in conflicted for s in inp.conflicts[n]})
        msg = (
            f"{len(conflicted)} selected node(s) are also selected by writing source(s) {', '.join(others)} "
            f"(e.g. {listed(conflicted)}): their NodeFeatures are removed and every node of this "
            "source falls back to the hostname-only profile until one source selects them"
        )
        conditions = _three(
            gen,
            ("False", "OwnershipConflict", msg),
            ("True", "Observed", described),
            ("True", "OverlappingSources", msg),
        )
        requeue = _sooner(poll, CONFLICT_RETRY_S)
    else:
        conditions = _three(
            gen,
            ("True", "Observed", described),
            ("True", "Observed", described),
            ("False", "NoConflict", "no other writing source selects these nodes"),
        )
        requeue = poll
    return SourceDecision(
        kind,
        apply=desired,
        delete=[n for n in owned if n not in desired],
        status=status_out,
        conditions=conditions,
        finalizer=True,
        requeue_after=requeue,
        undescribed=undescribed,
    )


def _failed(
    inp: SourceInputs,
    kind: Arm,
    gen: int | None,
    base: dict[str, Any],
    failure: tuple[str, str],
    owned: list[str],
    poll: float | None,
) -> SourceDecision:
    reason, message = failure
    no_conflict: _Cond = ("False", "NoConflict", "no snapshot is applied")
    status = dict(inp.source.get("status") or {})
    last = _parse_time(status.get("lastSuccessfulRefreshTime"))
    if last is None:
        conditions = _three(gen, ("False", reason, message), ("False", reason, message), no_conflict)
        return SourceDecision(
            kind, delete=owned, status=base, conditions=conditions, finalizer=True, requeue_after=poll
        )
    anchor = last
    if kind == "ConfigMap":
        valid = find(status.get("conditions"), VALID)
        failing = (valid or {}).get("status") == "False"
        began = _parse_time((valid or {}).get("lastTransitionTime")) if failing else None
        anchor = max(last, began or inp.now)
    staleness = _max_staleness(inp.source.get("spec") or {}, kind)
    deadline = anchor + dt.timedelta(seconds=staleness or 0.0)
    revision = status.get("lastSuccessfulRevision", "")
    if inp.now < deadline:
        left = (deadline - inp.now).total_seconds()
        stale = (
            f"{reason}: {message}; the last valid snapshot (revision {revision!r}) stays in effect until "
            f"{_format_time(deadline)}"
        )
        conditions = _three(gen, ("False", STALE, stale), ("False", reason, message), no_conflict)
        return SourceDecision(
            kind, status=base, conditions=conditions, finalizer=True, requeue_after=_sooner(poll, left)
        )
    expired = (
        f"{reason}: {message}; the last valid snapshot (revision {revision!r}) expired at "
        f"{_format_time(deadline)} and its NodeFeatures were removed"
    )
    conditions = _three(gen, ("False", EXPIRED, expired), ("False", reason, message), no_conflict)
    return SourceDecision(
        kind, delete=owned, status=base, conditions=conditions, finalizer=True, requeue_after=poll
    )


def lapsed_state(source: Mapping[str, Any]) -> tuple[str] | None:
    """``("Stale",)`` or ``("Expired",)`` when the source's ``Ready`` condition is False for that reason,
    else None: what ``gpustack_topologysources_stale_or_expired`` counts (an alert fires on it)."""
    ready = find((source.get("status") or {}).get("conditions"), READY)
    if ready is None or ready.get("status") != "False" or ready.get("reason") not in (STALE, EXPIRED):
        return None
    return (str(ready["reason"]),)
