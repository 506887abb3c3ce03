"""Real nodes: a kubelet on its own containerd, runc and a CNI bridge, on this machine.

:class:`RealNode` starts and stops one node (configured by :mod:`.node_config`). The machine-wide parts —
one kube-proxy for all nodes (they share the host's network namespace, and kube-proxy owns its iptables
chains machine-wide) and the sweep of what a killed run left behind — are here too; only one cluster
with real nodes runs on a machine at a time (:func:`machine_lock`).

Stopping a node leaves nothing: the kubelet stops, every container and sandbox of its containerd is
killed, containerd stops, then every mount under the node's directories (overlay root filesystems, Pod
volumes, network namespaces) is unmounted, the directories removed and the bridge deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from gpustack_worker.devcluster import node_config, oci
from gpustack_worker.devcluster.node_config import RUN_ROOT, STATE_ROOT, NodeLayout
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

    from gpustack_worker.devcluster.debs import NodeRuntime

__all__ = (
    "PAUSE_IMAGE_NAME",
    "RealNode",
    "host_ip",
    "kubeconfig",
    "machine_lock",
    "pause_image",
    "remove_kube_chains",
    "remove_tree",
    "sweep",
    "wait_node_ready",
)

#: The sandbox image's name; its tag is the pause program's source version (build.Component.version).
PAUSE_IMAGE_NAME = "localhost/gpustack-devcluster/pause"
_LOCK = RUN_ROOT / "real-nodes.lock"


def host_ip() -> str:
    """The address this machine reaches the outside from (its default route's source): the API server
    advertises it, so a Pod reaches the API server through the ``kubernetes`` Service."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: connect() on UDP only picks the route
        address: str = probe.getsockname()[0]
    if address.startswith("127."):
        raise StartupError(
            "this machine has no non-loopback IPv4 address; a Pod could not reach the API server"
        )
    return address


def machine_lock(log: Callable[[str], None]) -> IO[str]:
    """Take the machine-wide lock of clusters with real nodes (held until the returned file is closed):
    their kube-proxy chains and bridges are the machine's, so two such clusters cannot run at once."""
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    handle = _LOCK.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"waiting for another dev cluster with real nodes to stop (it holds {_LOCK})")
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def pause_image(binary: Path, tag: str, out: Path) -> tuple[Path, str]:
    """The sandbox image's layout tar (our pause program as ``/pause``, run as 65535) and its name."""
    rootfs = out.parent / "pause-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    rootfs.mkdir(parents=True)
    shutil.copy2(binary, rootfs / "pause")
    name = f"{PAUSE_IMAGE_NAME}:{tag}"
    oci.write_image_layout(rootfs, oci.ImageConfig(entrypoint=["/pause"], user="65535:65535"), name, out)
    return out, name


