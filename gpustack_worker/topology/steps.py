"""The topology package's thin reconcile steps: read the cache (and a webhook), decide, apply.

- ``source`` [TopologySource name] — the source's NodeFeatures, finalizer and status
  (:mod:`gpustack_worker.topology.sources` decides);
- ``node_profile`` [Node name] — the Kueue Topology of the Node's hierarchy, the Node's
  ``topology.gpustack.ai/profile`` label and its mirror on the Node's ``Devices``
  (:mod:`gpustack_worker.topology.profiles` decides);
- ``retire_topologies`` [``topologies``] — generated Topologies no Node is assigned and no flavor
  references any more are deleted (Kueue's ``resource-in-use`` finalizer holds one a queue still uses).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime import conditions
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import ApiError, Conflict, NotFound
from gpustack_worker.runtime.controller import Result
from gpustack_worker.runtime.finalizers import Finalizer, has_finalizer
from gpustack_worker.runtime.prune import Pruner, stamp
from gpustack_worker.topology import fetch, managers, profiles, sources
from gpustack_worker.topology.nodefeatures import same_content
from gpustack_worker.topology.selector import compile_selector
from gpustack_worker.topology.spec_check import parse_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer

__all__ = ("TOPOLOGIES_KEY", "UID_INDEX", "TopologySteps")

TOPOLOGIES_KEY: Final = "topologies"
#: Index of the TopologySource store: the source's UID (a NodeFeature names its source by UID).
UID_INDEX: Final = "uid"
_log = structlog.get_logger("gpustack_worker.topology")


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A source's selector, and what the profile assigner reads of it, compiled once per
    resourceVersion."""

    rv: str
    #: The selector (ownership conflicts read it whatever the source's state).
    matches: Callable[[Mapping[str, str]], bool]
    #: The assigner's view (:func:`profiles.source_input`; None while the source is not in effect).
    ready: profiles.ReadySource | None


@dataclass(slots=True)
class _Fetch:
    """The last webhook answer of a source, reused within its poll interval (our own NodeFeature writes
    wake the source too; they must not turn into fetches)."""

    identity: tuple[Any, ...]
    monotonic: float
    outcome: sources.Fetched | sources.ReadFailed


