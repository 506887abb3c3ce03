"""Real nodes: kubelets on containerd + runc with a CNI bridge, kube-controller-manager and kube-proxy,
beside the simulated Nodes (gpustack_worker/devcluster/real_nodes.py).

Checked against the machine itself, not only the API: the container's process as the kernel sees it
(uid, read-only root, seccomp, capabilities), the Service's ClusterIP answered through kube-proxy's rules,
and nothing of the nodes left on the machine after the cluster stops.
"""

from __future__ import annotations

import ssl
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.devcluster import build
from gpustack_worker.devcluster.node import PAUSE_IMAGE_NAME
from gpustack_worker.devcluster.node_config import pod_subnet
from gpustack_worker.devcluster.real_nodes import KUBELET_HARD_CODED_DIR, KUBERNETES_SERVICE_IP, NODE_PREFIX
from tests.kit.cluster import own
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NODES = 2


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[DevCluster]:
    with own(
        "real-nodes",
        why="real kubelets, kube-controller-manager and kube-proxy: the session's control plane runs no Pod",
        kubelets=NODES,
    ) as cluster:
        yield cluster


@pytest.fixture
def api(real_cluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = real_cluster.bootstrap()
    yield client
    client.close()


def _pause_image() -> str:
    """The sandbox image every real node's containerd holds (imported at start)."""
    return f"{PAUSE_IMAGE_NAME}:{build.OPTIONAL['pause'].version}"


def _restricted_pod(name: str, image: str, node: str) -> dict[str, Any]:
    """The chart's Pod security settings: uid 65532, non-root, read-only root, RuntimeDefault seccomp,
    every capability dropped."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "securityContext": {
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _container_pid(real_cluster: DevCluster, container_id: str) -> int:
    """The container's first process, from its containerd's runc v2 task directory."""
    assert real_cluster.real_nodes is not None
    cid = container_id.removeprefix("containerd://")
    for real in real_cluster.real_nodes.nodes:
        pid_file = (
            real.layout.containerd_state / "io.containerd.runtime.v2.task" / "k8s.io" / cid / "init.pid"
        )
        if pid_file.exists():
            return int(pid_file.read_text().strip())
    raise AssertionError(f"no node's containerd runs container {cid}")


def test_every_real_node_registers_ready_beside_the_simulated_ones(
    real_cluster: DevCluster, api: ApiBootstrap
) -> None:
    nodes = {n["metadata"]["name"]: n for n in (api.get("/api/v1/nodes") or {})["items"]}
    real = sorted(n for n in nodes if n.startswith(NODE_PREFIX))
    assert real == [f"{NODE_PREFIX}{i}" for i in range(NODES)]
    for name in real:
        info = nodes[name]["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.35.4"
        assert info["containerRuntimeVersion"].startswith("containerd://1.6")
        ready = next(c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready
    # nfd-master's simulated Node is still there, untouched by any kubelet
    assert "devcluster-nfd-master" in nodes


def test_a_restricted_pod_runs_as_65532_on_a_read_only_root_with_seccomp_and_no_capabilities(
    real_cluster: DevCluster, api: ApiBootstrap
) -> None:
    name = f"restricted-{uuid.uuid4().hex[:8]}"
    node = f"{NODE_PREFIX}{NODES - 1}"
    api.create("/api/v1/namespaces/default/pods", _restricted_pod(name, _pause_image(), node))

    def running() -> dict[str, Any] | None:
        pod = api.get(f"/api/v1/namespaces/default/pods/{name}") or {}
        status = pod.get("status") or {}
        return pod if status.get("phase") == "Running" and status.get("podIP") else None

    pod = eventually_sync(running, within=120)
    assert pod["spec"]["nodeName"] == node
    subnet = pod_subnet(NODES - 1).rsplit(".", 2)[0]  # 10.244.<i>
    assert pod["status"]["podIP"].startswith(subnet + ".")
    # the ServiceAccount admission gave it its projected token (kube-controller-manager made the account)
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
    pid = _container_pid(real_cluster, pod["status"]["containerStatuses"][0]["containerID"])
    status = _proc_status(pid)
    assert status["Uid"].split() == ["65532"] * 4
    assert status["Gid"].split() == ["65532"] * 4
    assert status["Seccomp"] == "2"  # filter mode: RuntimeDefault
    assert int(status["CapEff"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    root = next(
        line.split()
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    )
    assert "ro" in root[5].split(","), root


def test_a_deployment_becomes_a_running_pod_through_the_controller_manager(
    real_cluster: DevCluster, api: ApiBootstrap
) -> None:
    name = f"deploy-{uuid.uuid4().hex[:8]}"
    template = _restricted_pod(name, _pause_image(), f"{NODE_PREFIX}0")
    api.create(
        "/apis/apps/v1/namespaces/default/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
            },
        },
    )

    def available() -> dict[str, Any] | None:
        deployment = api.get(f"/apis/apps/v1/namespaces/default/deployments/{name}") or {}
        return deployment if (deployment.get("status") or {}).get("availableReplicas") == 1 else None

    eventually_sync(available, within=120)


def test_the_kubernetes_service_ip_reaches_the_api_server_through_kube_proxy(
    real_cluster: DevCluster,
) -> None:
    """The ClusterIP a Pod's in-cluster config dials, answered from this machine through kube-proxy's DNAT
    to the address the API server advertises (the ``lease`` endpoint reconciler's endpoint)."""
    assert real_cluster.pki is not None
    context = ssl.create_default_context(cafile=str(real_cluster.pki.ca_cert))
    request = urllib.request.Request(
        f"https://{KUBERNETES_SERVICE_IP}/version",
        headers={"Authorization": f"Bearer {real_cluster.pki.admin_token}"},
    )

    def answered() -> str | None:
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                return str(response.read().decode())
        except OSError:
            return None

    assert '"gitVersion": "v1.35.4"' in eventually_sync(answered, within=90)


def test_stopping_the_cluster_leaves_no_node_on_the_machine(real_cluster: DevCluster) -> None:
    """Last in the module: the stop removes every container and shim, mount, directory, bridge and
    ``KUBE-*`` iptables chain (the kubelet's and kube-proxy's), IPv4 and IPv6."""
    assert real_cluster.real_nodes is not None and real_cluster.real_nodes.runtime is not None
    layouts = [real.layout for real in real_cluster.real_nodes.nodes]
    env = real_cluster.real_nodes.runtime.env
    real_cluster.stop()
    mounts = Path("/proc/self/mountinfo").read_text()
    for layout in layouts:
        assert str(layout.run) not in mounts and str(layout.state) not in mounts
        assert not layout.run.parent.exists() and not layout.state.parent.exists()
        link = subprocess.run(["ip", "link", "show", layout.bridge], capture_output=True, check=False)
        assert link.returncode != 0, f"bridge {layout.bridge} is still there"
        shims = [
            c.parent.name
            for c in Path("/proc").glob("[0-9]*/cmdline")
            if str(layout.containerd_socket).encode() in _read(c)
        ]
        assert shims == [], f"processes still serve {layout.containerd_socket}: {shims}"
    # the device manager's hard-coded directory, made by this cluster's kubelets (none was there before)
    assert not KUBELET_HARD_CODED_DIR.exists()
    for save in ("iptables-save", "ip6tables-save"):
        rules = subprocess.run([save], capture_output=True, text=True, env=env, check=False)
        assert rules.returncode == 0, rules.stderr
        assert [line for line in rules.stdout.splitlines() if "KUBE-" in line] == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended while the test looked
        return b""
