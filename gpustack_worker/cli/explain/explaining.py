"""``gpustack-worker explain`` as pure functions: fetched objects in, an explanation out, in the order
docs/admission.md ("Reading a Pending group") reads a Pending group.

The diagnosis a person would otherwise assemble from ten ``kubectl`` commands, built from objects the
command has already read (:mod:`gpustack_worker.cli.explain.command` does the reading; nothing here does I/O):

* **a Node** (:func:`explain_node`): every label and capacity it carries and *who wrote each* — read from
  the Node's ``managedFields`` (field manager → component, :func:`component`); for a label nfd-master
  projected (listed in ``nfd.node.kubernetes.io/feature-labels``), also the NodeFeature(s) of the node
  that carry the key and who wrote it there. Then the flavors whose ``spec.nodeLabels`` select the Node,
  each flavor's ClusterQueue (``TopologyReady``, ``Active``, stop policy, checks, quota on the flavor),
  the InstanceType of that queue (same name) and its LocalQueues;
* **a Workload** (:func:`explain_workload`): its LocalQueue and ClusterQueue, its conditions verbatim,
  each PodSet's topology request, flavors and decoded v1beta2 ``topologyAssignment``, each admission
  check's state and message, and Kueue's own inadmissible message (``QuotaReserved=False``) verbatim;
* **a ModelDeployment** (:func:`explain_deployment`), optionally one role: its conditions, and per role
  and replica the pod group and its Workload's explanation.

Kueue's and the checks' wording is never rewritten; the one-line ``verdict`` only says which of them
speaks. :func:`render_text` prints an explanation for people, :func:`to_json` for machines.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_worker.agent import capacity as agent_capacity
from gpustack_worker.agent import fit as agent_fit
from gpustack_worker.agent import nodefeature as agent_nodefeature
from gpustack_worker.api import keys, node_class
from gpustack_worker.chain import managers as chain_managers
from gpustack_worker.cli.explain.cards import in_cards, quota_in_cards
from gpustack_worker.placement import deployments, joint_controller, node_devices
from gpustack_worker.placement.gate3 import decode_topology_assignment
from gpustack_worker.runtime.client import DEFAULT_USER_AGENT
from gpustack_worker.simulate import render as simulate_render
from gpustack_worker.topology import managers as topology_managers

__all__ = (
    "COMPONENTS",
    "CapacityLine",
    "CheckView",
    "Cond",
    "DeploymentExplanation",
    "DomainView",
    "Explanation",
    "FlavorView",
    "InstanceTypeView",
    "LabelLine",
    "NodeExplanation",
    "PodSetView",
    "QueueView",
    "ReplicaView",
    "RoleView",
    "WorkloadExplanation",
    "Writer",
    "component",
    "explain_deployment",
    "explain_node",
    "explain_workload",
    "field_writers",
    "projected_labels",
    "render_text",
    "to_json",
)

#: Field manager → the component it is. Ours are imported from the modules that write with them.
COMPONENTS: Final[Mapping[str, str]] = {
    agent_nodefeature.FIELD_MANAGER: "node agent: the worker NodeFeature",
    agent_capacity.FIELD_MANAGER: "node agent: the counting capacities",
    agent_fit.FIELD_MANAGER: "node agent: the per-card fit labels",
    topology_managers.NODE_TOPOLOGY: "topology controller: the Node profile and Kueue Topologies",
    topology_managers.SOURCE: "topology controller: a TopologySource's NodeFeatures",
    topology_managers.SOURCE_STATUS: "topology controller: TopologySource status",
    chain_managers.FLAVOR: "chain: ResourceFlavors",
    chain_managers.AUTHOR: "chain: InstanceType author",
    chain_managers.INSTANCE_TYPE: "chain: InstanceType lifecycle",
    chain_managers.QUEUE: "chain: ClusterQueues",
    chain_managers.LOCAL_QUEUE: "chain: LocalQueues",
    deployments.FIELD_MANAGER: "placement: ModelDeployment Pods and status",
    joint_controller.FIELD_MANAGER: "placement: the joint admission check",
    node_devices.FIELD_MANAGER: "placement: Gate 3 (node devices check)",
    simulate_render.FIELD_MANAGER: "the simulator, standing in for NFD's worker, the Device Manager, kubelet",
    DEFAULT_USER_AGENT: "a gpustack-worker command creating the object, without a field manager of its own",
    "nfd-master": "NFD master: projects NodeFeature labels onto the Node",
    "nfd-worker": "NFD worker",
    "nfd-topology-updater": "NFD topology updater",
    "kubelet": "kubelet",
    "kube-scheduler": "kube-scheduler",
    "kube-controller-manager": "kube-controller-manager",
}
#: Manager name prefixes → component (Kueue names its managers ``kueue``, ``kueue-admission``,
#: ``kueue-job-controller-<condition>``; kubectl ``kubectl``, ``kubectl-label``, ``kubectl-edit``...).
_PREFIXES: Final = (("kueue", "Kueue"), ("kubectl", "kubectl (by hand)"), ("helm", "helm"))
UNKNOWN: Final = "no component known for this field manager"

# Kueue Workload condition types and states (apis/kueue/v1beta2).
_QUOTA_RESERVED: Final = "QuotaReserved"
_ADMITTED: Final = "Admitted"
_EVICTED: Final = "Evicted"
_FINISHED: Final = "Finished"
_READY: Final = "Ready"


def component(manager: str) -> str:
    """What component a field manager name stands for."""
    if manager in COMPONENTS:
        return COMPONENTS[manager]
    for prefix, name in _PREFIXES:
        if manager == prefix or manager.startswith(prefix + "-"):
            return name
    return UNKNOWN


# --- the explanation's shapes (JSON: dataclasses.asdict) ------------------------------------------------
@dataclass(frozen=True, slots=True)
class Writer:
    """One field manager owning a field."""

    manager: str
    operation: str
    component: str

    def describe(self) -> str:
        return f"{self.manager} ({self.component})"


@dataclass(frozen=True, slots=True)
class Carrier:
    """A NodeFeature of the node carrying a projected label, and who wrote the key there."""

    nodefeature: str
    value: str
    writers: tuple[Writer, ...]


@dataclass(frozen=True, slots=True)
class LabelLine:
    key: str
    value: str
    writers: tuple[Writer, ...]
    #: nfd-master lists the key as its own (``nfd.node.kubernetes.io/feature-labels``).
    projected: bool
    carriers: tuple[Carrier, ...] = ()


@dataclass(frozen=True, slots=True)
class CapacityLine:
    resource: str
    capacity: str
    allocatable: str
    writers: tuple[Writer, ...]


@dataclass(frozen=True, slots=True)
class Cond:
    type: str
    status: str
    reason: str
    message: str

    def describe(self) -> str:
        head = f"{self.type}={self.status}"
        if self.reason:
            head += f" {self.reason}"
        return f"{head}: {self.message}" if self.message else head


@dataclass(frozen=True, slots=True)
class QueueView:
    name: str
    exists: bool
    topology_ready: Cond | None = None
    active: Cond | None = None
    stop_policy: str = ""
    admission_checks: tuple[str, ...] = ()
    flavors: tuple[str, ...] = ()
    #: ``resource → nominalQuota`` on the flavor being explained (node explanations only).
    quota: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InstanceTypeView:
    name: str
    exists: bool
    phase: str = ""
    phase_message: str = ""
    entrance: str = ""
    summary: str = ""
    inactive: bool = False


@dataclass(frozen=True, slots=True)
class FlavorView:
    name: str
    topology_name: str
    node_labels: dict[str, str]
    queues: tuple[QueueView, ...]
    instance_types: tuple[InstanceTypeView, ...]
    #: ``namespace/name`` of the LocalQueues fronting the flavor's queues.
    local_queues: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    name: str
    exists: bool
    labels: tuple[LabelLine, ...] = ()
    capacities: tuple[CapacityLine, ...] = ()
    flavors: tuple[FlavorView, ...] = ()
    #: Why the Node feeds no flavor (empty when it feeds one).
    problems: tuple[str, ...] = ()
    kind: str = "Node"


@dataclass(frozen=True, slots=True)
class DomainView:
    values: dict[str, str]
    pods: int
    #: The assigned Node's value of the PodSet's requested level (hostname-level assignments).
    requested_level_value: str = ""


@dataclass(frozen=True, slots=True)
class PodSetView:
    name: str
    count: int
    required: str = ""
    preferred: str = ""
    unconstrained: bool = False
    #: ``resource → ResourceFlavor`` of the admission (empty before quota is reserved).
    flavors: dict[str, str] = field(default_factory=dict)
    #: ``ResourceFlavor → its spec.topologyName``.
    topology_names: dict[str, str] = field(default_factory=dict)
    levels: tuple[str, ...] = ()
    domains: tuple[DomainView, ...] = ()
    assignment_error: str = ""


@dataclass(frozen=True, slots=True)
class CheckView:
    name: str
    state: str
    message: str
    last_transition: str


@dataclass(frozen=True, slots=True)
class WorkloadExplanation:
    namespace: str
    name: str
    exists: bool
    verdict: str
    local_queue: str = ""
    local_queue_exists: bool = False
    cluster_queue: str = ""
    queue: QueueView | None = None
    active: bool = True
    conditions: tuple[Cond, ...] = ()
    podsets: tuple[PodSetView, ...] = ()
    checks: tuple[CheckView, ...] = ()
    #: Kueue's ``QuotaReserved=False`` message, verbatim ("" when quota is reserved).
    kueue_message: str = ""
    #: The ClusterQueue's flavors (Kueue's candidates) → their ``spec.topologyName``.
    queue_flavors: dict[str, str] = field(default_factory=dict)
    kind: str = "Workload"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    replica: int
    group: str
    pods: int
    size: int
    workload: WorkloadExplanation | None


@dataclass(frozen=True, slots=True)
class RoleView:
    name: str
    kind: str
    instance_type: str
    replicas: int
    size: int
    required_level: str
    status_replicas: int
    admitted_replicas: int
    message: str
    replica_views: tuple[ReplicaView, ...]


@dataclass(frozen=True, slots=True)
class DeploymentExplanation:
    namespace: str
    name: str
    exists: bool
    conditions: tuple[Cond, ...] = ()
    roles: tuple[RoleView, ...] = ()
    #: Roles asked for with ``--role`` that the spec does not have.
    unknown_roles: tuple[str, ...] = ()
    kind: str = "ModelDeployment"


Explanation = NodeExplanation | WorkloadExplanation | DeploymentExplanation


# --- reading objects -----------------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _name(obj: Mapping[str, Any] | None) -> str:
    return str(_meta(obj).get("name") or "")


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def _conditions(obj: Mapping[str, Any] | None) -> tuple[Cond, ...]:
    return tuple(
        Cond(
            type=str(c.get("type") or ""),
            status=str(c.get("status") or ""),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
        )
        for c in ((obj or {}).get("status") or {}).get("conditions") or ()
    )


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Cond | None:
    return next((c for c in _conditions(obj) if c.type == type_), None)


def _is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    cond = _condition(obj, type_)
    return cond is not None and cond.status == "True"


def field_writers(obj: Mapping[str, Any] | None, path: Sequence[str]) -> dict[str, tuple[Writer, ...]]:
    """Every member of the map at ``path`` (e.g. ``("metadata", "labels")``) → the field managers owning
    it, from ``metadata.managedFields`` (FieldsV1; Apply owners first, then by name)."""
    found: dict[str, list[Writer]] = {}
    for entry in _meta(obj).get("managedFields") or ():
        node: Any = entry.get("fieldsV1") or {}
        for step in path:
            node = node.get(f"f:{step}") if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        manager = str(entry.get("manager") or "")
        writer = Writer(manager, str(entry.get("operation") or ""), component(manager))
        for member in node:
            if isinstance(member, str) and member.startswith("f:"):
                writers = found.setdefault(member[2:], [])
                if writer not in writers:
                    writers.append(writer)
    return {k: tuple(sorted(v, key=lambda w: (w.operation != "Apply", w.manager))) for k, v in found.items()}


def projected_labels(node: Mapping[str, Any]) -> frozenset[str]:
    """The label keys nfd-master lists as its own; a name without a ``/`` is in NFD's default
    ``feature.node.kubernetes.io`` namespace (nfd-master writes it without the prefix)."""
    listed = str(_annotations(node).get(keys.NFD_FEATURE_LABELS_ANNOTATION) or "")
    out = set()
    for name in listed.split(","):
        name = name.strip()
        if name:
            out.add(name if "/" in name else f"feature.node.kubernetes.io/{name}")
    return frozenset(out)


def _node_features_of(node_name: str, features: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    mine = [f for f in features if _labels(f).get(keys.NFD_NODE_NAME) == node_name]
    return sorted(mine, key=lambda f: (str(_meta(f).get("namespace") or ""), _name(f)))


def _carriers(key: str, features: Sequence[Mapping[str, Any]]) -> tuple[Carrier, ...]:
    out = []
    for feature in features:
        spec_labels: Mapping[str, str] = (feature.get("spec") or {}).get("labels") or {}
        # A NodeFeature may name a default-namespace label without its prefix, as nfd-worker does.
        short = key.removeprefix("feature.node.kubernetes.io/")
        held = key if key in spec_labels else short if short in spec_labels else None
        if held is None:
            continue
        writers = field_writers(feature, ("spec", "labels")).get(held, ())
        ns = str(_meta(feature).get("namespace") or "")
        out.append(Carrier(f"{ns}/{_name(feature)}", str(spec_labels[held]), writers))
    return tuple(out)


def _selects(flavor: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector: Mapping[str, str] = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _queue_flavors(queue: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    groups = (queue.get("spec") or {}).get("resourceGroups") or ()
    return [f for g in groups for f in g.get("flavors") or ()]


def _queue_view(queue: Mapping[str, Any] | None, name: str, flavor: str = "") -> QueueView:
    if queue is None:
        return QueueView(name=name, exists=False)
    spec = queue.get("spec") or {}
    strategy = spec.get("admissionChecksStrategy") or {}
    checks = tuple(sorted(str(c.get("name") or "") for c in strategy.get("admissionChecks") or ()))
    quota = {}
    for entry in _queue_flavors(queue):
        if flavor and entry.get("name") == flavor:
            for res in entry.get("resources") or ():
                quota[str(res.get("name") or "")] = str(res.get("nominalQuota") or "")
    return QueueView(
        name=name,
        exists=True,
        topology_ready=_condition(queue, keys.TOPOLOGY_READY),
        active=_condition(queue, "Active"),
        stop_policy=str(spec.get("stopPolicy") or "None"),
        admission_checks=checks,
        flavors=tuple(str(f.get("name") or "") for f in _queue_flavors(queue)),
        quota=quota,
    )


def _instance_type_view(it: Mapping[str, Any] | None, name: str) -> InstanceTypeView:
    if it is None:
        return InstanceTypeView(name=name, exists=False)
    status = it.get("status") or {}
    return InstanceTypeView(
        name=name,
        exists=True,
        phase=str(status.get("phase") or ""),
        phase_message=str(status.get("phaseMessage") or ""),
        entrance=str(status.get("entrance") or _labels(it).get(keys.QUEUE_ENTRANCE) or ""),
        summary=str(status.get("acceleratorSummary") or ""),
        inactive=bool((it.get("spec") or {}).get("inactive")),
    )


def _local_queues_of(queue: str, local_queues: Iterable[Mapping[str, Any]]) -> list[str]:
    out = [
        f"{_meta(lq).get('namespace', '')}/{_name(lq)}"
        for lq in local_queues
        if str((lq.get("spec") or {}).get("clusterQueue") or "") == queue
    ]
    return sorted(out)


def _topology_name(flavor: Mapping[str, Any] | None) -> str:
    """A ResourceFlavor's ``spec.topologyName`` ("" when absent or unknown)."""
    return str(((flavor or {}).get("spec") or {}).get("topologyName") or "")


