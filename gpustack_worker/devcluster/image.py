"""The product's container image, built here from the Containerfile's recipe, with no registry and no Docker.

The real nodes (:mod:`.real_nodes`) run the chart's Pods, so they need ``localhost/gpustack-worker:<version>``
in their containerd. Nothing can pull ``python:3.11.14-slim-trixie`` here, so the base is made locally from
Debian's packages and the Containerfile's steps are replayed on it:

1. **base** — ``mmdebstrap --variant=minbase`` of Debian 12 "bookworm" with ``python3``, ``python3-pip`` and
   ``ca-certificates`` (Debian's signed archive, through the machine's own apt sources; man pages, locales
   and docs left out). mmdebstrap itself comes from ``apt-get download`` and runs unpacked from the cache,
   never installed. Cached apart from the image, keyed by its package list (:func:`base_key`).
2. **wheel** — the build stage: ``requirements-build.lock`` installed ``--require-hashes --no-deps
   --only-binary=:all:`` (into a scratch directory, not the image's site-packages), then ``pip wheel
   --no-deps --no-build-isolation --no-index`` of the repository's files.
3. **install** — the final stage: user and group 65532 ``worker``, ``requirements.lock`` installed
   ``--require-hashes --no-deps --only-binary=:all:``, our wheel ``--no-deps --no-index``, ``pip check``.
4. **layout** — the rootfs as an OCI image-layout tar (:func:`.oci.write_image_layout`), ``User
   65532:65532``, ``Entrypoint ["gpustack-worker"]`` and the Containerfile's ``ENV``.

Every pip step runs with the image's own interpreter, inside the rootfs (``chroot``), in a private mount
namespace (``unshare --mount``) where ``/proc``, ``/dev``, ``/etc/resolv.conf`` and the machine's CA bundle
are mounted: the mounts vanish with the process, so a killed build leaves none behind and nothing is ever
unmounted by hand.

**How this differs from the Containerfile** (docs/image.md): the interpreter is Debian bookworm's CPython
3.11.2 (``/usr/bin/python3``, glibc 2.36), not the official image's CPython 3.11.14 on trixie (glibc
2.41). The locks were resolved for 3.11.14 on manylinux_2_28 and carry the hashes of every file of each
release, so pip picks the best wheel for this base: pure, ``cp311`` or ``abi3``, manylinux up to 2_34
(cryptography), all within glibc 2.36. Every entry installs by hash (a lock entry without a wheel for
this base would stop the build with pip's words), and the test loads each compiled module. pip is
Debian's 23.0.1 (``--break-system-packages``: Debian marks its Python externally managed); packages land
in ``/usr/local/lib/python3.11/dist-packages``, the entry point in ``/usr/local/bin``. World-writable
directories other than ``/tmp`` (``/var/tmp``, ``/run/lock``) lose their ``o+w`` bit: the root is
read-only at run time anyway.

The image is cached in ``<cache>/images/`` under a key hashing its inputs (:func:`input_key`): the locks,
the wheel's source files, the base key and :data:`RECIPE_VERSION`. A build holds a ``flock``, works in a
directory of its own and renames the finished tar into place, as :mod:`.build` does for binaries.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import ssl
import stat
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gpustack_worker.devcluster.build import BuildError, cache_dir
from gpustack_worker.devcluster.oci import ImageConfig, write_image_layout

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = (
    "ENTRYPOINT",
    "GID",
    "IMAGE_ENV",
    "REPOSITORY",
    "UID",
    "USER",
    "ProductImage",
    "base_key",
    "ensure_base",
    "ensure_product_image",
    "image_config",
    "image_name",
    "image_python",
    "input_key",
    "main",
    "package_version",
    "repo_root",
)

#: Bump when the recipe below changes in a way the inputs do not show (a flag, a step, a clean-up).
RECIPE_VERSION: Final = "1"
#: The chart's ``image.repository`` for a local image (``image.tag`` = the version, ``pullPolicy: Never``).
REPOSITORY: Final = "localhost/gpustack-worker"
#: The Containerfile's ``groupadd``/``useradd`` and ``USER``.
UID: Final = 65532
GID: Final = 65532
USER_NAME: Final = "worker"
USER: Final = f"{UID}:{GID}"
ENTRYPOINT: Final = ("gpustack-worker",)
#: The final stage's ``ENV`` line of the Containerfile.
IMAGE_ENV: Final = {
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
#: What the official python image sets besides: the search path and a UTF-8 locale.
BASE_ENV: Final = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
RUNTIME_LOCK: Final = "requirements.lock"
BUILD_LOCK: Final = "requirements-build.lock"
#: What the Containerfile copies into the build stage for ``pip wheel`` (besides the build lock).
SOURCE_PATHS: Final = ("gpustack_worker", "pyproject.toml", "README.md")

#: The base: Debian 12, its ``python3`` (3.11), Debian's pip to run the Containerfile's pip steps, and the
#: CA bundle (the official python image has it; the build mounts the machine's over it, :func:`_in_rootfs`).
SUITE: Final = "bookworm"
BASE_PACKAGES: Final = ("python3", "python3-pip", "ca-certificates")
#: The interpreter the locks' wheels are for (``cp311``); a base with another one is refused.
PYTHON_SERIES: Final = "3.11"
#: dpkg path filters, as the slim Debian images have them: no man pages, locales or docs but copyrights.
DPKG_FILTERS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
#: The one place in the image anybody may write (relative to the root); everything else loses ``o+w``.
WRITABLE: Final = ("tmp",)

#: Paths inside the rootfs used while building, all removed before the layer is written.
_SRC: Final = "/src"
_BUILD_TOOLS: Final = "/build-tools"
_WHEELS: Final = "/wheels"
_LOCK_IN_IMAGE: Final = "/tmp/requirements.lock"
_SCRATCH: Final = tuple(path.lstrip("/") for path in (_SRC, _BUILD_TOOLS, _WHEELS, _LOCK_IN_IMAGE))
#: Files mmdebstrap copies from the build machine; the runtime mounts its own over them.
_HOST_COPIES: Final = ("etc/resolv.conf", "etc/hostname")
_HOST_TOOLS: Final = (
    "perl",
    "python3",
    "apt-get",
    "apt-cache",
    "dpkg",
    "dpkg-deb",
    "unshare",
    "chroot",
    "mount",
    "cp",
    "git",
)
#: Host variables a pip step may need to reach the index (never host paths: the chroot has none of them).
_PASSED_ENV: Final = (
    "PIP_INDEX_URL",
    "PIP_DEFAULT_TIMEOUT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
_TAIL_LINES: Final = 20
_BUILDING_PREFIX: Final = ".building-"
_PIP: Final = ("python3", "-m", "pip")
_USERADD: Final = ("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin")
#: Debian marks its Python externally managed (PEP 668); the image is ours to install into, as in the
#: official image, and everything lands in /usr/local, never over a Debian package's files.
_PIP_INSTALL: Final = (*_PIP, "install", "--break-system-packages")
_LOCKED: Final = ("--require-hashes", "--no-deps", "--only-binary=:all:")


@dataclass(frozen=True)
class ProductImage:
    """An image-layout tar in the cache and the name ``ctr images import`` gives it."""

    tar: Path
    name: str
    version: str
    key: str

    @property
    def size(self) -> int:
        return self.tar.stat().st_size


# --- inputs ------------------------------------------------------------------------------------------------


def repo_root() -> Path:
    """The checkout this module runs from; the image is built from its files, so an installed copy (no
    ``pyproject.toml`` beside the package) cannot build one."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / RUNTIME_LOCK).is_file():
        raise BuildError(f"{root} is not the repository (no pyproject.toml and {RUNTIME_LOCK}): cannot build")
    return root


