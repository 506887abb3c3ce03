"""``gpustack-worker cleanup`` as a pure function: listed objects in, the ordered uninstall plan out.

Nothing here does I/O or reads a clock (:mod:`gpustack_worker.cli.cleanup.command` lists, passes ``now``,
prints and executes). An object is the operator's only on evidence the operator itself left on it, never
on its name or on a label an admin could copy from a name pattern:

* **owner label** ``worker.gpustack.ai/managed-by`` naming one of our pruning owners (the same stamp
  pruning trusts, :func:`gpustack_worker.runtime.prune.owner_of`): ResourceFlavors (``chain-flavors``),
  Kueue Topologies (``topology-profiles``), LocalQueues (``chain-localqueues``);
* **field manager**: an entry in ``metadata.managedFields`` of one of our managers owning the object's
  ``spec`` — ClusterQueues (``gpustack-queue``), the two AdmissionChecks (each under its own name),
  NodeFeatures (``gpustack-worker-nodefeature``, ``gpustack-topology-source``), InstanceTypes we authored
  (``gpustack-instancetype-author``, the create-only author), the leader Lease (the controller's
  User-Agent);
* **fields only**, on objects that are someone else's: Node labels and ``status`` counting keys, the
  ``Devices`` profile label, a TopologySource's status — released per field manager, so a key an admin
  or another component also owns stays (server-side apply drops only our ownership; a key nobody else
  owns goes with it);
* **our finalizers** (``gpustack.ai/controlled``, ``worker.gpustack.ai/topology-source``): released last,
  once the objects they guard are gone or being deleted.

An object we created that someone else has since given spec fields of their own (an admin's manager owns a
``spec`` field) is not deleted: only our fields are released. An object that looks like ours by name or by
``resource.gpustack.ai/type`` but carries none of the evidence is listed as left alone, with the reason.

The order (issue 19): refuse while the controller holds its Lease (it would author InstanceTypes and
re-create what we delete); drain the queues Kueue reports reservations on (``HoldAndDrain``: Kueue never
evicts on delete, and its ``resource-in-use`` finalizer holds a queue with reservations); then queues
(Kueue keeps a flavor while a queue references it), flavors, Topologies (kept while a flavor references
one), AdmissionChecks, LocalQueues, NodeFeatures (nfd-master drops the labels it projected from them),
our fields on Nodes and ``Devices``, derived InstanceTypes, finalizers, and the Lease.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_worker.agent import capacity as agent_capacity
from gpustack_worker.agent import fit as agent_fit
from gpustack_worker.agent import nodefeature as agent_nodefeature
from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import admissionchecks
from gpustack_worker.chain import managers as chain_managers
from gpustack_worker.runtime.finalizers import finalizers_of
from gpustack_worker.runtime.prune import OWNER_LABEL, owner_of
from gpustack_worker.topology import managers as topology_managers

__all__ = (
    "CONTROLLER_MANAGER",
    "OUR_MANAGERS",
    "Action",
    "Inventory",
    "LeftAlone",
    "Plan",
    "Step",
    "Verb",
    "lease_holder",
    "plan",
    "render_text",
    "to_json",
)

#: The field manager the API server derives from the controller's User-Agent
#: (``gpustack-worker-controller/<identity>``): who writes the leader Lease.
CONTROLLER_MANAGER: Final = "gpustack-worker-controller"
#: The leader Lease's name (``controller_cmd.LEASE_NAME``; not imported: that module pulls the runtime).
LEASE_NAME: Final = kinds.WORKER_GROUP

#: Every field manager the agent and the controllers write with, and what each is.
OUR_MANAGERS: Final[Mapping[str, str]] = {
    agent_nodefeature.FIELD_MANAGER: "agent: the worker NodeFeature",
    agent_capacity.FIELD_MANAGER: "agent: counting keys in Node status",
    agent_fit.FIELD_MANAGER: "agent: per-card fit labels on the Node",
    chain_managers.FLAVOR: "chain: ResourceFlavors",
    chain_managers.AUTHOR: "chain: the create-only InstanceType author",
    chain_managers.INSTANCE_TYPE: "chain: InstanceType finalizer, inactive backfill and status",
    chain_managers.QUEUE: "chain: ClusterQueues",
    chain_managers.LOCAL_QUEUE: "chain: LocalQueues",
    **{name: "chain: the AdmissionCheck of the same name" for name in admissionchecks.CHECKS},
    topology_managers.NODE_TOPOLOGY: "topology: the Node/Devices profile label and the Kueue Topologies",
    topology_managers.SOURCE: "topology: a TopologySource's NodeFeatures",
    topology_managers.SOURCE_STATUS: "topology: TopologySource status",
    CONTROLLER_MANAGER: "controller: the leader Lease",
}
#: Our pruning owners (owner label values) and the kind each stamps.
OUR_OWNERS: Final[Mapping[str, str]] = {
    chain_managers.OWNER_FLAVORS: kinds.RESOURCE_FLAVOR.kind,
    chain_managers.OWNER_LOCAL_QUEUES: kinds.LOCAL_QUEUE.kind,
    topology_managers.OWNER_TOPOLOGIES: kinds.TOPOLOGY.kind,
}
#: Our finalizers, by the kind they guard.
OUR_FINALIZERS: Final[Mapping[str, str]] = {
    kinds.INSTANCE_TYPE.kind: keys.FINALIZER_CONTROLLED,
    kinds.TOPOLOGY_SOURCE.kind: keys.FINALIZER_TOPOLOGY_SOURCE,
}
#: Kueue's ClusterQueue stop policy that evicts admitted Workloads.
HOLD_AND_DRAIN: Final = "HoldAndDrain"
#: A name that merely contains this looks like ours; it is never evidence (listed as left alone).
_NAME_HINT: Final = "gpustack"


class Step(enum.Enum):
    """The phases, in the order they run."""

    DRAIN = "drain queues with reservations"
    QUEUES = "delete ClusterQueues"
    FLAVORS = "delete ResourceFlavors"
    TOPOLOGIES = "delete Topologies"
    CHECKS = "delete AdmissionChecks"
    LOCAL_QUEUES = "delete LocalQueues"
    NODE_FEATURES = "delete NodeFeatures"
    FIELDS = "release our fields on others' objects"
    INSTANCE_TYPES = "delete derived InstanceTypes"
    FINALIZERS = "release our finalizers"
    LEASE = "delete the leader Lease"


_ORDER: Final = {step: i for i, step in enumerate(Step)}


class Verb(enum.Enum):
    DRAIN = "drain"  # stopPolicy HoldAndDrain, wait until Kueue reports no holding Workload
    DELETE = "delete"  # uid precondition
    RELEASE = "release"  # server-side apply of an empty body as the manager (Apply entries)
    REMOVE_KEYS = "remove-keys"  # JSON patch removing keys only this manager owns (Update entries)
    UNFINALIZE = "unfinalize"  # compare-and-swap JSON patch dropping our finalizer


@dataclass(frozen=True, slots=True)
class Action:
    """One write, and why the object (or field) is ours."""

    step: Step
    verb: Verb
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    why: str = ""
    #: RELEASE / REMOVE_KEYS: the manager whose fields go, and the subresource they are on.
    manager: str = ""
    subresource: str = ""
    #: RELEASE / REMOVE_KEYS: the keys that disappear (only we own them) and those that stay (shared).
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    #: REMOVE_KEYS: ``(field path, key) → value`` the JSON patch tests before removing.
    values: tuple[tuple[str, str, str], ...] = ()
    finalizer: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass(frozen=True, slots=True)
class LeftAlone:
    """An object that looks like ours (by name or type label) but carries none of our evidence."""

    kind: str
    name: str
    namespace: str
    reason: str


@dataclass(frozen=True, slots=True)
class Inventory:
    """What the command listed (every item as the API server returned it, ``managedFields`` included)."""

    instance_types: Sequence[Mapping[str, Any]] = ()
    cluster_queues: Sequence[Mapping[str, Any]] = ()
    flavors: Sequence[Mapping[str, Any]] = ()
    topologies: Sequence[Mapping[str, Any]] = ()
    admission_checks: Sequence[Mapping[str, Any]] = ()
    local_queues: Sequence[Mapping[str, Any]] = ()
    node_features: Sequence[Mapping[str, Any]] = ()
    nodes: Sequence[Mapping[str, Any]] = ()
    devices: Sequence[Mapping[str, Any]] = ()
    topology_sources: Sequence[Mapping[str, Any]] = ()
    lease: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    left_alone: tuple[LeftAlone, ...]
    #: Why cleanup must not run now (the controller holds its Lease), or None.
    refusal: str | None = None
    #: Notes for the reader (what happens without a write of ours).
    notes: tuple[str, ...] = field(default=())


# --- managedFields ---------------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _entries(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [e for e in _meta(obj).get("managedFields") or () if isinstance(e, Mapping)]


def _fields(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    value = entry.get("fieldsV1")
    return value if isinstance(value, Mapping) else {}


def _at(fields: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any] | None:
    node: Any = fields
    for part in path:
        node = node.get(f"f:{part}") if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _keys_at(entry: Mapping[str, Any], path: Sequence[str]) -> set[str]:
    """The map keys under ``path`` an entry owns (``f:metadata`` → ``f:labels`` → ``f:<key>``)."""
    node = _at(_fields(entry), path)
    return {k[2:] for k in node if k.startswith("f:")} if node else set()


def _owns_spec(entry: Mapping[str, Any]) -> bool:
    node = _at(_fields(entry), ("spec",))
    return bool(node) and entry.get("subresource") in (None, "")


def _spec_owners(obj: Mapping[str, Any], managers: Iterable[str]) -> list[str]:
    """Which of ``managers`` own a ``spec`` field of ``obj`` (main resource)."""
    wanted = set(managers)
    return sorted(
        {str(e.get("manager")) for e in _entries(obj) if e.get("manager") in wanted and _owns_spec(e)}
    )


def _foreign_spec_owners(obj: Mapping[str, Any]) -> list[str]:
    return sorted(
        {
            str(e.get("manager"))
            for e in _entries(obj)
            if e.get("manager") not in OUR_MANAGERS and _owns_spec(e)
        }
    )


def _ident(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _meta(obj)
    return str(meta.get("name") or ""), str(meta.get("namespace") or ""), str(meta.get("uid") or "")


def _looks_ours(obj: Mapping[str, Any]) -> bool:
    name = _ident(obj)[0]
    labels = _meta(obj).get("labels") or {}
    return _NAME_HINT in name or keys.RESOURCE_TYPE in labels or OWNER_LABEL in labels


# --- the Lease ---------------------------------------------------------------------------------------
def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def lease_holder(lease: Mapping[str, Any] | None, now: datetime.datetime) -> str | None:
    """The identity holding ``lease`` at ``now`` (renewed within its duration), else None.

    An unreadable renew time or duration counts as held: refusing is the safe answer."""
    spec = (lease or {}).get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    if not holder:
        return None
    renewed = _parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int) or isinstance(duration, bool):
        return holder
    return holder if renewed + datetime.timedelta(seconds=duration) > now else None


# --- the plan ----------------------------------------------------------------------------------------
def _owned_by_label(
    objs: Iterable[Mapping[str, Any]], kind: str, owner: str, step: Step, left: list[LeftAlone]
) -> list[Action]:
    out: list[Action] = []
    for obj in objs:
        name, ns, uid = _ident(obj)
        if owner_of(obj) == owner:
            out.append(
                Action(step, Verb.DELETE, kind, name, ns, uid, why=f"owner label {OWNER_LABEL}={owner}")
            )
        elif _looks_ours(obj):
            stamp = owner_of(obj)
            reason = (
                f"owner label names {stamp!r}, not {owner!r}" if stamp else f"no owner label {OWNER_LABEL}"
            )
            left.append(LeftAlone(kind, name, ns, reason))
    return out


def _owned_by_manager(
    objs: Iterable[Mapping[str, Any]],
    kind: str,
    managers: Sequence[str],
    step: Step,
    left: list[LeftAlone],
) -> list[Action]:
    """Delete what one of ``managers`` owns the spec of; release only our fields where a foreign manager
    owns spec fields too."""
    out: list[Action] = []
    for obj in objs:
        name, ns, uid = _ident(obj)
        ours = _spec_owners(obj, managers)
        if not ours:
            if _looks_ours(obj) or kind == kinds.ADMISSION_CHECK.kind:
                left.append(
                    LeftAlone(kind, name, ns, f"no spec owned by field manager {' or '.join(managers)}")
                )
            continue
        foreign = _foreign_spec_owners(obj)
        if foreign:
            shared = f"spec also owned by {', '.join(foreign)}: kept, only our fields released"
            out.extend(
                Action(
                    Step.FIELDS,
                    Verb.RELEASE,
                    kind,
                    name,
                    ns,
                    uid,
                    why=f"field manager {m}; {shared}",
                    manager=m,
                )
                for m in ours
            )
            continue
        out.append(
            Action(step, Verb.DELETE, kind, name, ns, uid, why=f"field manager {', '.join(ours)} (spec)")
        )
    return out


def _holds(queue: Mapping[str, Any]) -> bool:
    """Kueue reports (or may hide) a Workload holding quota in ``queue``: drain before deleting it."""
    status = queue.get("status") or {}
    for key in ("reservingWorkloads", "admittedWorkloads"):
        value = status.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value != 0:
            return True
    return False


_NODE_PATHS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    "": (("metadata", "labels"), ("metadata", "annotations")),
    "status": (("status", "capacity"), ("status", "allocatable")),
}


def _field_releases(obj: Mapping[str, Any], kind: str, managers: Sequence[str]) -> list[Action]:
    """Release what each of ``managers`` owns on someone else's object: an Apply entry by an empty apply
    (our ownership of shared keys goes, keys only we own go with it); an Update entry by a JSON patch
    removing the label/annotation/capacity keys nobody else owns."""
    name, ns, uid = _ident(obj)
    out: list[Action] = []
    entries = _entries(obj)
    for entry in entries:
        manager = str(entry.get("manager") or "")
        if manager not in managers:
            continue
        sub = str(entry.get("subresource") or "")
        paths = _NODE_PATHS.get(sub, ())
        removed: list[str] = []
        kept: list[str] = []
        values: list[tuple[str, str, str]] = []
        for path in paths:
            ours = _keys_at(entry, path)
            others: set[str] = set()
            for other in entries:
                if other is not entry and str(other.get("subresource") or "") == sub:
                    others |= _keys_at(other, path)
            source: Any = obj
            for part in path:
                source = source.get(part) if isinstance(source, Mapping) else None
            for key in sorted(ours):
                dotted = f"{'.'.join(path)}.{key}"
                if key in others:
                    kept.append(dotted)
                else:
                    removed.append(dotted)
                    if isinstance(source, Mapping) and key in source:
                        values.append(("/" + "/".join(path), key, str(source[key])))
        apply = entry.get("operation") == "Apply"
        if not apply and not values:
            continue  # an Update entry owning nothing we can remove (a finalizer is released on its own)
        out.append(
            Action(
                Step.FIELDS,
                Verb.RELEASE if apply else Verb.REMOVE_KEYS,
                kind,
                name,
                ns,
                uid,
                why=f"field manager {manager} ({entry.get('operation')}{', ' + sub if sub else ''})",
                manager=manager,
                subresource=sub,
                removed=tuple(removed),
                kept=tuple(kept),
                values=tuple(values),
            )
        )
    return out


def plan(inv: Inventory, *, now: datetime.datetime, namespace: str = kinds.SYSTEM_NAMESPACE) -> Plan:
    """The ordered uninstall plan for ``inv`` (listed at ``now``)."""
    left: list[LeftAlone] = []
    actions: list[Action] = []
    notes: list[str] = []

    holder = lease_holder(inv.lease, now)
    refusal = (
        f"the controller holds its Lease {namespace}/{LEASE_NAME} (holder {holder!r}): while it runs it "
        "authors InstanceTypes and re-creates what cleanup deletes. Stop it first — `helm uninstall "
        f"gpustack-worker -n {namespace}`, or `kubectl -n {namespace} scale "
        "deploy/gpustack-worker-controller --replicas=0` and delete the agent DaemonSet — then run "
        "cleanup again (--force skips this check)"
        if holder
        else None
    )

    queues = _owned_by_manager(
        inv.cluster_queues, kinds.CLUSTER_QUEUE.kind, (chain_managers.QUEUE,), Step.QUEUES, left
    )
    deleted_queues = {a.uid for a in queues if a.verb is Verb.DELETE}
    for queue in inv.cluster_queues:
        name, ns, uid = _ident(queue)
        if uid in deleted_queues and _holds(queue):
            status = queue.get("status") or {}
            actions.append(
                Action(
                    Step.DRAIN,
                    Verb.DRAIN,
                    kinds.CLUSTER_QUEUE.kind,
                    name,
                    ns,
                    uid,
                    why=f"Kueue reports {status.get('reservingWorkloads')} reserving / "
                    f"{status.get('admittedWorkloads')} admitted Workloads; stop policy "
                    f"{(queue.get('spec') or {}).get('stopPolicy') or 'None'}",
                    manager=chain_managers.QUEUE,
                )
            )
    actions += queues
    actions += _owned_by_label(
        inv.flavors, kinds.RESOURCE_FLAVOR.kind, chain_managers.OWNER_FLAVORS, Step.FLAVORS, left
    )
    actions += _owned_by_label(
        inv.topologies, kinds.TOPOLOGY.kind, topology_managers.OWNER_TOPOLOGIES, Step.TOPOLOGIES, left
    )
    for name in sorted(admissionchecks.CHECKS):
        checks = [c for c in inv.admission_checks if _ident(c)[0] == name]
        actions += _owned_by_manager(checks, kinds.ADMISSION_CHECK.kind, (name,), Step.CHECKS, left)
    left.extend(
        LeftAlone(kinds.ADMISSION_CHECK.kind, _ident(check)[0], "", "not one of our checks")
        for check in inv.admission_checks
        if _ident(check)[0] not in admissionchecks.CHECKS and _looks_ours(check)
    )
    actions += _owned_by_label(
        inv.local_queues, kinds.LOCAL_QUEUE.kind, chain_managers.OWNER_LOCAL_QUEUES, Step.LOCAL_QUEUES, left
    )
    actions += _owned_by_manager(
        inv.node_features,
        kinds.NODE_FEATURE.kind,
        (agent_nodefeature.FIELD_MANAGER, topology_managers.SOURCE),
        Step.NODE_FEATURES,
        left,
    )
    if any(a.step is Step.NODE_FEATURES for a in actions):
        notes.append(
            "labels nfd-master projected onto Nodes from these NodeFeatures (gpustack.ai/managed, the CPU "
            "keys, cpu-only, RDMA, topology levels) are nfd-master's: it removes them once the NodeFeatures "
            "are gone"
        )
    node_managers = (agent_fit.FIELD_MANAGER, agent_capacity.FIELD_MANAGER, topology_managers.NODE_TOPOLOGY)
    for node in inv.nodes:
        actions += _field_releases(node, kinds.NODE.kind, node_managers)
    for dev in inv.devices:
        actions += _field_releases(dev, kinds.DEVICES.kind, (topology_managers.NODE_TOPOLOGY,))
    for source in inv.topology_sources:
        actions += _field_releases(source, kinds.TOPOLOGY_SOURCE.kind, (topology_managers.SOURCE_STATUS,))

    for it in inv.instance_types:
        name, ns, uid = _ident(it)
        authored = any(e.get("manager") == chain_managers.AUTHOR for e in _entries(it))
        if authored:
            actions.append(
                Action(
                    Step.INSTANCE_TYPES,
                    Verb.DELETE,
                    kinds.INSTANCE_TYPE.kind,
                    name,
                    ns,
                    uid,
                    why=f"field manager {chain_managers.AUTHOR} (authored by the chain)",
                )
            )
        elif _looks_ours(it) or keys.DERIVED_FROM_NODE in (_meta(it).get("labels") or {}):
            left.append(
                LeftAlone(
                    kinds.INSTANCE_TYPE.kind,
                    name,
                    ns,
                    f"not authored by {chain_managers.AUTHOR}: an admin's type",
                )
            )
    for kind, objs in (
        (kinds.INSTANCE_TYPE.kind, inv.instance_types),
        (kinds.TOPOLOGY_SOURCE.kind, inv.topology_sources),
    ):
        finalizer = OUR_FINALIZERS[kind]
        for obj in objs:
            if finalizer in finalizers_of(obj):
                name, ns, uid = _ident(obj)
                actions.append(
                    Action(
                        Step.FINALIZERS,
                        Verb.UNFINALIZE,
                        kind,
                        name,
                        ns,
                        uid,
                        why=f"our finalizer {finalizer}",
                        finalizer=finalizer,
                    )
                )
    lease = inv.lease
    if lease is not None:
        name, ns, uid = _ident(lease)
        if any(e.get("manager") == CONTROLLER_MANAGER for e in _entries(lease)):
            actions.append(
                Action(
                    Step.LEASE,
                    Verb.DELETE,
                    kinds.LEASE.kind,
                    name,
                    ns,
                    uid,
                    why=f"field manager {CONTROLLER_MANAGER}",
                )
            )
        else:
            left.append(LeftAlone(kinds.LEASE.kind, name, ns, f"not written by {CONTROLLER_MANAGER}"))

    ordered = sorted(actions, key=lambda a: (_ORDER[a.step], a.kind, a.namespace, a.name, a.manager))
    return Plan(
        tuple(ordered),
        tuple(sorted(left, key=lambda x: (x.kind, x.namespace, x.name))),
        refusal,
        tuple(notes),
    )


# --- output ------------------------------------------------------------------------------------------
def _action_doc(action: Action) -> dict[str, Any]:
    doc = dataclasses.asdict(action)
    doc["step"] = action.step.name.lower()
    doc["verb"] = action.verb.value
    doc["removed"], doc["kept"] = list(action.removed), list(action.kept)
    doc.pop("values")
    return {k: v for k, v in doc.items() if v not in ("", [], ())}


def to_json(p: Plan, *, dry_run: bool, outcome: Mapping[str, Any] | None = None) -> str:
    doc: dict[str, Any] = {
        "dryRun": dry_run,
        "refusal": p.refusal,
        "actions": [_action_doc(a) for a in p.actions],
        "leftAlone": [dataclasses.asdict(x) for x in p.left_alone],
        "notes": list(p.notes),
    }
    if outcome is not None:
        doc["outcome"] = dict(outcome)
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def render_text(p: Plan, *, dry_run: bool) -> str:
    lines: list[str] = []
    if p.refusal:
        lines.append(f"REFUSED: {p.refusal}")
    head = "would" if dry_run else "will"
    lines.append(f"cleanup {head} run {len(p.actions)} action(s):")
    step: Step | None = None
    for a in p.actions:
        if a.step is not step:
            step = a.step
            lines.append(f"{_ORDER[step] + 1}. {step.value}")
        detail = ""
        if a.removed:
            detail += f"; removes {', '.join(a.removed)}"
        if a.kept:
            detail += f"; keeps (shared) {', '.join(a.kept)}"
        lines.append(f"   {a.verb.value:<11} {a.ref}  [{a.why}{detail}]")
    if p.left_alone:
        lines.append("left alone (look like ours, carry none of our owner labels or field managers):")
        lines += [
            f"   {x.kind} {x.namespace + '/' if x.namespace else ''}{x.name}  [{x.reason}]"
            for x in p.left_alone
        ]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines) + "\n"
