"""``gpustack-worker plan --from-cluster``: what the controllers would create, change and delete on a live
cluster, computed without writing anything.

One read (:func:`read_live`: LISTs and two kinds of GET, nothing else — a read-only role is enough), then
pure functions:

1. :func:`live_nodes` — each live Node as :class:`~gpustack_worker.cli.plan.planning.PlanNode`: the Node with
   every label nfd-master projected (those its ``feature-labels`` annotation lists) and every label our
   controllers write on it directly (profile, fit) taken off (``inputs.unproject``), the labels of the
   NodeFeatures that are not ours (the Device Manager's), the worker NodeFeature's labels as already
   published, and the ``Devices``;
2. :func:`desired_chain` — the Nodes through the scenario plan's own composition
   (:func:`~gpustack_worker.cli.plan.planning.converge`: agent, nfd-master and topology until the Nodes stop
   changing), then what the chain's controllers write **next**, each decision the function its controller
   calls, fed what its cache holds (:func:`caches_of`: the listed objects under the informers' own label
   selectors, finalizing flavors included): ``flavors.plan_flavors`` / ``flavor_body`` (a name held by
   an object that is not the chain's refused, a finalizing flavor not written), ``pools.
   derived_instance_type`` (create-only), per existing InstanceType ``queues.decide`` over the cached
   flavors and the Topologies that exist, with the live AdmissionChecks' ``Active`` and our field
   manager's ownership of ``spec.stopPolicy`` (``inputs.queue_inputs``), and ``inputs.type_decision``
   with ``inputs.pool_status`` — the settle gate (``settle.deferrable``,
   ``settle.topology_on_its_way``) deferring what the controller defers while its own writes are in
   flight — ``localqueues.desired_local_queues`` for every live Namespace,
   ``admissionchecks.desired_admission_checks`` and the profiles' Topologies; and **then** the queue,
   status and LocalQueue decisions over the caches once those writes are in (a new InstanceType's queue,
   a deferred write, a decision that changes with them);
3. :func:`diff_chain` — each next write against the live object of that name (and each later one
   against the object as the next writes leave it): ``create`` when there is
   none, ``change`` with the fields that differ (only the fields the controller sets: server-side apply
   leaves the others alone) — ``replace`` or ``drift`` instead when the controller's own tests
   (``flavors.immutable_spec_changed``, ``flavors.flavor_topology_drift``, ``profiles.topology_drift``)
   say it deletes and recreates, or leaves, that object — and ``delete`` for objects carrying a
   controller's owner label that nothing wants any more (the pruners' rule). An authored InstanceType is
   create-only, so an existing one is compared on ``status`` alone. Last, each Node's converged labels
   against its live ones (:func:`label_diff`): what installing would label.

Limits (said, not guessed): one TopologySource at most, and not a webhook one (its snapshot is fetched by
the controller from an address a planning machine may not reach) unless the snapshot is given — the
preview of a TopologySource change (:mod:`gpustack_worker.cli.plan.topology_preview`) plans the cluster with
that source in place of, or beside, the live ones, and its ``--snapshot`` as what the source serves.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import (
    admissionchecks,
    caches,
    inputs,
    localqueues,
    managers,
    pools,
    queues,
    settle,
)
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain.steps import is_ours
from gpustack_worker.cli.plan.planning import (
    PlanError,
    PlanNode,
    accepted,
    converge,
    facts_of,
    in_effect,
    own_keys,
    parsed_facts,
    reproject,
    topology_ready_status,
)
from gpustack_worker.runtime.labelselector import parse_selector
from gpustack_worker.runtime.prune import owner_of, stamp
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.topology import managers as topology_managers
from gpustack_worker.topology import profiles, sources

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from gpustack_worker.api.devices_view import DevicesFacts
    from gpustack_worker.chain.nodes import NodeHardware
    from gpustack_worker.cli.plan.topology_preview import TopologyPreview
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.labelselector import LabelSelector
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "Change",
    "DecidedSource",
    "DesiredChain",
    "FieldChange",
    "LiveCluster",
    "PlanReport",
    "applicable",
    "desired_chain",
    "diff_chain",
    "field_diff",
    "label_diff",
    "live_nodes",
    "plan_cluster",
    "read_live",
    "render_text",
    "report_list",
)

#: The order the kinds are shown in (the order the chain builds them).
KIND_ORDER: Final = (
    kinds.TOPOLOGY.kind,
    kinds.RESOURCE_FLAVOR.kind,
    kinds.INSTANCE_TYPE.kind,
    kinds.CLUSTER_QUEUE.kind,
    kinds.LOCAL_QUEUE.kind,
    kinds.ADMISSION_CHECK.kind,
)
#: The uid a LocalQueue's owner reference gets when its ClusterQueue does not exist yet.
NEW_UID: Final = "(assigned on create)"
#: The metadata fields a controller sets on the objects it applies (name and namespace are the identity).
_META_FIELDS: Final = ("labels", "annotations", "ownerReferences", "finalizers")


@dataclass(frozen=True, slots=True)
class LiveCluster:
    """Everything ``plan --from-cluster`` reads, as the API server returned it."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    node_features: list[dict[str, Any]] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    topology_sources: list[dict[str, Any]] = field(default_factory=list)
    #: ``namespace/name`` → ConfigMap: the settings ConfigMap and a TopologySource's snapshot ConfigMap.
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    flavors: list[dict[str, Any]] = field(default_factory=list)
    cluster_queues: list[dict[str, Any]] = field(default_factory=list)
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    local_queues: list[dict[str, Any]] = field(default_factory=list)
    admission_checks: list[dict[str, Any]] = field(default_factory=list)
    topologies: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DesiredChain:
    """The chain objects the controllers would hold the cluster to, by kind then ``[namespace/]name``."""

    #: The next writes: each controller's decision over its caches as they hold the cluster now.
    objects: dict[str, dict[str, dict[str, Any]]]
    #: The writes that follow once the next ones are in the caches (queues, statuses, LocalQueues).
    then: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: Kinds whose existing objects are compared on ``status`` only (create-only authoring).
    create_only: frozenset[str] = frozenset()
    #: ``[namespace/]name`` by kind of live objects a controller owns and would delete.
    delete: dict[str, list[str]] = field(default_factory=dict)
    profiles: dict[str, str] = field(default_factory=dict)
    #: Node name → its labels once the agent, nfd-master and the topology controller converged.
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    #: The TopologySource planned with and its decision (``sources.decide``, as the controller makes it).
    source: DecidedSource | None = None


