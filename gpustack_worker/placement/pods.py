"""The desired Pods of one ModelDeployment role replica (pure: no I/O, no clock).

Each replica of a role is one Kueue **pod group** of ``size`` Pods, so Kueue builds one Workload per
replica (``replicas: 3, size: 8`` is three independent 8-Pod decisions). What every Pod of a group
carries, and why (Kueue v0.19.2 ``pkg/controller/jobs/pod``):

- label ``kueue.x-k8s.io/queue-name``: the LocalQueue of the role's InstanceType
  (:func:`~gpustack_worker.api.keys.local_queue_name` of its name, which is its ClusterQueue's name);
- label ``kueue.x-k8s.io/pod-group-name`` and annotation ``kueue.x-k8s.io/pod-group-total-count``
  (``size``): the group; Kueue names the group's Workload after the group name;
- annotation ``kueue.x-k8s.io/role-hash`` = the role name: Kueue names each PodSet of a group after its
  members' role hash and takes the annotation when present (it computes one from the Pod spec only when
  it is absent), so the group's single, fate-sharing PodSet is named after the role;
- label ``kueue.x-k8s.io/pod-group-pod-index``: the member's index (0..size-1), which TAS uses to rank
  the Pods of the group;
- annotation ``kueue.x-k8s.io/podset-required-topology`` = ``roles[].topology.requiredLevel`` when set
  (Kueue turns it into the PodSet's ``topologyRequest.required``); omitted → no explicit request;
- labels ``modeldeployment.gpustack.ai/{uid,role,pod-ordinal,render-hash}``: the deployment's uid, the
  role, the replica ordinal and the render hash; a controller ownerReference to the ModelDeployment.

The template's own labels and annotations are carried to every Pod, except that the worker alone decides
the keys under Kueue's domain (``kueue.x-k8s.io`` and its subdomains) and the ModelDeployment identity
domain (``modeldeployment.gpustack.ai``): :func:`reserved_key` is that one rule. A template carrying such a
key is refused (``ReservedTemplateMetadata``), never stripped: each of those keys changes the group's
Workload (its queue, group, PodSet name, topology request, priority, slices...), so a template asking for
one asked for something the render would not do — a ``podset-required-topology`` would bypass the level
check, a ``podset-preferred-topology`` would silently drop the node-store terms. The other template
metadata fields (name, namespace, owners, finalizers) are never read.

Resources: the first container's limits get the InstanceType's unit resources × units (``cpu`` ×
units, ``memory`` = ``ram`` × units) and ``ephemeral-storage`` = ``spec.localStorage`` (GPUStack
bounds an instance's local storage by the type's value, not per card); its requests get the same, or —
with ``instance-general-resources-overcommit`` on, the default — GPUStack's scaled-down requests (an
accelerated unit 100m CPU per core and 128Mi per Gi, a general unit 800m / 128Mi, one eighth of the local
storage), while the limits stay at the preset. Both get the role's accelerator request in the type's
manufacturer resource: ``<base>: n`` for ``accelerator: n`` whole cards (units = n), or
``<base>.partitioned: 1`` + ``<base>.partitioned.<kind>-<profile>: 1`` for a partition profile
(units = 1). A role without an accelerator request gets one unit. Our values replace the template's
for the same resource names.

The **render hash** (FNV-1a 64 of the rendered Pod, without anything per replica or per Pod) identifies a
replica's render: a changed template, queue, level, size or resource changes it, and the controller
replaces the groups rendered before (only of the roles whose render changed). The node-store preference
terms are added at creation (:mod:`gpustack_worker.placement.modelstores`), outside the hash.

A role that cannot be rendered — no or unknown InstanceType, a level its queue's hierarchy does not have,
a malformed accelerator request, reserved template metadata — yields a :class:`RoleProblem` (a status
condition), never an exception.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.api import keys, kinds, manufacturers
from gpustack_worker.api.normalize import fnv64a_hex
from gpustack_worker.runtime.frozen import thaw
from gpustack_worker.runtime.quantity import parse

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = (
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "RolePlan",
    "RoleProblem",
    "group_of",
    "plan_role",
    "pod_name",
    "queue_levels",
    "replica_pods",
    "reserved_key",
    "template_preferred_count",
)

CPU: Final = "cpu"
MEMORY: Final = "memory"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"

#: Overcommitted requests (``instance-general-resources-overcommit``, GPUStack's values): per accelerated
#: unit 100m CPU per preset core and 128Mi per preset Gi; per general unit 800m CPU and 128Mi; one eighth
#: of the local storage. Limits stay at the preset.
OVERCOMMIT_CPU_MILLI_PER_CORE: Final = 100
OVERCOMMIT_MI_PER_GI: Final = 128
OVERCOMMIT_GENERAL_CPU_MILLI: Final = 800
OVERCOMMIT_GENERAL_MI: Final = 128
OVERCOMMIT_STORAGE_DIVISOR: Final = 8

#: Problem reasons (the deployment's ``Rendered`` condition carries the first one).
NO_INSTANCE_TYPE: Final = "NoInstanceType"
INSTANCE_TYPE_NOT_FOUND: Final = "InstanceTypeNotFound"
UNKNOWN_LEVEL: Final = "UnknownLevel"
INVALID_RESOURCES: Final = "InvalidResources"
INVALID_TEMPLATE: Final = "InvalidTemplate"
RESERVED_TEMPLATE_METADATA: Final = "ReservedTemplateMetadata"

#: Label and annotation domains (and their subdomains) only the render sets: Kueue's, whose keys decide
#: the Workload Kueue builds from the Pods, and the deployment's Pod identity labels.
RESERVED_DOMAINS: Final = (keys.KUEUE_DOMAIN, keys.MODEL_DEPLOYMENT_DOMAIN)


@dataclass(frozen=True, slots=True)
class RoleProblem:
    """Why a role renders no Pods."""

    role: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RolePlan:
    """Everything shared by the Pods of every replica of one role."""

    role: str
    replicas: int
    size: int
    queue: str
    instance_type: str
    level: str | None
    render_hash: str
    #: The rendered Pod without name, group, index, ordinal or node-store terms (a plain dict).
    base: dict[str, Any] = field(repr=False)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def reserved_key(key: str) -> bool:
    """Whether a label or annotation key is the render's alone (a template may not carry it): its prefix
    is a :data:`RESERVED_DOMAINS` domain or a subdomain of one."""
    prefix, slash, _name = key.partition("/")
    if not slash:
        return False
    prefix = prefix.lower()
    return any(prefix == domain or prefix.endswith("." + domain) for domain in RESERVED_DOMAINS)


def _reserved_in(template: Any) -> list[str]:
    """``<key> (label|annotation)`` for every reserved key of a role template's metadata, sorted."""
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    found: list[str] = []
    for field_name, what in (("labels", "label"), ("annotations", "annotation")):
        entries = meta.get(field_name) if isinstance(meta, Mapping) else None
        if isinstance(entries, Mapping):
            found.extend(f"{k} ({what})" for k in entries if reserved_key(str(k)))
    return sorted(found)


