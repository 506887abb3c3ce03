"""``kueue-config --merge`` of a team's Kueue ConfigMap, applied to the real API server and reverted.

The team's ConfigMap is the issue's: their integrations, ``waitForPodsReady``, their own ``nvidia.com/gpu``
transformation (``outputs: acme.io/gpu-cost: 10``), ``manageJobsWithoutQueueName: true``, the TAS gate
off, comments in their file — and Helm's metadata (``meta.helm.sh/release-*`` annotations, Helm's labels),
an ownerReference and a finalizer. The real CLI merges it (refusing the three conflicts until each is
accepted), ``kubectl replace``/``kubectl apply`` put the output back, and the revert that ``cleanup
--kueue-config`` runs restores it: data and metadata compared byte for byte with the original (only the
server's ``resourceVersion`` and ``managedFields`` move). A team edit made after the merge survives the
revert and is reported.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import keys, kinds, kueue_install
from gpustack_worker.cli.cleanup import command as cleanup_cmd
from gpustack_worker.cli.kueue_config import command as kueue_config_cmd
from gpustack_worker.runtime.client import Client

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _kubectl_on_path() -> None:
    """kubectl is the admin's tool under test: without it the module fails, saying so (never skipped)."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH: these tests put the merge back with kubectl replace/apply")


NS = f"kueue-merge-{uuid.uuid4().hex[:6]}"
KEY = kueue_install.CONFIG_KEY
#: The issue's team configuration, as they wrote it.
TEAM_TEXT = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: true   # every Job is queued, queue name or not
waitForPodsReady:
  timeout: 5m
  blockAdmission: true
integrations:
  frameworks: ["batch/job", "jobset.x-k8s.io/jobset", "ray.io/raycluster"]
resources:
  transformations:
  - input: nvidia.com/gpu
    strategy: Retain
    outputs:
      acme.io/gpu-cost: 10
featureGates:
  TopologyAwareScheduling: false
"""
ACCEPTS = ("transformation:nvidia.com/gpu", "gate:TopologyAwareScheduling", "integration:pod")
#: What the server may change on a write; everything else of the metadata must come back byte for byte.
MOVES = ("resourceVersion", "managedFields")


def _cli(*argv: str, kubeconfig: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker.cli.main", *argv],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _kubectl(verb: str, manifest: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), verb, "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _stable(obj: dict[str, Any]) -> str:
    """The ConfigMap's data and metadata but what the server moves, as canonical JSON bytes."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in MOVES}
    return json.dumps({"metadata": meta, "data": obj["data"]}, sort_keys=True)


@pytest.fixture
async def admin(devcluster: DevCluster) -> AsyncIterator[Client]:
    """An admin client; the test's ConfigMaps are deleted afterwards (the namespace stays: the dev cluster
    runs no namespace controller to finish deleting one)."""
    client = await Client.connect(str(devcluster.kubeconfig))
    if await client.get(kinds.NAMESPACE, NS) is None:
        await client.create(
            kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
    try:
        yield client
    finally:
        for cm in (await client.list(kinds.CONFIG_MAP, namespace=NS))[0]:
            if not cm["metadata"]["name"].startswith("kube-"):
                await client.delete(kinds.CONFIG_MAP, cm["metadata"]["name"], NS)
        await client.close()


async def _team_configmap(admin: Client, name: str) -> dict[str, Any]:
    """The team's ConfigMap as Helm leaves it (written by manager ``helm``), owned by another object."""
    owner = await admin.create(
        kinds.CONFIG_MAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-owner", "namespace": NS}},
        field_manager="helm",
    )
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": "kueue"},
            "annotations": {"meta.helm.sh/release-name": "kueue", "meta.helm.sh/release-namespace": NS},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                }
            ],
        },
        "data": {KEY: TEAM_TEXT},
    }
    return await admin.create(kinds.CONFIG_MAP, body, field_manager="helm")


async def _merge(
    devcluster: DevCluster, current: dict[str, Any], *accepts: str
) -> subprocess.CompletedProcess[str]:
    argv = ["kueue-config", "--merge", "-", *(a for t in accepts for a in ("--accept", t))]
    return await asyncio.to_thread(
        _cli, *argv, kubeconfig=devcluster.kubeconfig, stdin=yaml.safe_dump(current)
    )


