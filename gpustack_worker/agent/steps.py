"""The three reconcilers: read the cache and the settings snapshot, call the pure ``desired``, apply.

Each method is the reconcile function of one runtime :class:`~gpustack_worker.runtime.controller.Controller`
(key = node name) and writes one output through a runtime :class:`~gpustack_worker.runtime.apply.Applier`
with its own server-side-apply field manager, so removing a key is applying without it and the three
outputs never fight over ownership:

- ``gpustack-worker-nodefeature`` — the worker NodeFeature;
- ``gpustack-worker-capacity``    — counting keys on ``nodes/status``;
- ``gpustack-worker-fit``         — fit labels on Node metadata.

The Applier compares the desired body with the *cached object itself* (values, and the set of fields
this manager owns), so a value wiped by someone else (a kubelet restart rewriting capacity, an admin
deleting a label) is re-applied, a key we stopped wanting is released, and a steady state issues zero
writes. Two things go beyond it:

- **stale cleanup** — keys that match our pattern but are held by *another* field manager (a
  predecessor's merge patch) survive an apply; they are removed with a merge patch (``null``), which is
  the stale cleanup the spec asks for;
- **empty intent** — with nothing wanted the apply body is bare. If this manager owns nothing on the
  object either, there is nothing to release and no request is sent (the API server drops a manager's
  managedFields entry once its field set is empty, so the bare apply would otherwise never look like a
  no-op and would be re-sent every reconcile).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.controller import Result

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from gpustack_worker.agent.facts import DevicesFacts
    from gpustack_worker.agent.settings import AgentSettings
    from gpustack_worker.runtime.apply import ManagedFieldsCache
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.store import Store

__all__ = ("FIELD_MANAGERS", "Steps")

#: The agent's field managers; the informers' transform must keep their managedFields entries.
FIELD_MANAGERS: Final = (nodefeature.FIELD_MANAGER, capacity.FIELD_MANAGER, fit.FIELD_MANAGER)


@dataclass(slots=True)
class Steps:
    """The three reconcile functions over one set of caches and the live settings."""

    client: Client
    nodes: Store
    devices: Store
    features: Store
    #: The settings snapshot in force (read once per reconcile).
    settings: Callable[[], AgentSettings]
    #: The informers (or their transform) whose cached objects the appliers check: each must keep every
    #: agent field manager's managedFields, else the Applier refuses to start.
    caches: Sequence[ManagedFieldsCache]
    namespace: str = kinds.SYSTEM_NAMESPACE
    #: Write requests issued, by field manager (tests and the bench read it; the client counts by verb).
    writes: collections.Counter[str] = field(default_factory=collections.Counter)
    _appliers: dict[str, Applier] = field(init=False)

    def __post_init__(self) -> None:
        self._appliers = {
            manager: Applier(self.client, manager, cache=self.caches) for manager in FIELD_MANAGERS
        }

    def _devices(self, name: str) -> DevicesFacts | None:
        raw = self.devices.get(name)
        return devices_facts(raw) if raw is not None else None

    async def _apply_node(
        self, manager: str, body: Mapping[str, Any], cached: Mapping[str, Any], subresource: str | None
    ) -> dict[str, Any] | None:
        """Apply ``body`` to the Node as ``manager`` unless the Applier's no-op check says so."""
        applier = self._appliers[manager]
        if subresource == "status":
            result = await applier.apply_status(kinds.NODE, body, cached)
        else:
            result = await applier.apply(kinds.NODE, body, cached, force=True)
        if result is not None:
            self.writes[manager] += 1
        return result

    async def _null_out(
        self, manager: str, name: str, patch: dict[str, Any], subresource: str | None
    ) -> None:
        await self.client.patch(kinds.NODE, name, patch, subresource=subresource, field_manager=manager)
        self.writes[manager] += 1

    async def nodefeature(self, name: str) -> Result:
        """Converge ``<name>-gpustack-worker``; delete it once its Node is gone (no GC runs in a dev
        cluster, and a long-running all-nodes agent should not leak them)."""
        feature_name = keys.worker_nodefeature_name(name)
        current = self.features.get(kinds.NODE_FEATURE.key(feature_name, self.namespace))
        node = self.nodes.get(name)
        applier = self._appliers[nodefeature.FIELD_MANAGER]
        if node is None:
            if current is not None:
                self.writes[nodefeature.FIELD_MANAGER] += 1
                await applier.delete(kinds.NODE_FEATURE, current)
            return Result.done()
        settings = self.settings()
        wanted = nodefeature.desired(
            node_facts(node),
            self._devices(name),
            manual=settings.node_management_manual,
            mixed_on_node=settings.instance_type_mixed_on_node,
            namespace=self.namespace,
        )
        if await applier.apply(kinds.NODE_FEATURE, wanted, current, force=True) is not None:
            self.writes[nodefeature.FIELD_MANAGER] += 1
        return Result.done()

    async def capacity(self, name: str) -> Result:
        """Converge the counting keys in the Node's capacity and allocatable."""
        node = self.nodes.get(name)
        if node is None:
            return Result.done()
        facts = node_facts(node)
        wanted = capacity.desired(facts, self._devices(name), manual=self.settings().node_management_manual)
        body = capacity.apply_body(name, wanted)
        result = await self._apply_node(capacity.FIELD_MANAGER, body, node, "status")
        after = node_facts(result) if result is not None else facts
        leftover = capacity.stale(after.capacity, wanted) | capacity.stale(after.allocatable, wanted)
        if leftover:
            nulls = dict.fromkeys(sorted(leftover))
            patch = {"status": {"capacity": nulls, "allocatable": nulls}}
            await self._null_out(capacity.FIELD_MANAGER, name, patch, "status")
        return Result.done()

    async def fit(self, name: str) -> Result:
        """Converge the per-card fit labels (runs once the coalescing window has passed)."""
        node = self.nodes.get(name)
        if node is None:
            return Result.done()
        facts = node_facts(node)
        wanted = fit.desired(facts, self._devices(name), manual=self.settings().node_management_manual)
        result = await self._apply_node(fit.FIELD_MANAGER, fit.apply_body(name, wanted), node, None)
        after = node_facts(result) if result is not None else facts
        leftover = set(fit.observed(after)) - set(wanted)
        if leftover:
            patch = {"metadata": {"labels": dict.fromkeys(sorted(leftover))}}
            await self._null_out(fit.FIELD_MANAGER, name, patch, None)
        return Result.done()
