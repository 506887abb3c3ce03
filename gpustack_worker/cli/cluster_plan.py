"""``gpustack-worker plan --from-cluster``: what the controllers would create, change and delete on a live
cluster, computed without writing anything.

One read (:func:`read_live`: LISTs and two kinds of GET, nothing else — a read-only role is enough), then
pure functions:

1. :func:`live_nodes` — each live Node as :class:`~gpustack_worker.cli.planning.PlanNode`: the Node with
   every label nfd-master projected (those its ``feature-labels`` annotation lists) and every label our
   controllers write on it directly (profile, fit) taken off, the labels of the NodeFeatures that are not
   ours (the Device Manager's), the worker NodeFeature's labels as already published, and the ``Devices``;
2. :func:`desired_chain` — the scenario plan's own composition
   (:func:`~gpustack_worker.cli.planning.converge`: agent, nfd-master and topology until the Nodes stop
   changing), then the chain's pure decisions over the live objects exactly as the controllers call them:
   ``flavors.plan_flavors`` / ``flavor_body``, ``pools.derived_instance_type`` (create-only),
   ``queues.decide`` with the live queue, the live AdmissionChecks' ``Active`` and our field manager's
   ownership of ``spec.stopPolicy``, the InstanceType status views, ``localqueues.desired_local_queues``
   for every live Namespace, ``admissionchecks.desired_admission_checks`` and the profiles' Topologies;
3. :func:`diff_chain` — each desired object against the live one of that name: ``create`` when there is
   none, ``change`` with the fields that differ (only the fields the controller sets: server-side apply
   leaves the others alone) — ``replace`` or ``drift`` instead when the controller's own tests
   (``flavors.immutable_spec_changed``, ``flavors.flavor_topology_drift``, ``profiles.topology_drift``)
   say it deletes and recreates, or leaves, that object — and ``delete`` for objects carrying a
   controller's owner label that nothing wants any more (the pruners' rule). An authored InstanceType is
   create-only, so an existing one is compared on ``status`` alone. Last, each Node's converged labels
   against its live ones (:func:`label_diff`): what installing would label.

Limits (said, not guessed): one TopologySource at most, and not a webhook one (its snapshot is fetched by
the controller from an address a planning machine may not reach).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import admissionchecks, instancetypes, localqueues, managers, pools, queues
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.chain.steps import owns_field
from gpustack_worker.chain.views import cpu_used
from gpustack_worker.cli.planning import (
    NFD_DEFAULT_NS,
    PlanError,
    PlanNode,
    accepted,
    capacity_status,
    converge,
    in_effect,
    own_keys,
    parsed_facts,
    project,
    set_own,
    topology_ready_status,
)
from gpustack_worker.runtime.labelselector import parse_selector
from gpustack_worker.runtime.prune import owner_of, stamp
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.topology import managers as topology_managers
from gpustack_worker.topology import profiles, sources

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "Change",
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

    objects: dict[str, dict[str, dict[str, Any]]]
    #: Kinds whose existing objects are compared on ``status`` only (create-only authoring).
    create_only: frozenset[str] = frozenset()
    #: ``[namespace/]name`` by kind of live objects a controller owns and would delete.
    delete: dict[str, list[str]] = field(default_factory=dict)
    profiles: dict[str, str] = field(default_factory=dict)
    #: Node name → its labels once the agent, nfd-master and the topology controller converged.
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)


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

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.fields:
            out["fields"] = [f.as_dict() for f in self.fields]
        return out


@dataclass(frozen=True, slots=True)
class PlanReport:
    """The plan: the changes, how many objects already match, and what it was computed from."""

    changes: list[Change]
    unchanged: int
    desired: DesiredChain
    settings_source: str

    def as_dict(self) -> dict[str, Any]:
        counts = {a: sum(1 for c in self.changes if c.action == a) for a in _MARK}
        return {
            "settings": self.settings_source,
            "profiles": dict(self.desired.profiles),
            "summary": {**counts, "unchanged": self.unchanged},
            "changes": [c.as_dict() for c in self.changes],
            "notes": list(self.desired.notes),
            "refused": list(self.desired.refused),
        }


# --- the read ------------------------------------------------------------------------------------------


async def _list(client: Client, resource: Resource) -> list[dict[str, Any]]:
    items, _rv = await client.list(resource)
    return [dict(i) for i in items]


async def read_live(client: Client, *, namespace: str, settings_configmap: str) -> LiveCluster:
    """Every object the plan reads (LIST, and GET of the settings and snapshot ConfigMaps): never a write."""
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
    for source in srcs:
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


def _projected(meta: Mapping[str, Any]) -> set[str]:
    """The label keys nfd-master lists as projected from NodeFeatures (its default namespace restored)."""
    listed = str((meta.get("annotations") or {}).get(keys.NFD_FEATURE_LABELS_ANNOTATION) or "")
    return {k if "/" in k else NFD_DEFAULT_NS + k for k in (p.strip() for p in listed.split(",")) if k}


def live_nodes(live: LiveCluster, *, with_sources: bool) -> dict[str, PlanNode]:
    """Every live Node as the plan's node: base (no projection, none of our direct labels), the other
    NodeFeatures' labels, the worker NodeFeature's published labels, and — ``with_sources`` — the
    TopologySource NodeFeatures' labels as they stand; ``current`` is the live Node as it is."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for nf in live.node_features:
        target = ((_meta(nf).get("labels")) or {}).get(keys.NFD_NODE_NAME)
        if target:
            by_node.setdefault(str(target), []).append(nf)
    devices = {_name(d): d for d in live.devices}
    out: dict[str, PlanNode] = {}
    for node in sorted(live.nodes, key=_name):
        name = _name(node)
        meta = dict(_meta(node))
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        own = own_keys(labels)
        drop = _projected(meta) | set(own)
        annotations = dict(meta.get("annotations") or {})
        annotations.pop(keys.NFD_FEATURE_LABELS_ANNOTATION, None)
        kept = {k: v for k, v in labels.items() if k not in drop}
        base = {**node, "metadata": {**meta, "labels": kept, "annotations": annotations}}
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
        plan_node = PlanNode(base, others, dev, parsed_facts(dev), project(base, [others, worker, topology]))
        plan_node.worker, plan_node.topology = worker, topology
        set_own(plan_node, own)
        out[name] = plan_node
    return out


