"""``gpustack-worker controller``: the cluster-wide controller process.

Runs a :class:`~gpustack_worker.runtime.manager.Manager` with leader election on the Lease
``worker.gpustack.ai`` in the system namespace (identity = hostname + pid unless given), the live
settings ConfigMap, and the health/metrics endpoint, with the topology controllers
(:class:`~gpustack_worker.topology.controller.Topology`: TopologySources, Node profiles, Kueue Topologies),
the stage-4 chain controllers (:class:`~gpustack_worker.chain.controller.Chain`) and the placement
controllers (:class:`~gpustack_worker.placement.controller.Placement`: ModelDeployment pod groups, the
joint check, Gate 3) running while this replica leads, and the admission webhooks on every replica;
standbys keep warm caches. The elector fences the process's client: every write
(controllers, Events, settings Events) passes only while this replica leads and its Lease is provably
its own, so a standby or a replica that lost the Lease writes nothing but its own Lease attempts.
SIGTERM/SIGINT stop it gracefully: queues drain while the Lease is still renewed, then the Lease is
released so a standby takes over at once; losing the Lease exits 1. Requests carry ``User-Agent:
gpustack-worker-controller/<identity> gpustack-worker/<version>``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from typing import TYPE_CHECKING, Final

import structlog

from gpustack_worker.api import kinds, rbac
from gpustack_worker.chain.controller import Chain
from gpustack_worker.cli.metrics_serving import secure_metrics
from gpustack_worker.cli.preflight.command import startup_problems
from gpustack_worker.cli.process import running
from gpustack_worker.cli.settings import open_settings
from gpustack_worker.cli.webhook_serving import admission_webhooks
from gpustack_worker.placement.controller import Placement
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.topology.controller import Topology

if TYPE_CHECKING:
    import argparse

__all__ = ("LEASE_NAME", "USER_AGENT", "default_identity", "run")

LEASE_NAME: Final = kinds.WORKER_GROUP
#: The controller's User-Agent is ``gpustack-worker-controller/<identity>`` (the client adds the version).
USER_AGENT: Final = "gpustack-worker-controller"
_log = structlog.get_logger("gpustack_worker.cli.controller")


def default_identity() -> str:
    """``<hostname>_<pid>``: unique per process, readable in the Lease."""
    return f"{socket.gethostname()}_{os.getpid()}"


async def run(args: argparse.Namespace) -> int:
    """Run the controller manager until SIGTERM/SIGINT (0) or lost leadership (1)."""
    namespace: str = getattr(args, "namespace", None) or kinds.SYSTEM_NAMESPACE
    identity: str = getattr(args, "identity", None) or default_identity()
    async with running(
        getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        request_timeout=getattr(args, "request_timeout", None),
        user_agent=f"{USER_AGENT}/{identity}",
    ) as proc:
        # Start-up preflight (docs/operations.md, Preflight): one line per missing piece, exit 1.
        if problems := await startup_problems(proc.client, rbac.CONTROLLER, prefix="controller"):
            print("\n".join(problems), file=sys.stderr)
            return 1
        settings = open_settings(
            proc.client,
            name=getattr(args, "settings_configmap", None),
            namespace=namespace,
            reporting_instance=identity,
        )
        elector = LeaderElector(
            proc.client,
            name=LEASE_NAME,
            namespace=namespace,
            identity=identity,
            lease_duration=proc.boot.leader_lease_seconds,
            renew_deadline=proc.boot.leader_renew_deadline_seconds,
            retry_period=proc.boot.leader_retry_period_seconds,
        )
        manager = Manager(
            elector=elector,
            settings=settings,
            health_bind=getattr(args, "metrics_bind", None) or "127.0.0.1:8080",
            cache_sync_timeout=proc.boot.cache_sync_timeout_seconds,
        )
        # Cluster-wide lists: the first one paged (InformerOptions.paged_first_list).
        options = dataclasses.replace(proc.boot.informer_options(), paged_first_list=True)
        registry = manager.add_registry(InformerRegistry(proc.client, options=options))
        chain = Chain(proc.client, settings, registry, system_namespace=namespace)
        topology = Topology(proc.client, settings, registry, system_namespace=namespace)
        placement = Placement(proc.client, settings, registry, system_namespace=namespace)
        for part in (topology, chain, placement):
            for controller in part.controllers:
                manager.add_controller(controller)
            part.start_keys()
        _log.info("controller starting", identity=identity, namespace=namespace)
        # every replica serves the webhooks, not only the leader
        async with (
            admission_webhooks(args, namespace=namespace, handlers=placement.handlers),
            secure_metrics(args, proc.client, manager.health),
        ):
            code = await manager.run(proc.stop)
        _log.info("controller stopped", exit_code=code)
        return code
