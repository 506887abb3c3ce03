"""OCI image-layout tars written from a directory, and their import into containerd.

No registry is reachable here and there is no Docker, so the images the real nodes run (the pause
sandbox, the product image) are written locally: one gzip layer from a rootfs directory (uid, gid and
mode of every entry kept, so a file owned by 65532 stays so in the container), an image config, a
manifest, and an ``index.json`` whose ``org.opencontainers.image.ref.name`` annotation is the name
``ctr images import`` gives the image. Timestamps are fixed so the same tree gives the same digests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
FIXED_MTIME = 0
#: gzip's fastest level: the product image's layer takes ~2 s instead of ~30 s at the default 9 (the tests'
#: run rebuilds the image whenever the package changed), for a tar a few MiB larger that never leaves the
#: machine.
LAYER_GZIP_LEVEL = 1


@dataclass(frozen=True)
class ImageConfig:
    """What the container runs: the OCI config's ``config`` object."""

    entrypoint: list[str]
    cmd: list[str] = field(default_factory=list)
    user: str = ""
    env: list[str] = field(default_factory=list)
    workdir: str = "/"
    architecture: str = "amd64"
    os: str = "linux"


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob: its descriptor fields and its bytes."""

    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


def _layer_tar(rootfs: Path) -> bytes:
    """The rootfs as an uncompressed tar, sorted, ownership and modes as on disk, mtimes fixed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                path = Path(dirpath) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
                info.mtime = FIXED_MTIME
                info.uname = info.gname = ""
                if info.isreg():
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
    return buffer.getvalue()


def _json_blob(media_type: str, value: object) -> Blob:
    return Blob(media_type, json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def write_image_layout(rootfs: Path, config: ImageConfig, ref_name: str, out: Path) -> Path:
    """Write ``out`` as an OCI image-layout tar holding ``rootfs`` as one layer, named ``ref_name``."""
    diff = _layer_tar(rootfs)
    layer = Blob(LAYER_MEDIA_TYPE, gzip.compress(diff, compresslevel=LAYER_GZIP_LEVEL, mtime=FIXED_MTIME))
    runtime: dict[str, object] = {"Entrypoint": config.entrypoint, "WorkingDir": config.workdir}
    if config.cmd:
        runtime["Cmd"] = config.cmd
    if config.user:
        runtime["User"] = config.user
    if config.env:
        runtime["Env"] = config.env
    image_config = _json_blob(
        CONFIG_MEDIA_TYPE,
        {
            "architecture": config.architecture,
            "os": config.os,
            "config": runtime,
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(diff).hexdigest()]},
        },
    )
    manifest = _json_blob(
        MANIFEST_MEDIA_TYPE,
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": image_config.descriptor(),
            "layers": [layer.descriptor()],
        },
    )
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{**manifest.descriptor(), "annotations": {REF_NAME_ANNOTATION: ref_name}}],
    }
    files: list[tuple[str, bytes]] = [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
    ]
    files.extend(
        ("blobs/sha256/" + blob.digest.removeprefix("sha256:"), blob.data)
        for blob in (layer, image_config, manifest)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w") as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
            tar.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, FIXED_MTIME
            tar.addfile(info, io.BytesIO(data))
    return out


def import_image(tar: Path, ctr: Path, address: str, namespace: str = "k8s.io") -> None:
    """Import an image-layout tar into containerd under its ref name.

    That name is what a Pod with ``imagePullPolicy: Never`` finds, since no registry is reachable.
    """
    subprocess.run(
        [str(ctr), "--address", address, "--namespace", namespace, "images", "import", str(tar)],
        check=True,
        capture_output=True,
        text=True,
    )
