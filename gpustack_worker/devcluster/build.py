"""Build the pinned control-plane binaries from their Go modules into a version-keyed cache.

Each binary is built in its own throw-away wrapper module so Go's minimal version selection never mixes the
dependency sets of two programs. Binaries land in ``<cache>/bin/<component>-<version>/<binary>`` and are
reused when present; a build writes to a temporary name and renames, so an interrupted build never leaves a
half-written binary that a later run would trust.

Several processes may share one cache (the demo and the tests started at once on a cold cache). A build
holds an exclusive ``flock`` on ``<binary>.lock`` next to the binary, writes into a directory of its own
(``.building-*``, unique per build) and moves the result into place with one atomic ``os.replace``. A
second process asking for the same component waits for the lock (and says so), then finds the binary and
reuses it instead of building it again. Everything else a build writes is private (its wrapper module is
a fresh temporary directory) or safe to share (Go locks its module cache and its build cache itself).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_worker.devcluster import versions
from gpustack_worker.devcluster.progress import BuildProgress

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = (
    "COMPONENTS",
    "MIN_GO",
    "OPTIONAL",
    "BuildError",
    "Component",
    "cache_dir",
    "check_go_version",
    "ensure_all",
    "ensure_binary",
    "ensure_optional",
    "lock_path",
    "module_dir",
    "parse_go_version",
)

CACHE_ENV = "GPUSTACK_WORKER_CACHE"
#: Prefix of the private output directory of one build, next to its binary. Only the holder of the
#: component's lock creates one, so any found while holding the lock was left by a build that was killed.
_BUILDING_PREFIX = ".building-"
#: Lines of go's output a BuildError quotes (the end of it: where go says what failed).
_TAIL_LINES = 25
#: The oldest Go toolchain that builds every component: Kueue's, NFD's and helm's wrapper modules say
#: ``go 1.26``, and with ``GOTOOLCHAIN=local`` an older go refuses them deep into the build.
MIN_GO: tuple[int, int] = (1, 26)
#: ``go1.26.8``, ``go1.26``, ``go1.27rc1`` in ``go version``'s output (a ``devel`` build prints it too).
_GO_VERSION = re.compile(r"\bgo(\d+)\.(\d+)(?:\.(\d+))?")


class BuildError(RuntimeError):
    """A component could not be built; the message says which and why (the end of go's output)."""


def cache_dir() -> Path:
    """``$GPUSTACK_WORKER_CACHE``, else ``~/.cache/gpustack-worker``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "gpustack-worker"


def _replace_block(staging: str, extra: tuple[str, ...] = ()) -> str:
    lines = [f"\tk8s.io/{m} => k8s.io/{m} {staging}" for m in versions.STAGING_MODULES]
    return "replace (\n" + "\n".join([*lines, *extra]) + "\n)\n"


def _k8s_ldflags() -> str:
    major, minor = versions.KUBERNETES.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    # Without these, the binary reports v0.0.0-master+$Format:%h$ and Kueue's ParseSemantic aborts.
    return " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion={versions.KUBERNETES}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    )


@dataclass(frozen=True, slots=True)
class Component:
    """How to build one binary from its Go module."""

    name: str
    version: str
    #: The package to build (``go get -tool`` target without the version).
    package: str
    #: The module whose version pins the build (``package``'s module).
    module: str
    go_mod: Callable[[], str]
    ldflags: Callable[[], str]
    #: A directory of Go source in this repository that is the main package (no module to ``go get``):
    #: its files are copied into the wrapper module and built there.
    source: Path | None = None

    @property
    def binary(self) -> Path:
        return cache_dir() / "bin" / f"{self.name}-{self.version}" / self.name


def _kubernetes_go_mod(name: str) -> Callable[[], str]:
    """The wrapper module of a binary of ``k8s.io/kubernetes`` (kube-apiserver, kube-scheduler).

    Both get the same ``go``/``godebug`` lines and staging replace block, so they resolve the same
    dependency graph and the second build reuses every package the first compiled (Go's build cache is
    keyed by package content and flags, not by the wrapper module).
    """
    return lambda: (
        f"module local/{name}-build\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n"
        + _replace_block(versions.KUBERNETES_STAGING)
    )


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "etcd",
            versions.ETCD,
            "go.etcd.io/etcd/server/v3",
            "go.etcd.io/etcd/server/v3",
            lambda: "module local/etcd-build\n\ngo 1.25.0\n",
            lambda: "-s -w",
        ),
        Component(
            "kube-apiserver",
            versions.KUBERNETES,
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes",
            _kubernetes_go_mod("kube-apiserver"),
            _k8s_ldflags,
        ),
        # Built right after kube-apiserver: same module version, same flags, so only the scheduler's own
        # packages (pkg/scheduler, its plugins, cmd/kube-scheduler) are compiled anew.
        Component(
            "kube-scheduler",
            versions.KUBERNETES,
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes",
            _kubernetes_go_mod("kube-scheduler"),
            _k8s_ldflags,
        ),
        Component(
            "nfd-master",
            versions.NFD,
            "sigs.k8s.io/node-feature-discovery/cmd/nfd-master",
            "sigs.k8s.io/node-feature-discovery",
            lambda: (
                "module local/nfd-build\n\ngo 1.26\n\n"
                + _replace_block(
                    versions.NFD_STAGING,
                    (
                        "\tsigs.k8s.io/node-feature-discovery/api/nfd => "
                        f"sigs.k8s.io/node-feature-discovery/api/nfd {versions.NFD}",
                    ),
                )
            ),
            lambda: f"-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version={versions.NFD}",
        ),
        Component(
            "kueue",
            versions.KUEUE,
            "sigs.k8s.io/kueue/cmd/kueue",
            "sigs.k8s.io/kueue",
            lambda: "module local/kueue-build\n\ngo 1.26.0\n",
            lambda: f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={versions.KUEUE}",
        ),
    )
}


_JAEGER_VERSION_PKG = "github.com/jaegertracing/jaeger/internal/version"
_PAUSE_SOURCE = Path(__file__).resolve().parent / "pause"


def _source_version(directory: Path) -> str:
    """``src-<12 hex>`` over the names and contents of the ``.go`` files: a changed source builds anew."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.go")):
        digest.update(path.name.encode() + b"\x00" + path.read_bytes() + b"\x00")
    return "src-" + digest.hexdigest()[:12]


