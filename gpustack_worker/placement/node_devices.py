"""Gate 3's controllers: the thin I/O around :mod:`gpustack_worker.placement.gate3`.

Two controllers over shared informers, both writing as the check's field owner ``gpustack-node-devices``
(the check's own name, as GPUStack's check writes):

- ``node-devices-check`` [``gpustack-node-devices``]: marks the AdmissionCheck ``Active`` (condition
  ``Active=True``, reason ``Ready``) through ``/status`` once the chain has applied it; from then on the
  chain references it from every accelerated queue (while ``instance-type-derived-from-node``);
- ``node-devices-verdicts`` [Workload ``namespace/name``]: this check's ``status.admissionChecks`` entry
  of a Workload that holds a quota reservation, is not evicted, finished or admitted and has the entry
  ``Pending`` (:func:`~gpustack_worker.placement.gate3.needs_verdict`): ``Ready``, or ``Retry`` with
  ``requeueAfterSeconds: 30`` — Kueue then evicts the Workload, resets every check to ``Pending`` and
  requeues it no sooner than 30 s later. Never ``Rejected``, never a preemption.

Reads from informers: the Workloads (every namespace), the Nodes (labels: hostname → Node and the
flavors' pools), the ``Devices`` (checked by :func:`~gpustack_worker.api.devices_check.check_devices`
and parsed once per resourceVersion), the operator's ResourceFlavors, and the Pods Kueue has tied to a
PodSet (label ``kueue.x-k8s.io/podset``; indexed by ``namespace/<kueue.x-k8s.io/workload annotation>``)
for the inflight accounting. The ledgers of the nodes the Workload's hostname-level assignment names
are read once more, uncached, right before judging: the ledger
must be at least as fresh as the Pod cache that says which Pods it already holds, or a Pod seen as
held whose allocation the cached ledger does not show yet would leave its card looking free.

One Workload is judged at a time (one worker): two verdicts computed side by side could each promise
the same free card. After writing ``Ready`` the controller remembers it until the cache shows it, and
counts that Workload inflight meanwhile; a reconcile that still sees the Workload as it was before its
own write is skipped (the write's watch event brings the next one).

A request that never fits as the fleet stands (:mod:`~gpustack_worker.placement.gate3_parking`): while it
is retried the Workload carries Gate 3's record (an annotation, applied without a precondition: it is
Gate 3's own key); after ``node-devices-never-fits-retries`` retries it is parked — the record and
``spec.active=false`` in one forced apply with the Workload's ``resourceVersion``, and a ``NeverFits``
Warning Event on the Workload. A parked Workload is woken by every Node and ``Devices`` change (the
Workload index ``gate3-parked`` lists them) and reactivated once it fits a node of its pool. The record is
removed with a merge patch (Kueue's admission manager co-owns every annotation it read, so releasing it
from our apply would not remove it).

Kueue's reset of the entry on eviction is its protocol, not an edit: the Workload Applier's
``expected_change`` is :func:`~gpustack_worker.placement.checks.kueue_reset` (the informer keeps Kueue's
admission manager's managedFields for it); any other change of the entry is written back and reported,
with a ``FieldsRepaired`` Warning Event on the Workload.

How the entry is written: ``status.admissionChecks`` is a list keyed by ``name``, so the server-side
apply of the one item owns only that item's fields; the apply carries the Workload's
``resourceVersion``, so a verdict computed from a stale Workload (say, one Kueue just evicted) is refused
with 409 and retried from the fresh object. The runtime's no-op check skips an apply that changes
nothing.
"""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.devices_check import check_devices
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.api.settings import ControllerSettings
from gpustack_worker.placement import gate3, gate3_parking
from gpustack_worker.placement.checks import (
    CONFLICT_RETRY_S,
    WORKLOAD_MANAGERS,
    kueue_reset,
    mark_active,
    repair_reporter,
    workload_patch,
)
from gpustack_worker.placement.gate3_parking import Action
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Conflict, NotFound
from gpustack_worker.runtime.conditions import format_time
from gpustack_worker.runtime.controller import Controller, Result, semantic_changed
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.metrics import GATE3_VERDICTS, NEVER_FITTING
from gpustack_worker.runtime.queue import settings_queue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource

__all__ = ("CHECK_KEY", "FIELD_MANAGER", "POD_SELECTOR", "NodeDevicesCheck")

#: The check's field owner on Workloads and on the AdmissionCheck's status: the check's own name.
FIELD_MANAGER: Final = keys.NODE_DEVICES_CHECK
#: The singleton key of the ``node-devices-check`` controller.
CHECK_KEY: Final = keys.NODE_DEVICES_CHECK
#: Only Pods Kueue has tied to a PodSet are charged inflight; other Pods are not cached.
POD_SELECTOR: Final = keys.KUEUE_PODSET_LABEL
#: Pod index: ``namespace/<Workload name>`` from the ``kueue.x-k8s.io/workload`` annotation.
BY_WORKLOAD: Final = "gate3-workload"
#: Workload index: the Workloads Gate 3 parked (one value), woken by Node and Devices changes.
BY_PARKED: Final = "gate3-parked"
_PARKED: Final = "parked"
#: The Warning Event reason when Gate 3 parks a Workload.
REASON_NEVER_FITS: Final = "NeverFits"
ACTIVE_MESSAGE: Final = "the node-devices controller judges Workloads against the Devices ledgers"

_log = structlog.get_logger("gpustack_worker.placement.node_devices")


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _pod_workload(pod: Mapping[str, Any]) -> list[str]:
    """Index: ``namespace/<Workload>`` of a Pod Kueue tied to a Workload."""
    meta = _meta(pod)
    name = (meta.get("annotations") or {}).get(keys.KUEUE_WORKLOAD_ANNOTATION)
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def _parked_index(obj: Mapping[str, Any]) -> list[str]:
    """Index: the Workloads Gate 3 parked."""
    return [_PARKED] if gate3_parking.is_parked(obj) else []


def _workload_view(obj: Any) -> Any:
    """What decides whether a Workload is judged: its conditions, admission, this check's entry and Gate 3's
    record."""
    status = obj.get("status") or {}
    return (
        _meta(obj).get("deletionTimestamp"),
        (obj.get("spec") or {}).get("active"),
        tuple((c.get("type"), c.get("status")) for c in status.get("conditions") or ()),
        gate3.check_state(obj),
        status.get("admission") is not None,
        (_meta(obj).get("annotations") or {}).get(gate3_parking.RECORD),
    )


def _retries_bound(settings: RuntimeSettings) -> int:
    if isinstance(settings, ControllerSettings):
        return int(settings.node_devices_never_fits_retries)
    return int(ControllerSettings.model_fields["node_devices_never_fits_retries"].default)


