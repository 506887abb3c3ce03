"""The joint AdmissionCheck ``gpustack-model-deployment-joint`` (docs/admission.md), as pure functions.

A ModelDeployment's role replicas are separate Kueue pod groups (one Workload each), yet the deployment
admits as one set: the check holds every group until each has reserved quota. What is decided here:

* **whether to judge at all** (:func:`needs_verdict`): only a Workload that carries this check's entry,
  holds a quota reservation, is active, and is neither evicted, finished, deleted nor admitted. Kueue
  evicts in two writes (checks reset, then reservation dropped), so an evicted Workload is left alone;
* **which set a Workload belongs to** (:func:`owner_of`): its controller ``ownerReference`` to a
  ModelDeployment, or — the Kueue pod-group case — that of its owner Pods. A Workload with no such owner
  is *foreign*;
* **the verdict** (:func:`verdict`): foreign and single-group Workloads are ``Ready`` at once (otherwise
  the check, referenced from every queue, would park every Workload); a group of a deployment with ``n >=
  2`` groups (``n`` = Σ roles' replicas) is ``Ready`` iff all ``n`` groups hold a reservation, else
  ``Pending`` with ``"k of n groups reserved; waiting: <InstanceTypes>"``. The observable is the
  reservation, not admission (waiting for admitted siblings would deadlock). **Never ``Retry``**: a
  ``Retry`` evicts the Workload and releases its quota, so two roles waiting on each other would trade
  the same quota forever; a group that fits keeps its reservation and topology domain while it waits.
  Never ``Rejected`` either: the types make both unrepresentable;
* **parking, release and retry** (:func:`decide`): a set whose oldest ``Pending`` entry of this check
  (or its last retry, if later) is :data:`PARK_AFTER` (30 minutes) old has not assembled and is parked:
  the deployment's ``QuotaReserved`` condition says ``False``/``Parked`` (``Waiting`` before that,
  ``True``/``Reserved`` once all groups hold quota), ``status.hold`` records it, and every Workload of
  the set is deactivated (``spec.active=false``, :func:`to_switch`) so that Kueue evicts it and frees its
  quota and topology domain. A parked set stays parked until its spec changes (a new generation) or an
  admin sets the :data:`~gpustack_worker.api.keys.JOINT_RETRY` annotation to a new value; then its
  Workloads are reactivated and the clock restarts. :attr:`Decision.deadline` is when a waiting set
  parks, so the controller requeues exactly then.

Time is an input (``now``), never read here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.conditions import FALSE, TRUE, Condition

__all__ = (
    "PARK_AFTER",
    "QUOTA_RESERVED",
    "Action",
    "Decision",
    "Foreign",
    "Hold",
    "Owner",
    "OwnerRef",
    "Reason",
    "SetTally",
    "State",
    "Unresolved",
    "Verdict",
    "check_entry",
    "decide",
    "deployment_controller",
    "entry_for_apply",
    "group_count",
    "holds_reservation",
    "needs_verdict",
    "owner_of",
    "parked_set",
    "read_hold",
    "retry_command",
    "retry_token",
    "role_of",
    "tally",
    "to_switch",
    "verdict",
)

#: A set not assembled this long after its first group started waiting is parked (GPUStack's bound for
#: the same check: fixed by the product, not a tunable).
PARK_AFTER: Final = dt.timedelta(minutes=30)
#: The ModelDeployment condition the joint check owns (its only write on a deployment).
QUOTA_RESERVED: Final = "QuotaReserved"

# Kueue Workload condition types (apis/kueue/v1beta2 workload_types.go).
_QUOTA_RESERVED: Final = "QuotaReserved"
_ADMITTED: Final = "Admitted"
_EVICTED: Final = "Evicted"
_FINISHED: Final = "Finished"
_POD_KIND: Final = "Pod"


class State(StrEnum):
    """The only two states this check answers (``Retry`` and ``Rejected`` are deliberately absent)."""

    READY = "Ready"
    PENDING = "Pending"


class Reason(StrEnum):
    """``QuotaReserved`` reasons on the ModelDeployment."""

    RESERVED = "Reserved"
    WAITING = "Waiting"
    PARKED = "Parked"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the check says about one Workload."""

    state: State
    message: str


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The ModelDeployment a Workload's set belongs to (namespace, name, uid)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return kinds.MODEL_DEPLOYMENT.key(self.name, self.namespace)


