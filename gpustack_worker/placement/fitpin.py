"""The Workload fit pin (docs/admission.md, "The fit pin"): ``Gt U-1`` / ``Gt N-1`` ANDed into a PodSet's
required node affinity, so Kueue's topology-aware scheduling only places a Workload on nodes where one
card still fits.

Node totals cannot tell a fragmented node (ten cards with 10 % free each) from one with a whole free card,
so Gate 3 would answer ``Retry`` and TAS would place the Workload on the same node again every 30 s. The
agent publishes per-card fit labels on every managed Node (``sliced-max-free-units.fit.gpustack.ai/<aKey>``:
the largest free slice units on one card; ``shared-free-cards.fit.gpustack.ai/<aKey>``: how many cards can
still grant an ownership share); this module turns a Workload's demand into requirements on them.

Pure: :func:`decide` reads the admission request and three cache lookups (LocalQueues by
``<namespace>/<name>``, ClusterQueues and InstanceTypes by name) and returns a :class:`Decision` — the JSON
patch (possibly empty) and why. The HTTP side is :mod:`gpustack_worker.placement.fitpin_webhook`.

Recognition of "this operator's Workload", every rule a requirement (any missing link ⇒ untouched):

1. the request is for a ``kueue.x-k8s.io`` Workload (never a Pod, never a subresource), CREATE or UPDATE;
2. setting ``workload-fit-affinity`` is on;
3. on UPDATE, the **old** Workload holds no quota reservation (condition ``QuotaReserved`` True): once
   Kueue reserved, the PodSets are decided (and Kueue refuses to change them);
4. ``spec.queueName`` starts with ``gpustack-fnv64-``;
5. the LocalQueue ``<namespace>/<queueName>`` exists in the cache;
6. its ``spec.clusterQueue`` names a cached ClusterQueue labelled ``resource.gpustack.ai/type:
   instancetypes``;
7. an InstanceType of the same name is cached;
8. its ``spec.acceleratorGroup`` is non-empty and both fit keys built from it are valid label keys.

Then per PodSet, from the parser Gate 3 uses (:func:`gpustack_worker.placement.demand.demand_of_podset`):
``U`` = per-card units of its logical slice (0 when none or not folded), ``N`` = the largest
distinct-card count one container asks for via ``.shared``. ``U>0`` ⇒ ``{key: sliced…/<group>,
operator: Gt, values: ["U-1"]}``; ``N≥2`` ⇒ ``{key: shared…/<group>, operator: Gt, values: ["N-1"]}``.
The requirements are ANDed into every non-empty term of the template's
``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``; empty terms are
left alone; with no required selector (or no terms) one term holding just the pin is created; an identical
expression already in a term is not added again.

The pin stays on the Workload: Kueue copies only labels, annotations, nodeSelector, tolerations and
scheduling gates to the Pods (and compares only containers, init containers and tolerations when it
checks a Workload still matches its Pods), so the kubelet never re-admits a running Pod against the
labels of a node that has since filled up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from gpustack_worker.api import keys, kinds, validation
from gpustack_worker.placement.demand import Demand, demand_of_podset

__all__ = (
    "Decision",
    "ObjectLookup",
    "decide",
    "fit_requirements",
    "pin_patch",
    "recognise",
)

#: The Workload condition Kueue sets while the Workload holds a quota reservation.
QUOTA_RESERVED: Final = "QuotaReserved"
_AFFINITY_PATH: Final = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


class ObjectLookup(Protocol):
    """A cache read by key (``<namespace>/<name>`` or ``<name>``): an informer's store satisfies it."""

    def get(self, key: str) -> Any | None:
        """The cached object, or None."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the webhook does with one request: ``patch`` (JSON patch operations, empty = untouched) and
    ``reason`` (a short explanation for logs and tests)."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    #: The recognised accelerator group (``aKey``), when recognition got that far.
    group: str = ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()


def fit_requirements(group: str, demand: Demand) -> list[dict[str, Any]]:
    """The pin's node-selector requirements for one PodSet of accelerator group ``group``."""
    out: list[dict[str, Any]] = []
    if demand.slice_units > 0:
        out.append(
            {
                "key": keys.sliced_max_free_units_key(group),
                "operator": "Gt",
                "values": [str(demand.slice_units - 1)],
            }
        )
    if demand.shared_cards >= 2:
        out.append(
            {
                "key": keys.shared_free_cards_key(group),
                "operator": "Gt",
                "values": [str(demand.shared_cards - 1)],
            }
        )
    return out


