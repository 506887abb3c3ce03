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

Inputs are checked before use (``agent/validate.py``): every reconcile runs all the checks on the node
and its ``Devices``, reports new findings once (``agent/report.py``: log, metric, Warning Event on the
object) and passes the holds to ``desired`` together with what is published now, so a bad value keeps
its keys at their last good value and the reconcile ends. An apply the API server rejects as invalid
(422) is reported the same way and that body is not sent again: retrying cannot change the answer, and
the next body that differs (an input changed) is tried.
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.agent import capacity, fit, nodefeature, validate
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.agent.report import ACTION_APPLY, Reporter, reference
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.runtime.controller import Result

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from gpustack_worker.agent.facts import DevicesFacts
    from gpustack_worker.agent.report import EventSink
    from gpustack_worker.agent.settings import AgentSettings
    from gpustack_worker.runtime.apply import ManagedFieldsCache
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.store import Store

__all__ = ("FIELD_MANAGERS", "Steps")

#: The agent's field managers; the informers' transform must keep their managedFields entries.
FIELD_MANAGERS: Final = (nodefeature.FIELD_MANAGER, capacity.FIELD_MANAGER, fit.FIELD_MANAGER)
#: Event reason of an apply the API server rejected as invalid.
REASON_APPLY_REJECTED: Final = "ApplyRejected"
#: HTTP status of a request the API server found invalid (``StatusReasonInvalid``).
_INVALID: Final = 422