@dataclass(frozen=True, slots=True)
class _Foreign:
    """Not one group of a ModelDeployment."""


@dataclass(frozen=True, slots=True)
class _Unresolved:
    """Owned by a ModelDeployment that is not (or no longer) readable: no verdict."""

    reason: str


Foreign: Final = _Foreign()
Unresolved = _Unresolved
Owner = OwnerRef | _Foreign | _Unresolved


# -- reading a Workload ---------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    for cond in _status(obj).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return cond.get("status") == TRUE
    return False


def check_entry(workload: Mapping[str, Any], check: str = keys.JOINT_CHECK) -> Mapping[str, Any] | None:
    """This check's ``status.admissionChecks`` entry (None until Kueue adds it)."""
    for entry in _status(workload).get("admissionChecks") or ():
        if isinstance(entry, Mapping) and entry.get("name") == check:
            return entry
    return None


def _active(workload: Mapping[str, Any]) -> bool:
    spec = workload.get("spec")
    return not (isinstance(spec, Mapping) and spec.get("active") is False)


def holds_reservation(workload: Mapping[str, Any]) -> bool:
    """The Workload holds quota and keeps it: reserved, active, not evicted, finished or deleted."""
    return (
        _condition_true(workload, _QUOTA_RESERVED)
        and _active(workload)
        and not _condition_true(workload, _EVICTED)
        and not _condition_true(workload, _FINISHED)
        and not _meta(workload).get("deletionTimestamp")
    )


def needs_verdict(workload: Mapping[str, Any]) -> bool:
    """Whether the check judges this Workload now: it carries the check, holds a quota reservation and is
    not admitted yet."""
    return (
        check_entry(workload) is not None
        and holds_reservation(workload)
        and not _condition_true(workload, _ADMITTED)
    )


# -- ownership ------------------------------------------------------------------------------------------


def _group(api_version: Any) -> str:
    text = str(api_version or "")
    return text.rpartition("/")[0] if "/" in text else ""


def deployment_controller(obj: Mapping[str, Any]) -> OwnerRef | None:
    """The object's controller reference when it is a ModelDeployment."""
    meta = _meta(obj)
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        if ref.get("kind") != kinds.MODEL_DEPLOYMENT.kind:
            continue
        if _group(ref.get("apiVersion")) != kinds.MODEL_DEPLOYMENT.group:
            continue
        if ref.get("name") and ref.get("uid") and meta.get("namespace"):
            return OwnerRef(str(meta["namespace"]), str(ref["name"]), str(ref["uid"]))
    return None


def _owner_pods(workload: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, uid) of the Pods among the Workload's owners (a Kueue pod group is owned by its Pods)."""
    out = []
    for ref in _meta(workload).get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("kind") != _POD_KIND or _group(ref.get("apiVersion")):
            continue
        if ref.get("name") and ref.get("uid"):
            out.append((str(ref["name"]), str(ref["uid"])))
    return out


PodLookup = Callable[[str, str], Mapping[str, Any] | None]
"""``(namespace, name) -> Pod or None``: the cache of the deployments' Pods."""


def owner_pods(workload: Mapping[str, Any], pods: PodLookup) -> list[Mapping[str, Any]]:
    """The Workload's owner Pods that the cache holds (same uid as the reference)."""
    namespace = str(_meta(workload).get("namespace") or "")
    found = []
    for name, uid in _owner_pods(workload):
        pod = pods(namespace, name)
        if pod is not None and _meta(pod).get("uid") == uid:
            found.append(pod)
    return found