def _mounts_under(roots: tuple[Path, ...]) -> list[str]:
    """Mount points at or under any of ``roots``, deepest first (from /proc/self/mountinfo)."""
    found: list[str] = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4].replace("\\040", " ")
            if any(point == str(r) or point.startswith(str(r) + "/") for r in roots):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def _kill_tasks(state: Path) -> None:
    """SIGKILL every container a containerd state directory holds (runc writes each one's ``init.pid``
    into its task bundle); its namespace's other processes die with it."""
    for pid_file in (state / "io.containerd.runtime.v2.task").glob("*/*/init.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)


def _kill_shims(address_prefix: str) -> None:
    """SIGKILL every runc v2 shim serving a containerd whose socket path starts with ``address_prefix``
    (one shim per Pod; it runs in its own session, so stopping containerd leaves it)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes().split(b"\0")
            if not argv or not argv[0].endswith(b"containerd-shim-runc-v2") or b"-address" not in argv:
                continue
            address = argv[argv.index(b"-address") + 1].decode(errors="replace")
            if address.startswith(address_prefix):
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


def remove_kube_chains(env: dict[str, str]) -> None:
    """Remove the ``KUBE-*`` iptables chains, and the jumps to them, that a kubelet (``KUBE-FIREWALL``, its
    canaries) and kube-proxy leave in the filter, nat and mangle tables (IPv4 and IPv6); ``env`` finds the
    unpacked iptables (:attr:`NodeRuntime.env`). Under :func:`machine_lock` only our nodes made them."""
    for family in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            saved = subprocess.run(
                [f"{family}-save", "-t", table], env=env, capture_output=True, text=True, check=False
            )
            if saved.returncode != 0:
                continue
            chains = [line[1:].split()[0] for line in saved.stdout.splitlines() if line.startswith(":KUBE-")]
            for line in saved.stdout.splitlines():
                words = shlex.split(line) if line.startswith("-A ") else []
                if (
                    words
                    and not words[1].startswith("KUBE-")
                    and any(w.startswith("KUBE-") for w in words[2:])
                ):
                    _iptables(env, family, table, ["-D", *words[1:]])
            for verb in ("-F", "-X"):
                for chain in chains:
                    _iptables(env, family, table, [verb, chain])


def _iptables(env: dict[str, str], family: str, table: str, args: list[str]) -> None:
    subprocess.run([family, "-w", "-t", table, *args], env=env, capture_output=True, check=False)


def remove_tree(roots: tuple[Path, ...]) -> None:
    """Unmount everything at or under ``roots`` (deepest first, lazily), then remove them."""
    for _ in range(3):  # an unmount can reveal a mount it covered
        points = _mounts_under(roots)
        if not points:
            break
        for point in points:
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def _delete_link(name: str) -> None:
    subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


def sweep(log: Callable[[str], None], env: dict[str, str]) -> None:
    """Remove what real nodes of a run that was killed left behind (hold :func:`machine_lock`): their
    processes, mounts, directories and bridges. Nothing of a running cluster can be here: only the lock's
    holder runs real nodes."""
    if not any(
        p.is_dir() for p in (*RUN_ROOT.iterdir(), *(STATE_ROOT.iterdir() if STATE_ROOT.exists() else ()))
    ):
        return
    log(f"removing real nodes a stopped run left under {RUN_ROOT} and {STATE_ROOT}")
    for state in RUN_ROOT.glob("*/n*/containerd"):
        _kill_tasks(state)
    _kill_shims(str(RUN_ROOT) + "/")
    for cluster in [*RUN_ROOT.glob("*/"), *STATE_ROOT.glob("*/")]:
        for node_dir in cluster.glob("n*"):
            if node_dir.name[1:].isdigit():
                _delete_link(NodeLayout(cluster, int(node_dir.name[1:]), "").bridge)
        remove_tree((cluster,))
    remove_kube_chains(env)


@dataclass
class RealNode:
    """One kubelet on its own containerd."""

    layout: NodeLayout
    runtime: NodeRuntime
    kubelet: Path
    log: Callable[[str], None] = print
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    kubelet_port: int = 0
    healthz_port: int = 0

    @property
    def name(self) -> str:
        return self.layout.name

    def start_runtime(self, pause_tar: Path, pause_name: str) -> None:
        """containerd with the node's configuration, and the pause image imported into it."""
        lay = self.layout
        for directory in (lay.config, lay.run, lay.state, lay.cni_conf_dir):
            directory.mkdir(parents=True, exist_ok=True)
        (lay.cni_conf_dir / "10-gpustack-devcluster.conflist").write_text(
            json.dumps(node_config.cni_conflist(lay), indent=2)
        )
        config = lay.config / "containerd.toml"
        config.write_text(
            node_config.toml(
                node_config.containerd_config(
                    lay, runc=self.runtime.runc, cni_bin=self.runtime.cni_bin, sandbox_image=pause_name
                )
            )
        )
        env = {**os.environ, **self.runtime.env}
        proc = self._spawn("containerd", [str(self.runtime.containerd), f"--config={config}"], env)
        proc.wait_ready(self._containerd_answers, 60)
        imported = subprocess.run(
            [
                str(self.runtime.ctr),
                f"--address={lay.containerd_socket}",
                "--namespace=k8s.io",
                "images",
                "import",
                str(pause_tar),
            ],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        if imported.returncode != 0:
            raise StartupError(
                f"{self.name}: ctr could not import the pause image: {imported.stderr.strip()}"
            )

    def import_image(self, tar: Path) -> None:
        """Import an image-layout tar into this node's containerd (``imagePullPolicy: Never`` finds it)."""
        oci.import_image(tar, self.runtime.ctr, str(self.layout.containerd_socket))

    def start_kubelet(
        self, *, server: str, ca_cert: Path, token: str, node_ip: str, labels: dict[str, str]
    ) -> None:
        """The kubelet, registering its Node ``name`` with ``labels``, authenticated by ``token`` (a
        ``system:node:<name>`` user in ``system:nodes``: the Node authorizer's)."""
        lay = self.layout
        self.kubelet_port, self.healthz_port = free_port(), free_port()
        kubeconfig_path = lay.config / "kubelet.kubeconfig"
        user = f"system:node:{self.name}"
        kubeconfig_path.write_text(yaml.safe_dump(kubeconfig(server, ca_cert, user, token)))
        kubeconfig_path.chmod(0o600)
        config = lay.config / "kubelet.yaml"
        config.write_text(
            yaml.safe_dump(
                node_config.kubelet_config(
                    lay, ca_file=ca_cert, port=self.kubelet_port, healthz_port=self.healthz_port
                ),
                sort_keys=True,
            )
        )
        env = {**os.environ, **self.runtime.env}
        proc = self._spawn(
            "kubelet",
            [
                str(self.kubelet),
                f"--config={config}",
                f"--kubeconfig={kubeconfig_path}",
                f"--root-dir={lay.kubelet_root}",
                f"--cert-dir={lay.config / 'kubelet-pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={node_ip}",
                "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
                "--v=1",
            ],
            env,
        )
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz"), 120)

    def restart_kubelet(self) -> None:
        """Stop the kubelet and start it again with the same flags (containers keep running)."""
        old = self.procs.pop("kubelet")
        old.stop()
        proc = self._spawn("kubelet", list(old.argv), old.env)
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz"), 120)

    def stop(self) -> None:
        """Stop the kubelet, kill every container, stop containerd, and remove the node's mounts,
        directories and bridge."""
        kubelet = self.procs.pop("kubelet", None)
        if kubelet is not None:
            kubelet.stop()
        _kill_tasks(self.layout.containerd_state)
        containerd = self.procs.pop("containerd", None)
        if containerd is not None:
            containerd.stop()
        _kill_tasks(self.layout.containerd_state)
        _kill_shims(str(self.layout.containerd_socket))
        remove_tree((self.layout.run, self.layout.state))
        _delete_link(self.layout.bridge)

    def _containerd_answers(self) -> bool:
        done = subprocess.run(
            [str(self.runtime.ctr), f"--address={self.layout.containerd_socket}", "version"],
            capture_output=True,
            check=False,
            timeout=10,
        )
        return done.returncode == 0

    def _spawn(self, what: str, argv: list[str], env: dict[str, str] | None) -> ManagedProcess:
        log = self.layout.config / f"{what}.log"
        return spawn(self.procs, what, argv, log, env, name=f"{self.name}/{what}")


def kubeconfig(server: str, ca_cert: Path, user: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }


def wait_node_ready(get_node: Callable[[str], dict[str, Any] | None], name: str, timeout: float) -> None:
    """Block until Node ``name`` reports ``Ready=True`` (its kubelet's CNI and runtime are up)."""
    last: list[Any] = [None]

    def ready() -> bool:
        conditions = ((get_node(name) or {}).get("status") or {}).get("conditions") or []
        last[0] = next((c for c in conditions if c.get("type") == "Ready"), None)
        return last[0] is not None and last[0].get("status") == "True"

    if not wait_until(ready, timeout, interval=0.5):
        raise StartupError(f"Node {name} not Ready after {timeout:.0f}s; its Ready condition: {last[0]}")