def queue_levels(
    queue: Mapping[str, Any] | None,
    flavors: Mapping[str, Mapping[str, Any]],
    topologies: Mapping[str, Mapping[str, Any]],
) -> frozenset[str] | None:
    """Level keys of the hierarchies a ClusterQueue can place on: for every flavor of its resource
    groups, the levels of the Topology the flavor's ``topologyName`` names. None when the queue is
    unknown; a flavor or Topology not (yet) in the cache adds nothing."""
    if queue is None:
        return None
    levels: set[str] = set()
    for group in (queue.get("spec") or {}).get("resourceGroups") or ():
        for ref in group.get("flavors") or ():
            flavor = flavors.get(str(ref.get("name") or ""))
            topology_name = ((flavor or {}).get("spec") or {}).get("topologyName")
            topology = topologies.get(str(topology_name or ""))
            for level in ((topology or {}).get("spec") or {}).get("levels") or ():
                if level.get("nodeLabel"):
                    levels.add(str(level["nodeLabel"]))
    return frozenset(levels)


def _manufacturer(instance_type: Mapping[str, Any]) -> manufacturers.Manufacturer | None:
    detail = ((instance_type.get("status") or {}).get("detail") or {}).get("manufacturer")
    if detail and (found := manufacturers.get(str(detail))) is not None:
        return found
    a_key = str((instance_type.get("spec") or {}).get("acceleratorGroup") or "")
    return manufacturers.get(a_key.split("-", 1)[0]) if a_key else None


def _gi(text: str) -> int:
    return int(text.removesuffix("Gi"))


