"""The Manager: starts informers, waits for their caches, then runs controllers (as leader).

Start-up order follows controller-runtime: the health/metrics endpoint comes up first, informers list
and watch, and nothing reconciles before every cache has synced (a reconcile against a half-filled
cache would delete what it merely has not seen yet). After the sync the heap of cached objects is
``gc.freeze()``-d so the cyclic GC stops rescanning it (without a full collection first, which would hold
up the first reconcile by a scan of the whole cache). With a :class:`LeaderElector` the controllers
start only once this process leads; a standby keeps its informers (warm caches) and reports ready.
Losing leadership (the renew deadline passed: the elector's write fence is already closed, so no write
leaves the process) discards the queued keys, cancels in-flight reconciles and makes :meth:`Manager.run`
return 1 (the process exits and is restarted, like controller-runtime). So does any runner that ends on
its own — an informer, the registry, the settings source, a controller's worker pool or the elector —
whether it raised or returned: the error log line names it (``runner stopped, exiting``),
:attr:`Manager.failed` holds the name and readiness turns false, because a replica that keeps the Lease
while reconciling nothing must not look healthy. A stop request drains the
queues *while the elector keeps renewing* (up to ``shutdown_timeout``, then cancels; if the Lease is
lost meanwhile the drain is cut short the same way), then steps down (fence closed), releases the Lease
and returns 0. The node agent runs a Manager without an elector (and without a fence).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_worker.runtime.health import HealthServer
from gpustack_worker.runtime.registry import describe

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpustack_worker.runtime.controller import Controller
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.leader import LeaderElector
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import SettingsModel, SettingsSource

__all__ = ("CacheSyncTimeout", "Manager")

_log = structlog.get_logger("gpustack_worker.runtime.manager")


class CacheSyncTimeout(RuntimeError):
    """Informers did not complete their first list in time (the message names the ones that did not)."""


class Manager:
    """Owns the informers, controllers, optional leader election and the health endpoint."""

    def __init__(
        self,
        *,
        elector: LeaderElector | None = None,
        settings: SettingsSource[SettingsModel] | None = None,
        health_bind: str | None = None,
        cache_sync_timeout: float = 120.0,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.elector = elector
        self.settings = settings
        self.informers: list[Informer] = []
        self.registries: list[InformerRegistry] = []
        self.controllers: list[Controller] = []
        self.cache_sync_timeout = cache_sync_timeout
        self.shutdown_timeout = shutdown_timeout
        self.health = HealthServer(health_bind, self.ready) if health_bind else None
        self.synced = asyncio.Event()
        self.leading = asyncio.Event()
        #: The runner whose end made :meth:`run` return 1 (None while every runner runs).
        self.failed: str | None = None

    def add_informer(self, informer: Informer) -> Informer:
        self.informers.append(informer)
        return informer

    def add_registry(self, registry: InformerRegistry) -> InformerRegistry:
        """Run ``registry`` with the informers: every informer it holds at start (or gets while the caches
        sync) has listed before any controller runs; one added later is started by the registry at once
        (a controller built then takes it from ``await registry.synced(...)``)."""
        self.registries.append(registry)
        return registry

    def add_controller(self, controller: Controller) -> Controller:
        self.controllers.append(controller)
        return controller

    def ready(self) -> bool:
        """Readiness: no runner has stopped (:attr:`failed`), every cache has synced (leaders and standbys
        alike) and none has stopped following the server (:attr:`Informer.healthy`, e.g. a watch refused 401
        on every retry)."""
        if self.failed is not None or not self.synced.is_set():
            return False
        return all(inf.healthy for inf in self._all_informers())

    def _all_informers(self) -> list[Informer]:
        """The informers added directly and those of every registry."""
        return [*self.informers, *(inf for reg in self.registries for inf in reg.informers)]

    def _synced_informers(self) -> list[Informer]:
        """Every informer :meth:`_wait_synced` waits for: those added directly, every registry's (also one
        registered while the caches synced) and the settings source's. The ``caches synced`` line counts
        these, so its number is the number of informers that listed."""
        informers = self._all_informers()
        if self.settings is not None:
            informers.append(self.settings.informer)
        return informers

    def _runner_stopped(self, name: str, runner: asyncio.Future[Any]) -> None:
        """Record and log that ``runner`` ended on its own: the process is to exit non-zero."""
        self.failed = name
        error = None if runner.cancelled() else runner.exception()
        _log.error(
            "runner stopped, exiting",
            runner=name,
            outcome="cancelled" if runner.cancelled() else ("raised" if error else "returned"),
            exc_info=error,
        )

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (returns 0), leadership is lost (returns 1) or a runner ends on its own
        (returns 1, :attr:`failed` names it). :class:`CacheSyncTimeout` is raised as itself."""
        self.failed = None
        if self.health is not None:
            await self.health.start()
        runners: dict[asyncio.Future[Any], str] = {}
        main: asyncio.Future[int] | None = None
        try:
            for inf in self.informers:
                runners[asyncio.ensure_future(inf.run())] = f"informer {describe(inf)}"
            for reg in self.registries:
                runners[asyncio.ensure_future(reg.run())] = "informer registry"
            if self.settings is not None:
                runners[asyncio.ensure_future(self.settings.run())] = "settings source"
            main = asyncio.ensure_future(self._run_synced(stop))
            await asyncio.wait((main, *runners), return_when=asyncio.FIRST_COMPLETED)
            if main.done():
                return main.result()
            # An informer (or the registry, or the settings source) ended while we run: nothing keeps
            # that cache current any more, so stop the controllers and exit non-zero.
            dead = next(r for r in runners if r.done())
            self._runner_stopped(runners[dead], dead)
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)
            return 1
        finally:
            left = [r for r in (main, *runners) if r is not None and not r.done()]
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            if self.health is not None:
                await self.health.close()

    async def _run_synced(self, stop: asyncio.Event) -> int:
        stopper = asyncio.ensure_future(stop.wait())
        try:
            if not await self._wait_synced(stopper):
                return 0
            # Freeze without a full collection first: at 1,000 Nodes that collection took ~135 ms on the
            # path to the first reconcile (it scans every cached object once more) and found ~600
            # unreachable objects; those few are frozen with the cache and never freed — a one-time cost
            # well under a megabyte. Cached objects are still freed by reference counting when replaced.
            gc.freeze()
            self.synced.set()
            _log.info("caches synced", informers=len(self._synced_informers()))
            if self.elector is not None:
                campaign = asyncio.ensure_future(self.elector.campaign())
                await asyncio.wait((campaign, stopper), return_when=asyncio.FIRST_COMPLETED)
                if not campaign.done():
                    campaign.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await campaign
                    return 0
                campaign.result()
            self.leading.set()
            return await self._lead(stopper)
        finally:
            stopper.cancel()
            if self.elector is not None:
                await self.elector.release()

    async def _wait_synced(self, stopper: asyncio.Future[Any]) -> bool:
        """True once every cache synced, False if ``stopper`` fired first; :class:`CacheSyncTimeout` naming
        every informer still unsynced after ``cache_sync_timeout``. Leaves nothing pending either way."""
        waits = [inf.wait_synced() for inf in self.informers]
        waits.extend(reg.wait_synced() for reg in self.registries)
        if self.settings is not None:
            waits.append(self.settings.wait_synced())
        synced = asyncio.ensure_future(asyncio.gather(*waits))
        try:
            async with asyncio.timeout(self.cache_sync_timeout):
                await asyncio.wait((synced, stopper), return_when=asyncio.FIRST_COMPLETED)
            if not synced.done():
                return False  # stopped first
            synced.result()
            return True
        except TimeoutError:
            pending = [describe(inf) for inf in self._synced_informers() if not inf.has_synced]
            raise CacheSyncTimeout(
                f"caches did not sync within {self.cache_sync_timeout}s: "
                + (", ".join(pending) or "(every informer listed; a late registration is still syncing)")
            ) from None
        finally:
            if not synced.done():
                synced.cancel()
                await asyncio.gather(synced, return_exceptions=True)

    async def _lead(self, stopper: asyncio.Future[Any]) -> int:
        names = {asyncio.ensure_future(c.run()): f"controller {c.name}" for c in self.controllers}
        runners = list(names)
        holder = asyncio.ensure_future(self.elector.hold()) if self.elector is not None else None
        watched: list[asyncio.Future[Any]] = [stopper, *runners]
        if holder is not None:
            watched.append(holder)
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if holder is not None and holder.done():
                if holder.cancelled() or holder.exception() is not None:
                    self._runner_stopped("leader elector", holder)
                else:
                    # The fence closed at the renew deadline already; hand out nothing more and cancel.
                    _log.error("leadership lost, cancelling in-flight reconciles")
                await self._abort_controllers(runners)
                return 1
            if dead := [r for r in runners if r.done()]:
                # A worker pool ended while we lead: its keys are reconciled by no one. Exit non-zero so
                # the Lease goes to a replica that works (controller-runtime's manager does the same).
                self._runner_stopped(names[dead[0]], dead[0])
                await self._abort_controllers(runners)
                return 1
            # Graceful stop: the elector keeps renewing while the queues drain.
            drained = await self._drain_controllers(runners, holder)
            if failed := [r for r in runners if r.done() and not r.cancelled() and r.exception() is not None]:
                self._runner_stopped(names[failed[0]], failed[0])
                return 1
            return 0 if drained else 1
        finally:
            self.leading.clear()
            if holder is not None and self.elector is not None:
                self.elector.step_down()  # the fence closes; hold() returns after an in-flight renewal
                await asyncio.gather(holder, return_exceptions=True)
            leftover = [r for r in runners if not r.done()]
            for runner in leftover:
                runner.cancel()
            await asyncio.gather(*leftover, return_exceptions=True)

    async def _drain_controllers(
        self, runners: Sequence[asyncio.Future[None]], holder: asyncio.Future[None] | None
    ) -> bool:
        """Let in-flight and queued keys finish (up to ``shutdown_timeout``, then cancel); False when
        leadership was lost meanwhile (the rest is cancelled at once)."""
        for controller in self.controllers:
            controller.queue.shutdown()
        drained = asyncio.ensure_future(self._drained(runners))
        watched: list[asyncio.Future[Any]] = [drained]
        if holder is not None:
            watched.append(holder)
        try:
            async with asyncio.timeout(self.shutdown_timeout):
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            _log.warning("controllers did not drain in time, cancelling")
        lost = holder is not None and holder.done()
        if not drained.done():
            if lost:
                _log.error("leadership lost during the drain, cancelling in-flight reconciles")
            drained.cancel()
            await self._abort_controllers(runners)
        return not lost

    async def _drained(self, runners: Sequence[asyncio.Future[None]]) -> None:
        await asyncio.gather(*(c.queue.drain() for c in self.controllers))
        if runners:
            await asyncio.wait(runners)

    async def _abort_controllers(self, runners: Sequence[asyncio.Future[None]]) -> None:
        """Hand out no more keys and cancel every in-flight reconcile."""
        for controller in self.controllers:
            controller.queue.shutdown(discard=True)
        for runner in runners:
            runner.cancel()
        if runners:
            _, pending = await asyncio.wait(runners, timeout=self.shutdown_timeout)
            if pending:
                _log.error("reconciles ignored cancellation; their writes stay fenced", pending=len(pending))