def owner_of(
    workload: Mapping[str, Any],
    pods: PodLookup,
    deployments: Callable[[str], Mapping[str, Any] | None],
) -> Owner:
    """The ModelDeployment whose set this Workload is a group of, :data:`Foreign`, or :class:`Unresolved`.

    ``pods`` reads the cache of the deployments' Pods: an owner Pod it does not hold is not a
    deployment's Pod (Kueue creates a pod group's Workload only after it has seen the Pods, and the check
    judges only after quota was reserved, so the Pod cache is not behind). ``deployments`` reads a
    deployment by key; a deployment that is gone, being deleted or replaced (another uid) gives no
    verdict — its groups go with it.
    """
    ref = deployment_controller(workload)
    if ref is None:
        for pod in owner_pods(workload, pods):
            ref = deployment_controller(pod)
            if ref is not None:
                break
    if ref is None:
        return Foreign
    deployment = deployments(ref.key)
    if deployment is None:
        return Unresolved(f"ModelDeployment {ref.key} is not in the cache")
    meta = _meta(deployment)
    if meta.get("uid") != ref.uid:
        return Unresolved(f"ModelDeployment {ref.key} was replaced (uid {meta.get('uid')}, owner {ref.uid})")
    if meta.get("deletionTimestamp"):
        return Unresolved(f"ModelDeployment {ref.key} is being deleted")
    return ref


# -- the set --------------------------------------------------------------------------------------------