def _by_name(objs: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {_name(o): o for o in objs}


# --- a Node ----------------------------------------------------------------------------------------------
def _node_problems(labels: Mapping[str, str]) -> tuple[str, ...]:
    problems = []
    managed = node_class.ManagedLabel(labels.get(keys.MANAGED))
    if not managed.valid:
        problems.append(
            f"{keys.MANAGED}={managed.value!r} is neither 'true' nor 'false': the Node is not managed, so "
            "its capacity is in no flavor and it has no counting keys or fit labels (the node agent posts a "
            "Warning Event on the Node); set it to 'true' or 'false'"
        )
    elif not managed.managed:
        problems.append(
            f"no {keys.MANAGED}=true: the node agent has not published this Node (it is not managed)"
        )
    if not labels.get(keys.TOPOLOGY_PROFILE):
        problems.append(
            f"no {keys.TOPOLOGY_PROFILE} label: the topology controller has not given it a profile yet"
        )
    if not problems:
        problems.append(
            "no ResourceFlavor's spec.nodeLabels select it yet (the chain writes flavors after the "
            "agent's labels and the profile are on the Node)"
        )
    return tuple(problems)


def explain_node(
    node: Mapping[str, Any] | None,
    *,
    name: str = "",
    node_features: Iterable[Mapping[str, Any]] = (),
    flavors: Iterable[Mapping[str, Any]] = (),
    cluster_queues: Iterable[Mapping[str, Any]] = (),
    instance_types: Iterable[Mapping[str, Any]] = (),
    local_queues: Iterable[Mapping[str, Any]] = (),
) -> NodeExplanation:
    """A Node's labels and capacities with their writers, and the chain it feeds."""
    if node is None:
        return NodeExplanation(name=name, exists=False, problems=(f"Node {name} does not exist",))
    node_name = _name(node)
    labels = _labels(node)
    label_writers = field_writers(node, ("metadata", "labels"))
    projected = projected_labels(node)
    features = _node_features_of(node_name, node_features)
    label_lines = tuple(
        LabelLine(
            key=key,
            value=str(labels[key]),
            writers=label_writers.get(key, ()),
            projected=key in projected,
            carriers=_carriers(key, features) if key in projected else (),
        )
        for key in sorted(labels)
    )
    status = node.get("status") or {}
    cap: Mapping[str, Any] = status.get("capacity") or {}
    alloc: Mapping[str, Any] = status.get("allocatable") or {}
    cap_writers = field_writers(node, ("status", "capacity"))
    alloc_writers = field_writers(node, ("status", "allocatable"))
    capacity_lines = []
    for res in sorted(set(cap) | set(alloc)):
        writers = list(cap_writers.get(res, ()))
        writers += [w for w in alloc_writers.get(res, ()) if w not in writers]
        capacity_lines.append(
            CapacityLine(res, str(cap.get(res, "")), str(alloc.get(res, "")), tuple(writers))
        )
    queues = list(cluster_queues)
    types = _by_name(instance_types)
    lqs = list(local_queues)
    flavor_views = []
    for flavor in sorted(flavors, key=_name):
        if not _selects(flavor, labels):
            continue
        fname = _name(flavor)
        feeding = [q for q in queues if any(f.get("name") == fname for f in _queue_flavors(q))]
        qviews = tuple(_queue_view(q, _name(q), fname) for q in sorted(feeding, key=_name))
        flavor_views.append(
            FlavorView(
                name=fname,
                topology_name=str((flavor.get("spec") or {}).get("topologyName") or ""),
                node_labels=dict((flavor.get("spec") or {}).get("nodeLabels") or {}),
                queues=qviews,
                instance_types=tuple(_instance_type_view(types.get(q.name), q.name) for q in qviews),
                local_queues=tuple(lq for q in qviews for lq in _local_queues_of(q.name, lqs)),
            )
        )
    return NodeExplanation(
        name=node_name,
        exists=True,
        labels=label_lines,
        capacities=tuple(capacity_lines),
        flavors=tuple(flavor_views),
        problems=() if flavor_views else _node_problems(labels),
    )


# --- a Workload ------------------------------------------------------------------------------------------
def _podset_views(
    wl: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, Mapping[str, str]]
) -> tuple[PodSetView, ...]:
    assignments = {
        str(psa.get("name") or ""): psa
        for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()
    }
    out = []
    for ps in (wl.get("spec") or {}).get("podSets") or ():
        name = str(ps.get("name") or "")
        request = ps.get("topologyRequest") or {}
        required = str(request.get("required") or "")
        preferred = str(request.get("preferred") or "")
        level = required or preferred
        psa = assignments.get(name) or {}
        assigned = {str(k): str(v) for k, v in (psa.get("flavors") or {}).items()}
        topo_names = {f: _topology_name(flavors.get(f)) for f in sorted(set(assigned.values()))}
        levels: tuple[str, ...] = ()
        domains: list[DomainView] = []
        error = ""
        if psa.get("topologyAssignment"):
            try:
                levels, decoded = decode_topology_assignment(psa["topologyAssignment"])
            except (ValueError, TypeError) as exc:
                error = str(exc)
            else:
                for d in decoded:
                    values = dict(zip(levels, d.values, strict=True))
                    host = values.get(keys.HOSTNAME, "")
                    at_level = ""
                    if level and level not in values and host in nodes:
                        at_level = str(nodes[host].get(level, ""))
                    domains.append(DomainView(values, d.pods, at_level))
        out.append(
            PodSetView(
                name=name,
                count=int(ps.get("count") or 0),
                required=required,
                preferred=preferred,
                unconstrained=bool(request.get("unconstrained")),
                flavors=assigned,
                topology_names=topo_names,
                levels=levels,
                domains=tuple(domains),
                assignment_error=error,
            )
        )
    return tuple(out)


