"""The OCI image-layout writer: required fields, digests of the content, ownership and modes kept."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from typing import TYPE_CHECKING, Any

from gpustack_worker.devcluster.oci import (
    CONFIG_MEDIA_TYPE,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    REF_NAME_ANNOTATION,
    ImageConfig,
    write_image_layout,
)

if TYPE_CHECKING:
    from pathlib import Path

REF = "localhost/gpustack-devcluster/test:1"


def _layout(tmp_path: Path) -> dict[str, bytes]:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    program = rootfs / "bin" / "run"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o750)
    os.chown(program, 65532, 65532)
    config = ImageConfig(entrypoint=["/bin/run"], user="65532:65532", env=["A=1"], workdir="/bin")
    tar_path = write_image_layout(rootfs, config, REF, tmp_path / "image.tar")
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    data = files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
    assert len(data) == descriptor["size"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
    return data


def test_layout_has_the_required_fields_and_digests_match(tmp_path: Path) -> None:
    files = _layout(tmp_path)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    (entry,) = index["manifests"]
    assert entry["mediaType"] == MANIFEST_MEDIA_TYPE
    assert entry["annotations"][REF_NAME_ANNOTATION] == REF
    manifest = json.loads(_blob(files, entry))
    assert manifest["schemaVersion"] == 2
    assert manifest["config"]["mediaType"] == CONFIG_MEDIA_TYPE
    config = json.loads(_blob(files, manifest["config"]))
    assert config["os"] == "linux"
    assert config["architecture"] == "amd64"
    assert config["config"]["Entrypoint"] == ["/bin/run"]
    assert config["config"]["User"] == "65532:65532"
    (layer_descriptor,) = manifest["layers"]
    assert layer_descriptor["mediaType"] == LAYER_MEDIA_TYPE
    diff = gzip.decompress(_blob(files, layer_descriptor))
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(diff).hexdigest()]}


def test_a_files_mode_and_owner_survive(tmp_path: Path) -> None:
    files = _layout(tmp_path)
    manifest_digest = json.loads(files["index.json"])["manifests"][0]["digest"]
    manifest = json.loads(files["blobs/sha256/" + manifest_digest.removeprefix("sha256:")])
    layer_digest = manifest["layers"][0]["digest"].removeprefix("sha256:")
    with tarfile.open(fileobj=io.BytesIO(files["blobs/sha256/" + layer_digest]), mode="r:gz") as layer:
        program = layer.getmember("bin/run")
    assert (program.mode & 0o7777, program.uid, program.gid) == (0o750, 65532, 65532)


def test_the_same_tree_gives_the_same_image(tmp_path: Path) -> None:
    first = _layout(tmp_path / "a")
    second = _layout(tmp_path / "b")
    assert first["index.json"] == second["index.json"]
