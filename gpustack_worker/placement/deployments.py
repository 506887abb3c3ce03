"""ModelDeployment role replicas → Kueue pod groups, and the deployment's status (its per-role message is
the first thing to read on a Pending group: docs/admission.md, "Reading a Pending group").

Key: ``<namespace>/<name>`` of a ModelDeployment. One reconcile:

1. renders every role (:func:`~gpustack_worker.placement.pods.plan_role`); a role that cannot be
   rendered (unknown InstanceType, a ``requiredLevel`` its queue's hierarchy lacks, a malformed
   request) keeps whatever Pods it has, gets none, and is reported (``Rendered=False``, and a Warning
   Event with the problem's reason, e.g. ``InstanceTypeNotFound`` — once per generation and problem, not
   per reconcile: :func:`render_warning`);
2. decides the Pod writes (:func:`plan_writes`, pure): the missing members of every replica below
   ``replicas`` are created in one pass (Pods are immutable: create-only); every Pod of a replica at
   ``replicas`` or above, of a role the spec no longer has, or of a replica whose render hash changed is
   deleted — only the affected replica groups; a replaced replica's new group is created once the old
   group's Pods are gone, so the two never hold quota at once. New Pods of a node-delivered model carry
   the node-store preference terms (:mod:`~gpustack_worker.placement.modelstores`), decided once per
   replica: the missing members of a partly created replica copy the terms of its existing members, so
   every member carries the same term (Kueue builds the PodSet from one member);
3. writes ``status`` through ``/status`` (server-side apply as :data:`FIELD_MANAGER`,
   :func:`status_body`, pure): per role ``replicas`` (groups with all ``size`` Pods at the current
   render), ``admittedReplicas`` (their Workload is ``Admitted``), ``readyReplicas`` (all Pods
   ``Ready``; no kubelet runs on the local control plane, so there it stays 0) and a ``message`` naming
   each waiting replica — Kueue's ``QuotaReserved=False`` message verbatim, prefixed with
   ``role <r> replica <i>:``; conditions ``Rendered``, ``Admitted`` and ``Placeable``. The joint check's
   ``QuotaReserved`` condition is another manager's and is left alone.

``Placeable`` relays Gate 3's record (:mod:`~gpustack_worker.placement.gate3_parking`): ``False``/
``NeverFits`` while a replica group's Workload asks more than any node of its pool has free as the fleet
stands — the message names each such group, the largest fit and its node, and whether Gate 3 still
retries it or has stopped (parked) until the fleet changes; ``True``/``Fits`` otherwise (no group is known
to fall short: one Gate 3 has not judged yet counts as fitting).

The Workload of a group is found by name: Kueue names a pod group's Workload after the group
(``kueue.x-k8s.io/pod-group-name``), in the group's namespace.
"""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.placement import gate3_parking, modelstores, pods
from gpustack_worker.runtime import conditions
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import ApiError, Conflict, NotFound
from gpustack_worker.runtime.conditions import FALSE, TRUE, Condition
from gpustack_worker.runtime.controller import Controller, Result, semantic_changed
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.mappers import all_keys, by_owner
from gpustack_worker.runtime.queue import settings_queue

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource

__all__ = (
    "ADMITTED",
    "FIELD_MANAGER",
    "PLACEABLE",
    "RENDERED",
    "ModelDeployments",
    "Writes",
    "plan_writes",
    "render_warning",
    "role_statuses",
    "status_body",
)

#: The field manager of the Pods this controller creates and of its status fields.
FIELD_MANAGER: Final = "gpustack-model-deployment"
#: Deployment conditions this controller owns.
RENDERED: Final = "Rendered"
ADMITTED: Final = "Admitted"
PLACEABLE: Final = "Placeable"
NEVER_FITS: Final = "NeverFits"
FITS: Final = "Fits"
#: ``status.roles[].message`` bound (the CRD's maxLength).
MESSAGE_MAX: Final = 32768
#: Queue, flavor and Topology changes re-render every deployment at most once a second.
COALESCE_S: Final = 1.0
#: Pod cache indexes: the deployment uid; ``<namespace>/<pod group>``.
BY_UID: Final = "modeldeployment-uid"
BY_GROUP: Final = "modeldeployment-group"
_INVALID: Final = 422
_log = structlog.get_logger("gpustack_worker.placement")


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def _int_label(pod: Mapping[str, Any], key: str) -> int | None:
    try:
        return int(_labels(pod).get(key, ""))
    except ValueError:
        return None


