"""The node agent process: informers, three keyed work queues and their workers.

One process serves either its own node (``node_name`` set: every informer narrowed by
``metadata.name`` field selector or node-name label, the DaemonSet mode) or every node (``--all-nodes``
for simulation and benchmarks). The reconcilers are the same; only the informers' selectors widen.

Event → key mapping (keys are node names; reconciles are level-triggered):

- Node / Devices change → ``nodefeature`` and ``capacity`` at once, ``fit`` after the coalescing
  window;
- worker NodeFeature change (someone edited or deleted ours) → ``nodefeature``;
- settings ConfigMap change → every node, every queue.

The fit queue uses ``add_after(window)``, and a pending deadline is never pushed back by a later add,
so the first ledger change of a burst schedules the reconcile and the rest collapse into it: a burst
yields at most one Node metadata patch, computed from the state at the end of the window.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.policy import AgentPolicy, resolve
from gpustack_worker.agent.steps import Steps
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from gpustack_worker.runtime.client import Client

__all__ = ("Agent",)

_log = structlog.get_logger("gpustack_worker.agent")
_MANAGERS = (nodefeature.FIELD_MANAGER, capacity.FIELD_MANAGER, fit.FIELD_MANAGER)


def _name(obj: Any) -> str:
    return str((obj.get("metadata") or {}).get("name") or "") if obj is not None else ""


class Agent:
    """Stage 3 for one node, or for all nodes."""

    def __init__(
        self,
        client: Client,
        *,
        node_name: str | None,
        namespace: str = kinds.SYSTEM_NAMESPACE,
        settings_configmap: str = "gpustack-settings",
        env: Mapping[str, str] | None = None,
        workers: int | None = None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.namespace = namespace
        self._env = dict(os.environ if env is None else env)
        self._workers = workers or (1 if node_name else 8)
        transform = make_transform(_MANAGERS)
        by_name = f"metadata.name={node_name}" if node_name else None
        feature_selector = f"{keys.PART_OF}={keys.WORKER_PART_OF}"
        if node_name:
            feature_selector += f",{keys.NFD_NODE_NAME}={node_name}"
        self.nodes = Informer(client, kinds.NODE, field_selector=by_name, transform=transform)
        self.devices = Informer(client, kinds.DEVICES, field_selector=by_name, transform=transform)
        self.features = Informer(
            client,
            kinds.NODE_FEATURE,
            namespace=namespace,
            label_selector=feature_selector,
            transform=transform,
        )
        self.settings = Informer(
            client,
            kinds.CONFIG_MAP,
            namespace=namespace,
            field_selector=f"metadata.name={settings_configmap}",
        )
        self._settings_key = kinds.CONFIG_MAP.key(settings_configmap, namespace)
        self.steps = Steps(client, self.nodes.store, self.devices.store, self.features.store, namespace)
        self.queues: dict[str, WorkQueue] = {
            "nodefeature": WorkQueue("agent-nodefeature"),
            "capacity": WorkQueue("agent-capacity"),
            "fit": WorkQueue("agent-fit"),
        }
        self.ready = asyncio.Event()

    # -- settings, read per reconcile ------------------------------------------------------------------

    def policy(self) -> AgentPolicy:
        """The settings as of now (ConfigMap data over env seeds over defaults)."""
        cm = self.settings.store.get(self._settings_key)
        return resolve((cm or {}).get("data"), self._env)

    # -- event handlers (enqueue only) -------------------------------------------------------------------

    def _node_changed(self, name: str) -> None:
        if not name:
            return
        self.queues["nodefeature"].add(name)
        self.queues["capacity"].add(name)
        self.queues["fit"].add_after(name, self.policy().fit_label_coalesce_seconds)

    def _on_node_or_devices(self, _event: str, old: Any, new: Any) -> None:
        self._node_changed(_name(new if new is not None else old))

    def _on_feature(self, _event: str, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        node = str(((obj.get("metadata") or {}).get("labels") or {}).get(keys.NFD_NODE_NAME) or "")
        if node and _name(obj) == keys.worker_nodefeature_name(node):
            self.queues["nodefeature"].add(node)

    def _on_settings(self, _event: str, _old: Any, _new: Any) -> None:
        for name in self.nodes.store:
            self._node_changed(name)

    # -- workers -----------------------------------------------------------------------------------------

    async def _work(self, queue: WorkQueue, step: Callable[[str, AgentPolicy], Awaitable[None]]) -> None:
        while (key := await queue.get()) is not None:
            try:
                await step(key, self.policy())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.warning("reconcile failed", queue=queue.name, node=key, error=repr(exc))
                queue.add_rate_limited(key)
            else:
                queue.forget(key)
            finally:
                queue.done(key)

    async def run(self) -> None:
        """Run until cancelled: informers first, then handlers and workers once every cache synced."""
        informers = (self.settings, self.nodes, self.devices, self.features)
        async with asyncio.TaskGroup() as tg:
            for informer in informers:
                tg.create_task(informer.run())
            await asyncio.gather(*(i.wait_synced() for i in informers))
            self.settings.add_handler(self._on_settings)
            self.features.add_handler(self._on_feature)
            self.devices.add_handler(self._on_node_or_devices)
            self.nodes.add_handler(self._on_node_or_devices)
            steps = {
                "nodefeature": self.steps.nodefeature,
                "capacity": self.steps.capacity,
                "fit": self.steps.fit,
            }
            for name, queue in self.queues.items():
                for _ in range(self._workers):
                    tg.create_task(self._work(queue, steps[name]))
            _log.info("agent started", node=self.node_name or "*", nodes=len(self.nodes.store))
            self.ready.set()

    def shutdown(self) -> None:
        """Stop intake on every queue (workers exit once the queues are empty)."""
        for queue in self.queues.values():
            queue.shutdown()