def _roles(deployment: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """``(name, replicas, instanceType)`` of each role; a malformed role counts as one replica."""
    spec = deployment.get("spec")
    roles = spec.get("roles") if isinstance(spec, Mapping) else None
    out: list[tuple[str, int, str]] = []
    for role in roles if isinstance(roles, list | tuple) else ():
        if not isinstance(role, Mapping):
            continue
        replicas = role.get("replicas", 1)
        count = (
            replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0 else 1
        )
        out.append((str(role.get("name") or ""), count, str(role.get("instanceType") or "")))
    return out


def group_count(deployment: Mapping[str, Any]) -> int:
    """``n``: one pod group per role replica."""
    return sum(replicas for _, replicas, _ in _roles(deployment))


def role_of(
    workload: Mapping[str, Any], deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()
) -> str | None:
    """The role a group plays: its Pods' role label, else a PodSet named after a role, else the only role."""
    names = [name for name, _, _ in _roles(deployment)]
    for pod in pods:
        label = (_meta(pod).get("labels") or {}).get(keys.MODEL_DEPLOYMENT_ROLE)
        if label in names:
            return str(label)
    spec = workload.get("spec")
    podsets = spec.get("podSets") if isinstance(spec, Mapping) else None
    for podset in podsets if isinstance(podsets, list | tuple) else ():
        if isinstance(podset, Mapping) and podset.get("name") in names:
            return str(podset["name"])
    return names[0] if len(names) == 1 else None


@dataclass(frozen=True, slots=True)
class SetTally:
    """How far a deployment's set has assembled."""

    reserved: int
    """``k``: groups holding a reservation (at most each role's replicas count)."""
    total: int
    """``n``: Σ roles' replicas."""
    waiting: tuple[str, ...]
    """InstanceTypes (or ``role <name>`` when a role names none) of the roles still short of groups."""

    @property
    def complete(self) -> bool:
        return self.reserved >= self.total

    def describe(self) -> str:
        text = f"{self.reserved} of {self.total} groups reserved"
        return f"{text}; waiting: {', '.join(self.waiting)}" if self.waiting and not self.complete else text


def tally(deployment: Mapping[str, Any], groups: Iterable[tuple[Mapping[str, Any], str | None]]) -> SetTally:
    """Count the set: ``groups`` are the deployment's Workloads, each with its role (None: unknown).

    Each role counts at most its replicas (an old group being replaced does not stand in for another
    role); a reserved group of unknown role fills any shortfall but names no role.
    """
    roles = _roles(deployment)
    reserved_by_role: dict[str, set[str]] = {name: set() for name, _, _ in roles}
    unknown: set[str] = set()
    for workload, role in groups:
        if not holds_reservation(workload):
            continue
        name = str(_meta(workload).get("name") or "")
        if role is not None and role in reserved_by_role:
            reserved_by_role[role].add(name)
        else:
            unknown.add(name)
    total = sum(replicas for _, replicas, _ in roles)
    known = sum(min(len(reserved_by_role[name]), replicas) for name, replicas, _ in roles)
    reserved = min(total, known + len(unknown))
    waiting: dict[str, None] = {}
    for name, replicas, instance_type in roles:
        if len(reserved_by_role[name]) < replicas:
            waiting.setdefault(instance_type or f"role {name}", None)
    return SetTally(reserved, total, tuple(sorted(waiting)))


# -- verdicts -------------------------------------------------------------------------------------------

FOREIGN_MESSAGE: Final = "not a group of a multi-group ModelDeployment"
SINGLE_MESSAGE: Final = "the deployment has a single group"


def verdict(
    workload: Mapping[str, Any],
    owner: Owner,
    deployment: Mapping[str, Any] | None,
    groups: Iterable[tuple[Mapping[str, Any], str | None]],
) -> Verdict | None:
    """The check's answer for ``workload`` (None: not ours to judge now).

    ``owner`` is :func:`owner_of`'s answer, ``deployment`` the owner's object, ``groups`` every Workload
    of the deployment (this one included) with its role.
    """
    if not needs_verdict(workload) or isinstance(owner, _Unresolved):
        return None
    if isinstance(owner, _Foreign) or deployment is None:
        return Verdict(State.READY, FOREIGN_MESSAGE)
    if group_count(deployment) < 2:
        return Verdict(State.READY, SINGLE_MESSAGE)
    counted = tally(deployment, groups)
    if counted.complete:
        return Verdict(State.READY, counted.describe())
    return Verdict(State.PENDING, counted.describe())


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _format_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_for_apply(workload: Mapping[str, Any], answer: Verdict, now: dt.datetime) -> dict[str, Any]:
    """The ``status.admissionChecks`` item to apply: ``lastTransitionTime`` moves only when the state does."""
    current = check_entry(workload) or {}
    kept = current.get("lastTransitionTime") if current.get("state") == answer.state.value else None
    return {
        "name": keys.JOINT_CHECK,
        "state": answer.state.value,
        "message": answer.message,
        "lastTransitionTime": kept if isinstance(kept, str) and kept else _format_time(now),
    }


# -- parking ----------------------------------------------------------------------------------------------


class Action(StrEnum):
    """What the deployment's reconcile does to the set's Workloads besides writing status."""

    NONE = "None"
    PARK = "Park"
    """Parks now: record it in ``status.hold``, post the Warning Event, then deactivate the set."""
    STAY_PARKED = "StayParked"
    """Parked earlier: deactivate any Workload of the set still active (one created since, say)."""
    RETRY = "Retry"
    """A parked set is retried: reactivate its Workloads, then record it (the clock restarts)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """``status.hold``: the check's parking state on the deployment (its own field manager's)."""

    since: dt.datetime | None = None
    """When the last retry restarted the clock (None: it runs from the oldest ``Pending`` entry)."""
    parked_at: dt.datetime | None = None
    """When the set was parked (None: not parked)."""
    parked_generation: int | None = None
    """The deployment's generation when parked: a spec change retries."""
    retry: str | None = None
    """The retry annotation's value last consumed (:func:`retry_token`)."""

    @property
    def parked(self) -> bool:
        return self.parked_at is not None

    def to_status(self) -> dict[str, Any]:
        """The ``status.hold`` body (unset fields omitted: the apply releases them)."""
        out: dict[str, Any] = {}
        if self.since is not None:
            out["since"] = _format_time(self.since)
        if self.parked_at is not None:
            out["parkedAt"] = _format_time(self.parked_at)
        if self.parked_generation is not None:
            out["parkedGeneration"] = self.parked_generation
        if self.retry is not None:
            out["retry"] = self.retry
        return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_hold(deployment: Mapping[str, Any]) -> Hold:
    """The deployment's ``status.hold`` (malformed fields read as absent)."""
    raw = _status(deployment).get("hold")
    hold = raw if isinstance(raw, Mapping) else {}
    retry = hold.get("retry")
    return Hold(
        since=_parse_time(hold.get("since")),
        parked_at=_parse_time(hold.get("parkedAt")),
        parked_generation=_int(hold.get("parkedGeneration")),
        retry=retry if isinstance(retry, str) else None,
    )