def _fingerprint(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


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
    #: Where findings and rejected applies are posted as Warning Events (None: logged only).
    events: EventSink | None = None
    #: Applies rejected with 422, by field manager (each distinct body once).
    rejected: collections.Counter[str] = field(default_factory=collections.Counter)
    reporter: Reporter = field(init=False)
    _appliers: dict[str, Applier] = field(init=False)
    #: (field manager, object name) → fingerprint of the body the API server rejected.
    _rejected_bodies: dict[tuple[str, str], str] = field(init=False, default_factory=dict)
    #: Node name → (cached Node, cached Devices, the Devices' checks, all checks): the three controllers
    #: reconcile the same cached objects (immutable; replaced on every change), so the checks run once
    #: per change, and the costly ``Devices`` checks once per ``Devices`` change — not again for every
    #: Node update (our own writes' echoes, nfd-master's projection).
    _checked: dict[str, tuple[Any, Any, validate.DevicesChecked | None, validate.Checked]] = field(
        init=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        self._appliers = {
            manager: Applier(self.client, manager, cache=self.caches) for manager in FIELD_MANAGERS
        }
        self.reporter = Reporter(self.events)

    def applier(self, manager: str) -> Applier:
        """The Applier writing as ``manager`` (one of :data:`FIELD_MANAGERS`)."""
        return self._appliers[manager]

    def _devices(self, name: str) -> DevicesFacts | None:
        raw = self.devices.get(name)
        return devices_facts(raw) if raw is not None else None

    def _check(self, name: str, node: Mapping[str, Any]) -> validate.Checked:
        """All checks over the node and its ``Devices``; new findings are reported once."""
        raw_devices = self.devices.get(name)
        memo = self._checked.get(name)
        if memo is not None and memo[0] is node and memo[1] is raw_devices:
            checked = memo[3]
        else:
            if memo is not None and memo[1] is raw_devices:
                devices = memo[2]
            elif raw_devices is not None:
                devices = validate.check_devices_inputs(devices_facts(raw_devices))
            else:
                devices = None
            checked = validate.combine(node_facts(node), devices)
            self._checked[name] = (node, raw_devices, devices, checked)
        uids = {
            kinds.NODE.kind: checked.node.uid,
            kinds.DEVICES.kind: str(((raw_devices or {}).get("metadata") or {}).get("uid") or ""),
        }
        self.reporter.report(name, checked.findings, uids)
        return checked

    async def _guarded(
        self,
        manager: str,
        name: str,
        uid: str,
        body: Mapping[str, Any],
        send: Callable[[], Awaitable[dict[str, Any] | None]],
    ) -> dict[str, Any] | None:
        """Send an apply unless the API server already rejected this exact body as invalid (422); a new
        rejection is reported once on the Node and not retried (None is returned)."""
        key = (manager, name)
        # The fingerprint only where a rejection is on record: every other apply (all of them, mostly)
        # skips hashing its body.
        rejected = self._rejected_bodies.get(key)
        if rejected is not None and rejected == _fingerprint(body):
            return None
        try:
            result = await send()
        except ApiError as exc:
            if exc.status != _INVALID:
                raise
            self._rejected_bodies[key] = _fingerprint(body)
            self.rejected[manager] += 1
            self.reporter.warn(
                reference(kinds.NODE.kind, name, uid),
                reason=REASON_APPLY_REJECTED,
                action=ACTION_APPLY,
                note=f"{manager}: the API server rejected the apply as invalid: {exc}; "
                "not retried until what the agent publishes changes",
            )
            return None
        self._rejected_bodies.pop(key, None)
        return result

    async def _apply_node(
        self, manager: str, body: Mapping[str, Any], cached: Mapping[str, Any], subresource: str | None
    ) -> dict[str, Any] | None:
        """Apply ``body`` to the Node as ``manager`` unless the Applier's no-op check says so (or the API
        server rejected this very body before)."""
        applier = self._appliers[manager]
        name = str(body["metadata"]["name"])
        uid = str((cached.get("metadata") or {}).get("uid") or "")
        if subresource == "status":
            result = await self._guarded(
                manager, name, uid, body, lambda: applier.apply_status(kinds.NODE, body, cached)
            )
        else:
            result = await self._guarded(
                manager, name, uid, body, lambda: applier.apply(kinds.NODE, body, cached, force=True)
            )
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
            self.reporter.forget(name)
            self._checked.pop(name, None)
            if current is not None:
                self.writes[nodefeature.FIELD_MANAGER] += 1
                await applier.delete(kinds.NODE_FEATURE, current)
            return Result.done()
        settings = self.settings()
        checked = self._check(name, node)
        wanted = nodefeature.desired(
            checked.node,
            checked.devices,
            manual=settings.node_management_manual,
            mixed_on_node=settings.instance_type_mixed_on_node,
            namespace=self.namespace,
            holds=checked.holds(),
            published=((current or {}).get("spec") or {}).get("labels") or {},
        )
        result = await self._guarded(
            nodefeature.FIELD_MANAGER,
            name,
            checked.node.uid,
            wanted,
            lambda: applier.apply(kinds.NODE_FEATURE, wanted, current, force=True),
        )
        if result is not None:
            self.writes[nodefeature.FIELD_MANAGER] += 1
        return Result.done()

    async def capacity(self, name: str) -> Result:
        """Converge the counting keys in the Node's capacity and allocatable."""
        node = self.nodes.get(name)
        if node is None:
            return Result.done()
        checked = self._check(name, node)
        facts = checked.node
        wanted = capacity.desired(
            facts,
            checked.devices,
            manual=self.settings().node_management_manual,
            holds=checked.holds(),
            published=facts.capacity,
        )
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
        checked = self._check(name, node)
        facts = checked.node
        wanted = fit.desired(
            facts,
            checked.devices,
            manual=self.settings().node_management_manual,
            holds=checked.holds(),
            published=facts.labels,
        )
        result = await self._apply_node(fit.FIELD_MANAGER, fit.apply_body(name, wanted), node, None)
        after = node_facts(result) if result is not None else facts
        leftover = set(fit.observed(after)) - set(wanted)
        if leftover:
            patch = {"metadata": {"labels": dict.fromkeys(sorted(leftover))}}
            await self._null_out(fit.FIELD_MANAGER, name, patch, None)
        return Result.done()
