"""The thin I/O steps: read the cache, call the pure ``desired``, write only when the cache differs.

Each step is one output with its own server-side-apply field manager, so removing a key is applying
without it and the three outputs never fight over ownership:

- ``gpustack-worker-nodefeature`` — the worker NodeFeature;
- ``gpustack-worker-capacity``    — counting keys on ``nodes/status``;
- ``gpustack-worker-fit``         — fit labels on Node metadata.

The no-op check compares the desired state with the *cached object itself* (not with what we last
sent), so a value wiped by someone else (a kubelet restart rewriting capacity, an admin deleting a
label) is re-applied, and a steady state issues zero writes. Keys that match our pattern but are owned
by another manager (a predecessor's merge patch) survive an apply; those are removed with a merge
patch, which is the stale cleanup the spec asks for.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.agent.policy import AgentPolicy
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.store import Store

__all__ = ("Steps",)


@dataclass(slots=True)
class Steps:
    """The three reconcile steps over one set of caches."""

    client: Client
    nodes: Store
    devices: Store
    features: Store
    namespace: str = kinds.SYSTEM_NAMESPACE
    #: Writes issued, by field manager (tests and the bench read it; the client counts by HTTP verb).
    writes: collections.Counter[str] = field(default_factory=collections.Counter)

    def _inputs(self, name: str) -> tuple[Any, Any]:
        node = self.nodes.get(name)
        raw_devices = self.devices.get(name)
        return node, (devices_facts(raw_devices) if raw_devices is not None else None)

    async def nodefeature(self, name: str, policy: AgentPolicy) -> None:
        """Converge ``<name>-gpustack-worker``; delete it once its Node is gone (no GC runs in a dev
        cluster, and a long-running all-nodes agent should not leak them)."""
        feature_name = keys.worker_nodefeature_name(name)
        current = self.features.get(kinds.NODE_FEATURE.key(feature_name, self.namespace))
        node, devices = self._inputs(name)
        if node is None:
            if current is not None:
                uid = str((current.get("metadata") or {}).get("uid") or "") or None
                await self.client.delete(kinds.NODE_FEATURE, feature_name, self.namespace, uid=uid)
                self.writes[nodefeature.FIELD_MANAGER] += 1
            return
        wanted = nodefeature.desired(
            node_facts(node),
            devices,
            manual=policy.node_management_manual,
            mixed_on_node=policy.instance_type_mixed_on_node,
            namespace=self.namespace,
        )
        if nodefeature.up_to_date(current, wanted):
            return
        await self.client.apply(
            kinds.NODE_FEATURE, wanted, field_manager=nodefeature.FIELD_MANAGER, force=True
        )
        self.writes[nodefeature.FIELD_MANAGER] += 1

    async def capacity(self, name: str, policy: AgentPolicy) -> None:
        """Converge the counting keys in the Node's capacity and allocatable."""
        node, devices = self._inputs(name)
        if node is None:
            return
        facts = node_facts(node)
        wanted = capacity.desired(facts, devices, manual=policy.node_management_manual)
        if capacity.up_to_date(facts, wanted):
            return
        result = await self.client.apply(
            kinds.NODE,
            capacity.apply_body(name, wanted),
            field_manager=capacity.FIELD_MANAGER,
            force=True,
            subresource="status",
        )
        self.writes[capacity.FIELD_MANAGER] += 1
        after = node_facts(result)
        leftover = capacity.stale(after.capacity, wanted) | capacity.stale(after.allocatable, wanted)
        if leftover:
            nulls = dict.fromkeys(sorted(leftover))
            await self.client.patch(
                kinds.NODE,
                name,
                {"status": {"capacity": nulls, "allocatable": nulls}},
                subresource="status",
                field_manager=capacity.FIELD_MANAGER,
            )
            self.writes[capacity.FIELD_MANAGER] += 1

    async def fit(self, name: str, policy: AgentPolicy) -> None:
        """Converge the per-card fit labels (called after the coalescing window)."""
        node, devices = self._inputs(name)
        if node is None:
            return
        facts = node_facts(node)
        wanted = fit.desired(facts, devices, manual=policy.node_management_manual)
        if fit.observed(facts) == wanted:
            return
        result = await self.client.apply(
            kinds.NODE, fit.apply_body(name, wanted), field_manager=fit.FIELD_MANAGER, force=True
        )
        self.writes[fit.FIELD_MANAGER] += 1
        leftover = set(fit.observed(node_facts(result))) - set(wanted)
        if leftover:
            nulls: Mapping[str, None] = dict.fromkeys(sorted(leftover))
            await self.client.patch(
                kinds.NODE, name, {"metadata": {"labels": nulls}}, field_manager=fit.FIELD_MANAGER
            )
            self.writes[fit.FIELD_MANAGER] += 1
