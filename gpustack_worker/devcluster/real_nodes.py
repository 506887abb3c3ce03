"""The parts of a dev cluster that real nodes add (``DevCluster(kubelets=N)``, ``devcluster up --kubelets``).

Beside the control plane: kube-controller-manager (Deployments, ReplicaSets, DaemonSets, EndpointSlices,
the ``default`` ServiceAccount and ``kube-root-ca.crt`` of every namespace, garbage collection), N
kubelets each on its own containerd (:mod:`.node`) and one kube-proxy. The simulated Nodes stay as they
are; the real ones sit beside them.

What the API server does differently with real nodes, and why:

- it listens on every address and advertises this machine's (:func:`.node.host_ip`): a Pod reaches it
  through the ``kubernetes`` Service, whose endpoint the ``lease`` reconciler then keeps;
- its serving certificate names that address and the Service's ClusterIP and DNS names (a Pod's client
  checks them);
- the ``ServiceAccount`` admission plugin is on (every Pod gets its projected token), and the ``Node``
  authorizer authorizes the kubelets (each a ``system:node:<name>`` token user).

kube-controller-manager runs without its node-lifecycle controller: it would taint every simulated Node
``unreachable`` (no kubelet renews their leases) and evict what runs there.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import httpx
import yaml

from gpustack_worker.devcluster import build, debs, node
from gpustack_worker.devcluster.node_config import NodeLayout, kube_proxy_config
from gpustack_worker.devcluster.procs import (
    ManagedProcess,
    StartupError,
    free_port,
    http_ok,
    spawn,
    wait_until,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.pki import Pki

__all__ = ("KUBERNETES_SERVICE_IP", "NODE_PREFIX", "REAL_NODE_LABEL", "RealNodes", "apiserver_flags")

#: The first address of the API server's ``--service-cluster-ip-range`` (the ``kubernetes`` Service).
KUBERNETES_SERVICE_IP: Final = "10.0.0.1"
#: Real node ``i`` is ``devcluster-node-<i>`` unless named (``RealNodes.named``).
NODE_PREFIX: Final = "devcluster-node-"
#: Every real node's kubelet registers its Node with this label (``true``): what pins a workload to the
#: nodes that run Pods (a simulated Node has no kubelet: a Pod bound there never starts).
REAL_NODE_LABEL: Final = "gpustack.ai/devcluster-real-node"
_CONTROLLER_MANAGER_USER: Final = "system:kube-controller-manager"
_PROXY_USER: Final = "system:kube-proxy"
#: Names the API server's serving certificate carries for a Pod's client (the Service's DNS names).
_SERVICE_NAMES: Final = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_OPTIONAL_BINARIES: Final = ("kubelet", "kube-controller-manager", "kube-proxy", "pause")
#: The kubelet's device manager listens here whatever ``--root-dir`` says (hard-coded upstream), so all
#: real nodes share it; a stop removes it when the cluster's start made it.
KUBELET_HARD_CODED_DIR: Final = Path("/var/lib/kubelet")


#: What kube-controller-manager makes in every namespace that a Pod needs (checked in ``default``).
_MADE_BY_CONTROLLER_MANAGER: Final = (
    "/api/v1/namespaces/default/serviceaccounts/default",
    "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
)


def apiserver_flags(flags: list[str], *, host: str, pki: Pki) -> list[str]:
    """kube-apiserver's ``flags`` as a cluster with real nodes needs them (see the module docstring); the
    API server reaches a kubelet (``logs``, ``exec``) at its Node's InternalIP with ``pki``'s kubelet
    client certificate."""
    replaced = {
        "--bind-address": "0.0.0.0",
        "--advertise-address": host,
        "--authorization-mode": "Node,RBAC",
        "--endpoint-reconciler-type": "lease",
        # no node-lifecycle controller runs (module docstring): a not-ready taint would never be removed
        "--disable-admission-plugins": "TaintNodesByCondition",
    }
    out = []
    for flag in flags:
        name = flag.split("=", 1)[0]
        out.append(f"{name}={replaced[name]}" if name in replaced else flag)
    missing = sorted(set(replaced) - {f.split("=", 1)[0] for f in flags})
    if missing:
        raise ValueError(f"kube-apiserver's flags lack {missing}; real nodes replace them")
    return [
        *out,
        # a Node's hostname resolves nowhere here; its InternalIP is this machine's address
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki.kubelet_client_cert}",
        f"--kubelet-client-key={pki.kubelet_client_key}",
    ]


@dataclass
class RealNodes:
    """kube-controller-manager, ``count`` kubelets and kube-proxy of the cluster rooted at ``cluster_dir``."""

    cluster_dir: Path
    count: int
    log: Callable[[str], None] = print
    #: The names the first kubelets register their Nodes as (the rest ``devcluster-node-<i>``): a real node
    #: can stand in for a scenario's node of that name, which the simulator then dresses (labels, device
    #: plugin capacity, ``Devices``) without touching what the kubelet reports.
    named: tuple[str, ...] = ()
    host: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    nodes: list[node.RealNode] = field(default_factory=list)
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    binaries: dict[str, Path] = field(default_factory=dict)
    runtime: debs.NodeRuntime | None = None
    _lock: IO[str] | None = None
    _made_kubelet_dir: bool = False

    @property
    def names(self) -> list[str]:
        return [self.named[i] if i < len(self.named) else f"{NODE_PREFIX}{i}" for i in range(self.count)]

    def prepare(self) -> None:
        """Build (or reuse) the node binaries and runtime, take the machine's lock, sweep what a killed
        run left, and mint the tokens the API server must know before it starts."""
        if not 1 <= self.count <= 16:
            raise StartupError(f"a dev cluster runs 1 to 16 real nodes, not {self.count}")
        if len(self.named) > self.count or len(set(self.names)) != self.count:
            raise StartupError(f"{self.count} real node(s) cannot be named {', '.join(self.named)}")
        if bad := [n for n in self.named if not _DNS_SUBDOMAIN.fullmatch(n)]:
            raise StartupError(f"not a Node name (a DNS-1123 subdomain): {', '.join(bad)}")
        self.binaries = {name: build.ensure_optional(name, self.log) for name in _OPTIONAL_BINARIES}
        self.runtime = debs.ensure_node_runtime(self.log)
        self._lock = node.machine_lock(self.log)
        self._made_kubelet_dir = not KUBELET_HARD_CODED_DIR.exists()
        node.sweep(self.log, {**os.environ, **self.runtime.env})
        self.host = node.host_ip()
        users = [_CONTROLLER_MANAGER_USER, _PROXY_USER, *(f"system:node:{n}" for n in self.names)]
        self.tokens = {user: secrets.token_hex(24) for user in users}

    def pki_hosts(self) -> tuple[str, ...]:
        """What the API server's serving certificate names beside localhost."""
        return (self.host, KUBERNETES_SERVICE_IP, *_SERVICE_NAMES)

    def token_lines(self) -> str:
        """The API server's ``--token-auth-file`` lines of our users (the kubelets in ``system:nodes``)."""
        lines = []
        for user, token in self.tokens.items():
            group = ',"system:nodes"' if user.startswith("system:node:") else ""
            lines.append(f"{token},{user},uid-{user.replace(':', '-')}{group}\n")
        return "".join(lines)

    def start(self, *, server: str, pki: Pki, api: ApiBootstrap) -> None:
        """kube-controller-manager, then each node (containerd, the pause image, the kubelet) until its
        Node is Ready, then kube-proxy."""
        assert self.runtime is not None
        self._start_controller_manager(server, pki)
        # a Pod is refused until its namespace's ``default`` ServiceAccount exists, and its projected token
        # cannot mount without ``kube-root-ca.crt``: both are kube-controller-manager's first writes
        for path in _MADE_BY_CONTROLLER_MANAGER:
            if not wait_until(functools.partial(_exists, api, path), 90):
                raise StartupError(f"kube-controller-manager did not make {path} within 90 s")
        tag = build.OPTIONAL["pause"].version
        pause_tar, pause_name = node.pause_image(
            self.binaries["pause"], tag, self.cluster_dir / "images" / "pause.tar"
        )
        for index, name in enumerate(self.names):
            real = node.RealNode(
                NodeLayout(self.cluster_dir, index, name), self.runtime, self.binaries["kubelet"], self.log
            )
            self.nodes.append(real)
            real.start_runtime(pause_tar, pause_name)
            real.start_kubelet(
                server=server,
                ca_cert=pki.ca_cert,
                token=self.tokens[f"system:node:{name}"],
                node_ip=self.host,
                labels={REAL_NODE_LABEL: "true"},
            )
        for name in self.names:
            node.wait_node_ready(lambda n: _get_node(api, n), name, 120)
        self._start_kube_proxy(server, pki)
        self.log(f"real nodes ready: {', '.join(self.names)} (kubelet on containerd + runc, CNI bridge)")

    def stop(self) -> None:
        """kube-proxy (and its chains), the nodes, kube-controller-manager; then release the lock."""
        proxy = self.procs.pop("kube-proxy", None)
        if proxy is not None:
            proxy.stop()
            self._cleanup_proxy()
        for real in reversed(self.nodes):
            real.stop()
        if self.nodes:
            layout = self.nodes[0].layout
            node.remove_tree((layout.run.parent, layout.state.parent))  # the cluster's own directories
        self.nodes.clear()
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        self.procs.clear()
        if self.runtime is not None:
            node.remove_kube_chains({**os.environ, **self.runtime.env})
        if self._made_kubelet_dir:
            node.remove_tree((KUBELET_HARD_CODED_DIR,))
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def processes(self) -> dict[str, ManagedProcess]:
        """kube-controller-manager, kube-proxy and each node's containerd and kubelet, by name."""
        out = dict(self.procs)
        for real in self.nodes:
            out.update({proc.name: proc for proc in real.procs.values()})
        return out

    def import_image(self, tar: Path) -> None:
        """Import an image-layout tar into every real node's containerd."""
        for real in self.nodes:
            real.import_image(tar)

    # --- the machine-wide processes ---------------------------------------------------------------
    def _kubeconfig(self, user: str, server: str, pki: Pki) -> Path:
        path = self.cluster_dir / "kubeconfigs" / f"{user.replace(':', '-')}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(node.kubeconfig(server, pki.ca_cert, user, self.tokens[user])))
        path.chmod(0o600)
        return path

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ManagedProcess:
        return spawn(self.procs, name, argv, self.cluster_dir / "logs" / f"{name}.log", env)

    def _start_controller_manager(self, server: str, pki: Pki) -> None:
        kubeconfig = self._kubeconfig(_CONTROLLER_MANAGER_USER, server, pki)
        port = free_port()
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--controllers=*,-nodelifecycle,-nodeipam",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                "--v=1",
            ],
        )
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        proc.wait_ready(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", ctx), 90)

    def _start_kube_proxy(self, server: str, pki: Pki) -> None:
        assert self.runtime is not None
        kubeconfig = self._kubeconfig(_PROXY_USER, server, pki)
        healthz, metrics = free_port(), free_port()
        config = self.cluster_dir / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                kube_proxy_config(
                    kubeconfig=kubeconfig, node_name=self.names[0], healthz_port=healthz, metrics_port=metrics
                ),
                sort_keys=True,
            )
        )
        env = {**os.environ, **self.runtime.env}
        proc = self._spawn(
            "kube-proxy", [str(self.binaries["kube-proxy"]), f"--config={config}", "--v=1"], env
        )
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"), 90)

    def _cleanup_proxy(self) -> None:
        """``kube-proxy --cleanup``: remove its iptables chains and rules from the machine."""
        assert self.runtime is not None
        subprocess.run(
            [str(self.binaries["kube-proxy"]), "--cleanup", "--proxy-mode=iptables"],
            env={**os.environ, **self.runtime.env},
            capture_output=True,
            check=False,
        )


def _exists(api: ApiBootstrap, path: str) -> bool:
    return api.request("GET", path).status_code == 200


def _get_node(api: ApiBootstrap, name: str) -> dict[str, Any] | None:
    try:
        return api.get(f"/api/v1/nodes/{name}")
    except httpx.HTTPStatusError:  # starting up: asked again
        return None
