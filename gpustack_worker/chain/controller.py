"""The stage-4 chain's wiring: shared informers, five runtime controllers, and which event wakes which key.

Runs inside ``gpustack-worker controller`` (leader-elected): the caller passes the process's informer
registry and adds :attr:`Chain.controllers` to its Manager. Informers come from the registry, one per
kind, each keeping the managedFields of the chain's field managers for that kind (the appliers' no-op
check needs them). Reconciles are level-triggered; the mappers below only decide which keys a change
concerns:

- ``chain-flavors`` [``flavors``]: any Node label change (coalesced for a second); any flavor change; an
  InstanceType created, deleted or its spec changed;
- ``chain-queues`` [InstanceType name]: its InstanceType (not a status-only change) or ClusterQueue; any
  Topology or check change; any flavor or Node label change (every key, coalesced for a second);
- ``chain-instancetypes`` [InstanceType name]: its InstanceType (not a status-only change) or
  ClusterQueue; any flavor, Devices or Node label change (every key, coalesced for a second);
- ``chain-localqueues`` [Namespace name]: the Namespace; its LocalQueues; a ClusterQueue created,
  deleted or relabelled (every Namespace);
- ``chain-admissionchecks`` [``checks``]: the AdmissionChecks.

A write the API server refuses for one object of a many-object key (a flavor, a LocalQueue, a check, an
authored InstanceType) is reported once (log line, Warning Event) and skips only that object; the key is
retried rate-limited.

A new settings snapshot wakes every key of every controller, so a changed grouping, mixing, authoring or
draining setting converges without a restart.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import caches, managers, queues
from gpustack_worker.chain.admissionchecks import CHECKS
from gpustack_worker.chain.steps import CHECKS_KEY, FLAVORS_KEY, Steps
from gpustack_worker.runtime.controller import (
    Controller,
    generation_changed,
    labels_changed_except,
    semantic_changed,
)
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.mappers import all_keys
from gpustack_worker.runtime.metrics import QUEUES_HELD_IN_MIGRATION
from gpustack_worker.runtime.prune import owner_selector
from gpustack_worker.runtime.queue import settings_queue

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from gpustack_worker.chain.settings import ControllerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import SettingsSource

__all__ = ("Chain",)

#: Devices ledgers change with every allocation; their status views are recomputed at most once a second.
DEVICES_COALESCE_S: Final = 1.0
#: The Node label changes the chain reads: not the fit labels, which the node agent rewrites with every
#: allocation on the node (a flavor, a queue and an InstanceType are computed from what a Node *is*, not
#: from what is free on it). 100 allocations woke ~1,200 queue and InstanceType reconciles at 1,000 Nodes.
_HARDWARE_LABELS_CHANGED: Final = labels_changed_except(keys.FIT_LABEL_DOMAINS)
#: Node label changes wake the flavor, queue and InstanceType controllers, and flavor changes the queue and
#: InstanceType controllers, at most once a second: a fleet being labelled (a cold start labels every
#: Node's profile) is one recompute per second, not one per Node or per flavor write.
COALESCE_S: Final = 1.0


def _constant(key: str) -> Callable[[Any], Iterable[str]]:
    return lambda _obj: (key,)


def _window() -> float:
    return COALESCE_S


def _type_view(obj: Any) -> Any:
    """What the queue and InstanceType controllers read from an InstanceType: not its status (theirs)."""
    meta = obj.get("metadata") or {}
    return (
        meta.get("generation"),
        meta.get("deletionTimestamp"),
        meta.get("finalizers"),
        meta.get("labels"),
        obj.get("spec"),
    )


def _queue_identity(obj: Any) -> Any:
    meta = obj.get("metadata") or {}
    return meta.get("uid"), meta.get("labels"), meta.get("deletionTimestamp")


def _namespace_of(obj: Any) -> Iterable[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return (str(ns),) if ns else ()


class Chain:
    """The chain controllers over one informer registry."""

    def __init__(
        self,
        client: Client,
        settings: SettingsSource[ControllerSettings],
        registry: InformerRegistry,
        *,
        system_namespace: str = kinds.SYSTEM_NAMESPACE,
    ) -> None:
        self.settings = settings
        boot = settings.current
        reg = registry
        self.nodes = reg.informer(kinds.NODE)
        self.devices = reg.informer(kinds.DEVICES)
        self.flavors = reg.informer(
            kinds.RESOURCE_FLAVOR,
            label_selector=caches.FLAVORS,
            field_manager=managers.FLAVOR,
        )
        # Read-only here: the topology package applies and retires the generated Topologies.
        self.topologies = reg.informer(kinds.TOPOLOGY, label_selector=caches.TOPOLOGIES)
        self.queues = reg.informer(
            kinds.CLUSTER_QUEUE,
            label_selector=caches.QUEUES,
            field_manager=managers.QUEUE,
        )
        QUEUES_HELD_IN_MIGRATION.watch(
            self.queues.store, queues.held_in_migration, known=queues.MIGRATION_HOLD_STATES
        )
        self.types = reg.informer(
            kinds.INSTANCE_TYPE, field_manager=(managers.INSTANCE_TYPE, managers.AUTHOR)
        )
        self.local_queues = reg.informer(
            kinds.LOCAL_QUEUE,
            label_selector=owner_selector(managers.OWNER_LOCAL_QUEUES),
            field_manager=managers.LOCAL_QUEUE,
        )
        self.namespaces = reg.informer(kinds.NAMESPACE)
        self.checks = reg.informer(kinds.ADMISSION_CHECK, field_manager=tuple(CHECKS))
        self.steps = Steps(
            client,
            lambda: self.settings.current,
            nodes=self.nodes,
            devices=self.devices,
            flavor_cache=self.flavors,
            topology_cache=self.topologies,
            queue_cache=self.queues,
            type_cache=self.types,
            local_queue_cache=self.local_queues,
            namespaces=self.namespaces,
            checks=self.checks,
            system_namespace=system_namespace,
            # One object's refused write is a Warning on what it belongs to (the chain's ``_Batch``).
            events=EventRecorder(client, controller=keys.CHAIN_CONTROLLER, instance=socket.gethostname()),
        )
        self.flavor_ctl = self._controller("chain-flavors", self.steps.flavors, boot)
        self.queue_ctl = self._controller("chain-queues", self.steps.queue, boot)
        self.type_ctl = self._controller("chain-instancetypes", self.steps.instance_type, boot)
        self.local_queue_ctl = self._controller("chain-localqueues", self.steps.local_queues, boot)
        self.check_ctl = self._controller("chain-admissionchecks", self.steps.admission_checks, boot)

        every_type = all_keys(self.types.store)
        self.flavor_ctl.watch(
            self.nodes, mapper=_constant(FLAVORS_KEY), predicates=[_HARDWARE_LABELS_CHANGED], delay=_window
        )
        self.flavor_ctl.watch(self.flavors, mapper=_constant(FLAVORS_KEY))
        # Authoring reads only whether a type exists: its status updates (every InstanceType reconcile
        # may write one) would otherwise re-run the whole flavor plan.
        self.flavor_ctl.watch(self.types, mapper=_constant(FLAVORS_KEY), predicates=[generation_changed])
        for ctl in (self.queue_ctl, self.type_ctl):
            ctl.watch(self.types, predicates=[semantic_changed(_type_view)])
            ctl.watch(self.queues)
            ctl.watch(self.flavors, mapper=every_type, delay=_window)
            ctl.watch(self.nodes, mapper=every_type, predicates=[_HARDWARE_LABELS_CHANGED], delay=_window)
        self.queue_ctl.watch(self.topologies, mapper=every_type)
        self.queue_ctl.watch(self.checks, mapper=every_type)
        self.type_ctl.watch(self.devices, mapper=every_type, delay=lambda: DEVICES_COALESCE_S)
        self.local_queue_ctl.watch(self.namespaces)
        self.local_queue_ctl.watch(self.local_queues, mapper=_namespace_of)
        # A LocalQueue reads its ClusterQueue's name, uid, labels and deletion only; not Kueue's status.
        self.local_queue_ctl.watch(
            self.queues,
            mapper=all_keys(self.namespaces.store),
            predicates=[semantic_changed(_queue_identity)],
        )
        self.check_ctl.watch(self.checks, mapper=_constant(CHECKS_KEY))
        settings.subscribe(self._settings_changed)

    @property
    def controllers(self) -> list[Controller]:
        return [
            self.flavor_ctl,
            self.queue_ctl,
            self.type_ctl,
            self.local_queue_ctl,
            self.check_ctl,
        ]

    def start_keys(self) -> None:
        """Keys that exist without any event: the singleton reconciles."""
        self.flavor_ctl.enqueue_all([FLAVORS_KEY])
        self.check_ctl.enqueue_all([CHECKS_KEY])

    @staticmethod
    def _controller(
        name: str, reconcile: Callable[[str], Awaitable[Any]], boot: ControllerSettings
    ) -> Controller:
        return Controller(name, reconcile, settings_queue(name, boot), workers=boot.controller_workers)

    def _settings_changed(self, _settings: ControllerSettings) -> None:
        self.resync()

    def resync(self) -> None:
        """Enqueue every key of every controller (a settings change; tests' forced resyncs)."""
        self.flavor_ctl.enqueue_all([FLAVORS_KEY])
        self.queue_ctl.enqueue_all(self.types.store.keys())
        self.type_ctl.enqueue_all(self.types.store.keys())
        self.local_queue_ctl.enqueue_all(self.namespaces.store.keys())
        self.check_ctl.enqueue_all([CHECKS_KEY])
