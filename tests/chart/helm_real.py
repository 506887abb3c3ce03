"""What the tests that install the chart with helm onto real nodes share: the helm runner, reads of the
release's Pods and Lease, the image the nodes hold."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.devcluster import build

if TYPE_CHECKING:
    from pathlib import Path

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

RELEASE: Final = "gpustack-worker"
NS: Final = kinds.SYSTEM_NAMESPACE
#: The label every real node's kubelet registers with (devcluster/real_nodes.py).
REAL_NODE_LABEL: Final = "gpustack.ai/devcluster-real-node"
#: A generous bound for a slow machine, never a measurement.
WITHIN: Final = 240.0

Helm = Callable[..., subprocess.CompletedProcess[str]]


def helm_runner(cluster: DevCluster, home: Path) -> Helm:
    """``helm ARGS…`` against ``cluster`` with its state kept in ``home``."""
    binary = build.ensure_optional("helm")
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, check=False)

    return run


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


def get(api: ApiBootstrap, path: str) -> dict[str, Any] | None:
    response = api.request("GET", path)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def pods(api: ApiBootstrap, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    listed = get(api, f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}") or {}
    return [p for p in listed.get("items", []) if not (p.get("metadata") or {}).get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def holder(api: ApiBootstrap) -> str:
    lease = get(api, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE_NAME}") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")