def _verdict(
    wl: Mapping[str, Any], checks: Sequence[CheckView], lq_exists: bool, local_queue: str, namespace: str
) -> str:
    if (wl.get("spec") or {}).get("active") is False:
        return "deactivated (spec.active=false): Kueue will not admit it"
    if _is_true(wl, _FINISHED):
        return "finished"
    if _is_true(wl, _ADMITTED):
        return "admitted: its Pods are ungated"
    reserved = _condition(wl, _QUOTA_RESERVED)
    if reserved is not None and reserved.status == "True":
        waiting = [c for c in checks if c.state != _READY]
        if not waiting:
            return "quota reserved and every admission check Ready: Kueue admits it next"
        held = "; ".join(f"{c.name} {c.state}" + (f": {c.message}" if c.message else "") for c in waiting)
        return f"quota reserved, held by admission checks: {held}"
    evicted = _condition(wl, _EVICTED)
    if evicted is not None and evicted.status == "True":
        return f"evicted ({evicted.reason}): {evicted.message}"
    if not lq_exists:
        return f"its LocalQueue {local_queue!r} does not exist in namespace {namespace}"
    if reserved is not None and reserved.message:
        return "waiting for quota: Kueue cannot place it (its message, verbatim, is below)"
    return "not yet considered by Kueue (no QuotaReserved condition)"