#: Components built only when a caller asks for them by name (:func:`ensure_optional`), never by
#: :func:`ensure_all`: the default path (tests, ``devcluster up``) does not pay for them.
OPTIONAL: dict[str, Component] = {
    c.name: c
    for c in (
        # Jaeger v2 all-in-one (an OpenTelemetry Collector distribution): tracing in the demo, in
        # ``devcluster up --jaeger`` and in the trace test. Its go.mod asks for go 1.24.6.
        Component(
            "jaeger",
            versions.JAEGER,
            "github.com/jaegertracing/jaeger/cmd/jaeger",
            "github.com/jaegertracing/jaeger",
            lambda: "module local/jaeger-build\n\ngo 1.25.0\n",
            lambda: f"-s -w -X {_JAEGER_VERSION_PKG}.latestVersion={versions.JAEGER}",
        ),
        # helm renders and lints the chart in tests/chart (`helm template`, `helm lint`); never installs.
        Component(
            "helm",
            versions.HELM,
            "helm.sh/helm/v4/cmd/helm",
            "helm.sh/helm/v4",
            lambda: "module local/helm-build\n\ngo 1.26.0\n",
            lambda: f"-s -w -X helm.sh/helm/v4/internal/version.version={versions.HELM}",
        ),
        # promtool checks and unit-tests the chart's alert rules (tests/chart/test_alert_rules.py). The whole
        # cmd/promtool: it registers every service-discovery plugin (the AWS, Azure, GCE … SDKs), which the
        # rule commands never use, but Prometheus 3.7 has no build tag to leave them out.
        Component(
            "promtool",
            versions.PROMETHEUS,
            "github.com/prometheus/prometheus/cmd/promtool",
            "github.com/prometheus/prometheus",
            lambda: "module local/promtool-build\n\ngo 1.26.0\n",
            lambda: f"-s -w -X github.com/prometheus/common/version.Version={versions.PROMETHEUS_RELEASE}",
        ),
        # A real node (devcluster ``--kubelets``, :mod:`.node`): the kubelet, kube-controller-manager (the
        # Deployment, ReplicaSet, DaemonSet, EndpointSlice, ServiceAccount and root-CA controllers the
        # chart's Pods need) and kube-proxy (a Service's ClusterIP, which the API server dials for a
        # webhook). All from the same k8s.io/kubernetes release and wrapper module as kube-apiserver, so
        # they reuse its compiled packages.
        *(
            Component(
                name,
                versions.KUBERNETES,
                f"k8s.io/kubernetes/cmd/{name}",
                "k8s.io/kubernetes",
                _kubernetes_go_mod(name),
                _k8s_ldflags,
            )
            for name in ("kubelet", "kube-controller-manager", "kube-proxy")
        ),
        # The sandbox ("pause") program of the real nodes' Pods: no registry is reachable, so it is built
        # from devcluster/pause/main.go and put in an image here (:mod:`.oci`).
        Component(
            "pause",
            _source_version(_PAUSE_SOURCE),
            "local/pause",
            "local/pause",
            lambda: "module local/pause\n\ngo 1.25.0\n",
            lambda: "-s -w",
            source=_PAUSE_SOURCE,
        ),
    )
}


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # local toolchain only (fail fast instead of downloading one), no stray go.work, static binaries,
    # and module mode even if a vendor directory were present.
    env.update(GOTOOLCHAIN="local", GOWORK="off", CGO_ENABLED="0", GOFLAGS="-mod=mod")
    return env


