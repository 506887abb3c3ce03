"""The chain's thin reconcile steps: read the cache, call the pure decision, apply it.

One method per controller (keys in brackets):

- ``flavors`` [``flavors``] — every ResourceFlavor, plus create-only InstanceType authoring;
- ``queue`` [InstanceType name] — the ClusterQueue of the same name and its ``TopologyReady`` condition;
- ``instance_type`` [InstanceType name] — finalizer, teardown, ``inactive`` backfill and status;
- ``local_queues`` [Namespace name] — the Namespace's LocalQueues;
- ``admission_checks`` [``checks``] — the two AdmissionChecks.

Every write goes through an :class:`~gpustack_worker.runtime.apply.Applier` bound to the informer it
checks against (no write when nothing changed), or is a create / delete / patch decided from the cache.
In the steps whose key covers many objects (flavors and authoring, LocalQueues, AdmissionChecks) every
write goes through one :class:`_Batch`: an object the API server refuses is reported and skipped, the
others are written, and the key is retried rate-limited.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import functools
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.api import keys, kinds, validation
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.chain import (
    admissionchecks,
    flavors,
    inputs,
    localqueues,
    managers,
    pools,
    queues,
    settle,
    typestatus,
)
from gpustack_worker.chain.nodes import NodeHardware, node_hardware, unprofiled_hardware
from gpustack_worker.runtime import conditions
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import ApiError, Conflict, NotFound
from gpustack_worker.runtime.controller import Result
from gpustack_worker.runtime.finalizers import Finalizer
from gpustack_worker.runtime.labelselector import LabelSelector, parse_selector
from gpustack_worker.runtime.prune import Pruner, owner_of, stamp

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence

    from gpustack_worker.chain.flavors import FlavorPlan
    from gpustack_worker.chain.instancetypes import TypeDecision
    from gpustack_worker.chain.settings import ControllerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.events import EventRecorder
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "CHECKS_KEY",
    "FLAVORS_KEY",
    "Steps",
    "WriteFailure",
    "WritesRefused",
    "is_ours",
    "write_failure",
)

FLAVORS_KEY: Final = "flavors"
CHECKS_KEY: Final = "checks"
#: Requeue while a flavor whose immutable spec changed is being replaced (its deletion event also wakes us).
REPLACE_POLL_S: Final = 5.0
_log = structlog.get_logger("gpustack_worker.chain")


_INVALID: Final = 422
#: Answers about one object (bad request, forbidden, gone, conflict, invalid): its siblings are still
#: written. Anything else (401, 429, 5xx: the server or our credentials) fails the whole pass at once.
_PER_OBJECT: Final = frozenset({400, 403, 404, 409, _INVALID})
#: Event reasons of a refused write (on the object the refused one belongs to).
REASON_NAME_TAKEN: Final = "NameTakenByForeignObject"
REASON_WRITE_REFUSED: Final = "WriteRefused"
#: Event reason of a write that put back fields another field manager had changed on a chain object.
REASON_FIELDS_REPAIRED: Final = "FieldsRepaired"


@dataclass(frozen=True, slots=True)
class WriteFailure:
    """One object's write the API server refused, as reported (log line, Event) and remembered."""

    kind: str
    name: str
    namespace: str | None
    status: int
    message: str
    #: The name is held by an object the chain does not own: never overwritten, never deleted.
    foreign: bool

    @property
    def reason(self) -> str:
        return REASON_NAME_TAKEN if self.foreign else REASON_WRITE_REFUSED

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def note(self) -> str:
        if self.foreign:
            return (
                f"{self.kind} {self.where} exists and is not the chain's (no owner label of the chain); "
                f"the chain never overwrites or deletes it, so its own {self.kind} cannot be written "
                f"({self.status}: {self.message}). Delete or rename {self.kind} {self.where}."
            )
        return f"{self.kind} {self.where} refused by the API server ({self.status}: {self.message}); retried"


def is_ours(obj: Mapping[str, Any], *, owner: str | None, field_managers: Collection[str]) -> bool:
    """The one ownership test for a name the chain writes: the chain's owner label (``owner``) when the
    kind is stamped, else an apply entry of one of the chain's ``field_managers``."""
    if owner is not None:
        return owner_of(obj) == owner
    return any(e.get("manager") in field_managers for e in _meta(obj).get("managedFields") or ())


def write_failure(
    resource: Resource,
    name: str,
    namespace: str | None,
    error: ApiError,
    existing: Mapping[str, Any] | None,
    *,
    owner: str | None,
    field_managers: Collection[str],
) -> WriteFailure:
    """What a refused write of one object means (pure): ``existing`` is the object of that name as the
    API server holds it (None when there is none or it could not be read)."""
    message = str((error.body or {}).get("message") or "") or str(error)
    foreign = existing is not None and not is_ours(existing, owner=owner, field_managers=field_managers)
    return WriteFailure(resource.kind, name, namespace, error.status, message, foreign)


