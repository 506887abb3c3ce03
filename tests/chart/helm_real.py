"""What the tests that install the chart with helm onto real nodes share: the helm runner, reads of the
release's Pods and Lease, the image the nodes hold."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.devcluster import helm
from gpustack_worker.devcluster.helm import RELEASE, Helm

if TYPE_CHECKING:
    from pathlib import Path

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

NS: Final = kinds.SYSTEM_NAMESPACE
#: A generous bound for a slow machine, never a measurement.
WITHIN: Final = 240.0

__all__ = ("NS", "RELEASE", "WITHIN", "Helm", "helm_runner", "holder", "pods", "ready", "tag_image")


def helm_runner(cluster: DevCluster, home: Path) -> Helm:
    """``helm ARGS…`` against ``cluster`` with its state kept in ``home``."""
    return helm.helm_runner(cluster.kubeconfig, home)


def tag_image(cluster: DevCluster, name: str, also: str) -> None:
    """Give image ``name`` a second name ``also`` in every real node's containerd."""
    assert cluster.real_nodes is not None
    for real in cluster.real_nodes.nodes:
        done = subprocess.run(
            [str(real.runtime.ctr), f"--address={real.layout.containerd_socket}", "--namespace=k8s.io",
             "images", "tag", name, also],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr


def pods(api: ApiBootstrap, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    listed = api.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}") or {}
    return [p for p in listed.get("items", []) if not (p.get("metadata") or {}).get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def holder(api: ApiBootstrap) -> str:
    lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE_NAME}") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")
