"""Build the client-go reference writer (``bench/clientgo/``) with the harness's Go toolchain, cached.

The writer is a bench tool, not a control-plane component, so it is no :data:`devcluster.build.COMPONENTS`
entry: this helper builds it the same way (local toolchain only, module mode, static, ``-trimpath``) into
the same cache, ``<cache>/bin/clientgo-writer-<digest>/clientgo-writer``, keyed by the digest of the
module's sources (``go.mod``, ``go.sum``, ``main.go``) so an edit rebuilds it and an unchanged tree reuses
it. Offline first: ``GOPROXY=off`` resolves ``k8s.io/client-go`` and ``k8s.io/apimachinery`` from the module
cache (kube-apiserver's build put v0.35.4 there); only when that fails is the environment's proxy asked.
The binary is written into a private directory and renamed into place, so a killed build leaves nothing
a later run would trust.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpustack_worker.devcluster.build import BuildError, cache_dir, check_go_version

SOURCE = Path(__file__).resolve().parent / "clientgo"
NAME = "clientgo-writer"
_FILES = ("go.mod", "go.sum", "main.go")


def _digest() -> str:
    h = hashlib.sha256()
    for name in _FILES:
        h.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def binary_path() -> Path:
    return cache_dir() / "bin" / f"{NAME}-{_digest()}" / NAME


def _go(args: list[str], cwd: Path, *, offline: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOWORK="off", CGO_ENABLED="0", GOFLAGS="-mod=mod")
    if offline:
        env["GOPROXY"] = "off"
    return subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def ensure_writer(log: object = print) -> Path:
    """The cached writer binary, built first when missing; :class:`BuildError` with go's words if not."""
    target = binary_path()
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain ('go') is not on PATH; it builds the client-go reference writer")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".building-", dir=target.parent) as out:
        built = Path(out) / NAME
        args = ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(built), "."]
        version = _go(["version"], SOURCE, offline=True)
        check_go_version(version.stdout)
        proc = _go(args, SOURCE, offline=True)
        if proc.returncode != 0:
            proc = _go(args, SOURCE, offline=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
            raise BuildError(f"building the client-go writer failed (exit {proc.returncode}):\n{tail}")
        os.replace(built, target)
    if callable(log):
        log(f"built {NAME} → {target}")
    return target


if __name__ == "__main__":
    print(ensure_writer())