def explain_workload(
    wl: Mapping[str, Any] | None,
    *,
    namespace: str = "",
    name: str = "",
    local_queue: Mapping[str, Any] | None = None,
    cluster_queue: Mapping[str, Any] | None = None,
    flavors: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Mapping[str, Any]] = (),
) -> WorkloadExplanation:
    """A Workload's queue, topology request and assignment, checks, and Kueue's message verbatim.
    ``local_queue`` is the one ``spec.queueName`` names (None: absent); ``cluster_queue`` the one it
    points to (or the admission's); ``flavors`` at least those of the admission; ``nodes`` at least the
    assigned ones (to show their value of the requested level)."""
    if wl is None:
        return WorkloadExplanation(
            namespace=namespace,
            name=name,
            exists=False,
            verdict="no Workload (Kueue creates a pod group's Workload once all of its Pods exist)",
        )
    meta = _meta(wl)
    ns = str(meta.get("namespace") or namespace)
    lq_name = str((wl.get("spec") or {}).get("queueName") or "")
    admission = (wl.get("status") or {}).get("admission") or {}
    cq_name = str(
        (local_queue or {}).get("spec", {}).get("clusterQueue") or admission.get("clusterQueue") or ""
    )
    checks = tuple(
        CheckView(
            name=str(e.get("name") or ""),
            state=str(e.get("state") or ""),
            message=str(e.get("message") or ""),
            last_transition=str(e.get("lastTransitionTime") or ""),
        )
        for e in (wl.get("status") or {}).get("admissionChecks") or ()
    )
    reserved = _condition(wl, _QUOTA_RESERVED)
    node_labels = {_name(n): dict(_labels(n)) for n in nodes}
    known = _by_name(flavors)
    queue_flavors = {
        str(f.get("name") or ""): _topology_name(known.get(str(f.get("name") or "")))
        for f in (_queue_flavors(cluster_queue) if cluster_queue is not None else ())
    }
    return WorkloadExplanation(
        namespace=ns,
        name=_name(wl),
        exists=True,
        verdict=_verdict(wl, checks, local_queue is not None, lq_name, ns),
        local_queue=lq_name,
        local_queue_exists=local_queue is not None,
        cluster_queue=cq_name,
        queue=_queue_view(cluster_queue, cq_name) if cq_name else None,
        active=(wl.get("spec") or {}).get("active") is not False,
        conditions=_conditions(wl),
        podsets=_podset_views(wl, known, node_labels),
        checks=checks,
        kueue_message=reserved.message if reserved is not None and reserved.status != "True" else "",
        queue_flavors=queue_flavors,
    )


