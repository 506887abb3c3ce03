"""The node runtime from Debian's packages: containerd, runc, the CNI plugins and iptables, unpacked into
the component cache — never installed into the machine.

A real node (:mod:`.node`) needs a container runtime, an OCI runtime, CNI plugins and, for kube-proxy,
iptables. There is no registry and no Docker here, but Debian's archive is reachable: ``apt-get download``
fetches the ``.deb`` files (the versions ``apt-cache policy`` names as candidates; the ones this was built
and tested with are :data:`TESTED`) and ``dpkg-deb -x`` unpacks them under
``<cache>/debs/<key>/root``, where ``<key>`` hashes the downloaded file names (so a new Debian point
release unpacks beside the old one). No maintainer script runs, no service starts, nothing outside the
cache changes. Shared libraries that the packages need and a minimal Debian may lack (iptables' netfilter
libraries) come along and are found through ``LD_LIBRARY_PATH`` (:attr:`NodeRuntime.env`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gpustack_worker.devcluster.build import BuildError, cache_dir

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("PACKAGES", "TESTED", "NodeRuntime", "ensure_node_runtime")

#: What a node needs, with the libraries iptables links that a minimal Debian does not carry.
PACKAGES: Final = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "libip4tc2",
    "libip6tc2",
    "libxtables12",
    "libmnl0",
    "libnfnetlink0",
    "libnetfilter-conntrack3",
    "libnftnl11",
    "libseccomp2",
)
#: The versions this harness was built and tested with (Debian 12 "bookworm", 2026-12): containerd 1.6.20
#: is the one whose CRI needs ``restrict_oom_score_adj`` here (docs/devcluster.md "Real nodes").
TESTED: Final = {
    "containerd": "1.6.20~ds1-1+deb12u3",
    "runc": "1.1.5+ds1-1+deb12u1",
    "containernetworking-plugins": "1.1.1+ds1-3+b5",
    "iptables": "1.8.9-2",
}
#: The iptables commands kube-proxy runs (its ``iptables`` mode), each a name xtables-legacy-multi answers to.
_IPTABLES_COMMANDS: Final = (
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
)
_MULTIARCH: Final = "x86_64-linux-gnu"


@dataclass(frozen=True)
class NodeRuntime:
    """Where the unpacked node runtime is."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "usr/bin/containerd"

    @property
    def ctr(self) -> Path:
        return self.root / "usr/bin/ctr"

    @property
    def runc(self) -> Path:
        return self.root / "usr/sbin/runc"

    @property
    def cni_bin(self) -> Path:
        return self.root / "usr/lib/cni"

    @property
    def tools(self) -> Path:
        """A directory of the commands kube-proxy and containerd look up on ``PATH`` (iptables' names,
        containerd's shim, runc)."""
        return self.root / "gpustack-bin"

    @property
    def env(self) -> dict[str, str]:
        """The environment a node process runs with: our tools first on ``PATH``, the unpacked libraries
        and iptables' extensions found."""
        lib = self.root / "usr/lib" / _MULTIARCH
        return {
            "PATH": f"{self.tools}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
            "LD_LIBRARY_PATH": str(lib),
            "XTABLES_LIBDIR": str(lib / "xtables"),
        }


def _run(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BuildError(f"`{' '.join(args)}` failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _link_tools(root: Path) -> None:
    tools = root / "gpustack-bin"
    tools.mkdir(exist_ok=True)
    multi = root / "usr/sbin/xtables-legacy-multi"
    links = {name: multi for name in _IPTABLES_COMMANDS}
    links["runc"] = root / "usr/sbin/runc"
    links["containerd-shim-runc-v2"] = root / "usr/bin/containerd-shim-runc-v2"
    for name, target in links.items():
        if not target.exists():
            raise BuildError(f"the unpacked node runtime has no {target.relative_to(root)}")
        # relative: the tree is unpacked in a staging directory and then renamed into place
        (tools / name).symlink_to(os.path.relpath(target, tools))


def ensure_node_runtime(log: Callable[[str], None] = print) -> NodeRuntime:
    """Download (``apt-get download``) and unpack :data:`PACKAGES` once; reuse them afterwards.

    Raises :class:`BuildError` with apt's own words when a package cannot be fetched (no ``apt-get``,
    no package lists: ``apt-get update`` first, or the archive unreachable)."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool!r} is not on PATH; the real-node runtime comes from Debian's packages")
    base = cache_dir() / "debs"
    base.mkdir(parents=True, exist_ok=True)
    with (base / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with tempfile.TemporaryDirectory(prefix="gpustack-debs-") as tmp:
            work = Path(tmp)
            versions = _run(["apt-cache", "policy", *PACKAGES], work)
            key = hashlib.sha256(versions.encode()).hexdigest()[:16]
            done = base / key / "root"
            if done.is_dir():
                return NodeRuntime(done)
            log(f"downloading the node runtime from Debian: {', '.join(PACKAGES)}")
            os.chmod(work, 0o777)  # apt's sandbox user writes the files (else a warning, not an error)
            _run(["apt-get", "download", "--quiet", *PACKAGES], work)
            staging = base / f".unpacking-{key}"
            shutil.rmtree(staging, ignore_errors=True)
            for deb in sorted(work.glob("*.deb")):
                _run(["dpkg-deb", "-x", str(deb), str(staging)], work)
            _link_tools(staging)
            (base / key).mkdir(exist_ok=True)
            os.replace(staging, done)
            log(f"node runtime unpacked → {done}")
            return NodeRuntime(done)


def main() -> int:
    """Download and unpack the node runtime (or find it unpacked); exit 1 with apt's words when it cannot."""
    try:
        runtime = ensure_node_runtime()
    except BuildError as exc:
        print(f"node runtime: {exc}", flush=True)
        return 1
    print(f"node runtime: {runtime.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
