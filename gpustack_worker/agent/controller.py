"""The node agent's wiring: informers, three runtime controllers and a Manager (no leader election).

One process serves either its own node (``node_name`` set: every informer narrowed by
``metadata.name`` field selector or node-name label, the DaemonSet mode) or every node (``--all-nodes``
for simulation and benchmarks). The reconcilers are the same; only the informers' selectors widen.
Everything generic — workers, retries with rate limiting, metrics, spans, cache sync before the first
reconcile, ``/healthz`` ``/readyz`` ``/metrics``, graceful shutdown — is the runtime's
(:class:`~gpustack_worker.runtime.controller.Controller`, :class:`~gpustack_worker.runtime.manager.Manager`);
this module only says which event enqueues which key. Keys are node names; reconciles are
level-triggered.

- Node (when what the reconciler reads changed: :mod:`gpustack_worker.agent.reads`, so a sibling's
  write does not wake the others) or Devices → ``agent-nodefeature`` and ``agent-capacity`` at once,
  ``agent-fit`` after the coalescing window — except the objects of an
  informer's first LIST, which ``agent-fit`` takes at once too: they are the state as it stands, no
  burst is in flight to coalesce, and the window would only delay every node's first fit labels;
- worker NodeFeature change (someone edited or deleted ours) → ``agent-nodefeature``;
- a new settings snapshot (:meth:`SettingsSource.subscribe`) → every node, every controller.

The fit controller enqueues with ``add_after(window)``, the window read from the settings per event,
and a pending deadline is never pushed back by a later add: the first ledger change of a burst
schedules the reconcile and the rest collapse into it, so a burst yields at most one Node metadata
patch, computed from the state at the end of the window.

Workers per controller: ``controller-workers`` for a per-node agent (it has one key), and
``all-nodes-workers`` (default 8) with ``--all-nodes``, whose reconciles are one apply each over
every node, so the agent keeps the API server at its own write rate on a cold fleet.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import TYPE_CHECKING, Any, Final, TypeVar

import structlog

from gpustack_worker.agent import capacity, fit, nodefeature, reads
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.agent.steps import FIELD_MANAGERS, Steps
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.controller import Controller
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import settings_queue
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Iterable

    from gpustack_worker.agent.settings import AgentSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.clock import Clock
    from gpustack_worker.runtime.controller import Hold, Predicate, Result
    from gpustack_worker.runtime.settings import SettingsSource

__all__ = ("Agent", "kept", "kept_pair")

#: ``reportingController`` of the agent's Events.
EVENT_CONTROLLER: Final = "gpustack-worker-agent"
_log = structlog.get_logger("gpustack_worker.agent")
T = TypeVar("T")


def kept(view: Callable[[Any], T]) -> Callable[[Any], T]:
    """``view`` remembering its answers for the last two objects it was asked about, by identity.

    An informer hands each event ``(old, new)`` to its handlers in turn, and four of the agent's watches
    on Nodes ask about the same objects, so without this a Node event computed the Node's facts eight times
    (at 1,000 nodes: ~18,000 times for ~2,250 events, each event an echo of our own write or nfd-master's
    projection). Cached objects are immutable, replaced on every change, so identity is enough; the two
    objects kept are the last event's."""
    last: list[tuple[Any, T]] = []

    def view_kept(obj: Any) -> T:
        for seen, answer in last:
            if seen is obj:
                return answer
        answer = view(obj)
        last.append((obj, answer))
        del last[:-2]
        return answer

    return view_kept


def kept_pair(view: Callable[[Any, Any], T]) -> Callable[[Any, Any], T]:
    """``view`` of an (old, new) pair remembering its answer for the last pair, by identity: the handlers
    of one informer event ask it in turn."""
    last: list[tuple[Any, Any, T]] = []

    def view_kept(old: Any, new: Any) -> T:
        if last and last[0][0] is old and last[0][1] is new:
            return last[0][2]
        answer = view(old, new)
        last[:] = [(old, new, answer)]
        return answer

    return view_kept


def _node_update(
    change: Callable[[Any, Any], reads.NodeChange], wakes: Callable[[reads.NodeChange], bool]
) -> Predicate:
    """Pass Node creates and deletes, and updates whose :func:`~reads.node_change` ``wakes`` says the
    reconciler reads."""

    def predicate(_event: str, old: Any, new: Any) -> bool:
        return old is None or new is None or wakes(change(old, new))

    return predicate


def _feature_node(obj: Any) -> Iterable[str]:
    """The node of a worker NodeFeature (other NodeFeatures of the node map to nothing)."""
    meta = obj.get("metadata") or {}
    node = str((meta.get("labels") or {}).get(keys.NFD_NODE_NAME) or "")
    return (node,) if node and meta.get("name") == keys.worker_nodefeature_name(node) else ()


def _first_list(informer: Informer) -> tuple[Predicate, Predicate]:
    """Two predicates: the event comes from ``informer``'s first LIST (before it has synced), or not."""

    def listing(_event: str, _old: Any, _new: Any) -> bool:
        return not informer.has_synced

    def live(_event: str, _old: Any, _new: Any) -> bool:
        return informer.has_synced

    return listing, live