# --- a ModelDeployment -----------------------------------------------------------------------------------
def explain_deployment(
    deployment: Mapping[str, Any] | None,
    *,
    namespace: str = "",
    name: str = "",
    pods: Iterable[Mapping[str, Any]] = (),
    workloads: Mapping[str, WorkloadExplanation] | None = None,
    roles: Sequence[str] = (),
) -> DeploymentExplanation:
    """A deployment's conditions, and per role and replica its pod group and that group's Workload
    explanation (``workloads`` by Workload name = pod group name; a group without one reads as
    "no Workload"). ``roles`` narrows to those roles (all when empty). ``pods``: the deployment's Pods
    (label ``modeldeployment.gpustack.ai/uid``)."""
    if deployment is None:
        return DeploymentExplanation(namespace=namespace, name=name, exists=False)
    explained = workloads or {}
    ns = str(_meta(deployment).get("namespace") or namespace)
    spec_roles = list((deployment.get("spec") or {}).get("roles") or ())
    status_roles = {
        str(r.get("name") or ""): r for r in ((deployment.get("status") or {}).get("roles") or ())
    }
    # (role, replica) → group name → live member count.
    groups: dict[tuple[str, int], dict[str, int]] = {}
    for pod in pods:
        if _meta(pod).get("deletionTimestamp"):
            continue
        labels = _labels(pod)
        try:
            replica = int(labels.get(keys.POD_ORDINAL, ""))
        except ValueError:
            continue
        role = str(labels.get(keys.MODEL_DEPLOYMENT_ROLE) or "")
        group = str(labels.get(keys.POD_GROUP_NAME) or "")
        members = groups.setdefault((role, replica), {})
        members[group] = members.get(group, 0) + 1
    known = {str(r.get("name") or "") for r in spec_roles}
    views = []
    for role in spec_roles:
        rname = str(role.get("name") or "")
        if roles and rname not in roles:
            continue
        wanted = int(role.get("replicas") or 1)
        size = int(role.get("size") or 1)
        replica_views = []
        for replica in range(wanted):
            found = groups.get((rname, replica)) or {}
            if not found:
                replica_views.append(ReplicaView(replica, "", 0, size, None))
            for group, count in sorted(found.items()):
                wl = explained.get(group) or explain_workload(None, namespace=ns, name=group)
                replica_views.append(ReplicaView(replica, group, count, size, wl))
        status = status_roles.get(rname) or {}
        views.append(
            RoleView(
                name=rname,
                kind=str(role.get("kind") or "Server"),
                instance_type=str(role.get("instanceType") or ""),
                replicas=wanted,
                size=size,
                required_level=str((role.get("topology") or {}).get("requiredLevel") or ""),
                status_replicas=int(status.get("replicas") or 0),
                admitted_replicas=int(status.get("admittedReplicas") or 0),
                message=str(status.get("message") or ""),
                replica_views=tuple(replica_views),
            )
        )
    return DeploymentExplanation(
        namespace=ns,
        name=_name(deployment),
        exists=True,
        conditions=_conditions(deployment),
        roles=tuple(views),
        unknown_roles=tuple(r for r in roles if r not in known),
    )


