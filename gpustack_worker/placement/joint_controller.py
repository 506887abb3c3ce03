"""The joint AdmissionCheck's controllers: the thin I/O around :mod:`gpustack_worker.placement.joint`.

Three controllers over shared informers (Workloads and ModelDeployments in every namespace, the Pods of
ModelDeployments — label ``modeldeployment.gpustack.ai/uid`` — and the AdmissionChecks), all writing as
the check's field owner ``gpustack-model-deployment-joint`` (the check's own name, as GPUStack's check
writes):

- ``joint-check`` [``gpustack-model-deployment-joint``]: marks the AdmissionCheck ``Active`` (condition
  ``Active=True``, reason ``Ready``) through ``/status`` once the chain has applied it; from then on the
  chain references it from every queue;
- ``joint-verdicts`` [Workload ``namespace/name``]: this check's ``status.admissionChecks`` entry of a
  Workload that holds a reservation (:func:`~gpustack_worker.placement.joint.verdict`). Woken by the
  Workload itself **and by every sibling group** (a change on one group's Workload enqueues the other
  groups' Workloads of the same deployment), by its owner Pods, and by its deployment's spec (replicas);
- ``joint-deployments`` [ModelDeployment ``namespace/name``]: the deployment's ``QuotaReserved``
  condition (``Reserved`` / ``Waiting`` / ``Parked``) and ``status.hold``, requeued for the moment the
  set parks; parking deactivates the set's Workloads and a retry reactivates them
  (:func:`~gpustack_worker.placement.joint.decide`). Woken by the deployment's spec and its retry
  annotation, and by its Workloads and Pods.

How the entry is written, and why it does not fight Kueue. ``status.admissionChecks`` is a list keyed by
``name`` (Kueue v0.19 ``+listType=map``), so a server-side apply of the one item named after this check
owns only that item's fields. Kueue's scheduler applies the whole list with its own manager
(``kueue-admission``, forced) from what it read, so it co-owns our item while the values agree; where it
changes one — the reset to ``Pending`` on eviction — it takes that field, and we write again only when a
verdict is due (never for an evicted Workload). Writing over that reset is Kueue's protocol, not a repair:
the Workload Applier's ``expected_change`` (:func:`~gpustack_worker.placement.checks.kueue_reset`) leaves it
unreported, while any other manager's change of the entry is written back with a ``FieldsRepaired`` Warning
Event on the Workload. Kueue adds and drops items with a plain status update,
which removes an item whoever owns it. Each apply carries the Workload's ``resourceVersion`` as a
precondition (as Kueue's own check controllers do): a verdict computed from a stale Workload — say,
``Ready`` for one Kueue has just evicted and reset — is refused with 409 instead of surviving the reset,
and the key is retried once the cache has caught up. Applies are skipped when the cached object already
says the same (the runtime's exact no-op check), so a converged set costs no writes.

On the ModelDeployment the check owns only the ``QuotaReserved`` condition (a server-side apply of
``status.conditions`` keyed by ``type``, its own manager) and ``status.hold``; the deployments controller
owns ``status.roles`` and its own conditions under another manager, so neither removes the other's
fields. That apply carries the deployment's ``resourceVersion``: a park or retry decided from a stale
deployment (one whose spec or retry annotation has moved on) is refused and decided again.

Parking and retry on the Workloads. The check writes one field of a Workload's spec, ``spec.active``
(server-side apply, forced — Kueue created the Workload with ``active`` set — with the Workload's
``resourceVersion`` as precondition). ``false`` makes Kueue evict the Workload (reason
``Deactivated``) and, the pod group's Pods still being gated, clear its reservation: the quota and the
topology domain are free. Kueue's Pod integration neither deletes gated Pods nor reactivates a Workload,
so the set stays released until the check reactivates it. The order makes a restart safe: a park is
recorded in ``status.hold`` before any Workload is deactivated (a parked set re-deactivates whatever is
still active, a Workload created since included), and a retry reactivates every Workload before the
park is cleared (an interrupted retry is simply decided again).

The wall clock (``clock``) decides parking and the entry's ``lastTransitionTime``; tests inject it.
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement import joint
from gpustack_worker.placement.checks import (
    CONFLICT_RETRY_S,
    WORKLOAD_MANAGERS,
    kueue_reset,
    mark_active,
    repair_reporter,
    workload_patch,
)
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Conflict, NotFound
from gpustack_worker.runtime.conditions import for_apply
from gpustack_worker.runtime.controller import Controller, Result, generation_changed, semantic_changed
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.indexers import BY_OWNER_UID, owner_uids
from gpustack_worker.runtime.metrics import PARKED_SETS
from gpustack_worker.runtime.queue import settings_queue
from gpustack_worker.runtime.store import object_key

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource

__all__ = ("CHECK_KEY", "FIELD_MANAGER", "POD_SELECTOR", "JointCheck")

#: The check's field owner on Workloads, the AdmissionCheck's status and ModelDeployments: the check's
#: own name.
FIELD_MANAGER: Final = keys.JOINT_CHECK
#: The singleton key of the ``joint-check`` controller.
CHECK_KEY: Final = keys.JOINT_CHECK
#: Only a deployment's Pods matter (every one carries the deployment's uid label); other Pods are not
#: cached, so a Workload owned by Pods this cache does not hold is foreign.
POD_SELECTOR: Final = keys.MODEL_DEPLOYMENT_UID
#: Pod index: the uid of the ModelDeployment that controls the Pod.
BY_DEPLOYMENT_UID: Final = "joint-deployment-uid"
ACTIVE_MESSAGE: Final = "the joint check controller gives verdicts"

_log = structlog.get_logger("gpustack_worker.placement.joint")


def _deployment_uid(pod: Mapping[str, Any]) -> list[str]:
    """Index: the uid of the Pod's controlling ModelDeployment."""
    ref = joint.deployment_controller(pod)
    return [ref.uid] if ref is not None else []


