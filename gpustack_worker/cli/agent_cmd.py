"""``gpustack-worker agent``: the per-node stage-3 agent, or every node from one process.

In a cluster the DaemonSet runs it with ``NODE_NAME`` from the downward API, and the informers watch
that one Node (field selector). ``--all-nodes`` serves every node with the same reconcilers, for the
simulator, the dev cluster and the benchmarks. The kubeconfig comes from ``--kubeconfig``, else
``$KUBECONFIG``, else the in-cluster service account. Metrics (the default Prometheus registry) are
served on ``--metrics-bind``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from gpustack_worker.agent.controller import Agent
from gpustack_worker.runtime.client import Client

if TYPE_CHECKING:
    import argparse

__all__ = ("run",)


def _split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    return host or "0.0.0.0", int(port)


async def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGINT/SIGTERM; returns the process exit code."""
    node_name = None if args.all_nodes else (args.node_name or os.environ.get("NODE_NAME"))
    if not args.all_nodes and not node_name:
        print("agent: --node-name or $NODE_NAME is required unless --all-nodes", file=sys.stderr)
        return 2
    if args.metrics_bind:
        host, port = _split_bind(args.metrics_bind)
        start_http_server(port, addr=host)
    client = await Client.connect(args.kubeconfig)
    agent = Agent(
        client,
        node_name=node_name,
        namespace=args.namespace,
        settings_configmap=args.settings_configmap,
    )
    task = asyncio.create_task(agent.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    agent.shutdown()
    return 0