@dataclass
class TopologySteps:
    """The topology reconcile steps over one set of informers."""

    client: Client
    topology_sources: Informer
    nodefeatures: Informer
    config_maps: Informer
    secrets: Informer
    nodes: Informer
    devices: Informer
    topologies: Informer
    flavors: Informer
    namespace: str = kinds.SYSTEM_NAMESPACE
    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    monotonic: Callable[[], float] = field(default=time.monotonic)
    _compiled: dict[str, _Compiled] = field(default_factory=dict)
    _fetches: dict[str, _Fetch] = field(default_factory=dict)
    #: Each Node's assigned profile for the retire pass, by its resourceVersion, valid for one set of
    #: sources in effect (:meth:`_assigned_profiles`).
    _assigned: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    _assigned_for: tuple[tuple[str, str], ...] = ()
    #: One apply of a generated Topology at a time (:meth:`_ensure_topology`), and when we created each
    #: one that the cache has not shown yet.
    _topology_locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = self.client
        self.nodefeature_applier = Applier(c, managers.SOURCE, cache=self.nodefeatures)
        self.status_applier = Applier(c, managers.SOURCE_STATUS, cache=self.topology_sources)
        self.node_applier = Applier(c, managers.NODE_TOPOLOGY, cache=self.nodes)
        self.devices_applier = Applier(c, managers.NODE_TOPOLOGY, cache=self.devices)
        self.topology_applier = Applier(c, managers.NODE_TOPOLOGY, cache=self.topologies)
        self.topology_pruner = Pruner(c, kinds.TOPOLOGY, controller=managers.OWNER_TOPOLOGIES)
        self.finalizer = Finalizer(
            c, kinds.TOPOLOGY_SOURCE, keys.FINALIZER_TOPOLOGY_SOURCE, field_manager=managers.SOURCE
        )
        #: Generated Topologies found with other levels than their profile needs (drift, never patched).
        self.drift: dict[str, str] = {}
        #: Generated Topologies Kueue's API server refuses (or would): name → why. Never sent again (the
        #: name is the hash of the levels, so the same name is the same body).
        self.refused: dict[str, str] = {}

    # -- shared reads ------------------------------------------------------------------------------

    def compiled(self, source: Mapping[str, Any]) -> _Compiled:
        """The source's compiled selector and assigner view (memoised per resourceVersion)."""
        meta = _meta(source)
        name, rv = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
        memo = self._compiled.get(name)
        if memo is None or memo.rv != rv:
            memo = _Compiled(
                rv,
                compile_selector((source.get("spec") or {}).get("nodeSelector")),
                profiles.ready_source(name, profiles.source_input(source)),
            )
            self._compiled[name] = memo
        return memo

    def ready_sources(self) -> list[profiles.ReadySource]:
        """Every TopologySource the profile assigner may use (:func:`profiles.source_input`: in effect and
        not being deleted)."""
        out = []
        for source in self.topology_sources.store.list():
            ready = self.compiled(source).ready
            if ready is not None:
                out.append(ready)
        return out

    def _node_labels(self) -> dict[str, Mapping[str, str]]:
        return {str(_meta(n)["name"]): _labels(n) for n in self.nodes.store.list()}

    # -- TopologySource ----------------------------------------------------------------------------

    async def source(self, name: str) -> Result:
        source = self.topology_sources.store.get(name)
        if source is None:
            self._compiled.pop(name, None)
            self._fetches.pop(name, None)
            return Result.done()  # gone: its NodeFeatures go with it (owner references)
        meta = _meta(source)
        uid = str(meta.get("uid", ""))
        deleting = bool(meta.get("deletionTimestamp"))
        memo = self.compiled(source)
        nodes = self._node_labels()
        selected = {n: labels for n, labels in nodes.items() if memo.matches(labels)}
        kind = sources.arm_of(source.get("spec") or {})
        read: sources.Fetched | sources.ReadFailed | None = None
        if not deleting and kind == "ConfigMap":
            read = self._read_config_map(source)
        elif not deleting and kind == "Webhook":
            read = await self._read_webhook(source)
        owned = {
            str(_meta(nf)["name"]): nf
            for nf in self.nodefeatures.store.list()
            if _labels(nf).get(keys.TOPOLOGY_SOURCE_UID) == uid
        }
        decision = sources.decide(
            sources.SourceInputs(
                source=source,
                namespace=self.namespace,
                selected=selected,
                read=read,
                owned=owned,
                conflicts=self._conflicts(source, selected) if sources.is_writing(source) else {},
                now=self.now(),
            )
        )
        if decision.finalizer is True and not deleting:
            await self.finalizer.add(source)
        mutated = 0
        for nf_name, body in decision.apply.items():
            mutated += await self._apply_nodefeature(body, owned.get(nf_name))
        for nf_name in decision.delete:
            with_gone = owned[nf_name]
            if await self.nodefeature_applier.delete(kinds.NODE_FEATURE, with_gone):
                mutated += 1
        if decision.deleting:
            if decision.finalizer is False:
                await self.finalizer.remove(source)
            return Result.done()
        if decision.finalizer is False and has_finalizer(source, keys.FINALIZER_TOPOLOGY_SOURCE):
            await self.finalizer.remove(source)
        status = {
            **decision.status,
            "mutatedNodes": mutated,
            "conditions": conditions.for_apply(
                (source.get("status") or {}).get("conditions"), decision.conditions, now=self.now()
            ),
        }
        body = {
            "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
            "kind": kinds.TOPOLOGY_SOURCE.kind,
            "metadata": {"name": name},
            "status": {k: v for k, v in status.items() if v is not None},
        }
        try:
            await self.status_applier.apply_status(kinds.TOPOLOGY_SOURCE, body, source)
        except NotFound:
            return Result.done()
        if mutated:
            _log.info("topology source applied", source=name, kind=kind, mutated=mutated)
        return Result.after(decision.requeue_after) if decision.requeue_after else Result.done()

    async def _apply_nodefeature(self, body: dict[str, Any], cached: Mapping[str, Any] | None) -> int:
        """Apply one NodeFeature; an edited one (a key added by someone else included) is repaired in full.
        Returns 1 when written."""
        if cached is not None and same_content(body, cached):
            # Our apply may still be a no-op-check write (a manager change); the applier decides.
            return 1 if await self.nodefeature_applier.apply(kinds.NODE_FEATURE, body, cached) else 0
        extra = set(((cached or {}).get("spec") or {}).get("labels") or {}) - set(body["spec"]["labels"])
        if cached is not None and extra:
            # Server-side apply cannot remove keys another manager set: replace the object as a whole.
            full = {
                **body,
                "metadata": {**body["metadata"], "resourceVersion": _meta(cached)["resourceVersion"]},
            }
            with contextlib.suppress(Conflict):  # changed meanwhile: its event brings us back
                await self.client.replace(kinds.NODE_FEATURE, full)
            _log.warning(
                "repaired an edited topology NodeFeature",
                nodefeature=body["metadata"]["name"],
                extra=sorted(extra),
            )
        await self.nodefeature_applier.apply(kinds.NODE_FEATURE, body, cached, force=True)
        return 1

    def _conflicts(
        self, source: Mapping[str, Any], selected: Mapping[str, Mapping[str, str]]
    ) -> dict[str, list[str]]:
        """Node → the other writing sources (not being deleted) that also select it."""
        me = _meta(source).get("name")
        out: dict[str, list[str]] = {}
        for other in self.topology_sources.store.list():
            meta = _meta(other)
            if meta.get("name") == me or meta.get("deletionTimestamp") or not sources.is_writing(other):
                continue
            matches = self.compiled(other).matches
            for node, labels in selected.items():
                if matches(labels):
                    out.setdefault(node, []).append(str(meta["name"]))
        return out

    def _read_config_map(self, source: Mapping[str, Any]) -> sources.ReadFailed | sources.Fetched:
        arm = (source.get("spec") or {}).get("configMap") or {}
        ref = arm.get("configMapRef") or {}
        ns, cm_name, key = ref.get("namespace"), ref.get("name"), arm.get("key")
        if ns != self.namespace:
            return sources.ReadFailed(
                "ConfigMapReadFailed",
                f"ConfigMap {ns}/{cm_name} is outside the worker namespace {self.namespace}",
            )
        cm = self.config_maps.store.get(f"{ns}/{cm_name}")
        if cm is None:
            return sources.ReadFailed("ConfigMapReadFailed", f"ConfigMap {ns}/{cm_name} not found")
        data = cm.get("data") or {}
        if not isinstance(key, str) or key not in data:
            return sources.ReadFailed("SnapshotKeyMissing", f"ConfigMap {ns}/{cm_name} has no key {key!r}")
        return sources.Fetched(str(data[key]))

    def _secret(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.secrets.store.get(f"{namespace}/{name}") if namespace == self.namespace else None

    def _config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.config_maps.store.get(f"{namespace}/{name}") if namespace == self.namespace else None

    async def _read_webhook(self, source: Mapping[str, Any]) -> sources.Fetched | sources.ReadFailed:
        meta = _meta(source)
        name = str(meta.get("name", ""))
        arm = (source.get("spec") or {}).get("webhook") or {}
        try:
            creds = fetch.credentials_from(arm, secret=self._secret, config_map=self._config_map)
            poll = parse_duration(str(arm.get("pollInterval", "")))
            timeout = parse_duration(str(arm.get("timeout", "")))
        except fetch.FetchError as exc:
            return sources.ReadFailed("WebhookReadFailed", str(exc))
        except ValueError as exc:
            return sources.ReadFailed("WebhookReadFailed", f"invalid duration: {exc}")
        identity = (meta.get("uid"), meta.get("generation"), creds)
        memo = self._fetches.get(name)
        if memo is not None and memo.identity == identity and self.monotonic() - memo.monotonic < 0.9 * poll:
            return memo.outcome
        outcome: sources.Fetched | sources.ReadFailed
        try:
            outcome = sources.Fetched(
                await fetch.fetch(str(arm.get("url", "")), creds, timeout=timeout), self.now()
            )
        except fetch.FetchError as exc:
            outcome = sources.ReadFailed("WebhookReadFailed", str(exc))
        self._fetches[name] = _Fetch(identity, self.monotonic(), outcome)
        return outcome

    # -- Node profile --------------------------------------------------------------------------------

    async def node_profile(self, name: str) -> Result:
        node = self.nodes.store.get(name)
        if node is None:
            return Result.done()
        assignment = profiles.node_assignment(_labels(node), self.ready_sources())
        labels: dict[str, str] = {}
        if assignment is not None and not await self._ensure_topology(assignment.levels):
            return Result.done()  # reported; the Node keeps what it carries (never that profile)
        if assignment is not None:
            labels[keys.TOPOLOGY_PROFILE] = assignment.profile
        # The UID is a precondition: a Node deleted meanwhile answers 409 instead of being re-created by
        # the apply (which RBAC would refuse as a create anyway).
        metadata: dict[str, Any] = {"name": name, "uid": _meta(node).get("uid")}
        if labels:
            metadata["labels"] = labels
        body = {"apiVersion": kinds.NODE.api_version, "kind": kinds.NODE.kind, "metadata": metadata}
        # The Node and its Devices are written at once (two requests in flight, not one after the other):
        # a first install needs both on every Node, so their round trips set the cold start's pace.
        outcomes = await asyncio.gather(
            self.node_applier.apply(kinds.NODE, body, node),
            self._mirror(name, labels),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, NotFound | Conflict):
                continue  # deleted or replaced meanwhile: its own event brings the new one
            if isinstance(outcome, BaseException):
                raise outcome
        return Result.done()

    async def _ensure_topology(self, levels: tuple[str, ...]) -> bool:
        """The Topology of a profile exists. Every Node of the profile asks, ``node-profile-workers`` at
        once on a cold fleet: the first creates it, the others wait for that apply (a per-name lock) and
        write nothing while the informer has not reached the create yet (the Applier's own-create memory;
        a Topology deleted meanwhile is created again) — 8 workers wrote it 8 times otherwise.

        False when the Topology can never exist: Kueue's API server would refuse it (checked before
        sending, :func:`profiles.topology_problems`) or did (a 422). It is reported once and never sent
        again, and the caller does not give a Node that profile."""
        body = stamp(profiles.topology_body(levels), managers.OWNER_TOPOLOGIES)
        topo_name = body["metadata"]["name"]
        if topo_name in self.refused:
            return False
        problems = profiles.topology_problems(body)
        if problems:
            self._refuse(topo_name, "; ".join(problems))
            return False
        lock = self._topology_locks.setdefault(topo_name, asyncio.Lock())
        async with lock:
            return await self._ensure_topology_locked(topo_name, body)

    def _refuse(self, topo_name: str, why: str) -> None:
        self.refused[topo_name] = why
        _log.error(
            "generated Topology cannot be created; no Node gets its profile", topology=topo_name, error=why
        )

    async def _ensure_topology_locked(self, topo_name: str, body: dict[str, Any]) -> bool:
        cached = self.topologies.store.get(topo_name)
        drift = profiles.topology_drift(body, cached)
        if drift is not None:
            if self.drift.get(topo_name) != drift:
                _log.error(
                    "generated Topology drifted; not patched (immutable)", topology=topo_name, drift=drift
                )
            self.drift[topo_name] = drift
            return True
        self.drift.pop(topo_name, None)
        try:
            await self.topology_applier.apply(kinds.TOPOLOGY, body, cached)
        except ApiError as exc:
            if exc.status != 422:
                raise
            self._refuse(topo_name, str(exc))
            return False
        return True

    async def _mirror(self, name: str, labels: Mapping[str, str]) -> None:
        """The profile on the Node's Devices too (never creates a Devices: the UID is a precondition)."""
        devices = self.devices.store.get(name)
        if devices is None:
            return
        metadata: dict[str, Any] = {"name": name, "uid": _meta(devices).get("uid")}
        if labels:
            metadata["labels"] = dict(labels)
        body = {"apiVersion": kinds.DEVICES.api_version, "kind": kinds.DEVICES.kind, "metadata": metadata}
        await self.devices_applier.apply(kinds.DEVICES, body, devices)

    # -- retiring Topologies -------------------------------------------------------------------------

    def _assigned_profiles(self) -> set[str]:
        """Every profile a Node carries or is assigned now. A Node's assignment is recomputed only when
        the Node or the sources in effect changed: the pass runs about once a second while a fleet is
        labelled, and recomputing every Node each time made it O(Nodes) of selector matching and hashing
        per second (49 ms a pass at 2,000 Nodes)."""
        ready = self.ready_sources()
        signature = tuple(sorted((s.name, self._compiled[s.name].rv) for s in ready))
        if signature != self._assigned_for:
            self._assigned.clear()
            self._assigned_for = signature
        memo = self._assigned
        fresh: dict[str, tuple[str, str | None]] = {}
        wanted: set[str] = set()
        for node in self.nodes.store.list():
            meta = _meta(node)
            name, rv = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
            labels = _labels(node)
            carried = labels.get(keys.TOPOLOGY_PROFILE)
            if carried:
                wanted.add(carried)
            known = memo.get(name)
            if known is None or known[0] != rv:
                assignment = profiles.node_assignment(labels, ready)
                known = (rv, assignment.profile if assignment is not None else None)
            fresh[name] = known
            if known[1] is not None:
                wanted.add(known[1])
        self._assigned = fresh  # deleted Nodes drop out
        return wanted

    async def retire_topologies(self, _key: str) -> Result:
        wanted = {keys.topology_name(profile) for profile in self._assigned_profiles()}
        for flavor in self.flavors.store.list():
            ref = (flavor.get("spec") or {}).get("topologyName")
            if ref:
                wanted.add(str(ref))
        await self.topology_pruner.prune(self.topologies.store.list(), wanted)
        return Result.done()