@dataclass(frozen=True, slots=True)
class DecidedSource:
    """The TopologySource the plan decided: its name and what its reconcile decided (conditions, the
    selected Nodes its snapshot does not describe)."""

    name: str
    decision: sources.SourceDecision

    @property
    def ready(self) -> tuple[str, str, str]:
        """The decided ``Ready`` condition: (status, reason, message)."""
        found = next((c for c in self.decision.conditions if c.type == sources.READY), None)
        return (found.status, found.reason, found.message) if found else ("Unknown", "", "not decided")

    def line(self) -> str:
        status, reason, message = self.ready
        return f"topology source {self.name}: Ready={status}/{reason}: {message}"


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field that differs: its path, the live value (None: absent) and the desired one."""

    path: str
    live: Any
    desired: Any

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "live": self.live, "desired": self.desired}


@dataclass(frozen=True, slots=True)
class Change:
    """One object the controllers would act on: ``create``, ``change`` (with its fields), ``replace``
    (delete and create: a flavor's immutable selector), ``delete``, or ``drift`` (differs, but immutable:
    left as it is and reported)."""

    action: str
    kind: str
    name: str
    namespace: str | None = None
    fields: tuple[FieldChange, ...] = ()
    #: The desired object (create, change) or the live one (delete).
    body: dict[str, Any] = field(default_factory=dict)
    #: 1: a next write (decided from the cluster as read); 2: one that follows once those are in the
    #: controllers' caches.
    step: int = 1

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "name": self.name, "step": self.step}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.fields:
            out["fields"] = [f.as_dict() for f in self.fields]
        if self.action not in ("delete", "drift"):
            out["write"] = self.body  # what the controller applies (a Node: its labels, through NFD)
        return out


@dataclass(frozen=True, slots=True)
class PlanReport:
    """The plan: the changes, how many objects already match, and what it was computed from."""

    changes: list[Change]
    unchanged: int
    desired: DesiredChain
    settings_source: str
    #: What applying a given TopologySource would do (``--topology-source``), None otherwise.
    preview: TopologyPreview | None = None
    #: One line each: what the plan could not take as it is and how it planned instead (a rejected
    #: settings ConfigMap).
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        counts = {a: sum(1 for c in self.changes if c.action == a) for a in _MARK}
        src = self.desired.source
        return {
            **({"topologyPreview": self.preview.as_dict()} if self.preview is not None else {}),
            **({"topologySource": _source_dict(src)} if src is not None else {}),
            "warnings": list(self.warnings),
            "settings": self.settings_source,
            "profiles": dict(self.desired.profiles),
            "summary": {**counts, "unchanged": self.unchanged},
            "changes": [c.as_dict() for c in self.changes],
            "notes": list(self.desired.notes),
            "refused": list(self.desired.refused),
        }


def _source_dict(src: DecidedSource) -> dict[str, Any]:
    status, reason, message = src.ready
    return {
        "name": src.name,
        "ready": {"status": status, "reason": reason, "message": message},
        "selectedNodes": src.decision.status.get("selectedNodes"),
        "undescribedNodes": list(src.decision.undescribed),
    }


# --- the read ------------------------------------------------------------------------------------------


async def _list(client: Client, resource: Resource) -> list[dict[str, Any]]:
    items, _rv = await client.list(resource)
    return [dict(i) for i in items]


async def read_live(
    client: Client,
    *,
    namespace: str,
    settings_configmap: str,
    also: Sequence[Mapping[str, Any]] = (),
) -> LiveCluster:
    """Every object the plan reads (LIST, and GET of the settings and snapshot ConfigMaps — those of the
    live sources and of ``also``, a source to preview): never a write."""
    lists = await asyncio.gather(
        _list(client, kinds.NODE),
        _list(client, kinds.NODE_FEATURE),
        _list(client, kinds.DEVICES),
        _list(client, kinds.TOPOLOGY_SOURCE),
        _list(client, kinds.NAMESPACE),
        _list(client, kinds.RESOURCE_FLAVOR),
        _list(client, kinds.CLUSTER_QUEUE),
        _list(client, kinds.INSTANCE_TYPE),
        _list(client, kinds.LOCAL_QUEUE),
        _list(client, kinds.ADMISSION_CHECK),
        _list(client, kinds.TOPOLOGY),
    )
    nodes, features, devices, srcs, namespaces, flavors, cqs, its, lqs, checks, topologies = lists
    wanted = {(namespace, settings_configmap)}
    for source in [*srcs, *also]:
        ref = (((source.get("spec") or {}).get("configMap") or {}).get("configMapRef")) or {}
        if ref.get("namespace") == namespace and ref.get("name"):
            wanted.add((namespace, str(ref["name"])))
    config_maps = {}
    for ns, name in sorted(wanted):
        found = await client.get(kinds.CONFIG_MAP, name, ns)
        if found is not None:
            config_maps[f"{ns}/{name}"] = dict(found)
    return LiveCluster(
        nodes, features, devices, srcs, config_maps, namespaces, flavors, cqs, its, lqs, checks, topologies
    )


# --- the live Nodes as the plan's nodes ----------------------------------------------------------------


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _key(obj: Mapping[str, Any]) -> str:
    ns = _meta(obj).get("namespace")
    return f"{ns}/{_name(obj)}" if ns else _name(obj)


def _spec_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("spec") or {}).get("labels") or {}).items()}


def live_nodes(live: LiveCluster, *, with_sources: bool) -> dict[str, PlanNode]:
    """Every live Node as the plan's node: base (no projection, none of our direct labels), the other
    NodeFeatures' labels, the worker NodeFeature's published labels, and — ``with_sources`` — the
    TopologySource NodeFeatures' labels as they stand; ``current`` is the live Node as it is."""
    by_node = inputs.features_by_node(live.node_features)
    devices = {_name(d): d for d in live.devices}
    out: dict[str, PlanNode] = {}
    for node in sorted(live.nodes, key=_name):
        name = _name(node)
        own = own_keys({str(k): str(v) for k, v in (_meta(node).get("labels") or {}).items()})
        base = inputs.unproject(node, also=own)
        worker: dict[str, str] = {}
        topology: dict[str, str] = {}
        others: dict[str, str] = {}
        for feature in sorted(by_node.get(name, ()), key=_name):
            if _name(feature) == keys.worker_nodefeature_name(name):
                worker.update(_spec_labels(feature))
            elif (_meta(feature).get("labels") or {}).get(keys.TOPOLOGY_SOURCE_UID):
                topology.update(_spec_labels(feature) if with_sources else {})
            else:
                others.update(_spec_labels(feature))
        dev = devices.get(name)
        plan_node = PlanNode(base, others, dev, parsed_facts(dev), worker=worker, topology=topology)
        reproject(plan_node, own)
        out[name] = plan_node
    return out