class _DevicesView(Mapping[str, DevicesFacts]):
    """Node name → its checked ``Devices`` view, parsed lazily (memoised per resourceVersion)."""

    def __init__(
        self,
        informer: Informer,
        memo: dict[str, tuple[str, DevicesFacts]],
        fresh: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        self._informer = informer
        self._memo = memo
        #: Objects read uncached just now (None: the node has no Devices), preferred over the cache.
        self._fresh = fresh or {}

    def __getitem__(self, name: str) -> DevicesFacts:
        if name in self._fresh:
            read = self._fresh[name]
            if read is None:
                raise KeyError(name)
            return check_devices(devices_facts(read)).devices
        obj = self._informer.store.get(name)
        if obj is None:
            self._memo.pop(name, None)
            raise KeyError(name)
        rv = str(_meta(obj).get("resourceVersion", ""))
        found = self._memo.get(name)
        if found is None or found[0] != rv:
            checked = check_devices(devices_facts(obj))
            for finding in checked.findings:
                _log.debug("Devices finding", devices=name, finding=finding.note())
            found = (rv, checked.devices)
            self._memo[name] = found
        return found[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._informer.store.keys())

    def __len__(self) -> int:
        return len(self._informer.store)


class _PodsView(Mapping[tuple[str, str], "Sequence[Mapping[str, Any]]"]):
    """(namespace, Workload name) → the cached Pods Kueue tied to it."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer

    def __getitem__(self, key: tuple[str, str]) -> Sequence[Mapping[str, Any]]:
        found: list[Mapping[str, Any]] = self._informer.store.by_index(BY_WORKLOAD, f"{key[0]}/{key[1]}")
        return found

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for value in self._informer.store.index_values(BY_WORKLOAD):
            namespace, _, name = value.partition("/")
            yield (namespace, name)

    def __len__(self) -> int:
        return len(self._informer.store.index_values(BY_WORKLOAD))


class NodeDevicesCheck:
    """Gate 3's controllers over one informer registry."""

    def __init__(
        self,
        client: Client,
        registry: InformerRegistry,
        settings: SettingsSource[RuntimeSettings],
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.client = client
        self.clock = clock
        self.settings = settings
        boot = settings.current
        self.workloads = registry.informer(
            kinds.WORKLOAD,
            field_manager=WORKLOAD_MANAGERS,
            indexers={BY_PARKED: _parked_index},
        )
        NEVER_FITTING.watch(
            self.workloads.store, gate3_parking.never_fitting_state, gate3_parking.NEVER_FITTING_STATES
        )
        for state in (gate3.READY, gate3.RETRY):  # both series from the start (a rate never starts absent)
            GATE3_VERDICTS.labels(state=state)
        self.checks = registry.informer(kinds.ADMISSION_CHECK, field_manager=FIELD_MANAGER)
        self.nodes = registry.informer(kinds.NODE)
        self.devices = registry.informer(kinds.DEVICES)
        self.flavors = registry.informer(
            kinds.RESOURCE_FLAVOR, label_selector=f"{keys.RESOURCE_TYPE}={keys.TYPE_NODES}"
        )
        self.pods = registry.informer(
            kinds.POD, label_selector=POD_SELECTOR, indexers={BY_WORKLOAD: _pod_workload}
        )
        #: Warning Events on Workloads: a repaired edit of the entry, a parking.
        self.events = EventRecorder(
            client, controller=keys.NODE_DEVICES_CONTROLLER, instance=socket.gethostname()
        )
        self.workload_applier = Applier(
            client,
            FIELD_MANAGER,
            cache=self.workloads,
            on_repair=repair_reporter(self.events, keys.NODE_DEVICES_CHECK),
            expected_change=kueue_reset(keys.NODE_DEVICES_CHECK, decides_active=True),
        )
        self.check_applier = Applier(client, FIELD_MANAGER, cache=self.checks)
        self._devices_memo: dict[str, tuple[str, DevicesFacts]] = {}
        #: Workload key → (resourceVersion judged, resourceVersion written, state written), until the cache
        #: moves past the version judged.
        self._written: dict[str, tuple[str, str, str]] = {}
        #: The last verdict written per cached Workload (tests and the demo read them): key → state.
        self.verdicts: dict[str, str] = {}

        self.check_ctl = Controller(
            "node-devices-check", self.reconcile_check, settings_queue("node-devices-check", boot), workers=1
        )
        # One worker: one Workload judged at a time (two parallel verdicts could promise the same card).
        self.verdict_ctl = Controller(
            "node-devices-verdicts",
            self.reconcile_workload,
            settings_queue("node-devices-verdicts", boot),
            workers=1,
        )
        self.check_ctl.watch(self.checks, mapper=self._check_key)
        self.verdict_ctl.watch(self.workloads, predicates=[semantic_changed(_workload_view)])
        # A parked Workload resumes when the fleet changes: every Node and ledger change wakes the parked.
        self.verdict_ctl.watch(self.devices, mapper=self._parked_keys)
        self.verdict_ctl.watch(self.nodes, mapper=self._parked_keys)
        self.devices.add_handler(self._devices_event)

    @property
    def controllers(self) -> list[Controller]:
        return [self.check_ctl, self.verdict_ctl]

    def start_keys(self) -> None:
        """Keys that exist without any event: the AdmissionCheck singleton."""
        self.check_ctl.enqueue_all([CHECK_KEY])

    def resync(self) -> None:
        """Enqueue every key of both controllers."""
        self.check_ctl.enqueue_all([CHECK_KEY])
        self.verdict_ctl.enqueue_all(self.workloads.store.keys())

    # -- mappers and handlers ----------------------------------------------------------------------

    @staticmethod
    def _check_key(obj: Any) -> Iterable[str]:
        return (CHECK_KEY,) if _meta(obj).get("name") == CHECK_KEY else ()

    def _parked_keys(self, _obj: Any) -> Iterable[str]:
        return [
            f"{_meta(w).get('namespace')}/{_meta(w).get('name')}"
            for w in self.workloads.store.by_index(BY_PARKED, _PARKED)
        ]

    def _devices_event(self, _event: str, old: Any | None, new: Any | None) -> None:
        if new is None and old is not None:
            self._devices_memo.pop(str(_meta(old).get("name", "")), None)

    # -- reads -------------------------------------------------------------------------------------

    def nodes_labels(self) -> dict[str, dict[str, str]]:
        """Every cached Node's labels, by name."""
        return {
            str(_meta(n).get("name")): dict(_meta(n).get("labels") or {}) for n in self.nodes.store.list()
        }

    async def fresh_devices(self, names: Iterable[str]) -> dict[str, Mapping[str, Any] | None]:
        """The ``Devices`` of ``names`` read uncached (None for a node without one)."""
        out: dict[str, Mapping[str, Any] | None] = {}
        for name in names:
            # A consistent LIST narrowed to the one name: the same uncached read as a GET, under the
            # list verb the Devices informer already needs.
            items, _ = await self.client.list(kinds.DEVICES, field_selector=f"metadata.name={name}")
            out[name] = items[0] if items else None
        return out

    def cluster(
        self,
        nodes: dict[str, dict[str, str]] | None = None,
        fresh: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> gate3.Cluster:
        """What :func:`gate3.judge` reads, from the caches (Devices and Pods looked up lazily; ``fresh``
        Devices objects, read uncached, take precedence)."""
        nodes = self.nodes_labels() if nodes is None else nodes
        flavors = {
            str(_meta(f).get("name")): dict((f.get("spec") or {}).get("nodeLabels") or {})
            for f in self.flavors.store.list()
            if not _meta(f).get("deletionTimestamp")
        }
        return gate3.Cluster(
            nodes=nodes,
            devices=_DevicesView(self.devices, self._devices_memo, fresh),
            flavors=flavors,
            pods=_PodsView(self.pods),
        )

    def _remembered(self) -> frozenset[str]:
        """Workloads whose ``Ready`` this controller wrote and the cache does not show yet."""
        out = set()
        for key, (judged, _written, state) in list(self._written.items()):
            cached = self.workloads.store.get(key)
            if cached is None or str(_meta(cached).get("resourceVersion")) != judged:
                del self._written[key]
            elif state == gate3.READY:
                out.add(key)
        return frozenset(out)

    # -- reconciles --------------------------------------------------------------------------------

    async def reconcile_check(self, key: str) -> Result:
        """Mark the AdmissionCheck Active (once the chain has applied it)."""
        await mark_active(self.check_applier, self.checks.store.get(key), ACTIVE_MESSAGE, self.clock())
        return Result.done()

    async def reconcile_workload(self, key: str) -> Result:
        """Judge one Workload and write this check's entry (nothing when it is not ours to judge now); a
        Workload Gate 3 parked is resumed once it fits the fleet."""
        remembered = self._remembered()
        workload = self.workloads.store.get(key)
        if workload is None:
            self.verdicts.pop(key, None)
            return Result.done()
        if key in self._written:
            return Result.done()  # our own write is not cached yet: its watch event brings the next reconcile
        if gate3_parking.is_parked(workload):
            return await self._parked(key, workload)
        if not gate3.needs_verdict(workload):
            return Result.done()
        meta = _meta(workload)
        rv = str(meta.get("resourceVersion", ""))
        nodes = self.nodes_labels()
        fresh = await self.fresh_devices(gate3.assigned_nodes(workload, nodes))
        cluster = self.cluster(nodes, fresh)
        verdict = gate3.judge(workload, cluster, self.workloads.store.list(), remembered_ready=remembered)
        flavors = gate3.assigned_flavors(workload)
        found = gate3.shortfalls(workload, cluster, flavors) if verdict.state == gate3.RETRY else []
        decision = gate3_parking.decide_judged(
            workload, verdict, found, flavors, _retries_bound(self.settings.current)
        )
        if decision.action is Action.PARK:
            return await self._switch(key, workload, decision)
        verdict = gate3_parking.with_shortfall(verdict, decision.record)
        # Precondition: never judge a Workload newer than the one we read (see the module doc).
        body = workload_patch(
            workload,
            status={"admissionChecks": [gate3.entry_for_apply(workload, verdict, format_time(self.clock()))]},
        )
        try:
            written = await self.workload_applier.apply_status(kinds.WORKLOAD, body, workload)
        except Conflict:
            _log.debug("node-devices check: stale Workload, retrying", workload=key)
            return Result.after(CONFLICT_RETRY_S)
        except NotFound:
            return Result.done()
        if written is not None:
            self._written[key] = (rv, str(_meta(written).get("resourceVersion", "")), verdict.state)
            self.verdicts[key] = verdict.state
            GATE3_VERDICTS.labels(state=verdict.state).inc()
            _log.info("node-devices verdict", workload=key, state=verdict.state, message=verdict.message)
        await self._record(key, workload, decision.record)
        return Result.done()

    async def _record(
        self, key: str, workload: Mapping[str, Any], record: gate3_parking.Record | None
    ) -> None:
        """Keep ``record`` on the Workload (None: drop Gate 3's, if it has one). Gate 3's own annotation,
        applied without a precondition: it says what the fleet offers, whichever version of the Workload."""
        if record is None:
            await self._drop_record(workload)
            return
        body = workload_patch(workload)
        body["metadata"].pop("resourceVersion", None)
        body["metadata"]["annotations"] = {gate3_parking.RECORD: record.encode()}
        try:
            await self.workload_applier.apply(kinds.WORKLOAD, body, workload, force=True)
        except NotFound:
            return

    async def _drop_record(self, workload: Mapping[str, Any]) -> None:
        """Remove Gate 3's record. A merge patch, not an apply that releases it: Kueue's admission manager
        re-applies the Workload's annotations as it read them with every status write of its own
        (``baseSSAWorkload``), so it co-owns the record and a release alone would leave it in place."""
        meta = _meta(workload)
        if gate3_parking.RECORD not in (meta.get("annotations") or {}):
            return
        try:
            await self.client.patch(
                kinds.WORKLOAD,
                str(meta.get("name")),
                {"metadata": {"annotations": {gate3_parking.RECORD: None}}},
                namespace=str(meta.get("namespace")),
                field_manager=FIELD_MANAGER,
            )
        except NotFound:
            return

    async def _parked(self, key: str, workload: Mapping[str, Any]) -> Result:
        """A Workload Gate 3 parked: resume it once every role fits a node of its pool, else keep the
        record's largest fit current."""
        record = gate3_parking.read_record(workload)
        flavors = record.flavors if record is not None else {}
        found = gate3.shortfalls(workload, self.cluster(), flavors)
        return await self._switch(key, workload, gate3_parking.decide_parked(workload, found))

    async def _switch(
        self, key: str, workload: Mapping[str, Any], decision: gate3_parking.Decision
    ) -> Result:
        """Park (record + ``spec.active=false``), keep parked (the record) or resume (``spec.active=true``,
        no record): one forced apply with the Workload's ``resourceVersion`` as precondition."""
        metadata: dict[str, Any] = {}
        if decision.record is not None:
            metadata["annotations"] = {gate3_parking.RECORD: decision.record.encode()}
        spec = {"active": decision.action is Action.RESUME}
        body = workload_patch(workload, spec=spec)
        body["metadata"].update(metadata)
        try:
            written = await self.workload_applier.apply(kinds.WORKLOAD, body, workload, force=True)
        except Conflict:
            _log.debug("node-devices check: stale Workload, retrying", workload=key)
            return Result.after(CONFLICT_RETRY_S)
        except NotFound:
            return Result.done()
        if written is None:
            return Result.done()
        message = decision.record.message if decision.record is not None else ""
        if decision.action is Action.PARK:
            _log.info("node-devices check parked a Workload that never fits", workload=key, message=message)
            self.events.warning(workload, reason=REASON_NEVER_FITS, action="Park", note=message)
        elif decision.action is Action.RESUME:
            # Reactivated first, the record dropped after: an interrupted resume is an active Workload with
            # a record, judged as any other (its verdict drops the record), never a parked one left behind.
            _log.info("node-devices check resumed a parked Workload: it fits the fleet now", workload=key)
            await self._drop_record(workload)
        return Result.done()