def _run_go(
    args: list[str], cwd: Path, log: Callable[[str], None], progress: BuildProgress | None = None
) -> str:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain ('go') is not on PATH; it is needed to build the control plane")
    if progress is None:
        proc = subprocess.run(
            ["go", *args], cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False
        )
        stdout, output, code = proc.stdout, proc.stdout + proc.stderr, proc.returncode
    else:
        # go's output streams into the progress line (stderr merged: that is where go reports progress).
        lines: deque[str] = deque(maxlen=_TAIL_LINES)
        with subprocess.Popen(
            ["go", *args], cwd=cwd, env=_go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as running:
            assert running.stdout is not None
            for line in running.stdout:
                lines.append(line.rstrip("\n"))
                progress.feed(line)
        # only the end of the output is kept: the callers that pass a progress read none of it
        stdout = output = "\n".join(lines)
        code = running.returncode
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-_TAIL_LINES:])
        raise BuildError(f"`go {' '.join(args)}` failed (exit {code}):\n{tail}")
    return stdout


def parse_go_version(output: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from ``go version``'s output, ``None`` when it names no version."""
    match = _GO_VERSION.search(output)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def check_go_version(output: str) -> None:
    """Raise :class:`BuildError` unless ``go version``'s ``output`` names Go :data:`MIN_GO` or newer."""
    found = parse_go_version(output)
    want = ".".join(map(str, MIN_GO))
    if found is None:
        raise BuildError(
            f"cannot read a Go version in `go version`'s output {output.strip()!r}; need {want}+"
        )
    if found[:2] < MIN_GO:
        raise BuildError(
            f"Go {want} or newer is needed to build the control plane; `go version` says "
            f"{output.strip()!r}. Install Go {want}+ and put it first on PATH."
        )


def _usable(binary: Path) -> bool:
    return binary.is_file() and os.access(binary, os.X_OK)


def lock_path(component: Component) -> Path:
    """The file a build of ``component`` holds an exclusive ``flock`` on (never deleted: removing a lock
    file while another process waits on it would let a third process lock a new file and build alongside)."""
    binary = component.binary
    return binary.with_name(binary.name + ".lock")


@contextlib.contextmanager
def _build_lock(component: Component, log: Callable[[str], None]) -> Iterator[None]:
    """Hold the component's lock; when another process holds it, log that and wait for it.

    ``flock`` is released by the kernel when its holder exits, killed or not, so a dead build never
    blocks the next one.
    """
    path = lock_path(component)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(
                f"waiting for another process building {component.name} {component.version} (it holds {path})"
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_binary(component: Component, log: Callable[[str], None] = print) -> Path:
    """Return the cached binary, building it first when it is missing.

    At most one process builds a component at a time (:func:`_build_lock`); one that waited for another's
    build reuses its binary.
    """
    target = component.binary
    if _usable(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(component, log):
        if _usable(target):
            log(f"reusing {component.name} {component.version} built by another process → {target}")
            return target
        for stale in target.parent.glob(_BUILDING_PREFIX + "*"):
            # we hold the lock, so no build is running: this is what a killed build left behind
            shutil.rmtree(stale, ignore_errors=True)
        _build(component, target, log)
    return target


def _build(component: Component, target: Path, log: Callable[[str], None]) -> None:
    started = time.monotonic()
    log(f"building {component.name} {component.version} from {component.module} (cached afterwards)")
    with (
        tempfile.TemporaryDirectory(prefix=f"gpustack-build-{component.name}-") as tmp,
        tempfile.TemporaryDirectory(prefix=_BUILDING_PREFIX, dir=target.parent) as out,
    ):
        work = Path(tmp)
        # before anything is downloaded: an old toolchain fails here in one line, not deep in go's output
        check_go_version(_run_go(["version"], work, log))
        (work / "go.mod").write_text(component.go_mod())
        if component.source is not None:
            for path in component.source.glob("*.go"):
                shutil.copyfile(path, work / path.name)
        # go writes the binary into a directory of this build's own, on the cache's file system, so the
        # move into place is one atomic rename: no other process ever sees a half-written binary
        built = Path(out) / component.name
        with BuildProgress(component.name, component.version, component.package) as progress:
            if component.source is None:
                _run_go(["get", "-tool", f"{component.package}@{component.version}"], work, log, progress)
            progress.phase("listing")
            package = "." if component.source is not None else component.package
            deps = _run_go(["list", "-deps", package], work, log).split()
            progress.phase("compiling", total=len(deps))
            _run_go(
                [
                    "build",
                    "-v",
                    "-trimpath",
                    "-ldflags",
                    component.ldflags(),
                    "-o",
                    str(built),
                    package,
                ],
                work,
                log,
                progress,
            )
        os.replace(built, target)
    log(f"built {component.name} in {time.monotonic() - started:.0f}s → {target}")


def ensure_all(log: Callable[[str], None] = print) -> dict[str, Path]:
    """Build (or reuse) every component; raises :class:`BuildError` naming the one that failed."""
    return {name: ensure_binary(c, log) for name, c in COMPONENTS.items()}


def ensure_optional(name: str, log: Callable[[str], None] = print) -> Path:
    """Build (or reuse) the optional component ``name`` (a key of :data:`OPTIONAL`)."""
    if name not in OPTIONAL:
        raise BuildError(f"unknown optional component {name!r}; known: {', '.join(sorted(OPTIONAL))}")
    return ensure_binary(OPTIONAL[name], log)


def module_dir(module: str, version: str) -> Path:
    """The extracted module directory in the Go module cache (downloading it when needed)."""
    with tempfile.TemporaryDirectory(prefix="gpustack-moddir-") as tmp:
        out = _run_go(["mod", "download", "-json", f"{module}@{version}"], Path(tmp), print)
    info = json.loads(out)
    if "Dir" not in info:
        raise BuildError(f"go mod download {module}@{version}: {info.get('Error', 'no Dir in output')}")
    return Path(info["Dir"])


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) every pinned component, plus each optional one named by ``--with NAME``; exit 1
    with go's own words when one cannot be built."""
    import argparse

    parser = argparse.ArgumentParser(prog="gpustack_worker.devcluster.build")
    parser.add_argument(
        "--with", dest="optional", action="append", default=[], choices=sorted(OPTIONAL), metavar="NAME"
    )
    args = parser.parse_args(argv)
    try:
        paths = ensure_all()
        paths.update({name: ensure_optional(name) for name in args.optional})
    except BuildError as exc:
        print(f"control-plane build failed: {exc}", flush=True)
        return 1
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
