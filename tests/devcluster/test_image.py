"""The product image built here (gpustack_worker/devcluster/image.py) runs as the Containerfile says.

Run for real: the image is built (or reused from the cache), its layer unpacked into an OCI bundle and
``gpustack-worker --version`` started by Debian's runc (the real nodes' runtime) as uid 65532, with a
read-only root and no capabilities. No control plane is needed. A machine that cannot build the image
(no root, no Debian archive, no index) or run runc fails here with the tool's own words: never skipped.

The input key is tested offline, on a small git repository of its own.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import stat
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.devcluster import image as product
from gpustack_worker.devcluster.debs import NodeRuntime, ensure_node_runtime
from gpustack_worker.devcluster.oci import REF_NAME_ANNOTATION
from tests.test_containerfile import parse_containerfile

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
#: Generous: a cold Python start on a busy 2-core machine; only a hung runtime ever reaches it.
RUN_TIMEOUT = 300


# --- the image's config and layer --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> product.ProductImage:
    return product.ensure_product_image()


def _blobs(tar_path: Path) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """The layout's index, image config and (uncompressed) layer."""
    with tarfile.open(tar_path) as tar:

        def read(name: str) -> bytes:
            member = tar.extractfile(name)
            assert member is not None, name
            return member.read()

        def blob(descriptor: dict[str, Any]) -> bytes:
            return read("blobs/sha256/" + descriptor["digest"].removeprefix("sha256:"))

        index = json.loads(read("index.json"))
        manifest = json.loads(blob(index["manifests"][0]))
        config = json.loads(blob(manifest["config"]))
        (layer,) = manifest["layers"]
        return index, config, gzip.decompress(blob(layer))


@pytest.fixture(scope="module")
def blobs(image: product.ProductImage) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    return _blobs(image.tar)


def _final_stage() -> dict[str, str]:
    """The Containerfile's final stage: its last USER, ENTRYPOINT and ENV, as written."""
    stage = parse_containerfile((ROOT / "Containerfile").read_text())[-1]
    return {i.keyword: i.args for i in stage.instructions if i.keyword in {"USER", "ENTRYPOINT", "ENV"}}


def test_recipe_constants_are_the_containerfiles() -> None:
    final = _final_stage()
    assert final["USER"] == product.USER
    assert list(product.ENTRYPOINT) == json.loads(final["ENTRYPOINT"])
    assert dict(pair.split("=", 1) for pair in final["ENV"].split()) == product.IMAGE_ENV


def test_config_runs_the_entrypoint_as_65532(
    image: product.ProductImage, blobs: tuple[dict[str, Any], dict[str, Any], bytes]
) -> None:
    index, config, _ = blobs
    version = product.package_version(ROOT)
    assert image.name == f"localhost/gpustack-worker:{version}"  # the chart's repository:tag
    assert index["manifests"][0]["annotations"][REF_NAME_ANNOTATION] == image.name
    runtime = config["config"]
    assert runtime["User"] == "65532:65532"
    assert runtime["Entrypoint"] == ["gpustack-worker"]
    assert {f"{k}={v}" for k, v in product.IMAGE_ENV.items()} <= set(runtime["Env"])


def _writable_by_worker(member: tarfile.TarInfo) -> bool:
    mode = member.mode
    return bool(
        mode & stat.S_IWOTH
        or (member.uid == product.UID and mode & stat.S_IWUSR)
        or (member.gid == product.GID and mode & stat.S_IWGRP)
    )


def test_layer_has_nothing_the_worker_may_write_but_tmp(
    blobs: tuple[dict[str, Any], dict[str, Any], bytes],
) -> None:
    _, _, layer = blobs
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = [m for m in tar.getmembers() if not m.issym()]
    assert len(members) > 1000, "the layer should hold a whole root filesystem"
    writable = sorted(m.name for m in members if _writable_by_worker(m))
    assert writable == ["tmp"]
    assert [m.name for m in members if m.ischr() or m.isblk()] == []  # /dev is the runtime's


# --- running it with runc ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_runtime() -> NodeRuntime:
    return ensure_node_runtime()