def _accelerator(
    role: str, resources: Mapping[str, Any], instance_type: Mapping[str, Any]
) -> tuple[int, dict[str, str]] | RoleProblem:
    """(host units, accelerator requests) of the role on the InstanceType, or the problem."""
    count = resources.get("accelerator")
    profile = resources.get("acceleratorPartitionedProfile")
    name = _meta(instance_type).get("name")
    if count is None and not profile:
        return 1, {}
    if count is not None and profile:
        return RoleProblem(
            role, INVALID_RESOURCES, "accelerator and acceleratorPartitionedProfile are exclusive"
        )
    if not (instance_type.get("spec") or {}).get("acceleratable"):
        return RoleProblem(
            role, INVALID_RESOURCES, f"InstanceType {name} is CPU-only: it has no accelerator to request"
        )
    mfr = _manufacturer(instance_type)
    if mfr is None:
        return RoleProblem(role, INVALID_RESOURCES, f"InstanceType {name}: unknown accelerator manufacturer")
    if profile:
        if not mfr.partition_kind:
            return RoleProblem(
                role, INVALID_RESOURCES, f"{mfr.name} accelerators have no partition profiles ({profile})"
            )
        published = manufacturers.publish_profile_name(mfr, str(profile))
        per_profile = keys.partitioned_resource(mfr.resource, f"{mfr.partition_kind}-{published}")
        return 1, {keys.partitioned_resource(mfr.resource): "1", per_profile: "1"}
    value = parse(count)
    if value is None or value <= 0 or value != value.to_integral_value():
        return RoleProblem(
            role, INVALID_RESOURCES, f"accelerator must be a whole number of cards, not {count}"
        )
    cards = int(value)
    return cards, {mfr.resource: str(cards)}


def _host_resources(
    instance_type: Mapping[str, Any], units: int, overcommit: bool
) -> tuple[dict[str, str], dict[str, str]] | None:
    """(requests, limits) of CPU, memory and local storage for ``units`` units of the InstanceType, or
    None when its unit resources are malformed. Limits are the preset (unit × units, the type's
    ``localStorage``); requests equal them, or with overcommit are scaled down as GPUStack scales them:
    an accelerated unit requests 100m CPU per core and 128Mi per Gi, a general unit 800m CPU and 128Mi,
    and local storage one eighth."""
    spec = instance_type.get("spec") or {}
    unit = spec.get("unitResources") or {}
    try:
        cores = int(str(unit.get("cpu")))
        ram_gi = _gi(str(unit.get("ram")))
        storage_gi = _gi(str(spec.get("localStorage")))
    except ValueError:
        return None
    limits = {CPU: str(cores * units), MEMORY: f"{ram_gi * units}Gi", EPHEMERAL_STORAGE: f"{storage_gi}Gi"}
    if not overcommit:
        return dict(limits), limits
    if spec.get("acceleratable"):
        cpu_milli, mem_mi = OVERCOMMIT_CPU_MILLI_PER_CORE * cores, OVERCOMMIT_MI_PER_GI * ram_gi
    else:
        cpu_milli, mem_mi = OVERCOMMIT_GENERAL_CPU_MILLI, OVERCOMMIT_GENERAL_MI
    requests = {
        CPU: f"{cpu_milli * units}m",
        MEMORY: f"{mem_mi * units}Mi",
        EPHEMERAL_STORAGE: f"{storage_gi * 1024 // OVERCOMMIT_STORAGE_DIVISOR}Mi",
    }
    return requests, limits


def _render_base(
    deployment: Mapping[str, Any],
    role: Mapping[str, Any],
    instance_type: Mapping[str, Any],
    queue: str,
    level: str | None,
    units: int,
    accelerator: Mapping[str, str],
    overcommit: bool,
) -> dict[str, Any] | str:
    """The Pod every member of every replica of the role starts from, or why the template is unusable."""
    template = thaw(role.get("template") or {})
    if not isinstance(template, dict):
        return "the template is not an object"
    spec = template.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        return "the template has no containers"
    first = spec["containers"][0]
    if not isinstance(first, dict):
        return "the template's first container is not an object"
    host = _host_resources(instance_type, units, overcommit)
    if host is None:
        return f"InstanceType {_meta(instance_type).get('name')} has malformed unitResources or localStorage"
    requests_host, limits_host = host
    resources = first.setdefault("resources", {})
    if not isinstance(resources, dict):
        return "the template's first container has malformed resources"
    requests = resources.setdefault("requests", {})
    limits = resources.setdefault("limits", {})
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        return "the template's first container has malformed resources"
    requests.update(requests_host)
    requests.update(accelerator)
    limits.update(limits_host)
    limits.update(accelerator)
    found = template.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    role_name = str(role["name"])
    labels[keys.QUEUE_NAME] = queue
    labels[keys.MODEL_DEPLOYMENT_UID] = str(_meta(deployment).get("uid") or "")
    labels[keys.MODEL_DEPLOYMENT_ROLE] = role_name
    annotations[keys.POD_GROUP_TOTAL_COUNT] = str(int(role.get("size") or 1))
    annotations[keys.ROLE_HASH] = role_name
    if level:
        annotations[keys.PODSET_REQUIRED_TOPOLOGY] = level
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": _meta(deployment).get("namespace"),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def _hash(body: Mapping[str, Any]) -> str:
    return fnv64a_hex(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))