#: ``status.hold.retry`` holds at most this many characters; a longer annotation value is kept as its digest.
_TOKEN_MAX: Final = 253


def retry_token(deployment: Mapping[str, Any]) -> str | None:
    """The admin's retry request: the :data:`~gpustack_worker.api.keys.JOINT_RETRY` annotation's value."""
    annotations = _meta(deployment).get("annotations")
    value = annotations.get(keys.JOINT_RETRY) if isinstance(annotations, Mapping) else None
    if not isinstance(value, str):
        return None
    if len(value) <= _TOKEN_MAX:
        return value
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


def retry_command(deployment: Mapping[str, Any]) -> str:
    """The command an admin runs to retry this parked deployment."""
    meta = _meta(deployment)
    return (
        f"kubectl annotate modeldeployment {meta.get('name')} -n {meta.get('namespace')} "
        f"--overwrite {keys.JOINT_RETRY}=<any new value>"
    )


def _waiting_since(workloads: Iterable[Mapping[str, Any]]) -> dt.datetime | None:
    """The oldest ``lastTransitionTime`` of a ``Pending`` entry of this check on a reserved group."""
    oldest: dt.datetime | None = None
    for workload in workloads:
        entry = check_entry(workload)
        if entry is None or entry.get("state") != State.PENDING.value or not holds_reservation(workload):
            continue
        since = _parse_time(entry.get("lastTransitionTime"))
        if since is not None and (oldest is None or since < oldest):
            oldest = since
    return oldest


@dataclass(frozen=True, slots=True)
class Decision:
    """What the deployment's reconcile writes and does (:func:`decide`)."""

    condition: Condition | None
    """``QuotaReserved`` (None for a single-group deployment: nothing to hold)."""
    hold: Hold
    """``status.hold`` to apply."""
    action: Action
    deadline: dt.datetime | None
    """When a waiting set parks (None: nobody waits, or it is parked, assembled or single-group)."""

    @property
    def active(self) -> bool | None:
        """The ``spec.active`` the set's Workloads must have (None: leave them as they are)."""
        if self.action in (Action.PARK, Action.STAY_PARKED):
            return False
        return True if self.action is Action.RETRY else None


def _parked_condition(
    deployment: Mapping[str, Any], counted: SetTally, hold: Hold, observed: int | None
) -> Condition:
    parked_at = _format_time(hold.parked_at) if hold.parked_at is not None else "?"
    message = (
        f"{counted.describe()}; parked at {parked_at}: the set did not assemble within "
        f"{int(PARK_AFTER.total_seconds() // 60)} minutes, so its Workloads are deactivated and the quota "
        f"they held is released; to retry, change the spec or run: {retry_command(deployment)}"
    )
    return Condition(QUOTA_RESERVED, FALSE, Reason.PARKED.value, message, observed)