# --- output ----------------------------------------------------------------------------------------------
def to_json(explanation: Explanation) -> str:
    """The explanation as JSON (every field, stable key order)."""
    return json.dumps(dataclasses.asdict(explanation), indent=2, sort_keys=True)


def _writers_text(writers: Sequence[Writer]) -> str:
    return ", ".join(w.describe() for w in writers) if writers else "no field manager recorded"


def _node_text(e: NodeExplanation) -> list[str]:
    if not e.exists:
        return [f"Node {e.name}: does not exist"]
    out = [f"Node {e.name}", "", "Labels, grouped by who wrote them:"]
    groups: dict[str, list[str]] = {}
    for line in e.labels:
        head = _writers_text(line.writers)
        if line.projected:
            if line.carriers:
                via = "; ".join(
                    f"NodeFeature {c.nodefeature}, written there by {_writers_text(c.writers)}"
                    for c in line.carriers
                )
                head += f",\n      from {via}"
            else:
                head += ",\n      from no NodeFeature of this node (a NodeFeatureRule's output)"
        groups.setdefault(head, []).append(f"{line.key}={line.value}")
    for head, members in groups.items():
        out.append(f"  by {head}:")
        out.extend(f"    {m}" for m in members)
    out += ["", "Capacity (allocatable), grouped by who wrote them:"]
    cap_groups: dict[str, list[str]] = {}
    for cap in e.capacities:
        shown = cap.capacity if cap.capacity == cap.allocatable else f"{cap.capacity} ({cap.allocatable})"
        cap_groups.setdefault(_writers_text(cap.writers), []).append(f"{cap.resource}: {shown}")
    for head, members in cap_groups.items():
        out.append(f"  by {head}:")
        out.extend(f"    {m}" for m in members)
    out.append("")
    if not e.flavors:
        out.append("Feeds no ResourceFlavor:")
        out.extend(f"  {p}" for p in e.problems)
        return out
    for flavor in e.flavors:
        out.append(f"Feeds ResourceFlavor {flavor.name}")
        out.append(f"  topologyName: {flavor.topology_name or '(none)'}")
        out.append("  selects: " + ", ".join(f"{k}={v}" for k, v in sorted(flavor.node_labels.items())))
        if not flavor.queues:
            out.append("  in no ClusterQueue (no queue lists this flavor)")
        for queue, itype in zip(flavor.queues, flavor.instance_types, strict=True):
            out.extend(f"  {line}" for line in _queue_lines(queue))
            if queue.quota:
                quota = ", ".join(quota_in_cards(k, v) for k, v in sorted(queue.quota.items()))
                out.append(f"    nominal quota on this flavor: {quota}")
            out.append(f"  {_instance_type_line(itype)}")
        lqs = ", ".join(flavor.local_queues) or "(none)"
        out.append(f"  LocalQueues: {lqs}")
    return out