# --- the desired chain ---------------------------------------------------------------------------------


def _source_and_snapshot(
    live: LiveCluster, namespace: str
) -> tuple[Mapping[str, Any] | None, str | None, list[str]]:
    """The TopologySource the plan decides (and the snapshot its ConfigMap serves), with notes."""
    active = [s for s in live.topology_sources if not _meta(s).get("deletionTimestamp")]
    if len(active) > 1:
        names = ", ".join(sorted(_name(s) for s in active))
        raise PlanError(f"{len(active)} TopologySources ({names}): --from-cluster plans with one at most")
    if not active:
        return None, None, []
    source = active[0]
    spec = source.get("spec") or {}
    arm = sources.arm_of(spec)
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


def _with_uid(body: Mapping[str, Any], uid: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "uid": uid}}


def desired_chain(live: LiveCluster, settings: WorkerSettings, *, namespace: str) -> DesiredChain:
    """What the controllers would hold the cluster to, given ``live`` and ``settings`` (pure)."""
    source, snapshot, notes = _source_and_snapshot(live, namespace)
    nodes = live_nodes(live, with_sources=source is not None)
    assigned, levels_of, decision = converge(nodes, settings, source, snapshot, namespace)
    if source is not None and decision is not None:
        effective, why = in_effect(decision.conditions)
        if not effective:
            notes.append(f"TopologySource {_name(source)} is not in effect ({why}): hostname-only profiles")
    refused: list[dict[str, str]] = []
    aware = settings.instance_type_aware_cpu_manufacturer
    mixed = settings.instance_type_mixed_on_node

    topologies = {
        keys.topology_name(p): stamp(profiles.topology_body(levels), topology_managers.OWNER_TOPOLOGIES)
        for p, levels in levels_of.items()
    }
    topologies = {n: b for n, b in topologies.items() if accepted(b, refused)}
    hardware = [h for n in nodes.values() if (h := node_hardware(n.current)) is not None]
    plans = chain_flavors.plan_flavors(hardware, mixed_on_node=mixed)
    flavors = {
        p.name: stamp(chain_flavors.flavor_body(p, mixed_on_node=mixed, aware=aware), managers.OWNER_FLAVORS)
        for p in plans
    }
    flavors = {n: b for n, b in flavors.items() if accepted(b, refused)}
    flavor_list = list(flavors.values())

    # Topologies the retire pass keeps: every profile's, and every one a flavor still names.
    kept = set(topologies) | {
        str(ref)
        for f in (*live.flavors, *flavor_list)
        if (ref := (f.get("spec") or {}).get("topologyName"))
    }
    retired = [
        _name(t)
        for t in live.topologies
        if owner_of(t) == topology_managers.OWNER_TOPOLOGIES and _name(t) not in kept
    ]
    present = frozenset({*topologies, *(_name(t) for t in live.topologies)} - set(retired))

    live_types = {_name(t): t for t in live.instance_types}
    types: dict[str, dict[str, Any]] = {}
    if settings.instance_type_derived_from_node:
        for p in plans:
            body = pools.derived_instance_type(p, aware=aware)
            name = body["metadata"]["name"]
            if name not in live_types and name not in types and accepted(body, refused):
                types[name] = body
    live_queues = {_name(q): q for q in live.cluster_queues}
    checks = admissionchecks.active_checks(live.admission_checks)
    facts = {name: f for name, n in nodes.items() if (f := n.facts) is not None}
    cqs: dict[str, dict[str, Any]] = {}
    fronted: list[dict[str, Any]] = []  # the queues the LocalQueues front, with their uids
    for name, it in sorted({**live_types, **types}.items()):
        queue = live_queues.get(name)
        decided = queues.decide(
            queues.QueueInputs(
                instance_type=it,
                queue=queue,
                flavors=flavor_list,
                nodes=hardware,
                topologies=present,
                active_checks=checks,
                owns_stop_policy=owns_field(queue, managers.QUEUE, queues.STOP_POLICY_FIELD),
                aware=aware,
                mixed_on_node=mixed,
                derived_from_node=settings.instance_type_derived_from_node,
                drain_when_no_flavors=settings.instance_type_drain_when_no_flavors,
            )
        )
        after: Mapping[str, Any] | None = queue
        if decided.drain_only and decided.body is not None and queue is not None:
            cqs[name] = {**decided.body, "metadata": {"name": name}}
            after = queue
        elif decided.body is not None:
            body = dict(decided.body)
            if decided.condition is not None:
                body["status"] = topology_ready_status(decided.condition)
            cqs[name] = body
            after = {**body, "status": {**((queue or {}).get("status") or {}), **(body.get("status") or {})}}
        elif decided.condition is not None:
            notes.append(f"ClusterQueue {name}: {decided.condition.reason}: {decided.condition.message}")
        if after is not None and not _deleting(after):
            fronted.append(_with_uid(after, str(_meta(queue).get("uid") or NEW_UID)))
        phase, message = instancetypes.phase_of(after, deleting=_deleting(it))
        status: dict[str, Any] = {
            "entrance": keys.local_queue_name(name),
            "phase": phase,
            **({"phaseMessage": message} if message else {}),
            **capacity_status(it, flavor_list, hardware, facts, aware=aware, cpu_used=cpu_used(queue)),
        }
        types[name] = {**it, "status": status} if name in types else _status_body(it, status)
    if not settings.instance_type_derived_from_node and not live_types:
        notes.append("instance-type-derived-from-node=false and no InstanceType exists: no ClusterQueue")

    local: dict[str, dict[str, Any]] = {}
    selector = parse_selector(settings.local_queue_namespace_selector)
    for ns in live.namespaces:
        wanted = localqueues.desired_local_queues(ns, fronted, system_namespace=namespace, selector=selector)
        for body in wanted.values():
            stamped = stamp(body, managers.OWNER_LOCAL_QUEUES)
            local[_key(stamped)] = stamped
    owned_local = [q for q in live.local_queues if owner_of(q) == managers.OWNER_LOCAL_QUEUES]
    owned_flavors = [f for f in live.flavors if owner_of(f) == managers.OWNER_FLAVORS]
    return DesiredChain(
        objects={
            kinds.TOPOLOGY.kind: topologies,
            kinds.RESOURCE_FLAVOR.kind: flavors,
            kinds.INSTANCE_TYPE.kind: types,
            kinds.CLUSTER_QUEUE.kind: cqs,
            kinds.LOCAL_QUEUE.kind: local,
            kinds.ADMISSION_CHECK.kind: admissionchecks.desired_admission_checks(),
        },
        create_only=frozenset({kinds.INSTANCE_TYPE.kind}),
        delete={
            kinds.TOPOLOGY.kind: sorted(retired),
            kinds.RESOURCE_FLAVOR.kind: sorted(_key(f) for f in owned_flavors if _key(f) not in flavors),
            kinds.LOCAL_QUEUE.kind: sorted(_key(q) for q in owned_local if _key(q) not in local),
        },
        profiles={name: assigned.get(name, "") for name in sorted(nodes)},
        node_labels={name: dict(_meta(n.current).get("labels") or {}) for name, n in sorted(nodes.items())},
        notes=notes,
        refused=refused,
    )


