"""The chain's inputs, assembled one way (pure: no I/O, no clock, no globals).

Three code paths feed the chain's decisions, each from its own source:

- the controllers (:mod:`gpustack_worker.chain.steps`), from their informer caches;
- ``plan SCENARIO`` (:mod:`gpustack_worker.cli.plan.planning`), from the Nodes, NodeFeatures and ``Devices`` a
  scenario renders and the chain objects the plan itself computes;
- ``plan --from-cluster`` (:mod:`gpustack_worker.cli.plan.cluster_plan`), from what it listed, filtered as the
  caches hold it.

What each one gathers goes through the functions below, so a rule about what a decision reads is written
once:

- **nfd-master's projection** — which labels a Node ends up with from its NodeFeatures (:func:`project`),
  and the inverse a live Node is read back with (:func:`unproject`, :func:`features_by_node`): the plans
  emulate it (the controllers read the Nodes nfd-master projected);
- **the Nodes' chain view** (:func:`chain_nodes`, with :func:`~gpustack_worker.chain.nodes.node_hardware`
  per Node, which the controllers call per Node event);
- **a ClusterQueue's inputs** (:func:`queue_inputs`): what ``queues.decide`` reads — the cached
  InstanceType and queue, the flavor cache, the Nodes, the Topologies there are, the ``Active``
  AdmissionChecks, whether the queue controller owns the queue's stop policy, and the settings;
- **an InstanceType's decision and status** (:func:`type_decision`, :func:`pool_status`): the queue the
  InstanceType controller reads and whose stop it is, then the status
  (:func:`~gpustack_worker.chain.typestatus.instance_type_status`) from that decision's phase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, node_class
from gpustack_worker.chain import instancetypes, managers, queues, typestatus
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.runtime.apply import owned_fields

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

    from gpustack_worker.api.devices_view import DevicesFacts
    from gpustack_worker.api.settings import ChainSettings
    from gpustack_worker.chain.nodes import NodeHardware

__all__ = (
    "NFD_DEFAULT_NS",
    "chain_nodes",
    "feature_label_key",
    "features_by_node",
    "merged_feature_labels",
    "owns_field",
    "pool_status",
    "project",
    "projected_keys",
    "queue_inputs",
    "stop_policy_is_ours",
    "type_decision",
    "unproject",
)

#: nfd-master's default label namespace: a NodeFeature label named without a namespace lands in it, and the
#: ``feature-labels`` annotation lists the keys in it without it.
NFD_DEFAULT_NS = node_class.NFD_DEFAULT_NS


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


# --- nfd-master's projection ------------------------------------------------------------------------


def feature_label_key(key: str) -> str:
    """The Node label a NodeFeature's ``key`` projects to: a name without a namespace lands in
    :data:`NFD_DEFAULT_NS`."""
    return key if "/" in key else NFD_DEFAULT_NS + key


def merged_feature_labels(features: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """The union of NodeFeatures' ``spec.labels`` as nfd-master projects them, each key with its namespace
    (:func:`feature_label_key`); a key set by more than one takes the value of the later in ``features``."""
    merged: dict[str, str] = {}
    for feature in features:
        for key, value in feature.items():
            merged[feature_label_key(key)] = value
    return merged


def project(node: Mapping[str, Any], features: Iterable[Mapping[str, str]]) -> dict[str, Any]:
    """The Node with the union of its NodeFeatures' labels projected, as nfd-master does: every key set
    (:func:`merged_feature_labels`), and the projected names listed in the
    ``nfd.node.kubernetes.io/feature-labels`` annotation (without the default namespace, sorted); without
    any, the annotation is removed."""
    meta = dict(node.get("metadata") or {})
    labels = dict(meta.get("labels") or {})
    projected = merged_feature_labels(features)
    labels.update(projected)
    annotations = dict(meta.get("annotations") or {})
    if projected:
        annotations[keys.NFD_FEATURE_LABELS_ANNOTATION] = ",".join(
            sorted(k.removeprefix(NFD_DEFAULT_NS) for k in projected)
        )
    else:
        annotations.pop(keys.NFD_FEATURE_LABELS_ANNOTATION, None)
    meta["labels"] = dict(sorted(labels.items()))
    meta["annotations"] = annotations
    return {**node, "metadata": meta}


def projected_keys(node: Mapping[str, Any]) -> frozenset[str]:
    """The label keys nfd-master lists on ``node`` as projected from NodeFeatures (its ``feature-labels``
    annotation, the default namespace restored: :func:`~gpustack_worker.api.node_class.nfd_projected`)."""
    listed = (_meta(node).get("annotations") or {}).get(keys.NFD_FEATURE_LABELS_ANNOTATION)
    return node_class.nfd_projected({keys.NFD_FEATURE_LABELS_ANNOTATION: str(listed or "")})


def unproject(node: Mapping[str, Any], *, also: Collection[str] = ()) -> dict[str, Any]:
    """The Node as it was before nfd-master projected onto it — the inverse of :func:`project`: without
    the labels its annotation lists (:func:`projected_keys`), nor the annotation; ``also``: more label
    keys taken off (the ones a controller writes on the Node directly)."""
    meta = dict(_meta(node))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    drop = projected_keys(node) | set(also)
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(keys.NFD_FEATURE_LABELS_ANNOTATION, None)
    kept = {k: v for k, v in labels.items() if k not in drop}
    return {**node, "metadata": {**meta, "labels": kept, "annotations": annotations}}


def features_by_node(node_features: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """NodeFeatures by the Node nfd-master projects them onto (their ``nfd.node.kubernetes.io/node-name``
    label; one without it projects nowhere), in their order."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for feature in node_features:
        target = (_meta(feature).get("labels") or {}).get(keys.NFD_NODE_NAME)
        if target:
            out.setdefault(str(target), []).append(feature)
    return out


