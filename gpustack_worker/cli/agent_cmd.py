"""``gpustack-worker agent``: the per-node stage-3 agent, or every node from one process.

In a cluster the DaemonSet runs it with ``NODE_NAME`` from the downward API, and the informers watch
that one Node (field selector). ``--all-nodes`` serves every node with the same reconcilers, for the
simulator, the dev cluster and the benchmarks. The kubeconfig comes from ``--kubeconfig``, else
``$KUBECONFIG``, else the in-cluster service account. Settings are the live ConfigMap
``--settings-configmap`` in ``--namespace`` (env seeds ``GPUSTACK_*`` under it; start-up-only settings
from the environment alone). The agent runs on a
runtime :class:`~gpustack_worker.runtime.manager.Manager` without leader election (every node has its
own agent): ``/healthz``, ``/readyz`` (ready once the caches synced) and ``/metrics`` on
``--metrics-bind``; SIGTERM/SIGINT stop it gracefully (queues drain) and the exit code is the
manager's. Logs are structlog JSON lines. Requests carry ``User-Agent:
gpustack-worker-agent/<node name or 'all-nodes'> gpustack-worker/<version>``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import structlog

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.metrics_serving import secure_metrics
from gpustack_worker.cli.preflight.command import startup_problems
from gpustack_worker.cli.process import running
from gpustack_worker.cli.settings import open_settings

if TYPE_CHECKING:
    import argparse

__all__ = ("USER_AGENT", "run")

#: The agent's User-Agent is ``gpustack-worker-agent/<node name or 'all-nodes'>``.
USER_AGENT = "gpustack-worker-agent"

_log = structlog.get_logger("gpustack_worker.cli.agent")


async def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGINT/SIGTERM; returns the process exit code."""
    all_nodes = bool(getattr(args, "all_nodes", False))
    node_name = None if all_nodes else (getattr(args, "node_name", None) or os.environ.get("NODE_NAME"))
    if not all_nodes and not node_name:
        print("agent: --node-name or $NODE_NAME is required unless --all-nodes", file=sys.stderr)
        return 2
    namespace: str = getattr(args, "namespace", None) or kinds.SYSTEM_NAMESPACE
    async with running(
        getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        request_timeout=getattr(args, "request_timeout", None),
        user_agent=f"{USER_AGENT}/{node_name or 'all-nodes'}",
    ) as proc:
        # Start-up preflight (docs/operations.md, Preflight): one line per missing piece, exit 1.
        if problems := await startup_problems(proc.client, rbac.AGENT, prefix="agent"):
            print("\n".join(problems), file=sys.stderr)
            return 1
        settings = open_settings(
            proc.client,
            name=getattr(args, "settings_configmap", None),
            namespace=namespace,
            reporting_instance=f"agent-{node_name or 'all-nodes'}",
            # One agent per node: a rejected ConfigMap is reported by Event from the controller (and
            # from an --all-nodes agent), not once per node; every agent logs it and counts it.
            post_events=all_nodes,
        )
        agent = Agent(
            proc.client,
            settings,
            node_name=node_name,
            namespace=namespace,
            health_bind=getattr(args, "metrics_bind", None) or "127.0.0.1:8080",
        )
        async with secure_metrics(args, proc.client, agent.manager.health):
            return await agent.run(proc.stop)