class WritesRefused(ApiError):
    """Some objects of a multi-object reconcile were refused (the others were written): the key is retried
    through the rate limiter, and a pass where they are still refused writes nothing new."""

    def __init__(self, failures: Sequence[WriteFailure]) -> None:
        names = ", ".join(f"{f.kind} {f.where} ({f.status})" for f in failures[:5])
        more = f" and {len(failures) - 5} more" if len(failures) > 5 else ""
        super().__init__(failures[0].status, "WritesRefused", {}, f"refused: {names}{more}")
        self.failures = tuple(failures)


class _Batch:
    """One pass of a reconcile whose key covers many objects of one kind (every flavor, a Namespace's
    LocalQueues, the AdmissionChecks, the authored InstanceTypes): a write the API server refuses for that
    object alone is reported once per distinct failure and the rest are still written; :meth:`finish`
    then raises :class:`WritesRefused` so the key is retried rate-limited."""

    def __init__(
        self,
        steps: Steps,
        resource: Resource,
        *,
        owner: str | None,
        field_managers: Collection[str],
        namespace: str | None = None,
    ) -> None:
        self.steps = steps
        self.resource = resource
        self.owner = owner
        self.field_managers = field_managers
        self.namespace = namespace
        self.attempted: set[str] = set()
        self.failed: list[WriteFailure] = []
        self._holders: dict[str, Mapping[str, Any]] | None = None

    async def _holder(self, name: str) -> Mapping[str, Any] | None:
        """The object of that name on the server (one LIST of the kind per pass; the chain's role lists,
        it does not get), or None."""
        if self._holders is None:
            self._holders = {}
            with contextlib.suppress(ApiError):
                found, _rv = await self.steps.client.list(self.resource, namespace=self.namespace)
                self._holders = {str(_meta(o).get("name")): o for o in found}
        return self._holders.get(name)

    def apply(
        self, applier: Applier, body: Mapping[str, Any], cached: Mapping[str, Any] | None
    ) -> Callable[[], Awaitable[Any]]:
        """The apply of ``body`` for :meth:`write`. On an object that is the chain's (:func:`is_ours`) it is
        forced: the chain owns every field it sets there, so a field an admin changed is written back (and
        reported once, by the Applier's ``on_repair``) instead of refused as a conflict and retried
        forever. A name the chain does not hold is applied without force."""
        ours = cached is not None and is_ours(cached, owner=self.owner, field_managers=self.field_managers)
        return partial(applier.apply, self.resource, body, cached, force=ours)

    async def write(
        self,
        name: str,
        write: Callable[[], Awaitable[Any]],
        *,
        uncached: bool = False,
        regarding: Iterable[Mapping[str, Any] | None] = (),
    ) -> bool:
        """Run ``write`` (of the object ``name``); False when that object was refused. ``uncached``: the
        name is not in the chain's (owner-labelled) cache, so a holder the chain does not own is looked for
        first and reported instead of written over (server-side apply would merge into it)."""
        self.attempted.add(name)
        existing: Mapping[str, Any] | None = None
        error: ApiError | None = None
        if uncached and self.owner is not None:
            existing = await self._holder(name)
            if existing is not None and not is_ours(
                existing, owner=self.owner, field_managers=self.field_managers
            ):
                entries = _meta(existing).get("managedFields") or ()
                writers = ", ".join(sorted({str(e.get("manager")) for e in entries})) or "unknown"
                error = ApiError(409, "AlreadyExists", {"message": f"already exists, written by {writers}"})
        if error is None:
            try:
                await write()
            except ApiError as exc:
                if exc.status not in _PER_OBJECT:
                    raise
                error = exc
                existing = await self._holder(name)
        if error is not None:
            failure = write_failure(
                self.resource,
                name,
                self.namespace,
                error,
                existing,
                owner=self.owner,
                field_managers=self.field_managers,
            )
            self.failed.append(failure)
            targets = [r for r in regarding if r is not None] or ([existing] if existing else [])
            self.steps.report(failure, targets)
            return False
        self.steps.cleared(self.resource.kind, self.namespace, name)
        return True

    def finish(self) -> None:
        """Forget the failures of objects this pass no longer writes; raise when any write was refused."""
        self.steps.forget_failures(self.resource.kind, self.namespace, self.attempted)
        if self.failed:
            raise WritesRefused(self.failed)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