def plan_role(
    deployment: Mapping[str, Any],
    role: Mapping[str, Any],
    instance_types: Mapping[str, Mapping[str, Any]],
    levels: Mapping[str, frozenset[str] | None],
    *,
    overcommit: bool = True,
) -> RolePlan | RoleProblem:
    """The role's render, or why it has none.

    ``instance_types`` by name; ``levels`` maps an InstanceType name to :func:`queue_levels` of its
    ClusterQueue (checked only when the role requests a level); ``overcommit`` is the
    ``instance-general-resources-overcommit`` setting (requests scaled down, limits at the preset).
    """
    name = str(role.get("name") or "")
    type_name = role.get("instanceType")
    if not type_name:
        return RoleProblem(name, NO_INSTANCE_TYPE, f"role {name} names no instanceType")
    instance_type = instance_types.get(str(type_name))
    if instance_type is None:
        return RoleProblem(name, INSTANCE_TYPE_NOT_FOUND, f"InstanceType {type_name} not found")
    level = (role.get("topology") or {}).get("requiredLevel")
    if level:
        known = levels.get(str(type_name))
        if known is None or str(level) not in known:
            have = ", ".join(sorted(known or ())) or "none"
            return RoleProblem(
                name,
                UNKNOWN_LEVEL,
                f"requiredLevel {level} is not a level of InstanceType {type_name}'s hierarchy"
                f" (levels: {have})",
            )
    accel = _accelerator(name, role.get("resources") or {}, instance_type)
    if isinstance(accel, RoleProblem):
        return accel
    units, accelerator = accel
    reserved = _reserved_in(role.get("template"))
    if reserved:
        return RoleProblem(
            name,
            RESERVED_TEMPLATE_METADATA,
            f"the template sets {', '.join(reserved)}; keys under "
            f"{' and '.join(RESERVED_DOMAINS)} are the worker's to set (a topology request is "
            "roles[].topology.requiredLevel)",
        )
    queue = keys.local_queue_name(str(type_name))
    base = _render_base(
        deployment, role, instance_type, queue, str(level) if level else None, units, accelerator, overcommit
    )
    if isinstance(base, str):
        return RoleProblem(name, INVALID_TEMPLATE, f"role {name}: {base}")
    return RolePlan(
        role=name,
        replicas=int(role.get("replicas") or 1),
        size=int(role.get("size") or 1),
        queue=queue,
        instance_type=str(type_name),
        level=str(level) if level else None,
        render_hash=_hash(base),
        base=base,
    )


def pod_name(group: str, index: int) -> str:
    """The name of member ``index`` of a pod group."""
    return f"{group}-{index}"


def _owner(deployment: Mapping[str, Any]) -> dict[str, Any]:
    meta = _meta(deployment)
    return {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def group_of(deployment: Mapping[str, Any], plan: RolePlan, replica: int) -> str:
    """The pod group (and Workload) name of ``replica`` of the role at the plan's render."""
    meta = _meta(deployment)
    return keys.pod_group_name(
        str(meta.get("name") or ""), str(meta.get("uid") or ""), plan.role, replica, plan.render_hash
    )


def replica_pods(
    deployment: Mapping[str, Any],
    plan: RolePlan,
    replica: int,
    preferred_terms: Sequence[Mapping[str, Any]] = (),
    *,
    indices: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """The Pods of ``replica`` (all ``size`` members, or only ``indices``), each with the same
    ``preferred_terms`` appended to its preferred node affinity (the node-store terms, decided once for
    the whole replica)."""
    group = group_of(deployment, plan, replica)
    pods: list[dict[str, Any]] = []
    for index in range(plan.size) if indices is None else indices:
        pod = copy.deepcopy(plan.base)
        meta = pod["metadata"]
        meta["name"] = pod_name(group, index)
        meta["ownerReferences"] = [_owner(deployment)]
        meta["labels"].update(
            {
                keys.POD_GROUP_NAME: group,
                keys.POD_GROUP_POD_INDEX: str(index),
                keys.POD_ORDINAL: str(replica),
                keys.RENDER_HASH: plan.render_hash,
            }
        )
        if preferred_terms:
            affinity = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
            preferred = affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
            preferred.extend(copy.deepcopy(list(preferred_terms)))
        pods.append(pod)
    return pods


def template_preferred_count(plan: RolePlan) -> int:
    """How many preferred node-affinity terms the role's own template carries (the node-store terms of a
    created Pod follow them)."""
    affinity = (plan.base.get("spec") or {}).get("affinity") or {}
    return len(
        (affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