async def test_merge_replace_and_revert_give_back_the_configmap_byte_for_byte(
    devcluster: DevCluster, admin: Client
) -> None:
    original = await _team_configmap(admin, "kueue-manager-config")

    refused = await _merge(devcluster, original)
    assert refused.returncode == 1
    assert refused.stdout == ""
    for token in ACCEPTS:
        assert f"--accept {token}" in refused.stderr

    merged = await _merge(devcluster, original, *ACCEPTS)
    assert merged.returncode == 0, merged.stderr
    put = await asyncio.to_thread(_kubectl, "replace", merged.stdout, devcluster.kubeconfig)
    assert put.returncode == 0, put.stderr
    live = await admin.get(kinds.CONFIG_MAP, "kueue-manager-config", NS)
    assert live is not None
    annotations = dict(live["metadata"]["annotations"])
    record = json.loads(annotations.pop(keys.KUEUE_CONFIG_MERGE_ANNOTATION))
    assert record["original"] == TEAM_TEXT
    # Helm's ownership and everything else of the metadata: as it was.
    assert annotations == original["metadata"]["annotations"]
    for key in ("labels", "ownerReferences", "uid", "creationTimestamp"):
        assert live["metadata"][key] == original["metadata"][key]
    inner = yaml.safe_load(live["data"][KEY])
    assert inner["waitForPodsReady"] == {"timeout": "5m", "blockAdmission": True}
    assert "pod" in inner["integrations"]["frameworks"]

    # The output carries the resourceVersion it was read at: replacing it again is refused, not a clobber.
    stale = await asyncio.to_thread(_kubectl, "replace", merged.stdout, devcluster.kubeconfig)
    assert stale.returncode != 0
    assert "the object has been modified" in stale.stderr

    # cleanup --kueue-config's step: --dry-run says what it would restore and writes nothing.
    said: list[str] = []
    assert await cleanup_cmd.revert_kueue_config(
        admin, f"{NS}/kueue-manager-config", dry_run=True, say=said.append
    )
    assert "would revert" in said[0]
    assert "byte for byte" in said[0]
    unchanged = await admin.get(kinds.CONFIG_MAP, "kueue-manager-config", NS)
    assert unchanged is not None
    assert unchanged["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]

    said.clear()
    assert await cleanup_cmd.revert_kueue_config(
        admin, f"{NS}/kueue-manager-config", dry_run=False, say=said.append
    )
    back = await admin.get(kinds.CONFIG_MAP, "kueue-manager-config", NS)
    assert back is not None
    assert back["data"][KEY] == TEAM_TEXT
    assert _stable(back) == _stable(original)
    assert any("rollout restart" in line for line in said)

    # Nothing recorded any more: a second revert leaves it alone.
    said.clear()
    assert await cleanup_cmd.revert_kueue_config(
        admin, f"{NS}/kueue-manager-config", dry_run=False, say=said.append
    )
    assert "left alone" in said[0]


async def test_kubectl_apply_of_the_merge_keeps_helms_metadata_and_a_later_team_edit_survives_the_revert(
    devcluster: DevCluster, admin: Client
) -> None:
    original = await _team_configmap(admin, "applied")
    merged = await _merge(devcluster, original, *ACCEPTS)
    assert merged.returncode == 0, merged.stderr
    applied = await asyncio.to_thread(_kubectl, "apply", merged.stdout, devcluster.kubeconfig)
    assert applied.returncode == 0, applied.stderr
    live = await admin.get(kinds.CONFIG_MAP, "applied", NS)
    assert live is not None
    for key, value in original["metadata"]["annotations"].items():
        assert live["metadata"]["annotations"][key] == value
    for key in ("labels", "ownerReferences", "uid"):
        assert live["metadata"][key] == original["metadata"][key]

    # The team turns one of our gates off and adds a key of their own after the merge.
    inner = yaml.safe_load(live["data"][KEY])
    inner["featureGates"]["TASBalancedPlacement"] = False
    inner["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}
    edited = {**live, "data": {KEY: yaml.safe_dump(inner)}}
    await admin.replace(kinds.CONFIG_MAP, edited)

    said: list[str] = []
    assert await cleanup_cmd.revert_kueue_config(admin, f"{NS}/applied", dry_run=False, say=said.append)
    assert "key by key" in said[0]
    assert any("featureGates.TASBalancedPlacement: changed since the merge" in line for line in said)
    back = await admin.get(kinds.CONFIG_MAP, "applied", NS)
    assert back is not None
    out = yaml.safe_load(back["data"][KEY])
    team = yaml.safe_load(TEAM_TEXT)
    assert out == {
        **team,
        "featureGates": {"TopologyAwareScheduling": False, "TASBalancedPlacement": False},
        "fairSharing": inner["fairSharing"],
    }
    assert keys.KUEUE_CONFIG_MERGE_ANNOTATION not in back["metadata"]["annotations"]


async def test_a_configmap_kubectl_applied_gets_its_last_applied_annotation_back(
    devcluster: DevCluster, admin: Client
) -> None:
    """The team applied their ConfigMap with ``kubectl apply`` (kubectl's last-applied annotation holds it);
    ``kubectl replace`` of the merge rewrites that annotation with the merged ConfigMap, and the byte-for-byte
    revert puts the team's back — so their next ``kubectl apply`` diffs against their own file."""
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-applied", "namespace": NS, "labels": {"app.kubernetes.io/name": "kueue"}},
        "data": {KEY: TEAM_TEXT},
    }
    applied = await asyncio.to_thread(_kubectl, "apply", yaml.safe_dump(manifest), devcluster.kubeconfig)
    assert applied.returncode == 0, applied.stderr
    original = await admin.get(kinds.CONFIG_MAP, "kueue-applied", NS)
    assert original is not None
    theirs = original["metadata"]["annotations"][kueue_config_cmd.LAST_APPLIED]

    merged = await _merge(devcluster, original, *ACCEPTS)
    assert merged.returncode == 0, merged.stderr
    put = await asyncio.to_thread(_kubectl, "replace", merged.stdout, devcluster.kubeconfig)
    assert put.returncode == 0, put.stderr
    live = await admin.get(kinds.CONFIG_MAP, "kueue-applied", NS)
    assert live is not None
    assert live["metadata"]["annotations"][kueue_config_cmd.LAST_APPLIED] != theirs  # kubectl rewrote it

    said: list[str] = []
    assert await cleanup_cmd.revert_kueue_config(admin, f"{NS}/kueue-applied", dry_run=False, say=said.append)
    back = await admin.get(kinds.CONFIG_MAP, "kueue-applied", NS)
    assert back is not None
    assert back["metadata"]["annotations"][kueue_config_cmd.LAST_APPLIED] == theirs
    assert _stable(back) == _stable(original)
