"""What every long-running command sets up the same way: JSON logs, tracing, the API client, the event-loop
lag monitor (:mod:`gpustack_worker.runtime.looplag`) and a stop event set by SIGTERM/SIGINT (removed again,
and the client closed, when the command returns)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from gpustack_worker.cli.settings import WorkerSettings, boot_settings
from gpustack_worker.runtime.client import Client, user_agent_of
from gpustack_worker.runtime.looplag import LoopLagMonitor
from gpustack_worker.runtime.telemetry import configure_logging, configure_tracing
from gpustack_worker.runtime.version import VERSION

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("Process", "running")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_log = structlog.get_logger("gpustack_worker.cli.process")


@dataclass(frozen=True, slots=True)
class Process:
    """The process-wide pieces a command builds its manager from."""

    #: Settings from the environment alone: the start-up-only settings (and the log level until the
    #: ConfigMap is read).
    boot: WorkerSettings
    client: Client
    #: Set by SIGTERM/SIGINT: the manager drains and returns.
    stop: asyncio.Event


@contextlib.asynccontextmanager
async def running(
    kubeconfig: str | None,
    *,
    user_agent: str | None = None,
    context: str | None = None,
    request_timeout: float | None = None,
) -> AsyncIterator[Process]:
    """Configure logging and tracing, connect, log the start-up line, and turn SIGTERM/SIGINT into a
    graceful stop.

    ``kubeconfig`` and ``context`` are ``--kubeconfig`` and ``--context`` (:meth:`Client.connect`);
    ``request_timeout`` is ``--request-timeout`` (None: the ``api-timeout-seconds`` start-up setting), the
    deadline of every request.
    ``user_agent`` names the process and its identity on every request
    (``gpustack-worker-controller/<identity>``, ``gpustack-worker-agent/<node>``; the client adds
    ``gpustack-worker/<version>``), so the API server's audit log attributes each write to the process
    that made it. The start-up line names the version, the server and the context."""
    boot = boot_settings()
    configure_logging(boot.log_level)
    configure_tracing()
    client = await Client.connect(
        kubeconfig,
        context=context,
        timeout_s=boot.api_timeout_seconds if request_timeout is None else request_timeout,
        user_agent=user_agent,
    )
    _log.info(
        "gpustack-worker starting",
        version=VERSION,
        server=client.server,
        context=client.context or None,
        user_agent=user_agent_of(user_agent),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    lag = asyncio.ensure_future(LoopLagMonitor(boot.loop_lag_interval_seconds).run())
    try:
        yield Process(boot, client, stop)
    finally:
        lag.cancel()
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        await client.close()