@pytest.fixture(scope="module")
def bundle(
    blobs: tuple[dict[str, Any], dict[str, Any], bytes],
    node_runtime: NodeRuntime,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    """An OCI bundle of the image's layer, with runc's own ``runc spec`` as the config template."""
    _, _, layer = blobs
    path = tmp_path_factory.mktemp("bundle")
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        tar.extractall(path / "rootfs", numeric_owner=True, filter="fully_trusted")
    subprocess.run([str(node_runtime.runc), "spec"], cwd=path, check=True, capture_output=True)
    yield path
    shutil.rmtree(path)  # a whole root filesystem: not one of pytest's kept temporary directories


def _runc(
    runtime: NodeRuntime, bundle: Path, config: dict[str, Any], args: list[str]
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the image as the Pod's security context would: uid/gid 65532, read-only root, no
    capabilities, no new privileges, the image's Env."""
    spec = json.loads((bundle / "config.json").read_text())
    process = spec["process"]
    process.update(
        terminal=False,
        args=args,
        env=config["config"]["Env"],
        cwd=config["config"]["WorkingDir"],
        user={"uid": product.UID, "gid": product.GID},
        capabilities={kind: [] for kind in process["capabilities"]},
        noNewPrivileges=True,
    )
    spec["root"] = {"path": "rootfs", "readonly": True}
    (bundle / "config.json").write_text(json.dumps(spec))
    state = bundle / "runc-state"
    name = f"gpustack-image-test-{uuid.uuid4().hex[:12]}"
    return subprocess.run(
        [str(runtime.runc), "--root", str(state), "run", "--bundle", str(bundle), name],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def test_entrypoint_prints_the_version_as_65532_on_a_read_only_root(
    image: product.ProductImage,
    blobs: tuple[dict[str, Any], dict[str, Any], bytes],
    node_runtime: NodeRuntime,
    bundle: Path,
) -> None:
    _, config, _ = blobs
    done = _runc(node_runtime, bundle, config, [*config["config"]["Entrypoint"], "--version"])
    assert (done.returncode, done.stdout, done.stderr) == (0, f"gpustack-worker {image.version}\n", "")


PROBE = """
import errno, os
try:
    open("/usr/local/probe", "w")
except OSError as exc:
    denied = errno.errorcode[exc.errno]
else:
    denied = "written"
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
print(os.getuid(), os.getgid(), denied, caps)
"""


def test_the_process_is_65532_without_capabilities_and_cannot_write(
    blobs: tuple[dict[str, Any], dict[str, Any], bytes], node_runtime: NodeRuntime, bundle: Path
) -> None:
    _, config, _ = blobs
    done = _runc(node_runtime, bundle, config, ["python3", "-c", PROBE])
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == ["65532", "65532", "EROFS", "0000000000000000"]


#: Load every compiled module of the installed wheels: the locks were resolved for CPython 3.11.14 on
#: manylinux_2_28, the image has Debian's 3.11.2 and glibc 2.36, and a wheel needing a newer glibc or a
#: symbol 3.11.2 lacks fails here (``RTLD_NOW``: every symbol resolved at load).
LOAD_EXTENSIONS = """
import ctypes, os, pathlib
site = pathlib.Path("/usr/local/lib/python3.11/dist-packages")
failed, loaded = [], 0
for path in sorted(site.rglob("*.so")):
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_NOW)
        loaded += 1
    except OSError as exc:
        failed.append(str(exc))
print(loaded)
print("\\n".join(failed))
"""


def test_every_compiled_wheel_loads_on_the_debian_base(
    blobs: tuple[dict[str, Any], dict[str, Any], bytes], node_runtime: NodeRuntime, bundle: Path
) -> None:
    _, config, _ = blobs
    done = _runc(node_runtime, bundle, config, ["python3", "-c", LOAD_EXTENSIONS])
    assert (done.returncode, done.stderr) == (0, "")
    loaded, *failed = done.stdout.strip().split("\n")
    # cffi, charset-normalizer, cryptography, orjson, protobuf, pydantic-core, pyyaml … at least
    assert (int(loaded) >= 6, [f for f in failed if f]) == (True, [])


# --- the cache key, offline --------------------------------------------------------------------------------


def _repo(root: Path) -> Path:
    """A repository with the files the key reads: both locks, pyproject, README and one module."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("__pycache__/\n")
    for name in ("requirements.lock", "requirements-build.lock", "README.md"):
        (root / name).write_text(f"{name}\n")
    (root / "pyproject.toml").write_text('[project]\nname = "gpustack-worker"\nversion = "9.9"\n')
    (root / "gpustack_worker").mkdir()
    (root / "gpustack_worker/__init__.py").write_text("")
    return root


def test_the_same_inputs_give_the_same_key(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    assert product.input_key(root) == product.input_key(root)
    assert product.package_version(root) == "9.9"


@pytest.mark.parametrize(
    "change",
    ["requirements.lock", "requirements-build.lock", "gpustack_worker/__init__.py", "pyproject.toml"],
)
def test_a_changed_input_changes_the_key(tmp_path: Path, change: str) -> None:
    root = _repo(tmp_path)
    before = product.input_key(root)
    with (root / change).open("a") as handle:
        handle.write("# changed\n")
    assert product.input_key(root) != before


def test_a_new_module_changes_the_key_and_bytecode_does_not(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = product.input_key(root)
    (root / "gpustack_worker/__pycache__").mkdir()
    (root / "gpustack_worker/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("not a source of the wheel\n")
    assert product.input_key(root) == before
    (root / "gpustack_worker/new.py").write_text("")
    assert product.input_key(root) != before