def decide(
    deployment: Mapping[str, Any],
    groups: Iterable[tuple[Mapping[str, Any], str | None]],
    now: dt.datetime,
) -> Decision:
    """Parking, release and retry of a deployment's set (docs/admission.md, "The joint check").

    * **waiting**: the clock starts at the oldest ``Pending`` entry of this check on a reserved group, or
      at the last retry (``status.hold.since``) if that is later; ``QuotaReserved=False/Waiting``;
    * **park**: :data:`PARK_AFTER` on, the set parks: ``status.hold`` records when and at which
      generation, and every Workload of the set is deactivated (:func:`to_switch`) so Kueue releases its
      quota and topology domain — the unreserved ones too, or they would reserve later one by one;
      ``QuotaReserved=False/Parked`` says so and how to retry;
    * **retry**: a parked set whose deployment has another generation (its spec changed), or whose retry
      annotation carries a value not consumed yet, is reactivated and its clock restarts now. Nothing
      else un-parks it — our own status writes change neither;
    * **assembled**: every group holds quota — ``True``/``Reserved``; never parked (even one that
      was, if its groups were reactivated by hand and all reserved).

    An annotation value seen while the set is not parked is consumed without effect (recorded), so
    only a value set after the parking retries.
    """
    listed = list(groups)
    hold = read_hold(deployment)
    observed = _int(_meta(deployment).get("generation"))
    token = retry_token(deployment)
    consumed = token if token is not None else hold.retry
    multi = group_count(deployment) >= 2
    counted = tally(deployment, listed)
    if hold.parked:
        if hold.parked_generation != observed or (token is not None and token != hold.retry):
            message = f"{counted.describe()}; retried at {_format_time(now)}"
            condition = Condition(QUOTA_RESERVED, FALSE, Reason.WAITING.value, message, observed)
            return Decision(condition if multi else None, Hold(since=now, retry=consumed), Action.RETRY, None)
        if not (multi and counted.complete):
            return Decision(
                _parked_condition(deployment, counted, hold, observed), hold, Action.STAY_PARKED, None
            )
    if not multi:
        return Decision(None, Hold(), Action.NONE, None)
    base = Hold(since=hold.since, retry=consumed)
    if counted.complete:
        return Decision(
            Condition(QUOTA_RESERVED, TRUE, Reason.RESERVED.value, counted.describe(), observed),
            base,
            Action.NONE,
            None,
        )
    since = _waiting_since(w for w, _ in listed)
    if since is not None and hold.since is not None:
        since = max(since, hold.since)
    deadline = None if since is None else since + PARK_AFTER
    if deadline is not None and now >= deadline:
        parked = Hold(since=hold.since, parked_at=now, parked_generation=observed, retry=consumed)
        return Decision(_parked_condition(deployment, counted, parked, observed), parked, Action.PARK, None)
    message = counted.describe()
    if hold.since is not None:
        message += f"; retried at {_format_time(hold.since)}"
    return Decision(
        Condition(QUOTA_RESERVED, FALSE, Reason.WAITING.value, message, observed), base, Action.NONE, deadline
    )


def to_switch(workloads: Iterable[Mapping[str, Any]], active: bool) -> list[Mapping[str, Any]]:
    """The Workloads whose ``spec.active`` must be written to reach ``active``.

    Admitted Workloads (serving groups of a set that lost one) hold no idle quota and are left running;
    finished and deleted ones are left to Kueue.
    """
    out = []
    for workload in workloads:
        if _active(workload) == active or _condition_true(workload, _ADMITTED):
            continue
        if _condition_true(workload, _FINISHED) or _meta(workload).get("deletionTimestamp"):
            continue
        out.append(workload)
    return out


def parked_set(deployment: Mapping[str, Any]) -> tuple[()] | None:
    """``()`` when the deployment's set is parked (``status.hold.parkedAt``), else None: what
    ``gpustack_joint_parked_sets`` counts."""
    return () if read_hold(deployment).parked else None