# --- the desired chain ---------------------------------------------------------------------------------


def _source_and_snapshot(
    live: LiveCluster, namespace: str, given: str | None = None
) -> tuple[Mapping[str, Any] | None, str | None, list[str]]:
    """The TopologySource the plan decides (and the snapshot its ConfigMap serves, or ``given``: the
    snapshot a preview was handed), with notes."""
    active = [s for s in live.topology_sources if not _meta(s).get("deletionTimestamp")]
    if len(active) > 1:
        names = ", ".join(sorted(_name(s) for s in active))
        raise PlanError(f"{len(active)} TopologySources ({names}): --from-cluster plans with one at most")
    if not active:
        return None, None, []
    source = active[0]
    spec = source.get("spec") or {}
    arm = sources.arm_of(spec)
    if given is not None and arm in ("ConfigMap", "Webhook"):
        return source, given, []
    if arm == "Webhook":
        raise PlanError(
            f"TopologySource {_name(source)} has a webhook arm: --from-cluster does not fetch snapshots"
        )
    if arm != "ConfigMap":
        return source, None, []
    cm_arm = spec.get("configMap") or {}
    ref = cm_arm.get("configMapRef") or {}
    found = live.config_maps.get(f"{ref.get('namespace')}/{ref.get('name')}")
    data = (found or {}).get("data") or {}
    key = cm_arm.get("key")
    if ref.get("namespace") != namespace or not isinstance(key, str) or key not in data:
        note = (
            f"TopologySource {_name(source)}: its snapshot ConfigMap "
            f"{ref.get('namespace')}/{ref.get('name')} key {key!r} is not readable in "
            f"{namespace}; planned as the controller decides without it"
        )
        return source, None, [note]
    return source, str(data[key]), []


def _deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


@dataclass(frozen=True, slots=True)
class Caches:
    """What the chain controllers' caches hold — the objects their decisions are fed — listed with the
    informers' own selectors (:mod:`gpustack_worker.chain.caches`): flavors (finalizing ones included),
    the names of the Topologies, the queues, every InstanceType."""

    flavors: list[Mapping[str, Any]]
    topologies: frozenset[str]
    queues: dict[str, Mapping[str, Any]]
    types: dict[str, Mapping[str, Any]]