def _queue_lines(q: QueueView) -> list[str]:
    """``ClusterQueue <name> ...`` and its detail lines (indented two spaces)."""
    if not q.exists:
        return [f"ClusterQueue {q.name}: does not exist"]
    out = [f"ClusterQueue {q.name} (stopPolicy {q.stop_policy})"]
    out.extend(f"  {c.describe()}" for c in (q.topology_ready, q.active) if c is not None)
    out.append(f"  admission checks: {', '.join(q.admission_checks) or '(none)'}")
    return out


def _instance_type_line(t: InstanceTypeView) -> str:
    if not t.exists:
        return f"InstanceType {t.name}: does not exist"
    line = f"InstanceType {t.name}: phase {t.phase or '(unset)'}"
    if t.phase_message:
        line += f" ({t.phase_message})"
    if t.inactive:
        line += ", spec.inactive"
    if t.entrance:
        line += f", entrance LocalQueue {t.entrance}"
    if t.summary:
        line += f", views {t.summary}"
    return line


def _workload_text(e: WorkloadExplanation) -> list[str]:
    out = [f"Workload {e.namespace}/{e.name}"]
    body = [f"verdict: {e.verdict}"]
    if not e.exists:
        return [out[0], *(f"  {b}" for b in body)]
    lq = e.local_queue + ("" if e.local_queue_exists else " (does not exist)")
    body.append(f"LocalQueue {lq}")
    if e.queue is not None:
        body.extend(_queue_lines(e.queue))
        for flavor, topo in e.queue_flavors.items():
            body.append(f"  flavor {flavor} (topology {topo or '(none)'})")
    else:
        body.append("ClusterQueue: unknown (the LocalQueue does not exist and no quota is reserved)")
    body.append("conditions:")
    body.extend(f"  {c.describe()}" for c in e.conditions)
    if not e.conditions:
        body.append("  (none)")
    for ps in e.podsets:
        request = (
            f"required {ps.required}"
            if ps.required
            else f"preferred {ps.preferred}"
            if ps.preferred
            else "unconstrained"
            if ps.unconstrained
            else "none"
        )
        body.append(f"podSet {ps.name}: {ps.count} Pods, topology request: {request}")
        if not ps.flavors:
            body.append("  flavors: none assigned (no quota reserved)")
        for res, flavor in sorted(ps.flavors.items()):
            topo = ps.topology_names.get(flavor) or "(none)"
            body.append(f"  flavor for {res}: {flavor} (topology {topo})")
        if ps.assignment_error:
            body.append(f"  topology assignment unreadable: {ps.assignment_error}")
        for d in ps.domains:
            where = ", ".join(f"{k}={v}" for k, v in d.values.items())
            level = ps.required or ps.preferred
            extra = f" [{level}={d.requested_level_value}]" if d.requested_level_value else ""
            body.append(f"  assigned: {where}{extra}: {d.pods} Pods")
    body.append("admission checks:")
    for c in e.checks:
        msg = f": {c.message}" if c.message else ""
        body.append(f"  {c.name}: {c.state}{msg} (since {c.last_transition or '?'})")
    if not e.checks:
        body.append("  (none)")
    if e.kueue_message:
        told = in_cards(e.kueue_message)
        if told != e.kueue_message:
            body.append("Kueue's message, in cards (its credits in parentheses):")
            body.append(f"  {told}")
        body.append("Kueue's message (verbatim):")
        body.append(f"  {e.kueue_message}")
    return [out[0], *(f"  {b}" for b in body)]