def _preferred(pod: Mapping[str, Any]) -> list[Any]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ())


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- pure: which Pods to create and delete ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the node-store preference reads (only when the model is node-delivered)."""

    digests: tuple[str, ...] = ()
    stores: Sequence[Mapping[str, Any]] = ()
    csinodes: Sequence[Mapping[str, Any]] = ()
    hostnames: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Writes:
    """The Pod writes of one reconcile."""

    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Mapping[str, Any]] = field(default_factory=list)


def own_pods(deployment: Mapping[str, Any], cached: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The cached Pods that belong to this deployment object (by its uid label)."""
    uid = _meta(deployment).get("uid")
    return [p for p in cached if uid and _labels(p).get(keys.MODEL_DEPLOYMENT_UID) == uid]


def _by_replica(members: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    out: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for pod in members:
        role = _labels(pod).get(keys.MODEL_DEPLOYMENT_ROLE)
        replica = _int_label(pod, keys.POD_ORDINAL)
        if role is None or replica is None:
            continue
        out.setdefault((role, replica), []).append(pod)
    return out


def plan_writes(
    deployment: Mapping[str, Any],
    plans: Mapping[str, pods.RolePlan | pods.RoleProblem],
    members: Sequence[Mapping[str, Any]],
    stores: StoreView,
) -> Writes:
    """The Pods to create and delete (see the module docstring). ``plans`` by role name (every role of
    the spec); ``members`` = :func:`own_pods`."""
    writes = Writes()
    groups = _by_replica(members)
    for (role, replica), group in sorted(groups.items()):
        plan = plans.get(role)
        if plan is None or (isinstance(plan, pods.RolePlan) and replica >= plan.replicas):
            writes.delete.extend(p for p in group if not _terminating(p))
    for role, plan in plans.items():
        if not isinstance(plan, pods.RolePlan):
            continue
        terms: list[dict[str, Any]] | None = None
        for replica in range(plan.replicas):
            group = groups.get((role, replica), [])
            stale = [p for p in group if _labels(p).get(keys.RENDER_HASH) != plan.render_hash]
            if stale:
                writes.delete.extend(p for p in stale if not _terminating(p))
                continue
            present = {_int_label(p, keys.POD_GROUP_POD_INDEX) for p in group}
            missing = [i for i in range(plan.size) if i not in present]
            if not missing:
                continue
            if group:
                replica_terms = _plain(_preferred(group[0])[pods.template_preferred_count(plan) :])
            else:
                if terms is None:
                    terms = modelstores.store_terms(
                        stores.digests,
                        stores.stores,
                        stores.csinodes,
                        pod_annotations=plan.base["metadata"]["annotations"],
                        hostnames=stores.hostnames,
                    )
                replica_terms = terms
            writes.create.extend(pods.replica_pods(deployment, plan, replica, replica_terms, indices=missing))
    return writes


# --- pure: the status -----------------------------------------------------------------------------------


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    return conditions.find((obj or {}).get("status", {}).get("conditions"), type_)


def _waiting_reason(group: str, workload: Mapping[str, Any] | None) -> str:
    """Why an assembled replica group is not admitted, from its Workload."""
    if workload is None:
        return f"waiting for Kueue to create Workload {group}"
    reserved = _condition(workload, "QuotaReserved")
    if reserved is None:
        return f"Workload {group} not evaluated by Kueue yet"
    if reserved.get("status") != TRUE:
        return str(reserved.get("message") or f"Workload {group} has no quota reservation")
    checks = [
        f"{c.get('name')} {c.get('state')}" + (f": {c['message']}" if c.get("message") else "")
        for c in (workload.get("status") or {}).get("admissionChecks") or ()
        if c.get("state") != "Ready"
    ]
    if checks:
        return "quota reserved; admission checks: " + "; ".join(checks)
    return "quota reserved; waiting for admission"


def _bounded(lines: Sequence[str]) -> str | None:
    if not lines:
        return None
    out: list[str] = []
    size = 0
    for n, line in enumerate(lines):
        tail = f"\n... and {len(lines) - n} more"
        if size + len(line) + 1 + len(tail) > MESSAGE_MAX:
            out.append(tail.lstrip("\n"))
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[:MESSAGE_MAX]


@dataclass(frozen=True, slots=True)
class RoleTally:
    """One role's status entry and how many replicas it wants."""

    entry: dict[str, Any]
    wanted: int
    admitted: int
    #: ``role <r> replica <i>: <Gate 3's record>`` of each group that never fits as the fleet stands.
    never_fits: tuple[str, ...] = ()


def role_statuses(
    spec_roles: Sequence[Mapping[str, Any]],
    plans: Mapping[str, pods.RolePlan | pods.RoleProblem],
    members: Sequence[Mapping[str, Any]],
    workloads: Mapping[str, Mapping[str, Any]],
    create_errors: Mapping[str, str] | None = None,
) -> list[RoleTally]:
    """Each role's ``status.roles[]`` entry. ``workloads`` by name (the deployment's namespace);
    ``create_errors`` by role: the API server's refusal of a Pod of that role in this reconcile."""
    groups = _by_replica(members)
    out: list[RoleTally] = []
    for role in spec_roles:
        name = str(role.get("name") or "")
        plan = plans.get(name)
        wanted = int(role.get("replicas") or 1)
        size = int(role.get("size") or 1)
        render = plan.render_hash if isinstance(plan, pods.RolePlan) else None
        lines: list[str] = []
        if isinstance(plan, pods.RoleProblem):
            lines.append(f"role {name}: {plan.message}")
        if create_errors and name in create_errors:
            lines.append(f"role {name}: Pod creation refused: {create_errors[name]}")
        existing = admitted = ready = 0
        never_fits: list[str] = []
        for replica in range(wanted):
            group = [p for p in groups.get((name, replica), []) if not _terminating(p)]
            current = [p for p in group if render is None or _labels(p).get(keys.RENDER_HASH) == render]
            if render is not None and len(current) < len(group):
                lines.append(f"role {name} replica {replica}: replacing the Pods of an earlier render")
                continue
            if len(current) < size:
                if render is not None:
                    lines.append(f"role {name} replica {replica}: {len(current)} of {size} Pods created")
                continue
            existing += 1
            group_name = _labels(current[0]).get(keys.POD_GROUP_NAME, "")
            workload = workloads.get(group_name)
            record = gate3_parking.read_record(workload) if workload is not None else None
            if record is not None:
                never_fits.append(f"role {name} replica {replica}: {record.message}")
            if conditions.is_true((workload or {}).get("status", {}).get("conditions"), "Admitted"):
                admitted += 1
                if all(
                    conditions.is_true((p.get("status") or {}).get("conditions"), "Ready") for p in current
                ):
                    ready += 1
                continue
            lines.append(f"role {name} replica {replica}: {_waiting_reason(group_name, workload)}")
        entry: dict[str, Any] = {
            "name": name,
            "replicas": existing,
            "admittedReplicas": admitted,
            "readyReplicas": ready,
        }
        message = _bounded(lines)
        if message is not None:
            entry["message"] = message
        out.append(RoleTally(entry=entry, wanted=wanted, admitted=admitted, never_fits=tuple(never_fits)))
    return out


def placeable(tallies: Sequence[RoleTally], generation: int | None) -> Condition:
    """``Placeable``: ``False``/``NeverFits`` naming every group Gate 3 found short of the fleet, else
    ``True``/``Fits``."""
    lines = [line for t in tallies for line in t.never_fits]
    message = _bounded(lines)
    if message is not None:
        return Condition(PLACEABLE, FALSE, NEVER_FITS, message, generation)
    return Condition(
        PLACEABLE,
        TRUE,
        FITS,
        "no replica group is known to ask more than any node of its pool has free",
        generation,
    )


def render_warning(
    deployment: Mapping[str, Any], plans: Mapping[str, pods.RolePlan | pods.RoleProblem]
) -> tuple[str, str] | None:
    """``(reason, note)`` of the Warning Event a deployment whose roles do not all render gets, or None:
    none when every role renders, nor when its status already reports this very problem for this
    generation (``Rendered=False``, same reason and message, ``observedGeneration`` current) — the Event
    was posted then, so a reconcile repeats nothing. The note names the generation, so the same problem in
    a new generation is a new Event (the processes only create Events)."""
    problems = [p for p in plans.values() if isinstance(p, pods.RoleProblem)]
    if not problems:
        return None
    reason = problems[0].reason
    message = "; ".join(f"role {p.role}: {p.message}" for p in problems)
    generation = _meta(deployment).get("generation")
    status = deployment.get("status") or {}
    shown = conditions.find(status.get("conditions"), RENDERED) or {}
    if (
        shown.get("status") == FALSE
        and shown.get("reason") == reason
        and shown.get("message") == message
        and generation is not None
        and status.get("observedGeneration") == generation
    ):
        return None
    return reason, f"generation {generation}: {message}"


def status_body(
    deployment: Mapping[str, Any],
    plans: Mapping[str, pods.RolePlan | pods.RoleProblem],
    members: Sequence[Mapping[str, Any]],
    workloads: Mapping[str, Mapping[str, Any]],
    *,
    now: dt.datetime,
    create_errors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The status apply body of the deployment (roles, observedGeneration, our two conditions)."""
    meta = _meta(deployment)
    generation = meta.get("generation")
    spec_roles = list((deployment.get("spec") or {}).get("roles") or ())
    tallies = role_statuses(spec_roles, plans, members, workloads, create_errors)
    problems = [p for p in plans.values() if isinstance(p, pods.RoleProblem)]
    gen = int(generation) if generation is not None else None
    if problems:
        rendered = Condition(
            RENDERED,
            FALSE,
            problems[0].reason,
            "; ".join(f"role {p.role}: {p.message}" for p in problems),
            gen,
        )
    else:
        rendered = Condition(RENDERED, TRUE, "Rendered", "every role renders its Pods", gen)
    wanted = sum(t.wanted for t in tallies)
    done = sum(t.admitted for t in tallies)
    summary = f"{done} of {wanted} replica groups admitted"
    admitted = (
        Condition(ADMITTED, TRUE, "Admitted", summary, gen)
        if done == wanted and not problems
        else Condition(ADMITTED, FALSE, "Pending", summary, gen)
    )
    current = (deployment.get("status") or {}).get("conditions")
    status: dict[str, Any] = {
        "roles": [t.entry for t in tallies],
        "conditions": conditions.for_apply(current, [rendered, admitted, placeable(tallies, gen)], now=now),
    }
    if gen is not None:
        status["observedGeneration"] = gen
    return {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "status": status,
    }


# --- the thin step and its wiring --------------------------------------------------------------------


def _uid_index(obj: Mapping[str, Any]) -> list[str]:
    uid = _labels(obj).get(keys.MODEL_DEPLOYMENT_UID)
    return [uid] if uid else []


def _group_index(obj: Mapping[str, Any]) -> list[str]:
    group = _labels(obj).get(keys.POD_GROUP_NAME)
    ns = _meta(obj).get("namespace")
    return [f"{ns}/{group}"] if group and ns else []


def _deployment_view(obj: Any) -> Any:
    """What a reconcile reads of its own deployment besides its status (our own status writes echo)."""
    meta = obj.get("metadata") or {}
    return meta.get("generation"), meta.get("uid"), meta.get("deletionTimestamp"), obj.get("spec")


def _workload_view(obj: Any) -> Any:
    status = obj.get("status") or {}
    record = ((obj.get("metadata") or {}).get("annotations") or {}).get(gate3_parking.RECORD)
    return status.get("conditions"), status.get("admissionChecks"), record


def _pod_view(obj: Any) -> Any:
    meta = obj.get("metadata") or {}
    ready = conditions.find((obj.get("status") or {}).get("conditions"), "Ready")
    return meta.get("labels"), meta.get("deletionTimestamp"), (ready or {}).get("status")


def _overcommit(settings: RuntimeSettings) -> bool:
    if isinstance(settings, ChainSettings):
        return bool(settings.instance_general_resources_overcommit)
    return True


def _delivery_mode(settings: RuntimeSettings) -> str:
    if isinstance(settings, ChainSettings):
        return str(settings.model_artifact_delivery_mode)
    return modelstores.ENGINE


class ModelDeployments:
    """The ModelDeployment controller over one informer registry (``placement-modeldeployments``).

    Watches: its ModelDeployments (not status-only changes); its Pods (by the controller owner
    reference); Workloads (mapped through the Pods of the group they are named after); InstanceTypes,
    ClusterQueues, ResourceFlavors and Topologies (every deployment, coalesced for a second). The node
    stores, CSINodes and Nodes are read at creation only, never watched: a download finishing later must
    change nothing.
    """

    def __init__(
        self,
        client: Client,
        registry: InformerRegistry,
        settings: SettingsSource[RuntimeSettings],
        *,
        system_namespace: str = kinds.SYSTEM_NAMESPACE,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.client = client
        self.settings = settings
        self.system_namespace = system_namespace
        self.now = now
        reg = registry
        self.deployments = reg.informer(kinds.MODEL_DEPLOYMENT, field_manager=FIELD_MANAGER)
        self.pods = reg.informer(
            kinds.POD,
            label_selector=keys.MODEL_DEPLOYMENT_UID,
            indexers={BY_UID: _uid_index, BY_GROUP: _group_index},
        )
        self.workloads = reg.informer(kinds.WORKLOAD)
        self.types = reg.informer(kinds.INSTANCE_TYPE)
        by_type = keys.RESOURCE_TYPE + "={}"
        self.queues = reg.informer(
            kinds.CLUSTER_QUEUE, label_selector=by_type.format(keys.TYPE_INSTANCE_TYPES)
        )
        self.flavors = reg.informer(kinds.RESOURCE_FLAVOR, label_selector=by_type.format(keys.TYPE_NODES))
        self.topologies = reg.informer(kinds.TOPOLOGY, label_selector=by_type.format(keys.TYPE_TOPOLOGY))
        self.stores = reg.informer(kinds.NODE_MODEL_STORE)
        self.csinodes = reg.informer(kinds.CSI_NODE)
        self.nodes = reg.informer(kinds.NODE)
        self.status_applier = Applier(client, FIELD_MANAGER, cache=self.deployments)
        #: Warning Events on deployments whose roles do not render (:func:`render_warning`).
        self.events = EventRecorder(
            client, controller=keys.MODEL_DEPLOYMENT_CONTROLLER, instance=socket.gethostname()
        )
        #: ``(uid, note)`` of the render warnings posted: a reconcile before the status write is cached
        #: does not post the same one again.
        self._warned: set[tuple[str, str]] = set()
        boot = settings.current
        self.controller = Controller(
            "placement-modeldeployments",
            self.reconcile,
            settings_queue("placement-modeldeployments", boot),
            workers=boot.controller_workers,
        )
        every = all_keys(self.deployments.store)
        self.controller.watch(self.deployments, predicates=[semantic_changed(_deployment_view)])
        self.controller.watch(
            self.pods,
            mapper=by_owner(kinds.MODEL_DEPLOYMENT, controller_only=True),
            predicates=[semantic_changed(_pod_view)],
        )
        self.controller.watch(
            self.workloads, mapper=self._workload_owner, predicates=[semantic_changed(_workload_view)]
        )
        for informer in (self.types, self.queues, self.flavors, self.topologies):
            self.controller.watch(informer, mapper=every, delay=lambda: COALESCE_S)
        settings.subscribe(lambda _s: self.resync())

    @property
    def controllers(self) -> list[Controller]:
        return [self.controller]

    def start_keys(self) -> None:
        """Every deployment (nothing is a singleton here; the informer's ADDED events do the same)."""
        self.resync()

    def resync(self) -> None:
        self.controller.enqueue_all(self.deployments.store.keys())

    def _workload_owner(self, workload: Any) -> list[str]:
        meta = _meta(workload)
        found: list[str] = []
        owner_of = by_owner(kinds.MODEL_DEPLOYMENT, controller_only=True)
        for pod in self.pods.store.by_index(BY_GROUP, f"{meta.get('namespace')}/{meta.get('name')}"):
            for key in owner_of(pod):
                if key not in found:
                    found.append(key)
        return found

    # -- reading the caches ------------------------------------------------------------------------------

    def _levels(self, type_name: str) -> frozenset[str] | None:
        queue = self.queues.store.get(type_name)
        flavors: dict[str, Mapping[str, Any]] = {}
        topologies: dict[str, Mapping[str, Any]] = {}
        for group in ((queue or {}).get("spec") or {}).get("resourceGroups") or ():
            for ref in group.get("flavors") or ():
                name = str(ref.get("name") or "")
                flavor = self.flavors.store.get(name)
                if flavor is None:
                    continue
                flavors[name] = flavor
                topology_name = str((flavor.get("spec") or {}).get("topologyName") or "")
                topology = self.topologies.store.get(topology_name)
                if topology is not None:
                    topologies[topology_name] = topology
        return pods.queue_levels(queue, flavors, topologies)

    def _store_view(self, deployment: Mapping[str, Any]) -> StoreView:
        model = (deployment.get("spec") or {}).get("model")
        digests = modelstores.delivered_digests(model, _delivery_mode(self.settings.current))
        if not digests:
            return StoreView()
        stores = self.stores.store.list()
        hostnames: dict[str, str] = {}
        for store in stores:
            name = str(_meta(store).get("name") or "")
            node = self.nodes.store.get(name)
            hostname = _labels(node).get(keys.HOSTNAME) if node is not None else None
            if hostname:
                hostnames[name] = hostname
        return StoreView(digests, stores, self.csinodes.store.list(), hostnames)

    # -- the reconcile -----------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result:
        deployment = self.deployments.store.get(key)
        if deployment is None or _meta(deployment).get("deletionTimestamp"):
            return Result.done()  # the Pods go with it (controller owner reference, garbage collector)
        namespace = str(_meta(deployment).get("namespace") or "")
        uid = str(_meta(deployment).get("uid") or "")
        roles = list((deployment.get("spec") or {}).get("roles") or ())
        type_names = {str(r.get("instanceType")) for r in roles if r.get("instanceType")}
        instance_types = {n: t for n in type_names if (t := self.types.store.get(n)) is not None}
        levels = {n: self._levels(n) for n in type_names}
        overcommit = _overcommit(self.settings.current)
        plans = {
            str(r.get("name")): pods.plan_role(deployment, r, instance_types, levels, overcommit=overcommit)
            for r in roles
            if r.get("name")
        }
        members = own_pods(deployment, self.pods.store.by_index(BY_UID, uid))
        writes = plan_writes(deployment, plans, members, self._store_view(deployment))
        create_errors: dict[str, str] = {}
        failures: list[ApiError] = []
        for pod in writes.delete:
            try:
                await self.client.delete(
                    kinds.POD, str(_meta(pod)["name"]), namespace, uid=str(_meta(pod).get("uid") or "")
                )
            except Conflict:
                pass  # a different Pod of that name now: the next event re-decides
            except ApiError as exc:
                failures.append(exc)
        for body in writes.create:
            role = str(body["metadata"]["labels"][keys.MODEL_DEPLOYMENT_ROLE])
            try:
                await self.client.create(kinds.POD, body, namespace, field_manager=FIELD_MANAGER)
            except Conflict:
                pass  # already exists (the cache lags our own create): nothing to do
            except ApiError as exc:
                if exc.status == _INVALID or exc.status == 403:
                    create_errors.setdefault(role, str(exc))
                    _log.warning("pod refused", deployment=key, pod=body["metadata"]["name"], error=str(exc))
                else:
                    failures.append(exc)
        workloads: dict[str, Mapping[str, Any]] = {}
        for pod in members:
            group = _labels(pod).get(keys.POD_GROUP_NAME)
            if group and group not in workloads:
                found = self.workloads.store.get(f"{namespace}/{group}")
                if found is not None:
                    workloads[group] = found
        warning = render_warning(deployment, plans)
        if warning is not None and (uid, warning[1]) not in self._warned:
            self._warned.add((uid, warning[1]))
            self.events.warning(deployment, reason=warning[0], action="Render", note=warning[1])
        body = status_body(deployment, plans, members, workloads, now=self.now(), create_errors=create_errors)
        try:
            await self.status_applier.apply_status(kinds.MODEL_DEPLOYMENT, body, deployment)
        except NotFound:
            return Result.done()
        if failures:
            raise failures[0]
        return Result.done()