def package_version(root: Path) -> str:
    """The version the wheel will carry: pyproject's, not the installed metadata (which may be stale)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def image_name(version: str) -> str:
    """What the chart renders for ``image.repository=REPOSITORY``, ``image.tag=version``."""
    return f"{REPOSITORY}:{version}"


def source_files(root: Path) -> list[str]:
    """The wheel's source files: tracked or untracked-but-not-ignored, so ``__pycache__`` and build
    leftovers never change the key, and a new module does. Sorted, relative to ``root``."""
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SOURCE_PATHS],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"`git ls-files` failed in {root}: {proc.stderr.decode(errors='replace').strip()}")
    names = {name for name in proc.stdout.decode().split("\0") if name}
    return sorted(name for name in names if (root / name).is_file())


def base_key() -> str:
    """The base rootfs's key: what it is made of, not when (a Debian point release reuses it)."""
    return _digest(RECIPE_VERSION, SUITE, *BASE_PACKAGES, *DPKG_FILTERS)[:16]


def input_key(root: Path) -> str:
    """The image's key: the base key, the recipe version, both locks and every source file's name and
    content. The same inputs give the same key; any change to one of them gives another."""
    parts = [RECIPE_VERSION, base_key()]
    for name in (RUNTIME_LOCK, BUILD_LOCK, *source_files(root)):
        parts += [name, (root / name).read_bytes().hex()]
    return _digest(*parts)[:16]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# --- running tools -----------------------------------------------------------------------------------------