def _same(a: Any, b: Mapping[str, Any]) -> bool:
    if not isinstance(a, Mapping):
        return False
    return bool(
        a.get("key") == b["key"]
        and a.get("operator") == b["operator"]
        and list(_sequence(a.get("values"))) == b["values"]
    )


def _term_is_empty(term: Any) -> bool:
    term = _mapping(term)
    return not _sequence(term.get("matchExpressions")) and not _sequence(term.get("matchFields"))


def pin_patch(
    prefix: str, pod_spec: Mapping[str, Any], requirements: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """JSON patch operations ANDing ``requirements`` into the required node affinity of ``pod_spec``, which
    lives at JSON pointer ``prefix`` (empty when every requirement is already there)."""
    if not requirements:
        return []
    new_term = {"matchExpressions": [dict(r) for r in requirements]}
    node: Any = pod_spec
    path = prefix
    for name in _AFFINITY_PATH:
        child = node.get(name) if isinstance(node, Mapping) else None
        if not isinstance(child, Mapping):
            # Missing (or null): create the rest of the chain down to one term with just the pin.
            value: dict[str, Any] = {"nodeSelectorTerms": [new_term]}
            for inner in reversed(_AFFINITY_PATH[_AFFINITY_PATH.index(name) + 1 :]):
                value = {inner: value}
            return [{"op": "add", "path": f"{path}/{name}", "value": value}]
        node = child
        path = f"{path}/{name}"
    terms = node.get("nodeSelectorTerms")
    if not _sequence(terms):
        return [{"op": "add", "path": f"{path}/nodeSelectorTerms", "value": [new_term]}]
    ops: list[dict[str, Any]] = []
    for index, term in enumerate(_sequence(terms)):
        if _term_is_empty(term):
            continue
        current = _mapping(term).get("matchExpressions")
        missing = [r for r in requirements if not any(_same(e, r) for e in _sequence(current))]
        if not missing:
            continue
        term_path = f"{path}/nodeSelectorTerms/{index}/matchExpressions"
        if isinstance(current, (list, tuple)):
            ops.extend({"op": "add", "path": f"{term_path}/-", "value": dict(r)} for r in missing)
        else:  # absent or null: the term has only matchFields
            ops.append({"op": "add", "path": term_path, "value": [dict(r) for r in missing]})
    return ops


def _reserved(workload: Mapping[str, Any]) -> bool:
    return any(
        _mapping(cond).get("type") == QUOTA_RESERVED and _mapping(cond).get("status") == "True"
        for cond in _sequence(_mapping(workload.get("status")).get("conditions"))
    )


def recognise(
    workload: Mapping[str, Any],
    namespace: str,
    *,
    local_queues: ObjectLookup,
    cluster_queues: ObjectLookup,
    instance_types: ObjectLookup,
) -> tuple[str, str]:
    """``(group, "")`` for this operator's Workload (``group`` = the InstanceType's accelerator group),
    else ``("", why not)`` — rules 4-8 of the module docstring."""
    queue = _mapping(workload.get("spec")).get("queueName")
    if not isinstance(queue, str) or not queue.startswith(keys.LOCAL_QUEUE_PREFIX):
        return "", f"queue {queue!r} is not an operator entrance ({keys.LOCAL_QUEUE_PREFIX}…)"
    if not namespace:
        return "", "no namespace"
    local = local_queues.get(f"{namespace}/{queue}")
    if local is None:
        return "", f"LocalQueue {namespace}/{queue} not found"
    cq_name = _mapping(_mapping(local).get("spec")).get("clusterQueue")
    if not isinstance(cq_name, str) or not cq_name:
        return "", f"LocalQueue {namespace}/{queue} names no ClusterQueue"
    cluster_queue = cluster_queues.get(cq_name)
    if cluster_queue is None:
        return "", f"ClusterQueue {cq_name} not found"
    labels = _mapping(_mapping(_mapping(cluster_queue).get("metadata")).get("labels"))
    if labels.get(keys.RESOURCE_TYPE) != keys.TYPE_INSTANCE_TYPES:
        return "", f"ClusterQueue {cq_name} is not an InstanceType queue ({keys.RESOURCE_TYPE})"
    instance_type = instance_types.get(cq_name)
    if instance_type is None:
        return "", f"InstanceType {cq_name} not found"
    group = _mapping(_mapping(instance_type).get("spec")).get("acceleratorGroup")
    if not isinstance(group, str) or not group:
        return "", f"InstanceType {cq_name} has no acceleratorGroup"
    for key in (keys.sliced_max_free_units_key(group), keys.shared_free_cards_key(group)):
        if not validation.is_qualified_name(key):
            return "", f"InstanceType {cq_name}: {key!r} is not a valid label key"
    return group, ""


def _is_workload_request(request: Mapping[str, Any]) -> bool:
    resource = _mapping(request.get("resource"))
    if resource:
        return (
            resource.get("group") == kinds.WORKLOAD.group
            and resource.get("resource") == kinds.WORKLOAD.plural
            and not request.get("subResource")
        )
    kind = _mapping(request.get("kind"))
    return kind.get("group") == kinds.WORKLOAD.group and kind.get("kind") == kinds.WORKLOAD.kind


def decide(
    request: Mapping[str, Any],
    *,
    enabled: bool,
    local_queues: ObjectLookup,
    cluster_queues: ObjectLookup,
    instance_types: ObjectLookup,
) -> Decision:
    """The pin for one ``AdmissionReview.request`` (see the module docstring); ``enabled`` is the
    ``workload-fit-affinity`` setting in force."""
    if not _is_workload_request(request):
        return Decision(reason="not a Workload")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return Decision(reason=f"operation {operation!r}")
    if not enabled:
        return Decision(reason="workload-fit-affinity is off")
    workload = _mapping(request.get("object"))
    if operation == "UPDATE":
        old = request.get("oldObject")
        if not isinstance(old, Mapping):
            return Decision(reason="UPDATE without the old Workload")
        if _reserved(old):
            return Decision(reason="the old Workload holds a quota reservation")
    namespace = request.get("namespace") or _mapping(workload.get("metadata")).get("namespace") or ""
    group, why = recognise(
        workload,
        str(namespace),
        local_queues=local_queues,
        cluster_queues=cluster_queues,
        instance_types=instance_types,
    )
    if not group:
        return Decision(reason=why)
    ops: list[dict[str, Any]] = []
    pinned = 0
    for index, podset in enumerate(_sequence(_mapping(workload.get("spec")).get("podSets"))):
        template = _mapping(_mapping(podset).get("template"))
        requirements = fit_requirements(group, demand_of_podset(template))
        pod_spec = template.get("spec")
        if not requirements or not isinstance(pod_spec, Mapping):
            continue
        pinned += 1
        ops.extend(pin_patch(f"/spec/podSets/{index}/template/spec", pod_spec, requirements))
    if not pinned:
        return Decision(reason="no PodSet asks for a logical slice or shares on several cards", group=group)
    if not ops:
        return Decision(reason="the pin is already there", group=group)
    return Decision(patch=ops, reason=f"pinned {pinned} PodSet(s)", group=group)