def _workload_view(obj: Any) -> Any:
    """What a verdict reads from a Workload (its own and its siblings'): not Kueue's other status."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    entry = joint.check_entry(obj) or {}
    return (
        tuple(str(ref.get("uid")) for ref in meta.get("ownerReferences") or ()),
        meta.get("deletionTimestamp"),
        (obj.get("spec") or {}).get("active"),
        tuple((c.get("type"), c.get("status")) for c in status.get("conditions") or ()),
        (entry.get("state"), entry.get("message"), entry.get("lastTransitionTime")),
    )


def _deployment_view(obj: Any) -> Any:
    """What the deployment's decision reads from the deployment itself: its spec and the retry request."""
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), (meta.get("annotations") or {}).get(keys.JOINT_RETRY))


def _pod_view(obj: Any) -> Any:
    meta = obj.get("metadata") or {}
    return (meta.get("labels"), meta.get("ownerReferences"))


class JointCheck:
    """The joint check's controllers over one informer registry."""

    def __init__(
        self,
        client: Client,
        registry: InformerRegistry,
        settings: SettingsSource[RuntimeSettings],
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.clock = clock
        boot = settings.current
        self.workloads = registry.informer(
            kinds.WORKLOAD,
            field_manager=WORKLOAD_MANAGERS,
            indexers={BY_OWNER_UID: owner_uids},
        )
        self.pods = registry.informer(
            kinds.POD, label_selector=POD_SELECTOR, indexers={BY_DEPLOYMENT_UID: _deployment_uid}
        )
        self.deployments = registry.informer(kinds.MODEL_DEPLOYMENT, field_manager=FIELD_MANAGER)
        PARKED_SETS.watch(self.deployments.store, joint.parked_set)
        self.checks = registry.informer(kinds.ADMISSION_CHECK, field_manager=FIELD_MANAGER)
        #: The Warning Event posted once per parking (on the ModelDeployment), and per repaired edit of the
        #: check's entry (on the Workload).
        self.events = EventRecorder(client, controller=keys.JOINT_CONTROLLER, instance=socket.gethostname())
        self.workload_applier = Applier(
            client,
            FIELD_MANAGER,
            cache=self.workloads,
            on_repair=repair_reporter(self.events, keys.JOINT_CHECK),
            expected_change=kueue_reset(keys.JOINT_CHECK),
        )
        self.deployment_applier = Applier(client, FIELD_MANAGER, cache=self.deployments)
        self.check_applier = Applier(client, FIELD_MANAGER, cache=self.checks)

        def controller(name: str, reconcile: Callable[[str], Any]) -> Controller:
            return Controller(name, reconcile, settings_queue(name, boot), workers=boot.controller_workers)

        self.check_ctl = controller("joint-check", self.reconcile_check)
        self.verdict_ctl = controller("joint-verdicts", self.reconcile_workload)
        self.deployment_ctl = controller("joint-deployments", self.reconcile_deployment)

        self.check_ctl.watch(self.checks, mapper=self._check_key)
        verdict_inputs = [semantic_changed(_workload_view)]
        self.verdict_ctl.watch(self.workloads, mapper=self._workload_and_siblings, predicates=verdict_inputs)
        self.verdict_ctl.watch(
            self.pods, mapper=self._owned_workloads, predicates=[semantic_changed(_pod_view)]
        )
        self.verdict_ctl.watch(
            self.deployments, mapper=self._deployment_workloads, predicates=[generation_changed]
        )
        self.deployment_ctl.watch(self.deployments, predicates=[semantic_changed(_deployment_view)])
        self.deployment_ctl.watch(self.workloads, mapper=self._deployment_key, predicates=verdict_inputs)
        self.deployment_ctl.watch(
            self.pods, mapper=self._pod_deployment_key, predicates=[semantic_changed(_pod_view)]
        )

    @property
    def controllers(self) -> list[Controller]:
        return [self.check_ctl, self.verdict_ctl, self.deployment_ctl]

    def start_keys(self) -> None:
        """Keys that exist without any event: the AdmissionCheck singleton."""
        self.check_ctl.enqueue_all([CHECK_KEY])

    def resync(self) -> None:
        """Enqueue every key of every controller (tests moving the injected clock)."""
        self.check_ctl.enqueue_all([CHECK_KEY])
        self.verdict_ctl.enqueue_all(self.workloads.store.keys())
        self.deployment_ctl.enqueue_all(self.deployments.store.keys())

    # -- cache reads -------------------------------------------------------------------------------------

    def _pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        pod: Mapping[str, Any] | None = self.pods.store.get(kinds.POD.key(name, namespace))
        return pod

    def _deployment(self, key: str) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = self.deployments.store.get(key)
        return found

    def owner(self, workload: Mapping[str, Any]) -> joint.Owner:
        return joint.owner_of(workload, self._pod, self._deployment)

    def workloads_of(self, deployment_uid: str) -> list[Mapping[str, Any]]:
        """Every cached Workload owned by the deployment or by one of its Pods."""
        found: dict[str, Mapping[str, Any]] = {}
        for workload in self.workloads.store.by_index(BY_OWNER_UID, deployment_uid):
            found[object_key(workload)] = workload
        for pod in self.pods.store.by_index(BY_DEPLOYMENT_UID, deployment_uid):
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            for workload in self.workloads.store.by_index(BY_OWNER_UID, uid) if uid else ():
                found[object_key(workload)] = workload
        return [found[k] for k in sorted(found)]

    def groups(
        self, deployment: Mapping[str, Any], ref: joint.OwnerRef
    ) -> list[tuple[Mapping[str, Any], str | None]]:
        """The deployment's Workloads that resolve to it, each with its role."""
        out = []
        for workload in self.workloads_of(ref.uid):
            if self.owner(workload) != ref:
                continue
            out.append((workload, joint.role_of(workload, deployment, joint.owner_pods(workload, self._pod))))
        return out

    # -- mappers -------------------------------------------------------------------------------------------

    @staticmethod
    def _check_key(obj: Any) -> Iterable[str]:
        return (CHECK_KEY,) if (obj.get("metadata") or {}).get("name") == CHECK_KEY else ()

    def _workload_and_siblings(self, obj: Any) -> Iterable[str]:
        keys_ = [object_key(obj)]
        owner = self.owner(obj)
        if isinstance(owner, joint.OwnerRef):
            keys_ += [object_key(w) for w in self.workloads_of(owner.uid) if object_key(w) != keys_[0]]
        return keys_

    def _owned_workloads(self, pod: Any) -> Iterable[str]:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        return [object_key(w) for w in self.workloads.store.by_index(BY_OWNER_UID, uid)] if uid else []

    def _deployment_workloads(self, deployment: Any) -> Iterable[str]:
        uid = str((deployment.get("metadata") or {}).get("uid") or "")
        return [object_key(w) for w in self.workloads_of(uid)] if uid else []

    def _deployment_key(self, workload: Any) -> Iterable[str]:
        owner = self.owner(workload)
        return (owner.key,) if isinstance(owner, joint.OwnerRef) else ()

    @staticmethod
    def _pod_deployment_key(pod: Any) -> Iterable[str]:
        ref = joint.deployment_controller(pod)
        return (ref.key,) if ref is not None else ()

    # -- reconciles ----------------------------------------------------------------------------------------

    async def reconcile_check(self, key: str) -> Result:
        """Mark the AdmissionCheck Active (once the chain has applied it)."""
        await mark_active(self.check_applier, self.checks.store.get(key), ACTIVE_MESSAGE, self.clock())
        return Result.done()

    async def reconcile_workload(self, key: str) -> Result:
        """Write this check's verdict on one Workload (nothing when it is not ours to judge)."""
        workload = self.workloads.store.get(key)
        if workload is None or not joint.needs_verdict(workload):
            return Result.done()
        owner = self.owner(workload)
        if isinstance(owner, joint.Unresolved):
            _log.debug("joint check: no verdict", workload=key, reason=owner.reason)
            return Result.done()
        deployment = self._deployment(owner.key) if isinstance(owner, joint.OwnerRef) else None
        groups = self.groups(deployment, owner) if deployment and isinstance(owner, joint.OwnerRef) else []
        answer = joint.verdict(workload, owner, deployment, groups)
        if answer is None:
            return Result.done()
        # Precondition: never judge a Workload newer than the one we read (see the module doc).
        body = workload_patch(
            workload, status={"admissionChecks": [joint.entry_for_apply(workload, answer, self.clock())]}
        )
        try:
            written = await self.workload_applier.apply_status(kinds.WORKLOAD, body, workload)
        except Conflict:
            _log.debug("joint check: stale Workload, retrying", workload=key)
            return Result.after(CONFLICT_RETRY_S)
        except NotFound:
            return Result.done()
        if written is not None:
            _log.info("joint check verdict", workload=key, state=answer.state.value, message=answer.message)
        return Result.done()

    async def reconcile_deployment(self, key: str) -> Result:
        """The deployment's ``QuotaReserved`` condition and ``status.hold``; park, release and retry the
        set; requeue for the moment a waiting set parks."""
        deployment = self._deployment(key)
        if deployment is None:
            return Result.done()
        meta = deployment.get("metadata") or {}
        if meta.get("deletionTimestamp") or not meta.get("uid"):
            return Result.done()
        ref = joint.OwnerRef(str(meta.get("namespace")), str(meta.get("name")), str(meta["uid"]))
        groups = self.groups(deployment, ref)
        now = self.clock()
        decision = joint.decide(deployment, groups, now)
        if decision.action is joint.Action.RETRY:
            # Reactivate first: the park is cleared only once every Workload is active again.
            retry = await self._switch([w for w, _ in groups], active=True)
            if retry is not None:
                return retry
        status = (deployment.get("status") or {}).get("conditions")
        hold = decision.hold.to_status()
        body: dict[str, Any] = {
            "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
            "kind": kinds.MODEL_DEPLOYMENT.kind,
            # Precondition: never park or retry on a deployment newer than the one we read.
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            # An empty list releases the condition (a deployment that became single-group owns none).
            "status": {
                "conditions": for_apply(status, [decision.condition], now=now) if decision.condition else []
            },
        }
        if hold:
            body["status"]["hold"] = hold  # omitted, our fields of it are released
        try:
            await self.deployment_applier.apply_status(kinds.MODEL_DEPLOYMENT, body, deployment)
        except Conflict:
            _log.debug("joint check: stale ModelDeployment, retrying", deployment=key)
            return Result.after(CONFLICT_RETRY_S)
        except NotFound:
            return Result.done()
        if decision.action is joint.Action.PARK and decision.condition is not None:
            _log.info("joint check parked a set", deployment=key, message=decision.condition.message)
            self.events.warning(
                deployment, reason=joint.Reason.PARKED.value, action="Park", note=decision.condition.message
            )
        elif decision.action is joint.Action.RETRY:
            _log.info("joint check retried a parked set", deployment=key, retry=decision.hold.retry)
        if decision.active is False:
            retry = await self._switch([w for w, _ in groups], active=False)
            if retry is not None:
                return retry
        if decision.deadline is not None and decision.deadline > now:
            return Result.after((decision.deadline - now).total_seconds())
        return Result.done()

    async def _switch(self, workloads: Iterable[Mapping[str, Any]], *, active: bool) -> Result | None:
        """Apply ``spec.active`` on the Workloads that need it (None: all done; else when to retry)."""
        for workload in joint.to_switch(workloads, active):
            body = workload_patch(workload, spec={"active": active})
            try:
                await self.workload_applier.apply(kinds.WORKLOAD, body, workload, force=True)
            except Conflict:
                _log.debug("joint check: stale Workload, retrying", workload=object_key(workload))
                return Result.after(CONFLICT_RETRY_S)
            except NotFound:
                continue
            _log.info("joint check set spec.active", workload=object_key(workload), active=active)
        return None
