"""``gpustack-worker demo --kubelet``: the product installed with helm onto a real node, as a team would.

A kubelet (on containerd + runc, :mod:`gpustack_worker.devcluster.real_nodes`) registers as the demo's
node :data:`REAL_NODE`; the simulator dresses it like the scenario's other T4 machines (labels, the device
plugins' pools, the ``Devices`` ledger) without touching what the kubelet reports. The image built here is
imported into its containerd and ``helm install`` runs the chart with both workloads pinned to it: the
agent DaemonSet's Pod counts that node, two controller replicas elect a leader and serve the webhooks
through their Service. The other demo nodes are simulated (no kubelet: a Pod bound there never starts),
so their agents run as local processes with the agent's ServiceAccount, as their DaemonSet Pods would.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Final

from gpustack_worker.api import kinds, rbac
from gpustack_worker.devcluster import image
from gpustack_worker.devcluster.build import BuildError
from gpustack_worker.devcluster.helm import RELEASE, chart_dir, helm_runner, real_node_values
from gpustack_worker.devcluster.procs import ManagedProcess, StartupError, spawn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

__all__ = ("REAL_NODE", "InstallFailed", "install", "local_agents", "start_process")

#: The demo node a kubelet stands in for: a T4 machine in rack-b2 that no sample Pod is bound to (the
#: ``disagg`` deployment waits), so the demo's outcome is the same as on an all-simulated fleet.
REAL_NODE: Final = "t4-4"
#: helm's own bound on ``--wait`` (the Pods Ready); generous for a loaded two-core machine.
HELM_WAIT: Final = "5m"
#: A local agent's health and metrics endpoint: any free port on loopback.
_LOCAL_METRICS: Final = ("--metrics-bind=127.0.0.1:0",)


class InstallFailed(RuntimeError):
    """The image, its import or ``helm install`` failed; the message carries the tool's own output."""


def install(cluster: DevCluster, log: Callable[[str], None]) -> image.ProductImage:
    """Build (or reuse) the image, import it into the real nodes and ``helm install`` the chart, waiting
    for its Pods to be Ready. Spans go to the demo's Jaeger when it runs."""
    assert cluster.real_nodes is not None
    try:
        built = image.ensure_product_image(log=log)
        chart = chart_dir()
    except (BuildError, StartupError) as exc:
        raise InstallFailed(str(exc)) from exc
    cluster.real_nodes.import_image(built.tar)
    home = cluster.dir / "helm-home"
    home.mkdir(exist_ok=True)
    helm = helm_runner(cluster.kubeconfig, home, log)
    values = real_node_values(image.REPOSITORY, built.version, otel_endpoint=cluster.otlp_endpoint)
    args = ["install", RELEASE, str(chart), "-n", kinds.SYSTEM_NAMESPACE, *values]
    done = helm(*args, "--wait", "--timeout", HELM_WAIT)
    if done.returncode != 0:
        raise InstallFailed(f"helm {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return built


def local_agents(cluster: DevCluster, nodes: Iterable[str]) -> list[ManagedProcess]:
    """One agent process per simulated node, as the chart's agent ServiceAccount (made by the install)."""
    kubeconfig = cluster.service_account_kubeconfig(rbac.AGENT.name)
    return [
        start_process(
            cluster,
            f"agent-{name}",
            kubeconfig,
            "agent",
            f"--node-name={name}",
            *_LOCAL_METRICS,
            service="agent",
        )
        for name in nodes
    ]


def start_process(
    cluster: DevCluster, key: str, kubeconfig: Path, *args: str, service: str | None = None
) -> ManagedProcess:
    """``gpustack-worker ARGS…`` as a local process with ``kubeconfig``, logging to ``logs/<key>.log`` and
    stopped with the cluster; its spans go to the demo's Jaeger over OTLP (runtime/telemetry.py) as
    service ``gpustack-worker-<service or key>``."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    if cluster.jaeger is not None:
        env.update(cluster.jaeger.otel_env(f"gpustack-worker-{service or key}"))
    argv = [sys.executable, "-m", "gpustack_worker", *args]
    return spawn(cluster.procs, key, argv, cluster.dir / "logs" / f"{key}.log", env)