def _run(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a tool; on failure raise :class:`BuildError` with its own last lines."""
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_TAIL_LINES:])
        raise BuildError(f"`{' '.join(argv)}` failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _check_host() -> None:
    if os.geteuid() != 0:
        raise BuildError("building the image needs root (mmdebstrap --mode=root, chroot, mount)")
    path = BASE_ENV["PATH"] + ":" + os.environ.get("PATH", "")
    missing = [tool for tool in _HOST_TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        raise BuildError(f"building the image needs {', '.join(missing)} on this machine")


#: The image's CA bundle (Debian's ca-certificates).
_CA_BUNDLE: Final = "/etc/ssl/certs/ca-certificates.crt"
#: A private mount namespace: what the script mounts is gone when it exits, killed or not.
_PRIVATE: Final = ("unshare", "--mount", "--propagation", "private", "--")
#: Mount what pip needs into the rootfs ($1), then run the rest of the arguments chrooted there.
_CHROOT_SCRIPT: Final = (
    'set -e; root=$1; ca=$2; shift 2; mount -t proc proc "$root/proc"; mount --bind /dev "$root/dev"; '
    'touch "$root/etc/resolv.conf"; mount --bind /etc/resolv.conf "$root/etc/resolv.conf"; '
    f'if [ -n "$ca" ]; then mount --bind "$ca" "$root{_CA_BUNDLE}"; fi; '
    'exec chroot "$root" "$@"'
)


def _host_ca_bundle() -> str:
    """The certificates this machine trusts for the index (pip's own setting first): a TLS-inspecting proxy's
    CA is in them and not in Debian's bundle. The hashes, not the channel, vouch for what is installed."""
    paths = ssl.get_default_verify_paths()
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        paths.cafile,
        paths.openssl_cafile,
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return ""


def _chroot_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: the host's pip settings name host paths (find-links, certificates)."""
    env = {**BASE_ENV, "HOME": "/root", **IMAGE_ENV, "PIP_CERT": _CA_BUNDLE, **(extra or {})}
    env.update({name: os.environ[name] for name in _PASSED_ENV if name in os.environ})
    return env


def _in_rootfs(rootfs: Path, argv: Sequence[str], extra_env: dict[str, str] | None = None) -> str:
    """Run ``argv`` with the image's own programs, chrooted in ``rootfs``; the host's CA bundle is mounted
    over the image's for the run only (the image keeps Debian's)."""
    script = [*_PRIVATE, "sh", "-c", _CHROOT_SCRIPT, "sh", str(rootfs), _host_ca_bundle()]
    return _run([*script, *argv], env=_chroot_env(extra_env))


@contextlib.contextmanager
def _phase(name: str, log: Callable[[str], None]) -> Iterator[None]:
    started = time.monotonic()
    log(f"image: {name} …")
    yield
    log(f"image: {name} done in {time.monotonic() - started:.1f}s")


@contextlib.contextmanager
def _flock(path: Path, what: str, log: Callable[[str], None]) -> Iterator[None]:
    """Hold ``path``'s exclusive lock (the kernel drops it when its holder dies); say so when waiting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process building {what} (it holds {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _mounted_under(path: Path) -> list[str]:
    """Mount points under ``path`` (none are expected: every mount is in a private namespace)."""
    prefix = str(path.resolve()) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [point for point in points if point.startswith(prefix)]


def _remove_tree(path: Path) -> None:
    """Remove a build directory, refusing if something is mounted inside (that would delete host files)."""
    mounted = _mounted_under(path)
    if mounted:
        raise BuildError(f"not removing {path}: {', '.join(mounted)} mounted inside; unmount them first")
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _building_dir(parent: Path) -> Iterator[Path]:
    """A fresh directory of this build, beside its result (one file system: the final rename is atomic).
    The caller holds the lock, so any other ``.building-*`` was left by a killed build."""
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(_BUILDING_PREFIX + "*"):
        _remove_tree(stale)
    work = Path(tempfile.mkdtemp(prefix=_BUILDING_PREFIX, dir=parent))
    try:
        yield work
    finally:
        _remove_tree(work)


# --- phase 1: the Debian base ------------------------------------------------------------------------------


def _ensure_mmdebstrap(tools: Path, log: Callable[[str], None]) -> Path:
    """Debian's mmdebstrap unpacked under ``tools`` (``apt-get download`` + ``dpkg-deb -x``); returns the
    unpacked tree's root, whose ``usr/bin`` also holds ``mmtarfilter`` (the dpkg path filters need it)."""
    version = _run(["apt-cache", "policy", "mmdebstrap"])
    unpacked = tools / f"mmdebstrap-{_digest(version)[:12]}"
    if (unpacked / "usr/bin/mmdebstrap").is_file():
        return unpacked
    log("image: downloading mmdebstrap from Debian (apt-get download)")
    with _building_dir(tools) as work:
        os.chmod(work, 0o777)  # apt's sandbox user writes the file (else a warning, not an error)
        _run(["apt-get", "download", "--quiet", "mmdebstrap"], cwd=work)
        (deb,) = work.glob("mmdebstrap_*.deb")
        _run(["dpkg-deb", "-x", str(deb), str(work / "root")])
        shutil.rmtree(unpacked, ignore_errors=True)
        os.replace(work / "root", unpacked)
    return unpacked


def _apt_sources() -> list[str]:
    """The machine's apt sources files: Debian's archive as it is reached here, named by nobody else."""
    etc = Path("/etc/apt")
    parts = etc / "sources.list.d"
    files = [etc / "sources.list"] if (etc / "sources.list").is_file() else []
    files += [*sorted(parts.glob("*.list")), *sorted(parts.glob("*.sources"))]
    found = [str(f) for f in files if any(_is_entry(line) for line in f.read_text().splitlines())]
    if not found:
        raise BuildError("no apt sources under /etc/apt: mmdebstrap needs Debian's archive")
    return found


def _is_entry(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _mmdebstrap(mmdebstrap: Path, target: Path) -> None:
    hooks = mmdebstrap / "usr/share/mmdebstrap/hooks"
    argv = [
        "perl",
        str(mmdebstrap / "usr/bin/mmdebstrap"),
        "--mode=root",
        "--format=directory",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        # merged /usr set up by the hook (usr-is-merged) rather than the usrmerge package, which pulls perl
        f"--hook-dir={hooks / 'merged-usr'}",
        *(f"--dpkgopt={rule}" for rule in DPKG_FILTERS),
        SUITE,
        str(target),
        *_apt_sources(),
    ]
    env = {**os.environ, "PATH": f"{mmdebstrap / 'usr/bin'}:{BASE_ENV['PATH']}:{os.environ.get('PATH', '')}"}
    _run([*_PRIVATE, *argv], env=env)


def ensure_base(log: Callable[[str], None] = print) -> Path:
    """The Debian base rootfs, made once per :func:`base_key` and reused (never modified) afterwards."""
    bases = cache_dir() / "images" / "base"
    done = bases / base_key() / "rootfs"
    if (done / "usr/bin/python3").exists():
        return done
    with _flock(bases / ".lock", "the Debian base", log):
        if (done / "usr/bin/python3").exists():
            return done
        mmdebstrap = _ensure_mmdebstrap(bases / "tools", log)
        phase = f"base (mmdebstrap {SUITE} minbase + {', '.join(BASE_PACKAGES)})"
        with _phase(phase, log), _building_dir(bases) as work:
            _mmdebstrap(mmdebstrap, work / "rootfs")
            python = image_python(work / "rootfs")
            if not python.startswith(PYTHON_SERIES + "."):
                raise BuildError(f"the {SUITE} base has Python {python}; the locks are for {PYTHON_SERIES}")
            done.parent.mkdir(exist_ok=True)
            _remove_tree(done)
            os.replace(work / "rootfs", done)
        log(f"image: base has Python {python} → {done}")
    return done


def image_python(rootfs: Path) -> str:
    """The full version of the rootfs's ``python3`` (``3.11.2``)."""
    code = "import platform; print(platform.python_version())"
    return _in_rootfs(rootfs, ["python3", "-c", code]).strip()


# --- phases 2 and 3: the Containerfile's stages ------------------------------------------------------------


def _copy_sources(root: Path, rootfs: Path) -> None:
    """``COPY requirements-build.lock pyproject.toml README.md gpustack_worker`` into the build stage."""
    src = rootfs / _SRC.lstrip("/")
    for name in (BUILD_LOCK, *source_files(root)):
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, target)
    shutil.copyfile(root / RUNTIME_LOCK, rootfs / _LOCK_IN_IMAGE.lstrip("/"))


def _build_wheel(rootfs: Path) -> str:
    """The build stage: the build lock's tools, then our wheel. Returns the wheel's path in the rootfs."""
    _in_rootfs(rootfs, [*_PIP_INSTALL, *_LOCKED, "--target", _BUILD_TOOLS, "-r", f"{_SRC}/{BUILD_LOCK}"])
    _in_rootfs(
        rootfs,
        [*_PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", _WHEELS, _SRC],
        # the build lock's setuptools and wheel, ahead of Debian's older ones
        {"PYTHONPATH": _BUILD_TOOLS},
    )
    wheels = sorted((rootfs / _WHEELS.lstrip("/")).glob("gpustack_worker-*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"pip wheel left {[w.name for w in wheels]} in {_WHEELS}, expected one wheel")
    return f"{_WHEELS}/{wheels[0].name}"


def _install(rootfs: Path, wheel: str) -> None:
    """The final stage: the user, the runtime lock with its hashes, our wheel, ``pip check``."""
    _in_rootfs(rootfs, ["groupadd", "--gid", str(GID), USER_NAME])
    _in_rootfs(
        rootfs,
        [*_USERADD, "--uid", str(UID), "--gid", str(GID), USER_NAME],
    )
    _in_rootfs(rootfs, [*_PIP_INSTALL, *_LOCKED, "-r", _LOCK_IN_IMAGE])
    _in_rootfs(rootfs, [*_PIP_INSTALL, "--no-deps", "--no-index", wheel])
    _in_rootfs(rootfs, [*_PIP, "check"])


def _finish(rootfs: Path) -> None:
    """Remove the build's scratch files and the build machine's copies, empty ``/dev`` (the runtime mounts
    its own) and take ``o+w`` from everything but :data:`WRITABLE`."""
    for name in _SCRATCH:
        path = rootfs / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for name in _HOST_COPIES:
        (rootfs / name).write_bytes(b"")
    for entry in (rootfs / "dev").iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or str(path.relative_to(rootfs)) in WRITABLE:
                continue  # a symlink's own mode means nothing
            if mode & stat.S_IWOTH:
                path.chmod(stat.S_IMODE(mode) & ~stat.S_IWOTH)


def image_config(architecture: str) -> ImageConfig:
    """The Containerfile's ``USER``, ``ENTRYPOINT`` and ``ENV`` (with the base image's PATH and locale)."""
    env = [f"{k}={v}" for k, v in {**BASE_ENV, **IMAGE_ENV}.items()]
    return ImageConfig(entrypoint=list(ENTRYPOINT), user=USER, env=env, architecture=architecture)


# --- the whole build ---------------------------------------------------------------------------------------


def ensure_product_image(log: Callable[[str], None] = print) -> ProductImage:
    """The product image for the repository's current inputs: reused from the cache, else built.

    Raises :class:`BuildError` with the failing tool's own last lines (mmdebstrap, apt, pip)."""
    root = repo_root()
    version = package_version(root)
    key = input_key(root)
    images = cache_dir() / "images"
    image = ProductImage(images / f"gpustack-worker-{version}-{key}.tar", image_name(version), version, key)
    if image.tar.is_file():
        log(f"image: reusing {image.name} ({key}) → {image.tar}")
        return image
    _check_host()
    with _flock(images / ".lock", image.name, log):
        if image.tar.is_file():
            log(f"image: reusing {image.name} built by another process → {image.tar}")
            return image
        started = time.monotonic()
        base = ensure_base(log)
        with _building_dir(images) as work:
            rootfs = work / "rootfs"
            with _phase("copy of the base", log):
                _run(["cp", "-a", "--reflink=auto", str(base), str(rootfs)])
            with _phase("wheel (build lock, pip wheel)", log):
                _copy_sources(root, rootfs)
                wheel = _build_wheel(rootfs)
            with _phase("install (user 65532, requirements.lock, our wheel, pip check)", log):
                _install(rootfs, wheel)
                _finish(rootfs)
            with _phase("layout (OCI image-layout tar)", log):
                architecture = _run(["dpkg", "--print-architecture"]).strip()
                write_image_layout(rootfs, image_config(architecture), image.name, work / "image.tar")
                os.replace(work / "image.tar", image.tar)
        log(f"image: built {image.name} in {time.monotonic() - started:.0f}s → {image.tar}")
    return image


def main() -> int:
    """Build (or reuse) the image; print its tar, name and size, or the reason it could not be built."""
    try:
        image = ensure_product_image()
    except BuildError as exc:
        print(f"image build failed: {exc}", flush=True)
        return 1
    print(f"tar:  {image.tar}")
    print(f"name: {image.name}")
    print(f"size: {image.size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
