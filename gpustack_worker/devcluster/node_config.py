"""What a real node of the dev cluster is configured with — pure functions, no I/O (table-tested).

A real node (:mod:`.node`) is a kubelet on its own containerd, with runc and a CNI bridge, all on this
machine. Several can run side by side: each has its own containerd (a kubelet kills every sandbox its
runtime holds that it does not know, so two kubelets must never share one), its own bridge and Pod
subnet, its own ports and directories. What differs from a production node, and why (docs/devcluster.md
"Real nodes"):

- ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``: this machine has cgroup v1 and no systemd; the
  kubelet refuses v1 unless told, and the systemd driver needs systemd.
- ``cgroupsPerQOS: false`` and no node-allocatable enforcement: several kubelets share one cgroup
  hierarchy, and each would otherwise claim ``/kubepods`` as its own.
- ``failSwapOn: false``; eviction thresholds at 0 % for disk: a test machine's disk is not the node's.
- containerd's ``restrict_oom_score_adj = true``: without it every sandbox fails here with ``runc create
  failed: … can't get final child's PID from pipe: EOF`` (the VM refuses a lower ``oom_score_adj``).
- the sandbox image is our own pause program (no registry is reachable); network namespaces live under
  containerd's state directory, so stopping a node can find and unmount them.
- the CNI bridge does not masquerade: Pods talk to the host and to each other only, and no iptables rule
  of the bridge plugin outlives a Pod.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = (
    "CLUSTER_CIDR",
    "RUN_ROOT",
    "STATE_ROOT",
    "NodeLayout",
    "cni_conflist",
    "containerd_config",
    "kube_proxy_config",
    "kubelet_config",
    "pod_subnet",
    "toml",
)

#: Every real node's Pod subnet is a /24 of this (node ``i`` gets ``10.244.i.0/24``); kube-proxy's
#: ``clusterCIDR``.
CLUSTER_CIDR: Final = "10.244.0.0/16"
#: Sockets and containerd's state (network namespaces among them) — short paths, since a unix socket's
#: path may hold at most 107 bytes and a test's temporary directory is long.
RUN_ROOT: Final = Path("/run/gpustack-devcluster")
#: containerd's content and snapshots and the kubelet's root directory (Pod volumes): on disk.
STATE_ROOT: Final = Path("/var/lib/gpustack-devcluster")


def pod_subnet(index: int) -> str:
    """Node ``index``'s Pod subnet (``10.244.<index>.0/24``)."""
    if not 0 <= index < 256:
        raise ValueError(f"a real node's index is 0..255, not {index}")
    return f"10.244.{index}.0/24"


@dataclass(frozen=True)
class NodeLayout:
    """Where node ``index`` of the cluster rooted at ``cluster_dir`` keeps everything."""

    cluster_dir: Path
    index: int
    name: str

    @property
    def cluster_id(self) -> str:
        """8 hex digits of the cluster directory: its nodes' short paths are told apart by it."""
        return hashlib.sha256(str(self.cluster_dir).encode()).hexdigest()[:8]

    @property
    def run(self) -> Path:
        return RUN_ROOT / self.cluster_id / f"n{self.index}"

    @property
    def state(self) -> Path:
        return STATE_ROOT / self.cluster_id / f"n{self.index}"

    @property
    def config(self) -> Path:
        """Configuration files and logs: inside the cluster's own directory."""
        return self.cluster_dir / "nodes" / self.name

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def containerd_state(self) -> Path:
        return self.run / "containerd"

    @property
    def containerd_root(self) -> Path:
        return self.state / "containerd"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    @property
    def cni_conf_dir(self) -> Path:
        return self.config / "cni"

    @property
    def ipam_dir(self) -> Path:
        return self.state / "ipam"

    @property
    def bridge(self) -> str:
        """The bridge's interface name (at most 15 characters)."""
        return f"gpuwbr{self.index}"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml(document: dict[str, Any]) -> str:
    """``document`` as TOML: scalars and lists first, then each nested table under its dotted, quoted
    header (containerd's plugin names hold dots)."""
    lines: list[str] = []

    def table(node: dict[str, Any], path: tuple[str, ...]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict)}
        if path and scalars:
            lines.append("[" + ".".join(f'"{p}"' if "." in p else p for p in path) + "]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in scalars.items())
        for key, value in node.items():
            if isinstance(value, dict):
                table(value, (*path, key))

    table(document, ())
    return "\n".join(lines) + "\n"


def containerd_config(layout: NodeLayout, *, runc: Path, cni_bin: Path, sandbox_image: str) -> dict[str, Any]:
    """containerd's configuration (version 2) for the node: its own socket, root and state; CRI with runc
    through the v2 shim (cgroupfs), our pause image, the node's CNI configuration."""
    cri = "io.containerd.grpc.v1.cri"
    return {
        "version": 2,
        "root": str(layout.containerd_root),
        "state": str(layout.containerd_state),
        # snapshotters this machine has no use for: fewer warnings in the log, nothing else
        "disabled_plugins": [
            "io.containerd.snapshotter.v1.aufs",
            "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.zfs",
        ],
        "grpc": {"address": str(layout.containerd_socket)},
        "ttrpc": {"address": str(layout.run / "containerd.sock.ttrpc")},
        "plugins": {
            cri: {
                "sandbox_image": sandbox_image,
                "restrict_oom_score_adj": True,
                "tolerate_missing_hugepages_controller": True,
                "netns_mounts_under_state_dir": True,
                "stream_server_address": "127.0.0.1",
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": {
                        "runc": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"BinaryName": str(runc), "SystemdCgroup": False},
                        }
                    },
                },
                "cni": {"bin_dir": str(cni_bin), "conf_dir": str(layout.cni_conf_dir)},
            },
            "io.containerd.internal.v1.opt": {"path": str(layout.state / "opt")},
        },
    }


def cni_conflist(layout: NodeLayout) -> dict[str, Any]:
    """The node's CNI network: a bridge that is the Pods' gateway, addresses from the node's /24 (IPAM
    state in the node's own directory), no masquerade; and the loopback interface."""
    subnet = pod_subnet(layout.index)
    return {
        "cniVersion": "1.0.0",
        "name": f"gpustack-devcluster-{layout.index}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.ipam_dir),
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(
    layout: NodeLayout, *, ca_file: Path, port: int, healthz_port: int, resolv_conf: str = "/etc/resolv.conf"
) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration (see the module's docstring for what is set away from the
    defaults and why)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "resolvConf": resolv_conf,
        "evictionHard": {"imagefs.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100,
        "volumePluginDir": str(layout.state / "volume-plugins"),
        "serializeImagePulls": False,
        "rotateCertificates": False,
    }


def kube_proxy_config(
    *, kubeconfig: Path, node_name: str, healthz_port: int, metrics_port: int
) -> dict[str, Any]:
    """kube-proxy's configuration: iptables mode for the whole machine (one kube-proxy serves every real
    node: they share the host's network namespace), conntrack limits left as the machine has them."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "clusterCIDR": CLUSTER_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # 0: leave the machine's conntrack table size and TCP timeouts as they are (kube-proxy would set
        # them machine-wide); no localhost NodePorts (they need route_localnet, also machine-wide)
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s", "localhostNodePorts": False},
    }