# --- the Nodes --------------------------------------------------------------------------------------


def chain_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[NodeHardware]:
    """The chain's view of every Node that takes part (:func:`~gpustack_worker.chain.nodes.node_hardware`:
    managed, profiled), in order."""
    return [h for n in nodes if (h := node_hardware(n)) is not None]


# --- a ClusterQueue's inputs ------------------------------------------------------------------------


def owns_field(obj: Mapping[str, Any] | None, manager: str, path: tuple[str, ...]) -> bool:
    """Whether ``manager``'s apply entry on the cached ``obj`` owns the field ``path`` (``f:``-spelled)."""
    for entry in _meta(obj).get("managedFields") or ():
        if (
            entry.get("manager") == manager
            and not entry.get("subresource")
            and path in owned_fields(entry.get("fieldsV1") or {})
        ):
            return True
    return False


def stop_policy_is_ours(queue: Mapping[str, Any] | None) -> bool:
    """The queue controller's field manager owns ``spec.stopPolicy`` on the cached ``queue`` (when it does
    not, someone else stopped or released the queue); False without a queue."""
    return owns_field(queue, managers.QUEUE, queues.STOP_POLICY_FIELD)


def queue_inputs(
    instance_type: Mapping[str, Any] | None,
    queue: Mapping[str, Any] | None,
    *,
    flavors: Sequence[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    topologies: Iterable[str],
    active_checks: frozenset[str],
    settings: ChainSettings,
) -> queues.QueueInputs:
    """What the queue controller's decision (``queues.decide``) reads for one InstanceType name:
    ``instance_type`` and ``queue`` as cached (None: not there), ``flavors`` the flavor cache (finalizing
    ones included), ``nodes`` the chain's view of the Nodes (any set holding every Node the pool's plan
    involves), ``topologies`` the names of the Topologies there are, ``active_checks`` the AdmissionChecks
    marked ``Active`` (:func:`~gpustack_worker.chain.admissionchecks.active_checks`)."""
    return queues.QueueInputs(
        instance_type=instance_type,
        queue=queue,
        flavors=flavors,
        nodes=nodes,
        topologies=frozenset(topologies),
        active_checks=active_checks,
        owns_stop_policy=stop_policy_is_ours(queue),
        aware=settings.instance_type_aware_cpu_manufacturer,
        mixed_on_node=settings.instance_type_mixed_on_node,
        derived_from_node=settings.instance_type_derived_from_node,
        drain_when_no_flavors=settings.instance_type_drain_when_no_flavors,
    )


# --- an InstanceType's decision and status ----------------------------------------------------------


def type_decision(
    instance_type: Mapping[str, Any],
    cached: Mapping[str, Any] | None,
    *,
    writing: Mapping[str, Any] | None = None,
) -> tuple[instancetypes.TypeDecision, Mapping[str, Any] | None]:
    """The InstanceType controller's decision (``instancetypes.decide_type``) and the backing queue it was
    made over: the ``cached`` queue, whose stop policy is the chain's when the queue controller owns it
    (:func:`stop_policy_is_ours`) — or, when the cache holds none, ``writing``: the queue the queue
    controller is creating (a plan's), whose stop policy is its own."""
    queue = cached if cached is not None else writing
    ours = stop_policy_is_ours(cached) if cached is not None else True
    return instancetypes.decide_type(instance_type, queue, queue_stop_is_ours=ours), queue


def pool_status(
    instance_type: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    decision: instancetypes.TypeDecision,
    *,
    flavors: Iterable[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    facts: Callable[[str], DevicesFacts | None],
    settings: ChainSettings,
) -> dict[str, Any]:
    """The ``status`` the InstanceType controller applies (:func:`~gpustack_worker.chain.typestatus.
    instance_type_status`) with ``decision``'s phase: ``queue`` the one the decision read, ``flavors`` the
    flavor cache, ``nodes`` the chain's view of the Nodes (any set holding every Node the pool's flavors
    select), ``facts`` a Node's parsed ``Devices`` by name."""
    return typestatus.instance_type_status(
        instance_type,
        queue,
        flavors,
        nodes,
        facts,
        aware=settings.instance_type_aware_cpu_manufacturer,
        phase=decision.phase,
        phase_message=decision.phase_message,
    )
