"""``gpustack-worker controller``: the cluster-wide controller process.

Runs a :class:`~gpustack_worker.runtime.manager.Manager` with leader election on the Lease
``worker.gpustack.ai`` in the system namespace (identity = hostname + pid unless given), the live
settings ConfigMap, and the health/metrics endpoint. The scheduling-chain controllers are registered
here as later issues add them; until then the process elects a leader, keeps its settings current and
serves ``/healthz``, ``/readyz`` and ``/metrics``. SIGTERM/SIGINT stop it gracefully: queues drain and
the Lease is released so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import TYPE_CHECKING, Final

import structlog

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.settings import SettingsSource, settings_from
from gpustack_worker.runtime.telemetry import configure_logging, configure_tracing

if TYPE_CHECKING:
    import argparse

__all__ = ("LEASE_NAME", "default_identity", "run")

LEASE_NAME: Final = kinds.WORKER_GROUP
_log = structlog.get_logger("gpustack_worker.cli.controller")


def default_identity() -> str:
    """``<hostname>_<pid>``: unique per process, readable in the Lease."""
    return f"{socket.gethostname()}_{os.getpid()}"


async def run(args: argparse.Namespace) -> int:
    """Run the controller manager until SIGTERM/SIGINT (0) or lost leadership (1)."""
    namespace: str = getattr(args, "namespace", None) or kinds.SYSTEM_NAMESPACE
    identity: str = getattr(args, "identity", None) or default_identity()
    boot = settings_from(None)
    configure_logging(boot.log_level)
    configure_tracing()
    client = await Client.connect(getattr(args, "kubeconfig", None), timeout_s=boot.api_timeout_seconds)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        settings = SettingsSource(
            client,
            name=getattr(args, "settings_configmap", None) or "gpustack-settings",
            namespace=namespace,
            reporting_instance=identity,
        )
        elector = LeaderElector(client, name=LEASE_NAME, namespace=namespace, identity=identity)
        manager = Manager(
            elector=elector,
            settings=settings,
            health_bind=getattr(args, "metrics_bind", None) or "127.0.0.1:8080",
            cache_sync_timeout=boot.cache_sync_timeout_seconds,
        )
        _log.info("controller starting", identity=identity, namespace=namespace)
        code = await manager.run(stop)
        _log.info("controller stopped", exit_code=code)
        return code
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await client.close()