def _deployment_text(e: DeploymentExplanation) -> list[str]:
    if not e.exists:
        return [f"ModelDeployment {e.namespace}/{e.name}: does not exist"]
    out = [f"ModelDeployment {e.namespace}/{e.name}", "conditions:"]
    out.extend(f"  {c.describe()}" for c in e.conditions)
    out.extend(f"role {missing}: not in the deployment's spec" for missing in e.unknown_roles)
    for role in e.roles:
        level = f", requiredLevel {role.required_level}" if role.required_level else ""
        out.append("")
        out.append(
            f"role {role.name} ({role.kind}): InstanceType {role.instance_type or '(none)'}, "
            f"{role.replicas} replica(s) x {role.size} Pods{level}"
        )
        out.append(f"  status: {role.status_replicas} replicas, {role.admitted_replicas} admitted")
        if role.message:
            out.append("  status message (credits told in cards):")
            out.extend(f"    {line}" for line in in_cards(role.message).splitlines())
        for rv in role.replica_views:
            if not rv.group:
                out.append(f"  replica {rv.replica}: no Pods yet")
                continue
            out.append(f"  replica {rv.replica}: pod group {rv.group} ({rv.pods} of {rv.size} Pods)")
            if rv.workload is not None:
                out.extend(f"    {line}" for line in _workload_text(rv.workload))
    return out


def render_text(explanation: Explanation) -> str:
    """The explanation for people."""
    if isinstance(explanation, NodeExplanation):
        lines = _node_text(explanation)
    elif isinstance(explanation, WorkloadExplanation):
        lines = _workload_text(explanation)
    else:
        lines = _deployment_text(explanation)
    return "\n".join(lines) + "\n"