def _status_body(it: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The InstanceType status the InstanceType controller applies (for an existing one)."""
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
    desired: Mapping[str, Any], live: Mapping[str, Any], *, status_only: bool = False
) -> list[FieldChange]:
    """The fields ``desired`` sets that ``live`` does not hold (pure). Only what ``desired`` sets is
    compared — what server-side apply would change: a field another writer added (a default, Kueue's
    status counts, a condition's time) is not a difference. Lists are compared item by item (a different
    length is one change of the whole list); conditions by ``type``."""
    out: list[FieldChange] = []
    sections = ("status",) if status_only else ("metadata", "spec", "status")
    for section in sections:
        want = desired.get(section)
        if want is None:
            continue
        if section == "metadata":
            want = {k: v for k, v in want.items() if k in _META_FIELDS}
        _walk(want, live.get(section), section, out)
    return out


def diff_chain(desired: DesiredChain, live: LiveCluster) -> tuple[list[Change], int]:
    """The changes that take ``live`` to ``desired``, in :data:`KIND_ORDER`, and how many objects match."""
    existing: dict[str, dict[str, Mapping[str, Any]]] = {
        kinds.TOPOLOGY.kind: {_key(o): o for o in live.topologies},
        kinds.RESOURCE_FLAVOR.kind: {_key(o): o for o in live.flavors},
        kinds.INSTANCE_TYPE.kind: {_key(o): o for o in live.instance_types},
        kinds.CLUSTER_QUEUE.kind: {_key(o): o for o in live.cluster_queues},
        kinds.LOCAL_QUEUE.kind: {_key(o): o for o in live.local_queues},
        kinds.ADMISSION_CHECK.kind: {_key(o): o for o in live.admission_checks},
    }
    changes: list[Change] = []
    unchanged = 0
    for kind in KIND_ORDER:
        have = existing[kind]
        for key, body in sorted(desired.objects.get(kind, {}).items()):
            ns, _, name = key.rpartition("/")
            found = have.get(key)
            if found is None:
                if kind in desired.create_only and "spec" not in body:
                    continue  # a status for an InstanceType that is not there
                changes.append(Change("create", kind, name, ns or None, (), body))
                continue
            fields = field_diff(body, found, status_only=kind in desired.create_only)
            if fields:
                action = _action(kind, body, found)
                changes.append(Change(action, kind, name, ns or None, tuple(fields), body))
            else:
                unchanged += 1
        for key in desired.delete.get(kind, ()):
            ns, _, name = key.rpartition("/")
            changes.append(Change("delete", kind, name, ns or None, (), dict(have.get(key) or {})))
    for node in sorted(live.nodes, key=_name):
        name = _name(node)
        want = desired.node_labels.get(name)
        if want is None:
            continue
        fields = label_diff(want, _meta(node).get("labels") or {})
        if fields:
            body = {"apiVersion": "v1", "kind": kinds.NODE.kind, "metadata": {"name": name, "labels": want}}
            changes.append(Change("change", kinds.NODE.kind, name, None, tuple(fields), body))
        else:
            unchanged += 1
    return changes, unchanged


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
    live: LiveCluster, settings: WorkerSettings, *, namespace: str, settings_source: str
) -> PlanReport:
    """The whole plan over ``live`` (pure)."""
    desired = desired_chain(live, settings, namespace=namespace)
    changes, unchanged = diff_chain(desired, live)
    return PlanReport(changes, unchanged, desired, settings_source)


# --- output --------------------------------------------------------------------------------------------

#: Every action, in the order the summary counts them, and its mark in the text output.
_MARK: Final = {"create": "+", "change": "~", "replace": "-/+", "delete": "-", "drift": "!"}
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
        "",
    ]
    width = max((len(c.kind) for c in report.changes), default=0)
    for c in report.changes:
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
        lines.append(
            f"refused by the API server (not created): "
            f"{r['kind']} {r['name']} {r['path']}: {r['rule']}"
        )
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
    items = [
        applicable(c.body) for c in report.changes if c.action not in ("delete", "drift") and "spec" in c.body
    ]  # a Node's labels are written through NodeFeatures and nfd-master, not applied: comment only
    comments = [f"# {c.action} {c.kind} {c.where}" for c in report.changes]
    return {"apiVersion": "v1", "kind": "List", "items": items}, comments


# --- the command ---------------------------------------------------------------------------------------


async def _plan_live(args: argparse.Namespace, overrides: dict[str, str]) -> PlanReport:
    from gpustack_worker.cli.plan_cmd import InputError
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.settings import SettingsError, settings_from

    client = await Client.connect(
        args.kubeconfig, context=getattr(args, "context", None), user_agent="gpustack-worker-plan"
    )
    try:
        live = await read_live(client, namespace=args.namespace, settings_configmap=args.settings_configmap)
    finally:
        await client.close()
    where = f"{args.namespace}/{args.settings_configmap}"
    cm = live.config_maps.get(where)
    data = {str(k): str(v) for k, v in ((cm or {}).get("data") or {}).items()}
    source = f"ConfigMap {where} ({len(data)} keys)" if cm is not None else f"defaults (no ConfigMap {where})"
    if overrides:
        source += f" with --set {', '.join(sorted(overrides))}"
    try:
        settings = settings_from(WorkerSettings, {**data, **overrides}, {})
    except SettingsError as exc:
        raise InputError("invalid settings: " + "; ".join(exc.errors)) from None
    return plan_cluster(live, settings, namespace=args.namespace, settings_source=source)


def run(args: argparse.Namespace, overrides: dict[str, str]) -> int:
    """``plan --from-cluster``: read, plan, print. ``2`` on bad input; a cluster that cannot be read
    (unreachable, no credentials, a read refused) is the CLI's one error line naming the server, exit 1
    (:mod:`gpustack_worker.cli.errors`)."""
    from gpustack_worker.cli.plan_cmd import InputError

    try:
        report = asyncio.run(_plan_live(args, overrides))
    except (InputError, PlanError) as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    elif args.output == "yaml":
        doc, comments = report_list(report)
        print("\n".join(comments))
        print(yaml.safe_dump(doc, sort_keys=False), end="")
    else:
        print(render_text(report))
    return 0

