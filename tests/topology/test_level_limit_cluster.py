"""The TopologySource level limit on the real control plane (kube-apiserver, Kueue, nfd-master), with the
agent and the controllers running as their ServiceAccounts on ``topology-8`` (issue 27, class 4):

- the CRD schema refuses a 16-level source naming the limit; with the schema of a release before
  the limit, our admission webhook refuses it, its message naming the limit;
- a 15-level source gives its Nodes a 16-level Kueue Topology that Kueue's API server accepts, and the
  L4 queue on that profile becomes Ready;
- a 16-level source stored while the webhook was not registered (under the earlier schema, even with the
  ``Ready=True`` an earlier release wrote) is reported ``LevelLimitExceeded``; once every controller is
  idle, no Node carries its 17-level profile, it owns no NodeFeature, and no write of that Topology was
  ever attempted (the audit log); its levels cut to 15, it works.

The earlier schema is put back by replacing the CRD and restored afterwards (this module has its own
control plane). Polls wait for a condition with a generous bound, never a measurement; a negative claim
is checked only after the controllers went idle having seen the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds, validation, webhooks
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.topology import sources
from tests import stack as support
from tests.kit.webhooks import webhooks_served
from tests.stack import Stack, module_cluster, running_stack
from tests.stack import condition as _cond
from tests.topology.cluster_helpers import SNAPSHOT_KEY, snapshot_text

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NS = kinds.SYSTEM_NAMESPACE
TEAM = "team-levels"
RACK_NODES = tuple(f"rack-node-{i}" for i in range(1, 9))
INVENTORY = "example.com/inventory"
L4_QUEUE = "gpustack--nvidia-l4-linux-amd64"
CRD_NAME = f"{kinds.TOPOLOGY_SOURCE.plural}.{kinds.TOPOLOGY_SOURCE.group}"
COLLECTION = kinds.TOPOLOGY_SOURCE.collection_path()
DENIED_BY = f'admission webhook "{webhooks.TOPOLOGY_SOURCE_WEBHOOK}" denied the request'
LIMIT = "must list at most 15 levels"
WHY = "kubernetes.io/hostname is always appended as the finest level and a Kueue Topology holds at most 16"
HOSTNAME_ONLY = keys.topology_profile([keys.HOSTNAME])
#: A slow machine is slower than a warm one: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)


LEVEL_PREFIX = "topology.gpustack.ai/l"


def deep(n: int) -> list[str]:
    return [f"{LEVEL_PREFIX}{i}" for i in range(n)]


def _profile(levels: list[str]) -> str:
    return keys.topology_profile([*levels, keys.HOSTNAME])


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _snapshot(levels: list[str], revision: str) -> str:
    """Every rack node under one domain per level (a valid tree, however deep)."""
    return snapshot_text(revision, {n: {k: f"v{i}" for i, k in enumerate(levels)} for n in RACK_NODES})


def _config_map(name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {SNAPSHOT_KEY: text},
    }


def _source(name: str, levels: list[str], config_map: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {INVENTORY: "racks"}},
            "levels": levels,
            "configMap": {
                "configMapRef": {"namespace": NS, "name": config_map},
                "key": SNAPSHOT_KEY,
                "maxStaleness": "10m",
            },
        },
    }


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone (the chain reads every Node; the CRD is replaced here)."""
    with module_cluster("level-limit", audited=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def stack(devcluster: DevCluster) -> AsyncIterator[Stack]:
    async with running_stack(devcluster, "topology-8", namespaces=(TEAM,)) as running:
        yield running


@pytest.fixture
def api(devcluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = devcluster.bootstrap()
    try:
        yield client
    finally:
        client.close()


async def _call(api: ApiBootstrap, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return await asyncio.to_thread(api.request, method, path, body)


async def _dry_run(api: ApiBootstrap, levels: list[str]) -> Any:
    return await _call(api, "POST", f"{COLLECTION}?dryRun=All", _source("probe", levels, "probe"))


def _earlier_levels_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as a release before the limit served it: 1..16 levels, keys up to 317 characters."""
    earlier = copy.deepcopy(crd)
    schema = earlier["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    levels = schema["properties"]["spec"]["properties"]["levels"]
    levels["maxItems"] = 16
    levels["items"]["maxLength"] = 317
    return earlier


@contextlib.asynccontextmanager
async def earlier_schema(stack: Stack, api: ApiBootstrap) -> AsyncIterator[None]:
    """The TopologySource CRD of a release before the limit while the block runs (the current one after)."""
    admin = stack.admin
    current = await admin.get(kinds.CRD, CRD_NAME)
    assert current is not None
    await admin.replace(kinds.CRD, _earlier_levels_schema(current))

    async def relaxed() -> bool:  # the API server's schema no longer refuses 16 levels
        return bool((await _dry_run(api, deep(16))).status_code != 422)

    await eventually(relaxed)
    try:
        yield
    finally:
        live = await admin.get(kinds.CRD, CRD_NAME)
        assert live is not None
        await admin.replace(kinds.CRD, {**live, "spec": current["spec"]})

        async def restored() -> bool:
            return bool((await _dry_run(api, deep(16))).status_code == 422)

        await eventually(restored)


async def _delete_source(stack: Stack, name: str) -> None:
    admin = stack.admin
    with contextlib.suppress(Exception):
        await admin.delete(kinds.TOPOLOGY_SOURCE, name)

    async def gone() -> bool:
        return await admin.get(kinds.TOPOLOGY_SOURCE, name) is None

    await eventually(gone)

    # Its NodeFeatures go with it, and nfd-master then removes their labels from the Nodes on its own
    # schedule: the next test starts once no level label of any source is left on a rack node (a later
    # test asserting that its own snapshot's labels never arrived would otherwise see this one's).
    async def unlabelled() -> bool:
        for node in RACK_NODES:
            if any(k.startswith(LEVEL_PREFIX) for k in _labels(await admin.get(kinds.NODE, node))):
                return False
        return True

    await eventually(unlabelled)


async def _profiles(stack: Stack) -> set[str | None]:
    return {_labels(await stack.admin.get(kinds.NODE, n)).get(keys.TOPOLOGY_PROFILE) for n in RACK_NODES}


async def test_the_schema_and_the_webhook_refuse_16_levels_naming_the_limit(
    devcluster: DevCluster, stack: Stack, api: ApiBootstrap, tmp_path: Path
) -> None:
    async with webhooks_served(devcluster, tmp_path, namespace=NS):
        # This release's schema refuses first (the API server runs it before any webhook).
        refused = await _dry_run(api, deep(16))
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert "spec.levels" in message and "must have at most 15 items" in message, message
        assert (await _dry_run(api, deep(15))).status_code == 201
        # Under the earlier schema (1..16), the webhook is what refuses it, naming the limit.
        async with earlier_schema(stack, api):
            denied = await _dry_run(api, deep(16))
            assert denied.status_code == 403, denied.text
            status = denied.json()
            assert status["message"] == (
                f"{DENIED_BY}: TopologySource probe is invalid: spec.levels: {LIMIT} (lists 16): {WHY} levels"
            )
            assert [c["field"] for c in status["details"]["causes"]] == ["spec.levels"]
            assert (await _dry_run(api, deep(15))).status_code == 201


async def test_a_15_level_source_makes_a_16_level_topology_kueue_accepts_and_a_ready_queue(
    stack: Stack,
) -> None:
    admin, levels = stack.admin, deep(15)
    profile, name = _profile(levels), "fifteen"
    await admin.create(kinds.CONFIG_MAP, _config_map("fifteen", _snapshot(levels, "fifteen-1")))
    await admin.create(kinds.TOPOLOGY_SOURCE, _source(name, levels, "fifteen"))
    try:

        async def ready() -> dict[str, Any] | None:
            src = await admin.get(kinds.TOPOLOGY_SOURCE, name)
            return src if _cond(src, "Ready").get("status") == "True" else None

        await eventually(ready)

        async def profiled() -> bool:
            return await _profiles(stack) == {profile}

        await eventually(profiled)

        async def topology() -> dict[str, Any] | None:
            return await admin.get(kinds.TOPOLOGY, keys.topology_name(profile))

        created = await eventually(topology)  # Kueue's API server accepted it: it exists
        assert [lvl["nodeLabel"] for lvl in created["spec"]["levels"]] == [*levels, keys.HOSTNAME]
        assert len(created["spec"]["levels"]) == 16

        async def queue_ready() -> dict[str, Any] | None:
            cq = await admin.get(kinds.CLUSTER_QUEUE, L4_QUEUE)
            flavors = [
                f["name"]
                for g in ((cq or {}).get("spec") or {}).get("resourceGroups") or ()
                for f in g["flavors"]
            ]
            on_profile = bool(flavors) and all(f.endswith(profile) for f in flavors)
            ok = on_profile and _cond(cq, "TopologyReady").get("status") == "True"
            return cq if ok and _cond(cq, "Active").get("status") == "True" else None

        cq = await eventually(queue_ready)
        (flavor,) = [f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
        rf = await admin.get(kinds.RESOURCE_FLAVOR, flavor)
        assert rf is not None and rf["spec"]["topologyName"] == keys.topology_name(profile)
    finally:
        await _delete_source(stack, name)

        async def back() -> bool:
            return await _profiles(stack) == {HOSTNAME_ONLY}

        await eventually(back)


async def test_a_16_level_source_stored_without_the_webhook_is_not_ready_and_profiles_no_node(
    devcluster: DevCluster, stack: Stack, api: ApiBootstrap
) -> None:
    admin, levels, name = stack.admin, deep(16), "sixteen"
    seventeen = _profile(levels)
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    await admin.create(kinds.CONFIG_MAP, _config_map("sixteen", _snapshot(levels, "sixteen-1")))
    async with earlier_schema(stack, api):  # no webhook registered: stored as an earlier release allowed
        stored = await admin.create(kinds.TOPOLOGY_SOURCE, _source(name, levels, "sixteen"))
    try:
        # What an earlier release wrote for it (Ready=True): the assigner must not trust it either.
        ready_before = {"type": "Ready", "status": "True", "reason": "Observed", "message": "pre-limit"}
        ready_before["lastTransitionTime"] = stored["metadata"]["creationTimestamp"]
        with contextlib.suppress(Exception):  # the controller may be writing its own status meanwhile
            await admin.patch(
                kinds.TOPOLOGY_SOURCE, name, {"status": {"conditions": [ready_before]}}, subresource="status"
            )
        # A status patch does not wake the controller, and its first reconcile may already have run (it
        # then never sees the Ready=True written over its verdict): a new inventory revision wakes a
        # writing source, so it decides once more after the patch.
        await admin.patch(
            kinds.CONFIG_MAP,
            "sixteen",
            {"data": {SNAPSHOT_KEY: _snapshot(levels, "sixteen-1b")}},
            namespace=NS,
        )

        async def refused() -> dict[str, Any] | None:
            src = await admin.get(kinds.TOPOLOGY_SOURCE, name)
            ok = _cond(src, "Ready").get("reason") == sources.LEVEL_LIMIT_EXCEEDED
            return src if ok and _cond(src, "Ready").get("status") == "False" else None

        src = await eventually(refused)
        ready, valid = _cond(src, "Ready"), _cond(src, "Valid")
        assert ready["message"].startswith(f"spec.levels: {LIMIT} (lists 16): {WHY}"), ready
        assert (valid["status"], valid["reason"]) == ("False", sources.LEVEL_LIMIT_EXCEEDED)

        # The controllers had their chance: every queue drained after seeing the source.
        async def idle() -> bool:
            return stack.idle()

        await eventually(idle)
        assert await _profiles(stack) == {HOSTNAME_ONLY}
        for node in RACK_NODES:  # and no label of its snapshot reached a Node (it owns no NodeFeature)
            assert not any(k in levels for k in _labels(await admin.get(kinds.NODE, node))), node
        owned, _ = await admin.list(
            kinds.NODE_FEATURE,
            namespace=NS,
            label_selector=f"{keys.TOPOLOGY_SOURCE_UID}={stored['metadata']['uid']}",
        )
        assert owned == []
        assert await admin.get(kinds.TOPOLOGY, keys.topology_name(seventeen)) is None
        topology_writes = [e for e in audit.writes() if e.resource == "topologies"]
        assert [e for e in topology_writes if e.name == keys.topology_name(seventeen)] == []
        assert [
            e for e in topology_writes if e.code == 422
        ] == []  # no create Kueue refused, let alone a loop
        for topo in (await admin.list(kinds.TOPOLOGY))[0]:
            assert validation.object_problems(topo) == [], topo["metadata"]["name"]

        # Cut to 15 levels (and its snapshot with it): the source works.
        fixed = deep(15)
        await admin.patch(
            kinds.CONFIG_MAP, "sixteen", {"data": {SNAPSHOT_KEY: _snapshot(fixed, "sixteen-2")}}, namespace=NS
        )
        await admin.patch(kinds.TOPOLOGY_SOURCE, name, {"spec": {"levels": fixed}})

        async def profiled() -> bool:
            return await _profiles(stack) == {_profile(fixed)}

        await eventually(profiled)
        src = await admin.get(kinds.TOPOLOGY_SOURCE, name)
        assert _cond(src, "Ready").get("status") == "True", src
    finally:
        await _delete_source(stack, name)
