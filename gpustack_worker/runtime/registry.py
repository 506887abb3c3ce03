"""One shared informer per (kind, namespace, label selector, field selector) — controller-runtime's cache.

Cluster-wide controllers read the same kinds (every chain controller reads Nodes; two of them read
ClusterQueues). Each informer is a LIST + WATCH and a full copy of its objects, so two controllers
must not each run their own: :class:`InformerRegistry` hands every controller that asks for the same
(resource, namespace, label selector, field selector) the same :class:`Informer`, and the indexes they
ask for are added to that one store.

Field managers. The ingest transform drops ``managedFields`` except the entries of the field managers
it was told about (the apply no-op check needs exactly those). A controller names its field manager
when it asks for an informer of a kind it writes (``field_manager=``), and every informer of that kind
keeps the entries of every manager registered for it. Registering a new manager for a kind whose
informers are already running is an error (:class:`RegistryError`): the objects already cached were
trimmed without that manager's entries, and Kubernetes offers no cheap way to re-read them short of a
full relist whose store replace would skip every unchanged resourceVersion. Controllers are wired at
start-up, so "declare every manager before start" costs nothing and keeps the cache exact.
Registering a manager for a kind that has no running informer yet is always allowed.

Start-up and late informers. :meth:`InformerRegistry.run` (the :class:`~.manager.Manager` runs it with
its own informers, and waits for :meth:`InformerRegistry.wait_synced` before any controller runs)
starts every informer registered so far, and any informer registered later is started at once in the
same task group. :meth:`InformerRegistry.synced` returns an informer only after its first LIST has been
stored, so a controller built after start from that informer never reconciles against an empty cache.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_worker.runtime.informer import Informer, InformerOptions
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.clock import Clock
    from gpustack_worker.runtime.indexers import IndexFunc
    from gpustack_worker.runtime.resources import Resource
    from gpustack_worker.runtime.transform import Transform

__all__ = ("InformerKey", "InformerRegistry", "RegistryError", "describe")

_log = structlog.get_logger("gpustack_worker.runtime.registry")


def describe(informer: Informer) -> str:
    """``plural[ in namespace][ labelSelector=..][ fieldSelector=..]``: which informer, for log lines."""
    parts = [informer.resource.plural]
    if informer.namespace:
        parts.append(f"in {informer.namespace}")
    if informer.label_selector:
        parts.append(f"labelSelector={informer.label_selector}")
    if informer.field_selector:
        parts.append(f"fieldSelector={informer.field_selector}")
    return " ".join(parts)


class RegistryError(RuntimeError):
    """A request the registry cannot serve without making a cache inexact."""


@dataclass(frozen=True, slots=True)
class InformerKey:
    """What makes two informers the same: kind, scope and selectors (selectors compared as given)."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class _KindTransform:
    """The ingest transform shared by every informer of one kind; rebuilt while managers are added."""

    def __init__(self) -> None:
        self.managers: set[str] = set()
        self._inner: Transform = make_transform(())

    def widen(self, managers: Iterable[str]) -> bool:
        new = set(managers) - self.managers
        if not new:
            return False
        self.managers |= new
        self._inner = make_transform(sorted(self.managers))
        return True

    @property
    def field_managers(self) -> frozenset[str]:
        """The managers whose managedFields entries this transform keeps (what the Applier checks)."""
        return frozenset(self.managers)

    def __call__(self, obj: dict[str, Any]) -> Any:
        return self._inner(obj)


class InformerRegistry:
    """Get-or-create informers; start them with the Manager, or at once when added after start."""

    def __init__(
        self,
        client: Client,
        *,
        options: InformerOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.options = options or InformerOptions()
        self._clock = clock
        self._informers: dict[InformerKey, Informer] = {}
        self._transforms: dict[Resource, _KindTransform] = {}
        self._running: set[Resource] = set()
        self._group: asyncio.TaskGroup | None = None
        self._stopped: asyncio.Future[None] | None = None
        self._failure: RegistryError | None = None
        self._indexers: dict[InformerKey, dict[str, IndexFunc]] = {}

    # -- registration ------------------------------------------------------------------------------

    def register_field_manager(self, resource: Resource, *field_managers: str) -> None:
        """Keep ``field_managers``' managedFields entries on every cached object of ``resource``.

        Raises :class:`RegistryError` when a manager is new for a kind whose informers already run.
        """
        managers = {m for m in field_managers if m}
        transform = self._transforms.setdefault(resource, _KindTransform())
        missing = managers - transform.managers
        if missing and resource in self._running:
            raise RegistryError(
                f"field manager(s) {sorted(missing)} registered for {resource.kind} after its informers "
                "started: the cached objects lack their managedFields entries; register every field "
                "manager before the registry starts"
            )
        transform.widen(managers)

    def field_managers(self, resource: Resource) -> frozenset[str]:
        """The managers whose managedFields entries informers of ``resource`` keep."""
        transform = self._transforms.get(resource)
        return frozenset(transform.managers) if transform is not None else frozenset()

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        field_manager: str | Collection[str] | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> Informer:
        """The shared informer for this kind, scope and selectors (created on first request).

        ``field_manager``: the manager(s) the asking controller writes ``resource`` with (see
        :meth:`register_field_manager`). ``indexers`` are added to the shared store; asking again for
        an index name with a different function is an error (two controllers would silently disagree
        on what the index means). An informer created after :meth:`run` started is started at once;
        use :meth:`synced` to also wait for its first LIST.
        """
        if field_manager is not None:
            managers = (field_manager,) if isinstance(field_manager, str) else tuple(field_manager)
            self.register_field_manager(resource, *managers)
        key = InformerKey(resource, namespace or None, label_selector or None, field_selector or None)
        informer = self._informers.get(key)
        if informer is None:
            transform = self._transforms.setdefault(resource, _KindTransform())
            informer = Informer(
                self.client,
                resource,
                namespace=key.namespace,
                label_selector=key.label_selector,
                field_selector=key.field_selector,
                transform=transform,
                options=self.options,
                clock=self._clock,
            )
            self._informers[key] = informer
            if self._group is not None:
                self._start(informer)
        if indexers:
            self._add_indexers(key, informer, indexers)
        return informer

    async def synced(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        field_manager: str | Collection[str] | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> Informer:
        """:meth:`informer`, returned once its cache holds the first complete LIST.

        Waits for :meth:`run` to start when it has not yet (so do not await this before the Manager
        runs; build start-up controllers with :meth:`informer` and let the Manager wait for them).
        """
        informer = self.informer(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            field_manager=field_manager,
            indexers=indexers,
        )
        await informer.wait_synced()
        return informer

    def _add_indexers(self, key: InformerKey, informer: Informer, indexers: Mapping[str, IndexFunc]) -> None:
        existing = self._indexers.setdefault(key, {})
        fresh: dict[str, IndexFunc] = {}
        for name, fn in indexers.items():
            have = existing.get(name)
            if have is None:
                fresh[name] = fn
            elif have is not fn:
                raise RegistryError(
                    f"index {name!r} on {informer.resource.kind} is already defined by another function"
                )
        if fresh:
            informer.add_indexers(fresh)
            existing.update(fresh)

    # -- reads ---------------------------------------------------------------------------------------

    @property
    def informers(self) -> list[Informer]:
        """Every informer created so far."""
        return list(self._informers.values())

    def get(self, key: InformerKey) -> Informer | None:
        """The informer for ``key`` if one was created."""
        return self._informers.get(key)

    def __len__(self) -> int:
        return len(self._informers)

    # -- running -------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """True while :meth:`run` is running."""
        return self._group is not None

    async def run(self) -> None:
        """Run every informer (present and future) until cancelled.

        Informers never end on their own; when one does (raised or returned) the others are cancelled and
        this raises :class:`RegistryError` naming it, so the Manager exits instead of serving a cache
        that no longer follows the server.
        """
        if self._group is not None:
            raise RegistryError("registry already running")
        stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stopped = stopped
        self._failure = None
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                for informer in self._informers.values():
                    self._start(informer)
                await stopped  # until cancelled, or until an informer ends
                if self._failure is not None:
                    raise self._failure
        except BaseExceptionGroup:
            if self._failure is not None:
                raise self._failure  # noqa: B904 - the informer's own error is its __cause__
            raise
        finally:
            self._group = None
            self._stopped = None
            self._running.clear()

    def _start(self, informer: Informer) -> None:
        assert self._group is not None
        self._running.add(informer.resource)
        task = self._group.create_task(informer.run(), name=f"informer {informer.resource.plural}")
        task.add_done_callback(lambda done: self._informer_ended(informer, done))
        _log.debug(
            "informer started",
            resource=informer.resource.plural,
            namespace=informer.namespace,
            label_selector=informer.label_selector,
            field_selector=informer.field_selector,
        )

    def _informer_ended(self, informer: Informer, task: asyncio.Task[None]) -> None:
        """Done-callback of an informer task: one that ended by itself (not cancelled) stops :meth:`run`."""
        if task.cancelled() or self._failure is not None:
            return
        error = task.exception()
        how = f"raised {error!r}" if error is not None else "returned"
        self._failure = RegistryError(f"informer {describe(informer)} stopped: {how}")
        self._failure.__cause__ = error
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)  # wake run(), which raises the failure

    async def wait_synced(self, *informers: Informer) -> None:
        """Wait until ``informers`` (default: every registered one, also those added meanwhile) synced."""
        if informers:
            await asyncio.gather(*(i.wait_synced() for i in informers))
            return
        while True:
            pending = [i for i in self._informers.values() if not i.has_synced]
            if not pending:
                return
            await asyncio.gather(*(i.wait_synced() for i in pending))