class Agent:
    """Stage 3 for one node, or for all nodes."""

    def __init__(
        self,
        client: Client,
        settings: SettingsSource[AgentSettings],
        *,
        node_name: str | None,
        namespace: str = kinds.SYSTEM_NAMESPACE,
        health_bind: str | None = None,
        fit_clock: Clock | None = None,
    ) -> None:
        """``fit_clock`` times the fit coalescing window (tests pass a fake clock to close it)."""
        self.client = client
        self.settings = settings
        self.node_name = node_name
        boot = settings.current
        transform = make_transform(FIELD_MANAGERS)
        options = boot.informer_options()
        if not node_name:  # --all-nodes lists whole collections: the first list paged
            options = dataclasses.replace(options, paged_first_list=True)
        by_name = f"metadata.name={node_name}" if node_name else None
        feature_selector = f"{keys.PART_OF}={keys.WORKER_PART_OF}"
        if node_name:
            feature_selector += f",{keys.NFD_NODE_NAME}={node_name}"
        self.nodes = Informer(
            client, kinds.NODE, field_selector=by_name, transform=transform, options=options
        )
        self.devices = Informer(
            client, kinds.DEVICES, field_selector=by_name, transform=transform, options=options
        )
        self.features = Informer(
            client,
            kinds.NODE_FEATURE,
            namespace=namespace,
            label_selector=feature_selector,
            transform=transform,
            options=options,
        )
        #: Warning Events for bad inputs and rejected applies (de-duplicated, fire-and-forget).
        self.events = EventRecorder(
            client, controller=EVENT_CONTROLLER, instance=node_name or socket.gethostname()
        )
        self.steps = Steps(
            client,
            self.nodes.store,
            self.devices.store,
            self.features.store,
            settings=lambda: self.settings.current,
            caches=(self.nodes, self.features),  # the appliers write Nodes and NodeFeatures
            namespace=namespace,
            events=self.events,
        )
        workers = boot.controller_workers if node_name else boot.all_nodes_workers
        self.nodefeature = self._controller("agent-nodefeature", self.steps.nodefeature, workers, boot)
        self.capacity = self._controller("agent-capacity", self.steps.capacity, workers, boot)
        self.fit = self._controller("agent-fit", self.steps.fit, workers, boot, fit_clock)
        # A Node update reaches a reconciler only when it changed something that reconciler reads
        # (agent/reads.py): the echo of a sibling's write (counting keys, fit labels) wakes nobody else,
        # and the echo of its own write (the watch event of exactly that write) wakes nobody at all.
        facts = kept(node_facts)
        change = kept_pair(
            lambda old, new: reads.node_change(
                facts(old), facts(new), manual=self.settings.current.node_management_manual
            )
        )
        # The NodeFeature reconciler writes no Node: its own echo comes on the NodeFeature watch below.
        self.nodefeature.watch(self.nodes, predicates=[_node_update(change, reads.wakes_nodefeature)])
        capacity_read = _node_update(change, reads.wakes_capacity)
        capacity_echo = self._echo(capacity.FIELD_MANAGER, self.nodes, "status")
        self.capacity.watch(self.nodes, predicates=[capacity_read], hold=capacity_echo)
        for ctl in (self.nodefeature, self.capacity):
            ctl.watch(self.devices)
        feature_echo = self._echo(nodefeature.FIELD_MANAGER, self.features)
        self.nodefeature.watch(self.features, mapper=_feature_node, hold=feature_echo)
        fit_read = _node_update(change, reads.wakes_fit)
        fit_echo = self._echo(fit.FIELD_MANAGER, self.nodes)
        for informer, predicates, hold in ((self.nodes, [fit_read], fit_echo), (self.devices, [], None)):
            listing, live = _first_list(informer)
            self.fit.watch(informer, predicates=[*predicates, listing], hold=hold)
            self.fit.watch(informer, predicates=[*predicates, live], delay=self._window, hold=hold)
        settings.subscribe(self._settings_changed)
        self.manager = Manager(
            settings=settings, health_bind=health_bind, cache_sync_timeout=boot.cache_sync_timeout_seconds
        )
        for informer in (self.nodes, self.devices, self.features):
            self.manager.add_informer(informer)
        for ctl in (self.nodefeature, self.capacity, self.fit):
            self.manager.add_controller(ctl)

    @staticmethod
    def _controller(
        name: str,
        reconcile: Callable[[str], Awaitable[Result]],
        workers: int,
        boot: AgentSettings,
        clock: Clock | None = None,
    ) -> Controller:
        return Controller(name, reconcile, settings_queue(name, boot, clock), workers=workers)

    def _echo(self, manager: str, informer: Informer, subresource: str | None = None) -> Hold:
        """Drop the watch event of ``manager``'s own write of the object (:meth:`Applier.echo_hold`)."""
        return self.steps.applier(manager).echo_hold(informer, subresource)

    def _window(self) -> float:
        return self.settings.current.fit_label_coalesce_seconds

    def _settings_changed(self, _settings: AgentSettings) -> None:
        names = self.nodes.store.keys()
        self.nodefeature.enqueue_all(names)
        self.capacity.enqueue_all(names)
        for name in names:
            self.fit.queue.add_after(name, self._window())

    @property
    def ready(self) -> asyncio.Event:
        """Set once every cache has synced and the controllers run."""
        return self.manager.leading

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set; returns the manager's exit code (0 after a graceful stop)."""
        _log.info("agent starting", node=self.node_name or "*")
        try:
            code = await self.manager.run(stop)
        finally:
            await self.events.close()
        _log.info("agent stopped", node=self.node_name or "*", exit_code=code)
        return code
