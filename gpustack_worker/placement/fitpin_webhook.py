"""The Workload fit-pin webhook's AdmissionReview handler (the rules are in
:mod:`gpustack_worker.placement.fitpin`).

:class:`FitPinWebhook` reads the controller process's informer caches (LocalQueues, ClusterQueues,
InstanceTypes) and the live ``workload-fit-affinity`` setting, and answers every review *allowed*: with a
base64 JSON patch (``patchType: JSONPatch``) when the Workload gets a pin, without one otherwise. It never
denies — not on a cache miss, not on a malformed request, not on its own bug (any exception is logged and
answered allowed without a patch), matching the configuration's ``failurePolicy: Ignore``.

Caches are read as they are: on a replica whose informers have not synced yet a LocalQueue is simply not
found and the Workload passes unpinned: Gate 3 still judges it, it only loses the placement hint (one
of the residual retries listed in docs/admission.md, "The fit pin").

Wiring (the controller process, every replica)::

    fit_pin = FitPinWebhook.from_registry(registry, settings)
    async with admission_webhooks(args, namespace=ns, handlers={webhooks.WORKLOAD_FIT_PATH: fit_pin.review}):
        ...
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson
import structlog

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement import fitpin

if TYPE_CHECKING:
    from gpustack_worker.placement.fitpin import ObjectLookup
    from gpustack_worker.runtime.registry import InformerRegistry

__all__ = ("INSTANCE_TYPE_QUEUES", "FitPinWebhook", "FitSettings", "SettingsReader")

_log = structlog.get_logger("gpustack_worker.placement.fitpin")
#: The label selector of the operator's InstanceType queues.
INSTANCE_TYPE_QUEUES: Final = f"{keys.RESOURCE_TYPE}={keys.TYPE_INSTANCE_TYPES}"


class FitSettings(Protocol):
    """The one setting the pin reads."""

    @property
    def workload_fit_affinity(self) -> bool:
        """Whether Workloads get the pin."""


class SettingsReader(Protocol):
    """The live settings (a :class:`~gpustack_worker.runtime.settings.SettingsSource` satisfies it)."""

    @property
    def current(self) -> FitSettings:
        """The snapshot in force."""


class FitPinWebhook:
    """The fit pin's ``review(AdmissionReview) -> AdmissionReview`` over informer caches."""

    def __init__(
        self,
        *,
        local_queues: ObjectLookup,
        cluster_queues: ObjectLookup,
        instance_types: ObjectLookup,
        settings: SettingsReader,
    ) -> None:
        self.local_queues = local_queues
        self.cluster_queues = cluster_queues
        self.instance_types = instance_types
        self.settings = settings
        #: Reviews answered, by outcome (``pinned``, ``untouched``, ``error``), for tests and logs.
        self.answered: dict[str, int] = {}

    @classmethod
    def from_registry(cls, registry: InformerRegistry, settings: SettingsReader) -> FitPinWebhook:
        """Over the registry's shared informers (created if missing): every LocalQueue (recognition asks
        only that it exists, whoever made it), the ClusterQueues labelled
        ``resource.gpustack.ai/type=instancetypes`` (the same informer the chain's queue controller reads;
        an unlabelled queue is then simply not found) and every InstanceType (the chain's)."""
        return cls(
            local_queues=registry.informer(kinds.LOCAL_QUEUE).store,
            cluster_queues=registry.informer(kinds.CLUSTER_QUEUE, label_selector=INSTANCE_TYPE_QUEUES).store,
            instance_types=registry.informer(kinds.INSTANCE_TYPE).store,
            settings=settings,
        )

    def decide(self, request: Mapping[str, Any]) -> fitpin.Decision:
        """The decision for one ``AdmissionReview.request`` (raises only on a bug)."""
        return fitpin.decide(
            request,
            enabled=bool(self.settings.current.workload_fit_affinity),
            local_queues=self.local_queues,
            cluster_queues=self.cluster_queues,
            instance_types=self.instance_types,
        )

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one AdmissionReview: always allowed, patched when the Workload gets a pin."""
        request = body.get("request") if isinstance(body, Mapping) else None
        request = request if isinstance(request, Mapping) else {}
        uid = request.get("uid")
        response: dict[str, Any] = {"uid": uid if isinstance(uid, str) else "", "allowed": True}
        obj = request.get("object")
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}
        where = {
            "namespace": request.get("namespace"),
            "name": meta.get("name") or meta.get("generateName"),
            "operation": request.get("operation"),
        }
        try:
            decision = self.decide(request)
            if decision.patch:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode()
                outcome = "pinned"
                _log.info("workload fit pin", reason=decision.reason, group=decision.group, **where)
            else:
                outcome = "untouched"
                _log.debug("workload fit pin skipped", reason=decision.reason, **where)
        except Exception:  # never deny, never fail the API server's call
            outcome = "error"
            _log.exception("workload fit pin failed; admitted without a pin", **where)
        self.answered[outcome] = self.answered.get(outcome, 0) + 1
        api_version = body.get("apiVersion") if isinstance(body, Mapping) else None
        return {
            "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }
