"""A small leader-elected controller that really writes, for the fencing cluster test.

``python -m tests.runtime.fencing_app --kubeconfig K --namespace NS --lease NAME --identity ID`` runs the
real runtime — Manager, LeaderElector (and so the client's write fence), informers, a Controller and the
server-side Applier — with one controller: every ConfigMap labelled ``fencing=source`` in ``NS`` is
mirrored into ``<name>-mirror`` (label ``fencing=mirror``) with the source's data plus ``writer: ID``.
Each reconcile first sleeps ``--delay`` seconds (or the source's ``data.delay``, so a test can keep one
reconcile in flight for as long as it likes), then applies. When the process is resumed (SIGCONT) it
also tries one write at once, ``<identity>-resumed`` — work that was pending while it was frozen, issued
whatever the Manager has noticed by then — and logs whether it was sent or refused; the process waits
for that attempt before it exits.

A source whose ``data.stall-who`` names this process's identity asks for a loop stall: its reconcile
issues :data:`STALL_WRITES` writes (``<identity>-stalled-<i>``, the pending work) and returns; when the
first of them has passed the write fence and is about to write its request headers (httpcore's ``trace``
hook), a loop callback blocks the event loop synchronously (``time.sleep``) until the file named by
``data.stall-until`` exists, so those writes are queued right behind the stall, as work is behind a relist
ingest or a GC pause. Each is logged as ``stall write refused`` (with ``fenced``, ``outcome`` and the
error) or ``stall write sent``, and the process waits for them before it exits; on exit it logs
``fencing app stopped`` with the exit code and ``fenced_writes`` (its ``gpustack_fenced_writes_total``).

Requests carry ``User-Agent:
fencing-app/ID``; the process authenticates with whatever its kubeconfig holds (the test gives each
process its own ServiceAccount token). Exit code: the Manager's (0 after SIGTERM, 1 after losing the
Lease).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.cli.process import running
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Fenced
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.metrics import FENCED_WRITES
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.resources import CONFIG_MAP
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    import httpx

    from gpustack_worker.runtime.client import Client

USER_AGENT: Final = "fencing-app"
FIELD_MANAGER: Final = "fencing-app"
LABEL: Final = "fencing"
SOURCE: Final = "source"
MIRROR: Final = "mirror"

#: Writes queued right behind a requested loop stall.
STALL_WRITES: Final = 3
#: A stall never outlasts this (a test that failed half-way must not leave a process blocked for good).
STALL_CAP_SECONDS: Final = 600.0

_log = structlog.get_logger("tests.runtime.fencing_app")


def block_until(path: str) -> None:
    """The loop stall: a synchronous wait (no await) until ``path`` exists."""
    _log.warning("loop stall begins", until=path)
    deadline = time.monotonic() + STALL_CAP_SECONDS
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    _log.warning("loop stall ends")


class Staller:
    """Writes queued right behind a loop stall (see the module docstring)."""

    def __init__(self, client: Client, namespace: str, identity: str) -> None:
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.tasks: list[asyncio.Task[None]] = []
        self._until: str | None = None

    def stall(self, until: str) -> None:
        """Issue the writes; the first one stalls the loop right before its request headers go out."""
        if self._until is not None:
            return  # once per process
        self._until = until
        session = self.client._api.session
        session.event_hooks["request"].append(self._hook)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._write(i)) for i in range(STALL_WRITES)]

    async def _hook(self, request: httpx.Request) -> None:
        if f"{self.identity}-stalled-" in request.url.path:
            request.extensions["trace"] = self._trace

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_headers.started" and self._until is not None:
            until, self._until = self._until, ""
            if until:
                asyncio.get_running_loop().call_soon(block_until, until)
                await asyncio.sleep(0)  # the rest of this write runs right after the stall

    async def _write(self, i: int) -> None:
        name = f"{self.identity}-stalled-{i}"
        body = mirror_of({"metadata": {"name": name, "namespace": self.namespace}}, self.identity)
        body["metadata"]["name"] = name
        try:
            await self.client.apply(CONFIG_MAP, body, field_manager=FIELD_MANAGER)
        except Exception as exc:
            _log.warning(
                "stall write refused",
                name=name,
                fenced=isinstance(exc, Fenced),
                outcome=getattr(exc, "outcome", None),
                error=str(exc),
            )
        else:
            _log.warning("stall write sent", name=name)


def fenced_writes() -> float:
    """This process's ``gpustack_fenced_writes_total``, all labels."""
    return sum(
        sample.value
        for metric in FENCED_WRITES.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def mirror_of(source: Any, writer: str) -> dict[str, Any]:
    """The desired mirror of one source ConfigMap."""
    meta = source["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-{MIRROR}",
            "namespace": meta["namespace"],
            "labels": {LABEL: MIRROR},
        },
        "data": {**dict(source.get("data") or {}), "writer": writer},
    }


async def main(args: argparse.Namespace) -> int:
    async with running(args.kubeconfig, user_agent=f"{USER_AGENT}/{args.identity}") as proc:
        client = proc.client
        sources = Informer(client, CONFIG_MAP, namespace=args.namespace, label_selector=f"{LABEL}={SOURCE}")
        mirrors = Informer(
            client,
            CONFIG_MAP,
            namespace=args.namespace,
            label_selector=f"{LABEL}={MIRROR}",
            transform=make_transform([FIELD_MANAGER]),
        )
        applier = Applier(client, FIELD_MANAGER, cache=mirrors)

        staller = Staller(client, args.namespace, args.identity)

        async def reconcile(key: str) -> Result:
            source = sources.store.get(key)
            if source is None:
                return Result.done()
            data = source.get("data") or {}
            if "stall-who" in data:
                if data["stall-who"] == args.identity and data.get("stall-until"):
                    staller.stall(str(data["stall-until"]))
                return Result.done()
            delay = float((source.get("data") or {}).get("delay") or args.delay)
            await asyncio.sleep(delay)
            source = sources.store.get(key)  # read again after the pause: level-triggered
            if source is None:
                return Result.done()
            desired = mirror_of(source, args.identity)
            cached = mirrors.store.get(f"{args.namespace}/{desired['metadata']['name']}")
            await applier.apply(CONFIG_MAP, desired, cached)
            return Result.done()

        queue = WorkQueue("fencing-mirror")
        controller = Controller("fencing-mirror", reconcile, queue, workers=args.workers)
        controller.watch(sources)
        elector = LeaderElector(
            client,
            name=args.lease,
            namespace=args.namespace,
            identity=args.identity,
            lease_duration=args.lease_seconds,
            renew_deadline=args.renew_deadline_seconds,
            retry_period=args.retry_period_seconds,
        )
        manager = Manager(
            elector=elector, health_bind=args.metrics_bind, shutdown_timeout=args.shutdown_timeout
        )
        manager.add_informer(sources)
        manager.add_informer(mirrors)
        manager.add_controller(controller)
        resumed: list[asyncio.Task[None]] = []

        async def write_on_resume() -> None:
            body = mirror_of({"metadata": {"name": "resumed", "namespace": args.namespace}}, args.identity)
            body["metadata"]["name"] = f"{args.identity}-resumed"
            try:
                await client.apply(CONFIG_MAP, body, field_manager=FIELD_MANAGER)
            except Exception as exc:
                _log.warning("resume write refused", error=repr(exc), fenced=isinstance(exc, Fenced))
            else:
                _log.warning("resume write sent")

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCONT, lambda: resumed.append(loop.create_task(write_on_resume())))
        # A standby's informers enqueue too; its workers start only once it leads.
        try:
            code = await manager.run(proc.stop)
            await asyncio.gather(*resumed, *staller.tasks)
        finally:
            loop.remove_signal_handler(signal.SIGCONT)
        _log.info("fencing app stopped", exit_code=code, fenced_writes=fenced_writes())
        return code


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fencing_app")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--metrics-bind", default="127.0.0.1:0")
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--lease-seconds", type=float, default=8.0)
    parser.add_argument("--renew-deadline-seconds", type=float, default=5.0)
    parser.add_argument("--retry-period-seconds", type=float, default=1.0)
    parser.add_argument("--shutdown-timeout", type=float, default=5.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