@dataclass
class Steps:
    """The chain's reconcile steps over one set of informers."""

    client: Client
    settings: Callable[[], ControllerSettings]
    nodes: Informer
    devices: Informer
    flavor_cache: Informer
    topology_cache: Informer
    queue_cache: Informer
    type_cache: Informer
    local_queue_cache: Informer
    namespaces: Informer
    checks: Informer
    system_namespace: str = kinds.SYSTEM_NAMESPACE
    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    #: The clock of the settle gate (:mod:`gpustack_worker.chain.settle`).
    monotonic: Callable[[], float] = field(default=time.monotonic)
    #: Warning Events for refused writes (None: the structured log line only).
    events: EventRecorder | None = None
    #: The refused writes last reported, by (kind, namespace, name): a repeat is not reported again.
    _refused: dict[tuple[str, str | None, str], WriteFailure] = field(default_factory=dict)
    #: The chain's view of every managed, profiled Node, by name, kept current by the Node informer's events.
    _hardware: dict[str, NodeHardware] = field(default_factory=dict)
    _hardware_list: list[NodeHardware] | None = None
    #: (mixed-on-node, family → how many profiled Nodes feed it), kept current by the Node handler.
    _family_counts: tuple[bool, collections.Counter[flavors.Family]] | None = None
    #: Names of those Nodes by label pair, for the pairs every flavor selector or accelerated pool pins
    #: (``<key>.count=<n>``, ``acceleratable.feature.gpustack.ai/<aKey>=true``): the candidates a selection
    #: is checked against, instead of every Node.
    _by_label: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    #: Parsed ``Devices`` by name, with the resourceVersion they were parsed from.
    _facts: dict[str, tuple[str, DevicesFacts]] = field(default_factory=dict)
    #: Pending Nodes (managed, profile not there yet): their view (profile "") and when first seen pending.
    _pending: dict[str, tuple[NodeHardware, float]] = field(default_factory=dict)
    #: When a pending Node last got its profile (or stopped being pending).
    _last_arrival: float | None = None
    #: Flavors this process wrote, by name → (the resourceVersion the server answered, when), until the
    #: flavor cache has reached it (the queue and status computed from the cache wait for them).
    _flavor_writes: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: A flavor pass is planning or writing (from its start: its first write, and the LIST of holders
    #: before it, are awaited while no flavor of the pass is in the cache or in ``_flavor_writes`` yet).
    _flavor_pass_writing: bool = False
    #: When the last flavor pass started (a profile that arrived later is not planned yet).
    _flavor_pass_started: float | None = None
    #: The families the last flavor pass left unwritten for their held pending Nodes: once one of them
    #: is no longer held (its Nodes' hold ran out, or they were deleted) that pass is out of date.
    _flavor_pass_blocked: frozenset[flavors.Family] = frozenset()
    #: (controller, key) → when the key first waited for the chain's own writes (the wait's bound).
    _waiting_since: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        c, fix = self.client, self.repaired
        self.flavor_applier = Applier(c, managers.FLAVOR, cache=self.flavor_cache, on_repair=fix)
        self.queue_applier = Applier(c, managers.QUEUE, cache=self.queue_cache, on_repair=fix)
        self.type_applier = Applier(c, managers.INSTANCE_TYPE, cache=self.type_cache, on_repair=fix)
        self.type_author = Applier(c, managers.AUTHOR, cache=self.type_cache)
        self.local_queue_applier = Applier(
            c, managers.LOCAL_QUEUE, cache=self.local_queue_cache, on_repair=fix
        )
        self.check_appliers = {
            name: Applier(c, name, cache=self.checks, on_repair=fix) for name in admissionchecks.CHECKS
        }
        self.flavor_pruner = Pruner(c, kinds.RESOURCE_FLAVOR, controller=managers.OWNER_FLAVORS)
        self.local_queue_pruner = Pruner(c, kinds.LOCAL_QUEUE, controller=managers.OWNER_LOCAL_QUEUES)
        self.finalizer = Finalizer(
            c, kinds.INSTANCE_TYPE, keys.FINALIZER_CONTROLLED, field_manager=managers.INSTANCE_TYPE
        )
        #: Objects created by the InstanceType author (tests count them).
        self.authored = 0
        # Every flavor, queue and InstanceType reconcile reads every Node's view; walking all Nodes per
        # reconcile dominated the controller's CPU at 5,000 Nodes, so the view is updated per Node event.
        self.nodes.add_handler(self._node_event)
        self.devices.add_handler(self._devices_event)

    # -- refused writes ----------------------------------------------------------------------------

    def report(self, failure: WriteFailure, regarding: Sequence[Mapping[str, Any]]) -> None:
        """Log ``failure`` and post a Warning on each of ``regarding`` — once per distinct failure."""
        key = (failure.kind, failure.namespace, failure.name)
        if self._refused.get(key) == failure:
            _log.debug("write still refused", kind=failure.kind, name=failure.where, status=failure.status)
            return
        self._refused[key] = failure
        _log.error(
            "write refused: the object is skipped, the others are written",
            kind=failure.kind,
            name=failure.where,
            status=failure.status,
            message=failure.message,
            foreign=failure.foreign,
            regarding=[str(_meta(r).get("name")) for r in regarding],
        )
        if self.events is not None:
            for obj in regarding:
                self.events.warning(obj, reason=failure.reason, action="Apply", note=failure.note())

    def repaired(self, resource: Resource, obj: Mapping[str, Any], fields: tuple[str, ...]) -> None:
        """A write put back ``fields`` another field manager had changed on ``obj``: a Warning on it (the
        Applier logs it; it reports once per such write, and the next pass is a no-op)."""
        if self.events is not None:
            meta = _meta(obj)
            ns, name = meta.get("namespace"), meta.get("name")
            note = (
                f"{resource.kind} {f'{ns}/{name}' if ns else name}: {', '.join(fields)} changed by another "
                "field manager; written back to the chain's value (the chain owns these fields: change the "
                "chain's inputs instead)"
            )
            self.events.warning(obj, reason=REASON_FIELDS_REPAIRED, action="Apply", note=note)

    def cleared(self, kind: str, namespace: str | None, name: str) -> None:
        """A write of the object was accepted: a later refusal is new again."""
        if self._refused.pop((kind, namespace, name), None) is not None:
            _log.info("write accepted again", kind=kind, name=f"{namespace}/{name}" if namespace else name)

    def forget_failures(self, kind: str, namespace: str | None, keep: Collection[str]) -> None:
        """Drop the remembered failures of ``kind`` in ``namespace`` for objects not in ``keep``."""
        for key in [k for k in self._refused if k[0] == kind and k[1] == namespace and k[2] not in keep]:
            del self._refused[key]

    def _plan_regarding(self, plan: FlavorPlan, *, aware: bool) -> list[Mapping[str, Any] | None]:
        """What a flavor belongs to: the InstanceType whose pool it feeds, else its first contributor."""
        it = self.type_cache.store.get(pools.derived_instance_type(plan, aware=aware)["metadata"]["name"])
        if it is not None:
            return [it]
        return [self.nodes.store.get(plan.nodes[0])] if plan.nodes else []

    # -- shared reads ------------------------------------------------------------------------------

    def _node_event(self, _event: str, old: Any | None, new: Any | None) -> None:
        """Keep the Node's chain view current (informer handler: the cache already holds ``new``)."""
        name = str(_meta(new if new is not None else old).get("name", ""))
        pending = unprofiled_hardware(new) if new is not None else None
        if pending is not None:
            seen = self._pending.get(name)
            self._pending[name] = (pending, seen[1] if seen is not None else self.monotonic())
        elif self._pending.pop(name, None) is not None:
            self._last_arrival = self.monotonic()
        view = node_hardware(new) if new is not None else None
        before = self._hardware.pop(name, None) if view is None else self._hardware.get(name)
        if view is None and before is None:
            return
        if before is not None:
            for pair in _indexed_pairs(before.labels):
                names = self._by_label.get(pair)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self._by_label[pair]
        if view is not None:
            self._hardware[name] = view
            for pair in _indexed_pairs(view.labels):
                self._by_label.setdefault(pair, set()).add(name)
        self._hardware_list = None
        if self._family_counts is not None:
            mixed, counts = self._family_counts
            if before is not None:
                counts.subtract(flavors.node_families(before, mixed_on_node=mixed))
            if view is not None:
                counts.update(flavors.node_families(view, mixed_on_node=mixed))

    def _live_families(self) -> set[flavors.Family]:
        """The families of every profiled Node's flavors (:func:`flavors.node_families`), kept as counts
        the Node handler updates, so asking costs nothing per Node."""
        mixed = self.settings().instance_type_mixed_on_node
        if self._family_counts is None or self._family_counts[0] != mixed:
            counts: collections.Counter[flavors.Family] = collections.Counter()
            for node in self._hardware.values():
                counts.update(flavors.node_families(node, mixed_on_node=mixed))
            self._family_counts = (mixed, counts)
        return {family for family, count in self._family_counts[1].items() if count > 0}

    def hardware(self) -> list[NodeHardware]:
        """Every managed, profiled Node's chain view (a fresh list; rebuilt only after a Node changed)."""
        if self._hardware_list is None:
            self._hardware_list = list(self._hardware.values())
        return list(self._hardware_list)

    def _with_pair(self, pair: tuple[str, str]) -> set[str]:
        return self._by_label.get(pair) or set()

    def _candidates(
        self, selectors: Iterable[Mapping[str, str]], extra: Iterable[str] = ()
    ) -> list[NodeHardware]:
        """Every Node a flavor selector of ``selectors`` may select, plus the Nodes named in ``extra``, by
        name (all Nodes when a selector pins no ``.count`` label: then no index narrows it)."""
        names = set(extra)
        for selector in selectors:
            pair = next(((k, v) for k, v in selector.items() if k.endswith(_COUNT)), None)
            if pair is None:
                return self.hardware()
            names |= self._with_pair(pair)
        return [self._hardware[n] for n in sorted(names) if n in self._hardware]

    def _queue_nodes(self, it: Mapping[str, Any] | None) -> list[NodeHardware]:
        """The Nodes a queue's plan can involve: an accelerated pool's Nodes and its flavors' candidates
        (the plan over them equals the plan over every Node); every Node for a CPU pool."""
        if it is None:
            return self.hardware()
        pool = pools.identity_of(it)
        if not pool.acceleratable or not pool.accelerator_group:
            return self.hardware()
        labels = pools.schedule_labels(pool, aware=self.settings().instance_type_aware_cpu_manufacturer)
        matching = pools.flavors_of(pools.flavor_selector(labels), self.flavor_cache.store.list())
        selectors = [(f.get("spec") or {}).get("nodeLabels") or {} for f in matching]
        return self._candidates(
            selectors, self._with_pair((keys.accelerator_key(pool.accelerator_group), "true"))
        )

    def _devices_event(self, _event: str, old: Any | None, new: Any | None) -> None:
        if new is None and old is not None:
            self._facts.pop(str(_meta(old).get("name", "")), None)

    def devices_facts(self, name: str) -> DevicesFacts | None:
        """The Node's parsed ``Devices`` (memoised per resourceVersion), or None without one."""
        obj = self.devices.store.get(name)
        if obj is None:
            self._facts.pop(name, None)
            return None
        rv = str(_meta(obj).get("resourceVersion", ""))
        memo = self._facts.get(name)
        if memo is None or memo[0] != rv:
            memo = (rv, devices_facts(obj))
            self._facts[name] = memo
        return memo[1]

    # -- the settle gate (chain/settle.py) ----------------------------------------------------------

    def held(self) -> settle.Held:
        """The pending Nodes that hold back what they feed, now."""
        return settle.held(
            {name: seen for name, (_view, seen) in self._pending.items()},
            last_arrival=self._last_arrival,
            now=self.monotonic(),
            settle=self.settings().chain_settle_seconds,
        )

    def _held_families(self, held: settle.Held) -> set[flavors.Family]:
        mixed = self.settings().instance_type_mixed_on_node
        out: set[flavors.Family] = set()
        for name in held.nodes:
            out |= flavors.node_families(self._pending[name][0], mixed_on_node=mixed)
        return out

    def _pool_held(self, it: Mapping[str, Any], held: settle.Held) -> bool:
        """A held pending Node will belong to the InstanceType's pool."""
        if not held.nodes:
            return False
        s = self.settings()
        pool = pools.identity_of(it)
        selector = pools.flavor_selector(
            pools.schedule_labels(pool, aware=s.instance_type_aware_cpu_manufacturer)
        )
        views = [self._pending[name][0] for name in sorted(held.nodes)]
        return bool(
            queues.pool_nodes(pool, views, mixed_on_node=s.instance_type_mixed_on_node, selector=selector)
        )

    def _own_flavor_writes(self, held: settle.Held) -> bool:
        """A profile arrived after the last flavor pass started (its flavor is not planned yet), a family
        that pass held back is free now (the next pass writes it), a flavor pass is running, or a flavor
        it wrote is not in the cache yet. An entry is dropped once the cache has reached it, or
        ``chain-settle-seconds`` after the write (a flavor deleted before the watch brought it never
        arrives). ``held``: :meth:`held` now (the caller has it)."""
        arrived = self._last_arrival
        if arrived is not None and (self._flavor_pass_started is None or arrived > self._flavor_pass_started):
            return True
        if self._flavor_pass_blocked and not self._flavor_pass_blocked <= self._held_families(held):
            return True
        now, limit = self.monotonic(), self.settings().chain_settle_seconds
        for name, (rv, at) in list(self._flavor_writes.items()):
            if (_rv(self.flavor_cache.store.get(name)) or 0) >= rv or now - at >= limit:
                del self._flavor_writes[name]
        return self._flavor_pass_writing or bool(self._flavor_writes)

    def _topology_on_its_way(self) -> bool:
        """A cached flavor names a generated Topology the cache does not hold (:func:`settle.
        topology_on_its_way`)."""
        return settle.topology_on_its_way(self.flavor_cache.store.list(), self.topology_cache.store.keys())

    def _wait(self, controller: str, name: str, it: Mapping[str, Any], *, also: bool = False) -> float | None:
        """Seconds the write of ``controller``'s key ``name`` waits for complete inputs, or None to write
        now (:func:`settle.wait`): a held pending Node of the pool, the chain's own flavor writes in
        flight, a flavor's Topology on its way, or ``also`` (the status' queue not created yet) — the
        last three for at most ``chain-settle-seconds`` per key."""
        held = self.held()
        pool_held = self._pool_held(it, held)
        own = also or self._own_flavor_writes(held) or self._topology_on_its_way()
        key = (controller, name)
        if pool_held or not own:
            # Held Nodes have their own bound; the key's own bound counts from its first wait on writes.
            self._waiting_since.pop(key, None)
        if not pool_held and not own:
            return None
        now = self.monotonic()
        since = now if pool_held else self._waiting_since.setdefault(key, now)
        wait = settle.wait(
            held_for=held.recheck_after if pool_held else None,
            own_writes=own,
            waited=now - since,
            settle=self.settings().chain_settle_seconds,
        )
        if wait is None:
            self._waiting_since.pop(key, None)
        return wait

    def _tracked_flavor(self, name: str, write: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        """``write`` of the flavor ``name``, remembered until the flavor cache has it."""

        async def run() -> Any:
            written = await write()
            if written is not None:
                rv = _rv(written)
                if rv is not None and (_rv(self.flavor_cache.store.get(name)) or 0) < rv:
                    self._flavor_writes[name] = (rv, self.monotonic())
            return written

        return run

    # -- flavors, InstanceType authoring -----------------------------------------------

    async def flavors(self, _key: str) -> Result:
        # A flavor (and the InstanceType authored from it) whose family a held pending Node will join is
        # written once that Node's profile has arrived, not now and again then.
        held = self.held()
        blocked = self._held_families(held)
        if held.nodes and blocked >= self._live_families():
            # Every family is held (a cold fleet being labelled): no flavor to write, none to prune, so no
            # plan over every Node either — at 20,000 Nodes that was most of the controller's CPU.
            return Result.after(held.recheck_after) if held.recheck_after else Result.done()
        self._flavor_pass_started = self.monotonic()
        self._flavor_pass_blocked = frozenset(blocked)
        s = self.settings()
        hardware = self.hardware()
        planned = flavors.plan_flavors(hardware, mixed_on_node=s.instance_type_mixed_on_node)
        requeue: float | None = None
        plans = [p for p in planned if p.family not in blocked]

        desired = {
            p.name: stamp(
                flavors.flavor_body(
                    p,
                    mixed_on_node=s.instance_type_mixed_on_node,
                    aware=s.instance_type_aware_cpu_manufacturer,
                ),
                managers.OWNER_FLAVORS,
            )
            for p in plans
        }
        by_name = {p.name: p for p in plans}
        batch = self._flavor_batch()
        batch.attempted |= {p.name for p in planned if p.family in blocked}  # their refusals stay known
        # From here the pass awaits (a LIST of holders, each write): until it ends, a queue or a status
        # computed from the flavor cache would see a partial set of this pass's flavors, and wait.
        self._flavor_pass_writing = True
        try:
            for name, body in desired.items():
                regarding = self._plan_regarding(by_name[name], aware=s.instance_type_aware_cpu_manufacturer)
                if not validation.is_dns1123_subdomain(name):
                    # Never valid as built: reported, not retried (a Node change re-plans it).
                    why = "; ".join(validation.dns1123_subdomain(name))
                    error = ApiError(_INVALID, "Invalid", {"message": why})
                    failure = write_failure(
                        kinds.RESOURCE_FLAVOR, name, None, error, None, owner=None, field_managers=()
                    )
                    self.report(failure, [r for r in regarding if r is not None])
                    batch.attempted.add(name)
                    continue
                cached = self.flavor_cache.store.get(name)
                if cached is not None and _meta(cached).get("deletionTimestamp"):
                    requeue = REPLACE_POLL_S  # being replaced: wait until Kueue lets it go
                    continue
                if cached is not None and (drift := flavors.flavor_topology_drift(body, cached)):
                    # No EventRecorder in the chain's steps: a structured error log names the drift. The
                    # queue refuses the flavor (MissingTopology) until an admin removes it.
                    _log.error(
                        "flavor topology drift: left unmodified (immutable in Kueue); delete it to recreate",
                        flavor=name,
                        drift=drift,
                    )
                    continue
                if cached is not None and flavors.immutable_spec_changed(body, cached):
                    _log.info("replacing flavor whose immutable selector changed", flavor=name)
                    await batch.write(
                        name, partial(self._delete, kinds.RESOURCE_FLAVOR, cached), regarding=regarding
                    )
                    requeue = REPLACE_POLL_S
                    continue
                await batch.write(
                    name,
                    self._tracked_flavor(name, batch.apply(self.flavor_applier, body, cached)),
                    uncached=cached is None,
                    regarding=regarding,
                )
            if not held.nodes:
                # Nothing is pruned while a held Node may still select a flavor (its profile is arriving).
                await self.flavor_pruner.prune(self.flavor_cache.store.list(), {p.name for p in planned})
        finally:
            self._flavor_pass_writing = False
        authored = None
        if s.instance_type_derived_from_node:
            authored = await self._author(plans, aware=s.instance_type_aware_cpu_manufacturer)
        try:
            batch.finish()
        finally:
            # Both batches forget what they no longer write, even when the flavors' one raises first.
            if authored is not None:
                authored.finish()
        waits = [w for w in (requeue, held.recheck_after) if w]
        return Result.after(min(waits)) if waits else Result.done()

    def _flavor_batch(self) -> _Batch:
        return _Batch(
            self, kinds.RESOURCE_FLAVOR, owner=managers.OWNER_FLAVORS, field_managers=(managers.FLAVOR,)
        )

    async def _author(self, plans: list[FlavorPlan], *, aware: bool) -> _Batch:
        """Create the pool's InstanceType when none of that name exists (create-only, never updated)."""
        batch = _Batch(self, kinds.INSTANCE_TYPE, owner=None, field_managers=(managers.AUTHOR,))
        done: set[str] = set()
        for plan in plans:
            body = pools.derived_instance_type(plan, aware=aware)
            name = body["metadata"]["name"]
            if name in done or self.type_cache.store.get(name) is not None:
                continue
            done.add(name)
            node = self.nodes.store.get(plan.nodes[0]) if plan.nodes else None
            await batch.write(name, partial(self._create_type, name, body), regarding=[node])
        return batch

    async def _create_type(self, name: str, body: Mapping[str, Any]) -> None:
        try:
            # None: our own create of it is on its way to the cache.
            if await self.type_author.create(kinds.INSTANCE_TYPE, body) is None:
                return
        except Conflict:
            return  # AlreadyExists: someone (an admin, or our cache lagging) has it — never touched
        self.authored += 1
        _log.info("authored InstanceType", instance_type=name)

    async def _delete(self, resource: Any, cached: Mapping[str, Any]) -> None:
        meta = _meta(cached)
        with contextlib.suppress(Conflict):  # a newer object of that name: not the one we decided on
            await self.client.delete(resource, str(meta["name"]), meta.get("namespace"), uid=meta.get("uid"))

    # -- the ClusterQueue --------------------------------------------------------------------------

    def queue_inputs(self, name: str) -> queues.QueueInputs:
        """What the queue decision of the InstanceType name ``name`` reads, from the caches
        (:func:`inputs.queue_inputs`; the Nodes: :meth:`_queue_nodes`)."""
        it = self.type_cache.store.get(name)
        return inputs.queue_inputs(
            it,
            self.queue_cache.store.get(name),
            flavors=self.flavor_cache.store.list(),
            nodes=self._queue_nodes(it),
            topologies=self.topology_cache.store.keys(),
            active_checks=admissionchecks.active_checks(self.checks.store.list()),
            settings=self.settings(),
        )

    async def queue(self, name: str) -> Result:
        inp = self.queue_inputs(name)
        it, queue = inp.instance_type, inp.queue
        decision = queues.decide(inp)
        if decision.body is None:
            if queue is not None and decision.condition is not None:
                # Not ours to change (UnsupportedExistingObject): only the condition is reported.
                await self._queue_condition(name, queue, decision.condition)
            return Result.done()
        if decision.drain_only:
            current = ((queue or {}).get("spec") or {}).get("stopPolicy")
            if queue is not None and current != queues.HOLD_AND_DRAIN:
                with contextlib.suppress(NotFound):
                    await self.client.patch(
                        kinds.CLUSTER_QUEUE, name, decision.body, field_manager=managers.QUEUE
                    )
            return Result.done()
        if it is not None and settle.deferrable(decision.body, queue):
            # A plan, quota or TopologyReady from a partial view: written once its inputs are complete.
            wait = self._wait("queue", name, it)
            if wait is not None:
                return Result.after(wait)
        written = await self.queue_applier.apply(kinds.CLUSTER_QUEUE, decision.body, queue, force=True)
        if written is not None:
            for note in decision.notes:
                _log.info(note, queue=name)
        target = written if written is not None else queue
        if target is not None and decision.condition is not None:
            await self._queue_condition(name, target, decision.condition)
        return Result.after(decision.requeue_after) if decision.requeue_after else Result.done()

    async def _queue_condition(self, name: str, queue: Mapping[str, Any], cond: queues.Condition) -> None:
        generation = _meta(queue).get("generation")
        wanted = conditions.Condition(
            keys.TOPOLOGY_READY,
            cond.status,
            cond.reason,
            cond.message,
            observed_generation=int(generation) if generation is not None else None,
        )
        current = (queue.get("status") or {}).get("conditions") or ()
        body = {
            "apiVersion": kinds.CLUSTER_QUEUE.api_version,
            "kind": kinds.CLUSTER_QUEUE.kind,
            "metadata": {"name": name},
            "status": {"conditions": conditions.for_apply(current, [wanted], now=self.now())},
        }
        await self.queue_applier.apply_status(kinds.CLUSTER_QUEUE, body, queue)

    # -- the InstanceType --------------------------------------------------------------------------

    async def instance_type(self, name: str) -> Result:
        it = self.type_cache.store.get(name)
        if it is None:
            return Result.done()
        queue = self.queue_cache.store.get(name)
        decision, _read = inputs.type_decision(it, queue)
        if decision.add_finalizer:
            await self.finalizer.add(it)
        if decision.delete_queue and queue is not None:
            await self._delete(kinds.CLUSTER_QUEUE, queue)
        if decision.remove_finalizer:
            await self.finalizer.remove(it)
            return Result.done()
        if decision.backfill_inactive:
            await self.client.patch(
                kinds.INSTANCE_TYPE, name, {"spec": {"inactive": True}}, field_manager=managers.INSTANCE_TYPE
            )
        if not _meta(it).get("deletionTimestamp"):
            # The status of a pool still being labelled, or before the queue controller created its queue,
            # is written once they are there (finalizer, teardown and backfill above never wait).
            wait = self._wait("instancetype", name, it, also=queue is None)
            if wait is not None:
                return Result.after(wait)
        status = self.pool_status(it, queue, decision)
        body = {
            "apiVersion": kinds.INSTANCE_TYPE.api_version,
            "kind": kinds.INSTANCE_TYPE.kind,
            "metadata": {"name": name},
            "status": status,
        }
        await self.type_applier.apply_status(kinds.INSTANCE_TYPE, body, it)
        return Result.after(decision.requeue_after) if decision.requeue_after else Result.done()

    def pool_status(
        self, it: Mapping[str, Any], queue: Mapping[str, Any] | None, decision: TypeDecision
    ) -> dict[str, Any]:
        """The status the InstanceType step applies, from the caches (:func:`inputs.pool_status`; the
        Nodes: :meth:`_pool_candidates`)."""
        return inputs.pool_status(
            it,
            queue,
            decision,
            flavors=self.flavor_cache.store.list(),
            nodes=self._pool_candidates(it),
            facts=self.devices_facts,
            settings=self.settings(),
        )

    def _pool_candidates(self, it: Mapping[str, Any]) -> list[NodeHardware]:
        """The Nodes the pool's cached flavors may select (the candidate index, not every Node)."""
        chosen = typestatus.pool_flavors(
            it, self.flavor_cache.store.list(), aware=self.settings().instance_type_aware_cpu_manufacturer
        )
        selectors: list[Mapping[str, str]] = [(f.get("spec") or {}).get("nodeLabels") or {} for f in chosen]
        return self._candidates(selectors) if selectors else []

    # -- LocalQueues ---------------------------------------------------------------------------------

    async def local_queues(self, namespace: str) -> Result:
        ns = self.namespaces.store.get(namespace)
        desired: dict[str, dict[str, Any]] = {}
        if ns is not None:
            desired = localqueues.desired_local_queues(
                ns,
                self.queue_cache.store.list(),
                system_namespace=self.system_namespace,
                selector=_namespace_selector(self.settings().local_queue_namespace_selector),
            )
        batch = _Batch(
            self,
            kinds.LOCAL_QUEUE,
            owner=managers.OWNER_LOCAL_QUEUES,
            field_managers=(managers.LOCAL_QUEUE,),
            namespace=namespace,
        )
        for name, body in desired.items():
            cached = self.local_queue_cache.store.get(f"{namespace}/{name}")
            stamped = stamp(body, managers.OWNER_LOCAL_QUEUES)
            write = batch.apply(self.local_queue_applier, stamped, cached)
            await batch.write(name, write, uncached=cached is None, regarding=[ns])
        ours = [q for q in self.local_queue_cache.store.list() if _meta(q).get("namespace") == namespace]
        await self.local_queue_pruner.prune(ours, {f"{namespace}/{n}" for n in desired})
        batch.finish()
        return Result.done()

    # -- AdmissionChecks -----------------------------------------------------------------------------

    async def admission_checks(self, _key: str) -> Result:
        batch = _Batch(self, kinds.ADMISSION_CHECK, owner=None, field_managers=tuple(admissionchecks.CHECKS))
        for name, body in admissionchecks.desired_admission_checks().items():
            cached = self.checks.store.get(name)
            await batch.write(name, batch.apply(self.check_appliers[name], body, cached))
        batch.finish()
        return Result.done()


_COUNT: Final = ".count"


@functools.lru_cache(maxsize=8)
def _namespace_selector(text: str) -> LabelSelector:
    """The parsed ``local-queue-namespace-selector`` (the settings model has validated it)."""
    return parse_selector(text)


def _indexed_pairs(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """The label pairs of a Node the candidate index keeps."""
    return [
        (k, v)
        for k, v in labels.items()
        if k.endswith(_COUNT) or (v == "true" and k.startswith(keys.ACCELERATABLE_PREFIX))
    ]


def _rv(obj: Mapping[str, Any] | None) -> int | None:
    """An object's resourceVersion as a number (None when absent or not numeric)."""
    try:
        return int(str(_meta(obj).get("resourceVersion", "")))
    except ValueError:
        return None