def caches_of(live: LiveCluster) -> Caches:
    """The chain's caches as they hold ``live`` (pure)."""
    return Caches(
        flavors=caches.held(live.flavors, caches.FLAVORS),
        topologies=frozenset(_name(t) for t in caches.held(live.topologies, caches.TOPOLOGIES)),
        queues={_name(q): q for q in caches.held(live.cluster_queues, caches.QUEUES)},
        types={_name(t): t for t in live.instance_types},
    )


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What every queue and status decision reads besides the caches."""

    hardware: list[NodeHardware]
    facts: dict[str, DevicesFacts]
    checks: frozenset[str]
    settings: WorkerSettings


@dataclass(slots=True)
class _Pass:
    """One pass of the queue and InstanceType controllers over one state of the caches."""

    #: ClusterQueue name → the body applied (spec with ``status`` holding ``TopologyReady``, a status
    #: alone, or the drain-only stop policy).
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: InstanceType name → the ``status`` applied.
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ClusterQueue name → the queue once those writes are in the cache.
    after: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _status_of(name: str, condition: queues.Condition) -> dict[str, Any]:
    return {
        "apiVersion": kinds.CLUSTER_QUEUE.api_version,
        "kind": kinds.CLUSTER_QUEUE.kind,
        "metadata": {"name": name},
        "status": topology_ready_status(condition),
    }


def _queue_pass(view: Caches, inp: _Inputs, *, in_flight: bool | None) -> _Pass:
    """Every InstanceType's queue decision (``queues.decide`` over ``inputs.queue_inputs``) and status
    (``inputs.type_decision``, ``inputs.pool_status``) over ``view``, as the controllers' steps call them.

    ``in_flight``: the chain's own writes are on their way (its flavor pass writes, or a cached flavor
    names a Topology the cache does not hold): a queue write the settle gate may defer
    (``settle.deferrable``) and a status write wait for them, as does a status whose queue is not there
    yet — they are not written in this pass. None: no gate (the pass after those writes; a status then
    reads its queue once the queue controller's write is in)."""
    s = inp.settings
    out = _Pass()
    for name, it in sorted(view.types.items()):
        queue = view.queues.get(name)
        decided = queues.decide(
            inputs.queue_inputs(
                it,
                queue,
                flavors=view.flavors,
                nodes=inp.hardware,
                topologies=view.topologies,
                active_checks=inp.checks,
                settings=s,
            )
        )
        body: dict[str, Any] | None = None
        if decided.body is None:
            if queue is not None and decided.condition is not None:
                body = _status_of(name, decided.condition)  # not ours to change: the condition only
            elif decided.condition is not None:
                cond = decided.condition
                out.notes.append(f"ClusterQueue {name}: {cond.reason}: {cond.message}")
        elif decided.drain_only:
            if queue is not None and (queue.get("spec") or {}).get("stopPolicy") != queues.HOLD_AND_DRAIN:
                body = {**decided.body, "metadata": {"name": name}}
        elif not (in_flight and settle.deferrable(decided.body, queue)):
            body = dict(decided.body)
            if decided.condition is not None:
                body["status"] = topology_ready_status(decided.condition)
        after = queue if body is None else _after_write(queue, body)
        if body is not None:
            out.queues[name] = body
        if after is not None:
            out.after[name] = after
        # a status waits for its queue to be there: the cached one, else the one just written
        typed, read = inputs.type_decision(it, queue, writing=after)
        if typed.remove_finalizer:
            continue
        if in_flight is not None and not _deleting(it) and (in_flight or queue is None):
            continue  # the settle gate: written once its inputs are in
        out.statuses[name] = inputs.pool_status(
            it, read, typed, flavors=view.flavors, nodes=inp.hardware, facts=inp.facts.get, settings=s
        )
    return out


def _after_write(obj: Mapping[str, Any] | None, body: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` once ``body`` is applied to it (server-side apply's effect on the fields ``body`` sets); a
    new object gets the placeholder uid, and a spec change a new generation (Kueue has not reported it)."""
    if obj is None:
        created = copy.deepcopy(dict(body))
        created["metadata"] = {**created.get("metadata", {}), "uid": NEW_UID, "generation": 1}
        return created
    merged: dict[str, Any] = dict(applied(obj, body))
    if "spec" in body and merged.get("spec") != obj.get("spec"):
        meta = dict(merged.get("metadata") or {})
        meta["generation"] = int(meta.get("generation") or 0) + 1
        merged["metadata"] = meta
    return merged


def applied(live: Any, want: Any) -> Any:
    """``live`` with the fields ``want`` sets applied: dicts merged key by key, conditions by ``type``,
    anything else replaced (pure)."""
    if isinstance(want, Mapping) and isinstance(live, Mapping):
        out = dict(live)
        for key, value in want.items():
            have = live.get(key)
            if key == "conditions" and isinstance(value, list) and isinstance(have, list):
                types = {c.get("type") for c in value if isinstance(c, Mapping)}
                kept = [c for c in have if not (isinstance(c, Mapping) and c.get("type") in types)]
                out[key] = kept + copy.deepcopy(value)
            else:
                out[key] = applied(have, value)
        return out
    return copy.deepcopy(want)


def _flavor_writes(
    flavors: Mapping[str, dict[str, Any]], live: Sequence[Mapping[str, Any]], refused: list[dict[str, str]]
) -> dict[str, str]:
    """What the flavor pass does with each desired flavor it writes, by name: ``create``, ``change`` or
    ``replace`` (``drift`` is left as it is, an unchanged one is not written, a finalizing one waits for
    Kueue to let it go). A name held by an object that is not the chain's
    (:func:`~gpustack_worker.chain.steps.is_ours`) is never written: refused."""
    by_name = {_name(f): f for f in live}
    out: dict[str, str] = {}
    for name, body in flavors.items():
        found = by_name.get(name)
        if found is None:
            out[name] = "create"
            continue
        if not is_ours(found, owner=managers.OWNER_FLAVORS, field_managers=(managers.FLAVOR,)):
            refused.append(
                {
                    "kind": kinds.RESOURCE_FLAVOR.kind,
                    "name": name,
                    "path": "metadata.name",
                    "rule": "held by an object that is not the chain's (no owner label): never written over",
                }
            )
            continue
        if _deleting(found):
            continue  # being let go by Kueue: written again once it is gone
        action = _action(kinds.RESOURCE_FLAVOR.kind, body, found)
        if action != "drift" and field_diff(body, found):
            out[name] = action
    return out


def _flavors_after(
    view: Caches, desired: Mapping[str, dict[str, Any]], writes: Mapping[str, str], deleted: Collection[str]
) -> list[Mapping[str, Any]]:
    """The flavor cache once the flavor pass's writes are in: written flavors as applied; a deleted or
    replaced one that a queue still lists stays, finalizing (Kueue's in-use finalizer), else is gone."""
    listed = {
        str(f.get("name"))
        for q in view.queues.values()
        for g in (q.get("spec") or {}).get("resourceGroups") or ()
        for f in g.get("flavors") or ()
    }
    out: dict[str, Mapping[str, Any]] = {_name(f): f for f in view.flavors}
    for name in sorted({*deleted, *(n for n, a in writes.items() if a == "replace")}):
        cached = out.pop(name, None)
        if cached is not None and name in listed:
            meta = {**_meta(cached), "deletionTimestamp": "(deleted by the flavor pass)"}
            out[name] = {**cached, "metadata": meta}
    for name, action in writes.items():
        if action in ("create", "change"):
            out[name] = _after_write(out.get(name), desired[name])
    return [out[n] for n in sorted(out)]


def desired_chain(
    live: LiveCluster, settings: WorkerSettings, *, namespace: str, snapshot: str | None = None
) -> DesiredChain:
    """What the controllers would write, given ``live`` and ``settings`` (pure), in two steps.

    **Next** (:attr:`DesiredChain.objects`): each controller's decision over its caches as they hold
    ``live`` (:func:`caches_of`) — the topology controller's Topologies, the flavor pass (flavors, authored
    InstanceTypes), the AdmissionChecks, each existing InstanceType's queue and status (the settle gate
    applied: a deferrable write waits while the chain's own writes are in flight) and the LocalQueues of
    the queues there are. **Then** (:attr:`DesiredChain.then`): the queue, status and LocalQueue writes
    that follow once those writes are in the caches (a new InstanceType's queue, a deferred write, a
    decision that changes with the new flavors or Topologies). Kueue's own progress is not modelled:
    its status is the one read. ``snapshot``: what the (one) writing source serves, instead of reading
    its ConfigMap (a preview's ``--snapshot``)."""
    source, served, notes = _source_and_snapshot(live, namespace, snapshot)
    nodes = live_nodes(live, with_sources=source is not None)
    assigned, levels_of, decision = converge(nodes, settings, source, served, namespace)
    if source is not None and decision is not None:
        effective, why = in_effect(decision.conditions)
        if not effective:
            notes.append(f"TopologySource {_name(source)} is not in effect ({why}): hostname-only profiles")
    refused: list[dict[str, str]] = []
    aware = settings.instance_type_aware_cpu_manufacturer
    mixed = settings.instance_type_mixed_on_node
    view = caches_of(live)

    topologies = {
        keys.topology_name(p): stamp(profiles.topology_body(levels), topology_managers.OWNER_TOPOLOGIES)
        for p, levels in levels_of.items()
    }
    topologies = {n: b for n, b in topologies.items() if accepted(b, refused)}
    hardware = inputs.chain_nodes(n.current for n in nodes.values())
    plans = chain_flavors.plan_flavors(hardware, mixed_on_node=mixed)
    flavors = {
        p.name: stamp(chain_flavors.flavor_body(p, mixed_on_node=mixed, aware=aware), managers.OWNER_FLAVORS)
        for p in plans
    }
    flavors = {n: b for n, b in flavors.items() if accepted(b, refused)}
    flavor_writes = _flavor_writes(flavors, live.flavors, refused)
    foreign = {r["name"] for r in refused if r["kind"] == kinds.RESOURCE_FLAVOR.kind}
    letting_go = sorted(_name(f) for f in live.flavors if _deleting(f) and _name(f) in flavors)
    notes.extend(
        f"ResourceFlavor {n} is being deleted (Kueue keeps it while a queue lists it): the flavor pass "
        "writes it again once it is gone"
        for n in letting_go
    )
    flavors = {n: b for n, b in flavors.items() if n not in foreign and n not in letting_go}
    owned_flavors = [f for f in live.flavors if owner_of(f) == managers.OWNER_FLAVORS]
    pruned = sorted(_key(f) for f in owned_flavors if _key(f) not in flavors and not _deleting(f))

    # Topologies the retire pass keeps: every profile's, and every one a flavor still names.
    kept = set(topologies) | {
        str(ref)
        for f in (*live.flavors, *flavors.values())
        if (ref := (f.get("spec") or {}).get("topologyName"))
    }
    retired = [
        _name(t)
        for t in live.topologies
        if owner_of(t) == topology_managers.OWNER_TOPOLOGIES and _name(t) not in kept
    ]
    live_topologies = {_name(t): t for t in live.topologies}
    made = {
        n
        for n, body in topologies.items()
        if (found := live_topologies.get(n)) is None or _action(kinds.TOPOLOGY.kind, body, found) != "drift"
    }

    authored: dict[str, dict[str, Any]] = {}
    if settings.instance_type_derived_from_node:
        for p in plans:
            body = pools.derived_instance_type(p, aware=aware)
            name = body["metadata"]["name"]
            if name not in view.types and name not in authored and accepted(body, refused):
                authored[name] = body
    inp = _Inputs(
        hardware=hardware,
        facts=facts_of(nodes),
        checks=admissionchecks.active_checks(live.admission_checks),
        settings=settings,
    )
    # Next: the queue and status controllers over the caches as they are.
    in_flight = bool(flavor_writes or pruned) or settle.topology_on_its_way(view.flavors, view.topologies)
    first = _queue_pass(view, inp, in_flight=in_flight)
    # Then: over the caches once the next writes are in.
    later_view = Caches(
        flavors=_flavors_after(view, flavors, flavor_writes, pruned),
        topologies=frozenset((view.topologies | made) - set(retired)),
        queues={**view.queues, **first.after},
        types={**view.types, **{n: _after_write(None, b) for n, b in authored.items()}},
    )
    second = _queue_pass(later_view, inp, in_flight=None)
    notes.extend(n for n in second.notes if n not in notes)
    if not settings.instance_type_derived_from_node and not later_view.types:
        notes.append("instance-type-derived-from-node=false and no InstanceType exists: no ClusterQueue")

    selector = parse_selector(settings.local_queue_namespace_selector)
    local_now = _local_queues(live, view.queues.values(), selector, namespace)
    local_then = _local_queues(live, second.after.values(), selector, namespace)
    owned_local = [q for q in live.local_queues if owner_of(q) == managers.OWNER_LOCAL_QUEUES]
    next_writes = {
        kinds.TOPOLOGY.kind: topologies,
        kinds.RESOURCE_FLAVOR.kind: flavors,
        kinds.INSTANCE_TYPE.kind: {
            **authored,
            **{n: _status_body(view.types[n], st) for n, st in first.statuses.items()},
        },
        kinds.CLUSTER_QUEUE.kind: first.queues,
        kinds.LOCAL_QUEUE.kind: local_now,
        kinds.ADMISSION_CHECK.kind: admissionchecks.desired_admission_checks(),
    }
    then = {
        kinds.INSTANCE_TYPE.kind: {
            n: _status_body(later_view.types[n], st) for n, st in second.statuses.items()
        },
        kinds.CLUSTER_QUEUE.kind: second.queues,
        kinds.LOCAL_QUEUE.kind: local_then,
    }
    return DesiredChain(
        objects=next_writes,
        then=then,
        create_only=frozenset({kinds.INSTANCE_TYPE.kind}),
        delete={
            kinds.TOPOLOGY.kind: sorted(retired),
            kinds.RESOURCE_FLAVOR.kind: pruned,
            kinds.LOCAL_QUEUE.kind: sorted(
                _key(q) for q in owned_local if _key(q) not in local_now and _key(q) not in local_then
            ),
        },
        profiles={name: assigned.get(name, "") for name in sorted(nodes)},
        node_labels={name: dict(_meta(n.current).get("labels") or {}) for name, n in sorted(nodes.items())},
        notes=notes,
        refused=refused,
        source=DecidedSource(_name(source), decision) if source is not None and decision else None,
    )


def _local_queues(
    live: LiveCluster,
    queues_now: Iterable[Mapping[str, Any]],
    selector: LabelSelector,
    namespace: str,
) -> dict[str, dict[str, Any]]:
    """The LocalQueue controller's LocalQueues of every live Namespace, for the queues ``queues_now``."""
    fronted = [q for q in queues_now if not _deleting(q)]
    out: dict[str, dict[str, Any]] = {}
    for ns in live.namespaces:
        wanted = localqueues.desired_local_queues(ns, fronted, system_namespace=namespace, selector=selector)
        for body in wanted.values():
            stamped = stamp(body, managers.OWNER_LOCAL_QUEUES)
            out[_key(stamped)] = stamped
    return out


def _status_body(it: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The InstanceType status the InstanceType controller applies."""
    return {
        "apiVersion": kinds.INSTANCE_TYPE.api_version,
        "kind": kinds.INSTANCE_TYPE.kind,
        "metadata": {"name": _name(it)},
        "status": status,
    }


# --- the diff ------------------------------------------------------------------------------------------


def _same(want: Any, have: Any) -> bool:
    if want == have:
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    if isinstance(want, str | int | float) and isinstance(have, str | int | float):
        a, b = parse(want), parse(have)
        return a is not None and a == b
    return False


def _join(path: str, key: object) -> str:
    """``path.key``, or ``path[key]`` for a key with dots or slashes (a label key)."""
    text = str(key)
    if "." in text or "/" in text:
        return f"{path}[{text}]"
    return f"{path}.{text}" if path else text


def _walk(want: Any, have: Any, path: str, out: list[FieldChange]) -> None:
    if isinstance(want, dict):
        if not isinstance(have, dict):
            out.append(FieldChange(path, have, want))
            return
        for key, value in want.items():
            _walk(value, have.get(key), _join(path, key), out)
        return
    if isinstance(want, list):
        if path.endswith("conditions") and isinstance(have, list):
            for cond in want:
                kind = cond.get("type")
                found = next((c for c in have if isinstance(c, dict) and c.get("type") == kind), None)
                _walk(cond, found, f"{path}[{cond.get('type')}]", out)
            return
        if not isinstance(have, list) or len(have) != len(want):
            out.append(FieldChange(path, have, want))
            return
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            _walk(w, h, f"{path}[{i}]", out)
        return
    if not _same(want, have):
        out.append(FieldChange(path, have, want))


def field_diff(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    *,
    status_only: bool = False,
    whole_status: bool = False,
) -> list[FieldChange]:
    """The fields ``desired`` sets that ``live`` does not hold (pure). Only what ``desired`` sets is
    compared — what server-side apply would change: a field another writer added (a default, Kueue's
    status counts, a condition's time) is not a difference. Lists are compared item by item (a different
    length is one change of the whole list); conditions by ``type``. ``whole_status``: the status is applied
    whole (an InstanceType's), so a field of the live one the desired one lacks is a removal (desired
    None)."""
    out: list[FieldChange] = []
    sections = ("status",) if status_only else ("metadata", "spec", "status")
    for section in sections:
        want = desired.get(section)
        if want is None:
            continue
        if section == "metadata":
            want = {k: v for k, v in want.items() if k in _META_FIELDS}
        _walk(want, live.get(section), section, out)
    if whole_status:
        # A status the controller applies whole (an InstanceType's): a field it no longer sets is removed.
        found = live.get("status")
        have: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        wanted: Mapping[str, Any] = desired.get("status") or {}
        out.extend(FieldChange(_join("status", k), have[k], None) for k in sorted(have) if k not in wanted)
    return out


def diff_chain(desired: DesiredChain, live: LiveCluster) -> tuple[list[Change], int]:
    """The changes that take ``live`` to ``desired``: the next writes (step 1, each against the live
    object) in :data:`KIND_ORDER` with the deletes and the Nodes' labels, then the writes that follow
    (step 2, each against the object as the next writes leave it); and how many objects match."""
    existing: dict[str, dict[str, Mapping[str, Any]]] = {
        kinds.TOPOLOGY.kind: {_key(o): o for o in live.topologies},
        kinds.RESOURCE_FLAVOR.kind: {_key(o): o for o in live.flavors},
        kinds.INSTANCE_TYPE.kind: {_key(o): o for o in live.instance_types},
        kinds.CLUSTER_QUEUE.kind: {_key(o): o for o in live.cluster_queues},
        kinds.LOCAL_QUEUE.kind: {_key(o): o for o in live.local_queues},
        kinds.ADMISSION_CHECK.kind: {_key(o): o for o in live.admission_checks},
    }
    changes: list[Change] = []
    seen: set[tuple[str, str]] = set()
    changed: set[tuple[str, str]] = set()
    after: dict[str, dict[str, Mapping[str, Any]]] = {k: dict(v) for k, v in existing.items()}
    for step, objects in ((1, desired.objects), (2, desired.then)):
        for kind in KIND_ORDER:
            have = after[kind]
            for key, body in sorted(objects.get(kind, {}).items()):
                seen.add((kind, key))
                ns, _, name = key.rpartition("/")
                found = have.get(key)
                if found is None:
                    if kind in desired.create_only and "spec" not in body:
                        continue  # a status for an InstanceType that is not there
                    changes.append(Change("create", kind, name, ns or None, (), body, step))
                    changed.add((kind, key))
                    have[key] = body
                    continue
                only = kind in desired.create_only
                fields = field_diff(body, found, status_only=only, whole_status=only)
                if fields:
                    action = _action(kind, body, found)
                    changes.append(Change(action, kind, name, ns or None, tuple(fields), body, step))
                    changed.add((kind, key))
                    if action == "change" and kind in desired.create_only:
                        have[key] = {**found, "status": body.get("status")}  # applied whole
                    elif action == "change":
                        have[key] = applied(found, body)
            if step == 1:
                for key in desired.delete.get(kind, ()):
                    ns, _, name = key.rpartition("/")
                    changes.append(Change("delete", kind, name, ns or None, (), dict(have.get(key) or {})))
        if step == 1:
            changes.extend(_node_changes(desired, live))
    unchanged = (
        len(seen - changed)
        + sum(1 for node in live.nodes if _name(node) in desired.node_labels)
        - sum(1 for c in changes if c.kind == kinds.NODE.kind)
    )
    return changes, unchanged


def _node_changes(desired: DesiredChain, live: LiveCluster) -> list[Change]:
    out = []
    for node in sorted(live.nodes, key=_name):
        name = _name(node)
        want = desired.node_labels.get(name)
        if want is None:
            continue
        fields = label_diff(want, _meta(node).get("labels") or {})
        if fields:
            body = {"apiVersion": "v1", "kind": kinds.NODE.kind, "metadata": {"name": name, "labels": want}}
            out.append(Change("change", kinds.NODE.kind, name, None, tuple(fields), body))
    return out


def label_diff(desired: Mapping[str, str], live: Mapping[str, str]) -> list[FieldChange]:
    """Every label that differs between a Node's converged labels and its live ones, added, changed or
    removed (the agent's NodeFeature, nfd-master's projection and the topology controller set and remove
    them, so — unlike an applied object — a label the plan no longer has is a change too)."""
    return [
        FieldChange(_join("metadata.labels", key), live.get(key), desired.get(key))
        for key in sorted({*desired, *live})
        if desired.get(key) != live.get(key)
    ]


def _action(kind: str, desired: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """What the controller does with an object that differs, by its own tests: a flavor whose generated
    topology fields drifted, or a generated Topology whose levels did, is left as it is (``drift``:
    immutable in Kueue, an admin deletes it); a flavor whose other immutable fields changed is deleted and
    created again (``replace``); anything else is applied (``change``)."""
    if kind == kinds.RESOURCE_FLAVOR.kind:
        if chain_flavors.flavor_topology_drift(desired, live):
            return "drift"
        if chain_flavors.immutable_spec_changed(desired, live):
            return "replace"
    if kind == kinds.TOPOLOGY.kind and profiles.topology_drift(desired, live) is not None:
        return "drift"
    return "change"


def plan_cluster(
    live: LiveCluster,
    settings: WorkerSettings,
    *,
    namespace: str,
    settings_source: str,
    snapshot: str | None = None,
) -> PlanReport:
    """The whole plan over ``live`` (pure); ``snapshot``: see :func:`desired_chain`."""
    desired = desired_chain(live, settings, namespace=namespace, snapshot=snapshot)
    changes, unchanged = diff_chain(desired, live)
    return PlanReport(changes, unchanged, desired, settings_source)


# --- output --------------------------------------------------------------------------------------------

#: Every action, in the order the summary counts them, and its mark in the text output.
_MARK: Final = {"create": "+", "change": "~", "replace": "-/+", "delete": "-", "drift": "!"}
#: The heading of each step's changes in the text output.
_STEP_TITLE: Final = {
    1: "next writes (each controller's decision over the cluster as read):",
    2: "then, once those writes are in the controllers' caches:",
}
#: What an action means, for the text output's legend line (shown for the rare ones only).
_LEGEND: Final = {
    "replace": "-/+ replace: deleted and created again (Kueue forbids changing a flavor's selector)",
    "drift": "! drift: not written (immutable in Kueue); delete the object and the controller recreates it",
}


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    return json.dumps(value, sort_keys=True)


def render_text(report: PlanReport) -> str:
    """The plan as a person reads it: one line per object, the changed fields under it."""
    d = report.desired
    counts = report.as_dict()["summary"]
    managed = sorted({p for p in d.profiles.values() if p})
    lines = [
        f"settings: {report.settings_source}",
        f"nodes: {len(d.profiles)} ({sum(1 for p in d.profiles.values() if p)} managed); "
        f"profiles: {', '.join(managed) or '-'}",
    ]
    if report.preview is not None:
        lines += ["", *report.preview.lines()]
    elif d.source is not None:
        lines.append(d.source.line())
    lines.append("")
    width = max((len(c.kind) for c in report.changes), default=0)
    for step in (1, 2):
        shown = [c for c in report.changes if c.step == step]
        if shown:
            lines.append(_STEP_TITLE[step])
        for c in shown:
            lines.append(f"{_MARK[c.action]:<3} {c.action:<7}  {c.kind:<{width}}  {c.where}")
            lines.extend(f"      {f.path}: {_shown(f.live)} -> {_shown(f.desired)}" for f in c.fields)
    if not report.changes:
        lines.append("no changes: the chain on the cluster is what the controllers would write")
    lines += [
        "",
        f"{counts['create']} to create, {counts['change']} to change, {counts['delete']} to delete, "
        f"{counts['unchanged']} unchanged"
        + "".join(f", {counts[a]} to {a}" for a in ("replace",) if counts[a])
        + (f", {counts['drift']} drifted (left as they are)" if counts["drift"] else ""),
    ]
    for r in d.refused:
        held = r["path"] == "metadata.name" and r["rule"].startswith("held by")
        by = "the chain" if held else "the API server"
        lines.append(f"refused by {by} (not written): {r['kind']} {r['name']} {r['path']}: {r['rule']}")
    lines.extend(_LEGEND[a] for a in _LEGEND if counts[a])
    lines.extend(f"note: {n}" for n in d.notes)
    return "\n".join(lines)


def applicable(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as ``kubectl apply`` takes it: without ``status``."""
    return {k: v for k, v in body.items() if k != "status"}


def report_list(report: PlanReport) -> tuple[dict[str, Any], list[str]]:
    """``-o yaml``: a ``v1 List`` of every object to create or change, without ``status`` (the controllers
    write it; ``kubectl apply`` neither applies nor accepts a partial one), and comment lines naming each
    action (a delete has no object to apply, so it is a comment only)."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for c in report.changes:  # an object written at both steps is listed once, as it ends
        if c.action not in ("delete", "drift") and "spec" in c.body:
            last.pop((c.kind, c.where), None)
            last[c.kind, c.where] = applicable(c.body)
    items = list(last.values())  # a Node's labels are written through NodeFeatures: comment only
    comments = [f"# {c.action} {c.kind} {c.where}{' (then)' if c.step > 1 else ''}" for c in report.changes]
    return {"apiVersion": "v1", "kind": "List", "items": items}, comments
