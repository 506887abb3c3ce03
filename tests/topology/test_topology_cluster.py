"""Topology-aware scheduling end to end on the real control plane (Kueue, nfd-master), with the node agent
and the controllers (topology + chain) running as their ServiceAccounts, on the ``topology-8`` scenario:

- a configMap source places 8 two-L4 nodes into 2 zones × 2 racks: the labels reach the Nodes through
  NFD, the Topology and the per-profile flavors exist, and a Workload whose PodSet requires the rack
  level is admitted with every pod in one rack (one pod more than a rack holds stays pending);
- a broken snapshot changes nothing and reports ``SnapshotInvalid``;
- two overlapping writing sources fall back to hostname-only;
- a nodeLabels source over cloud region/zone labels works without writing any NodeFeature or any Node
  label other than the profile;
- a configMap source over the same labels that goes Stale and then Expired: the Nodes fall back to
  hostname-only on the expiry alone (no Node changes);
- the webhook arm against local HTTPS servers (bearer token, client certificate): a redirect, a slow, a
  huge and a malformed answer each give a clear condition while the last good snapshot holds; then it
  expires.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import managers as chain_managers
from gpustack_worker.simulate.load import packaged_scenario
from gpustack_worker.topology import managers as topology_managers
from tests import stack as support
from tests.stack import Stack, module_cluster, running_stack
from tests.stack import condition as _cond
from tests.topology.cluster_helpers import SNAPSHOT_KEY, decode_topology_assignment, snapshot_text, workload
from tests.topology.https_server import Mode, Pki, SnapshotServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NS = kinds.SYSTEM_NAMESPACE
TEAM = "team-topo"
RACK_NODES = tuple(f"rack-node-{i}" for i in range(1, 9))
REGION, ZONE, RACK = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
LEVELS = (REGION, ZONE, RACK)
PROFILE = keys.topology_profile([*LEVELS, keys.HOSTNAME])
HOSTNAME_ONLY = keys.topology_profile([keys.HOSTNAME])
L4_QUEUE = "gpustack--nvidia-l4-linux-amd64"
INVENTORY = "example.com/inventory"
#: Every field manager the controller process writes with.
CONTROLLER_MANAGERS = {
    *(getattr(topology_managers, n) for n in topology_managers.__all__ if not n.startswith("OWNER")),
    *(getattr(chain_managers, n) for n in chain_managers.__all__ if not n.startswith("OWNER")),
}


def _placement(i: int) -> dict[str, str]:
    """rack-node-1..8 → zone-a/rack-1 (1, 2), zone-a/rack-2 (3, 4), zone-b/rack-3 (5, 6), zone-b/rack-4."""
    rack = (i - 1) // 2 + 1
    zone = "zone-a" if rack <= 2 else "zone-b"
    return {REGION: "region-1", ZONE: zone, RACK: f"rack-{rack}"}


#: A fresh CI machine is slower than a warm one: poll up to two minutes (never a measurement).
eventually = functools.partial(support.eventually, within=120.0)
GOOD = snapshot_text("inventory-1", {f"rack-node-{i}": _placement(i) for i in range(1, 9)})


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": data,
    }


def _source(name: str, levels: tuple[str, ...], selector: dict[str, str], **arm: Any) -> dict[str, Any]:
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": selector}, "levels": list(levels), **arm},
    }


def _cm_arm(cm: str, staleness: str = "10m") -> dict[str, Any]:
    return {
        "configMap": {
            "configMapRef": {"namespace": NS, "name": cm},
            "key": SNAPSHOT_KEY,
            "maxStaleness": staleness,
        }
    }


class Running:
    """The stack, and what these tests read of the cluster."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.admin = stack.admin

    async def source(self, name: str) -> dict[str, Any] | None:
        return await self.admin.get(kinds.TOPOLOGY_SOURCE, name)

    async def owned_nodefeatures(self, uid: str) -> dict[str, dict[str, Any]]:
        items, _ = await self.admin.list(
            kinds.NODE_FEATURE, namespace=NS, label_selector=f"{keys.TOPOLOGY_SOURCE_UID}={uid}"
        )
        return {i["metadata"]["name"]: i for i in items}

    async def profiles(self, names: tuple[str, ...]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name in names:
            node = await self.admin.get(kinds.NODE, name)
            out[name] = _labels(node).get(keys.TOPOLOGY_PROFILE)
        return out


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone: the chain reads every Node of the cluster."""
    with module_cluster("topology") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    async with running_stack(devcluster, "topology-8", namespaces=(TEAM,)) as stack:
        yield Running(stack)


async def _data_center(run: Running) -> dict[str, Any]:
    """The configMap source over the rack nodes, applied (idempotent: later tests start from here)."""
    admin = run.admin
    if await admin.get(kinds.CONFIG_MAP, "inventory", NS) is None:
        await admin.create(kinds.CONFIG_MAP, _config_map("inventory", {SNAPSHOT_KEY: GOOD}))
    if await run.source("data-center") is None:
        await admin.create(
            kinds.TOPOLOGY_SOURCE,
            _source("data-center", LEVELS, {INVENTORY: "racks"}, **_cm_arm("inventory")),
        )

    async def ready() -> dict[str, Any] | None:
        src = await run.source("data-center")
        return src if _cond(src, "Ready").get("status") == "True" else None

    return await eventually(ready)


async def test_configmap_source_places_nodes_into_racks(running: Running) -> None:
    run, admin = running, running.admin
    src = await _data_center(run)
    status = src["status"]
    assert status["sourceKind"] == "ConfigMap"
    assert status["lastSuccessfulRevision"] == "inventory-1"
    assert status["selectedNodes"] == 8
    assert _cond(src, "Valid")["reason"] == "Observed"
    assert _cond(src, "OwnershipConflict") | {"lastTransitionTime": ""} == {
        **_cond(src, "OwnershipConflict"),
        "status": "False",
        "reason": "NoConflict",
        "lastTransitionTime": "",
    }
    uid = src["metadata"]["uid"]

    # One NodeFeature per node, named and labelled per reference §2.1.1, with only the private labels.
    owned = await eventually(lambda: _when(run.owned_nodefeatures(uid), lambda o: len(o) == 8))
    for i, node in enumerate(RACK_NODES, start=1):
        nf = owned[keys.topology_source_nodefeature_name(uid, node)]
        assert nf["metadata"]["labels"] == {keys.NFD_NODE_NAME: node, keys.TOPOLOGY_SOURCE_UID: uid}
        assert nf["spec"]["labels"] == _placement(i)
        ref = nf["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("TopologySource", uid, True)

    # NFD projects them onto the Nodes; the profile assigner gives them the region/zone/rack profile.
    async def labelled() -> bool:
        for i, name in enumerate(RACK_NODES, start=1):
            labels = _labels(await admin.get(kinds.NODE, name))
            if any(labels.get(k) != v for k, v in _placement(i).items()):
                return False
            if labels.get(keys.TOPOLOGY_PROFILE) != PROFILE:
                return False
        return True

    await eventually(labelled)
    for name in RACK_NODES:  # mirrored onto the ledger
        devices = await admin.get(kinds.DEVICES, name)
        assert _labels(devices).get(keys.TOPOLOGY_PROFILE) == PROFILE

    topology = await eventually(lambda: admin.get(kinds.TOPOLOGY, keys.topology_name(PROFILE)))
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [*LEVELS, keys.HOSTNAME]

    flavor_name = f"gpustack--intel-xeon-platinum-8375c--nvidia-l4-linux-amd64-2d-{PROFILE}"

    async def flavor() -> dict[str, Any] | None:
        return await admin.get(kinds.RESOURCE_FLAVOR, flavor_name)

    rf = await eventually(flavor)
    assert rf["spec"]["topologyName"] == keys.topology_name(PROFILE)
    assert rf["spec"]["nodeLabels"][keys.TOPOLOGY_PROFILE] == PROFILE

    async def queue_ready() -> dict[str, Any] | None:
        cq = await admin.get(kinds.CLUSTER_QUEUE, L4_QUEUE)
        flavors = [
            f["name"] for g in (cq or {}).get("spec", {}).get("resourceGroups") or () for f in g["flavors"]
        ]
        ok = _cond(cq, "TopologyReady").get("status") == "True" and flavors == [flavor_name]
        return cq if ok and _cond(cq, "Active").get("status") == "True" else None

    await eventually(queue_ready)

    # Four pods of one GPU each, rack required: one rack (2 nodes × 2 L4) holds exactly four.
    await admin.create(
        kinds.WORKLOAD, workload("rack-four", TEAM, L4_QUEUE, count=4, required_level=RACK), namespace=TEAM
    )

    async def admitted() -> dict[str, Any] | None:
        wl = await admin.get(kinds.WORKLOAD, "rack-four", TEAM)
        return wl if _cond(wl, "Admitted").get("status") == "True" else None

    wl = await eventually(admitted)
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {"credits.gpustack.ai/nvidia": flavor_name}
    levels, domains = decode_topology_assignment(assignment["topologyAssignment"])
    assert sum(d.pods for d in domains) == 4
    racks = set()
    for domain in domains:
        values = dict(zip(levels, domain.values, strict=True))
        if RACK in values:
            racks.add(values[RACK])
        else:  # Kueue names only the hostname level when the lowest level is the host
            node = await admin.get(kinds.NODE, values[keys.HOSTNAME])
            racks.add(_labels(node)[RACK])
    assert len(racks) == 1, f"pods spread over racks {racks}: {domains}"

    # A fifth pod does not fit any one rack although the cluster has 16 L4s: pending, Kueue's words.
    await admin.create(
        kinds.WORKLOAD, workload("rack-five", TEAM, L4_QUEUE, count=5, required_level=RACK), namespace=TEAM
    )

    async def pending() -> str | None:
        wl5 = await admin.get(kinds.WORKLOAD, "rack-five", TEAM)
        cond = _cond(wl5, "QuotaReserved")
        return cond.get("message") if cond.get("status") == "False" and cond.get("message") else None

    message = await eventually(pending)
    print(f"Kueue on a 5-pod rack-required PodSet: {message}")
    assert _cond(await admin.get(kinds.WORKLOAD, "rack-five", TEAM), "Admitted").get("status") != "True"
    for name in ("rack-four", "rack-five"):
        await admin.delete(kinds.WORKLOAD, name, TEAM)


async def _when(value: Any, check: Callable[[Any], bool]) -> Any:
    got = await value
    return got if check(got) else None


async def test_a_broken_snapshot_changes_nothing(running: Running) -> None:
    run, admin = running, running.admin
    src = await _data_center(run)
    uid = src["metadata"]["uid"]
    before = {n: nf["metadata"]["resourceVersion"] for n, nf in (await run.owned_nodefeatures(uid)).items()}
    assert len(before) == 8
    profiles_before = await run.profiles(RACK_NODES)
    # rack-2 under two zones: one child value under two parent tuples rejects the whole revision.
    broken = {f"rack-node-{i}": _placement(i) for i in range(1, 9)}
    broken["rack-node-4"] = {**broken["rack-node-4"], ZONE: "zone-b"}
    cm = _config_map("inventory", {SNAPSHOT_KEY: snapshot_text("inventory-2", broken)})
    await admin.patch(kinds.CONFIG_MAP, "inventory", {"data": cm["data"]}, namespace=NS)

    async def invalid() -> dict[str, Any] | None:
        got = await run.source("data-center")
        return got if _cond(got, "Valid").get("reason") == "SnapshotInvalid" else None

    got = await eventually(invalid)
    valid, ready = _cond(got, "Valid"), _cond(got, "Ready")
    assert valid["status"] == "False" and "rack-2" in valid["message"], valid
    assert (ready["status"], ready["reason"]) == ("False", "Stale"), ready
    assert got["status"]["lastSuccessfulRevision"] == "inventory-1"
    # Nothing changed: the NodeFeatures (same resourceVersions), the Node profiles.
    after = {n: nf["metadata"]["resourceVersion"] for n, nf in (await run.owned_nodefeatures(uid)).items()}
    assert after == before
    assert await run.profiles(RACK_NODES) == profiles_before

    await admin.patch(kinds.CONFIG_MAP, "inventory", {"data": {SNAPSHOT_KEY: GOOD}}, namespace=NS)
    await _data_center(run)


async def test_two_overlapping_writing_sources_fall_back_to_hostname_only(running: Running) -> None:
    run, admin = running, running.admin
    first = await _data_center(run)
    other = {f"rack-node-{i}": {REGION: "region-9"} for i in (1, 2)}
    await admin.create(
        kinds.CONFIG_MAP, _config_map("inventory-b", {SNAPSHOT_KEY: snapshot_text("b-1", other)})
    )
    await admin.create(
        kinds.TOPOLOGY_SOURCE,
        _source("second-opinion", (REGION,), {INVENTORY: "racks"}, **_cm_arm("inventory-b")),
    )

    async def both_conflicted() -> bool:
        for name in ("data-center", "second-opinion"):
            src = await run.source(name)
            if _cond(src, "OwnershipConflict").get("reason") != "OverlappingSources":
                return False
            if _cond(src, "Ready").get("reason") != "OwnershipConflict":
                return False
        return True

    await eventually(both_conflicted)
    second = await run.source("second-opinion")
    assert second is not None and second["status"]["conflictedNodes"] == 8
    assert _cond(second, "Valid")["status"] == "True"

    async def hostname_only() -> bool:
        return set((await run.profiles(RACK_NODES)).values()) == {HOSTNAME_ONLY}

    await eventually(hostname_only)
    for src in (first, second):  # conflicted nodes lose the NodeFeatures of both
        assert await run.owned_nodefeatures(src["metadata"]["uid"]) == {}

    # One source again: the rack hierarchy comes back.
    await admin.delete(kinds.TOPOLOGY_SOURCE, "second-opinion")
    await admin.delete(kinds.CONFIG_MAP, "inventory-b", NS)
    await _data_center(run)

    async def racks_again() -> bool:
        return set((await run.profiles(RACK_NODES)).values()) == {PROFILE}

    await eventually(racks_again)


async def test_node_labels_source_over_cloud_labels_writes_only_the_profile(running: Running) -> None:
    run, admin = running, running.admin
    levels = (keys.STANDARD_REGION, keys.STANDARD_ZONE)
    await admin.create(kinds.TOPOLOGY_SOURCE, _source("cloud", levels, {INVENTORY: "cloud"}, nodeLabels={}))

    async def ready() -> dict[str, Any] | None:
        src = await run.source("cloud")
        return src if _cond(src, "Ready").get("status") == "True" else None

    src = await eventually(ready)
    assert src["status"]["sourceKind"] == "NodeLabels"
    assert src["status"]["selectedNodes"] == 2
    assert (_cond(src, "OwnershipConflict")["status"], _cond(src, "OwnershipConflict")["reason"]) == (
        "False",
        "ReadOnly",
    )
    assert keys.FINALIZER_TOPOLOGY_SOURCE not in (src["metadata"].get("finalizers") or [])
    profile = keys.topology_profile([*levels, keys.HOSTNAME])

    async def profiled() -> bool:
        return set((await run.profiles(("cloud-a", "cloud-b"))).values()) == {profile}

    await eventually(profiled)
    assert await run.owned_nodefeatures(src["metadata"]["uid"]) == {}
    for name in ("cloud-a", "cloud-b"):
        node = await admin.get(kinds.NODE, name)
        assert node is not None
        # The controller's field managers own exactly the profile label on the Node, nothing else.
        ours = {
            e["manager"]: e.get("fieldsV1")
            for e in node["metadata"].get("managedFields") or ()
            if e.get("manager") in CONTROLLER_MANAGERS
        }
        assert ours == {
            topology_managers.NODE_TOPOLOGY: {"f:metadata": {"f:labels": {f"f:{keys.TOPOLOGY_PROFILE}": {}}}}
        }
        # The cloud's values are untouched and only NFD's NodeFeatures exist for the node.
        assert _labels(node)[keys.STANDARD_ZONE].startswith("us-east-1")
        items, _ = await admin.list(kinds.NODE_FEATURE, namespace=NS)
        assert all(
            i["metadata"]["name"]
            in (keys.worker_nodefeature_name(name), keys.device_manager_nodefeature_name(name))
            for i in items
            if (i["metadata"].get("labels") or {}).get(keys.NFD_NODE_NAME) == name
        )


async def test_an_expired_source_drops_its_profile_without_any_node_change(running: Running) -> None:
    """A configMap source over the cloud Nodes' standard region/zone (a snapshot may only repeat those: it
    writes no NodeFeature, so its expiry changes no Node label). Stale keeps its profile; Expired — a
    reason change, no Ready status flip — must fall the Nodes back to hostname-only by itself."""
    run, admin = running, running.admin
    nodes = ("cloud-a", "cloud-b")
    if await run.source("cloud") is not None:  # the nodeLabels source over the same Nodes: two would tie
        await admin.delete(kinds.TOPOLOGY_SOURCE, "cloud")

        async def cloud_gone() -> bool:
            return await run.source("cloud") is None

        await eventually(cloud_gone)
    levels = (keys.STANDARD_REGION, keys.STANDARD_ZONE)
    snapshot = {name: {k: _labels(await admin.get(kinds.NODE, name))[k] for k in levels} for name in nodes}
    await admin.create(
        kinds.CONFIG_MAP, _config_map("cloud-inventory", {SNAPSHOT_KEY: snapshot_text("cloud-1", snapshot)})
    )
    await admin.create(
        kinds.TOPOLOGY_SOURCE,
        _source("cloud-inventory", levels, {INVENTORY: "cloud"}, **_cm_arm("cloud-inventory", "15s")),
    )
    profile = keys.topology_profile([*levels, keys.HOSTNAME])

    async def profiled(want: str) -> bool:
        return set((await run.profiles(nodes)).values()) == {want}

    async def ready_reason(reason: str) -> dict[str, Any] | None:
        src = await run.source("cloud-inventory")
        return src if _cond(src, "Ready").get("reason") == reason else None

    try:
        src = await eventually(lambda: ready_reason("Observed"))
        assert _cond(src, "Ready")["status"] == "True"
        await eventually(lambda: profiled(profile))
        assert await run.owned_nodefeatures(src["metadata"]["uid"]) == {}

        def others(found: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in found.items() if k != keys.TOPOLOGY_PROFILE}

        labels_before = {n: others(_labels(await admin.get(kinds.NODE, n))) for n in nodes}
        # The key goes away: SnapshotKeyMissing, the last valid snapshot stays in effect (Stale) ...
        await admin.patch(kinds.CONFIG_MAP, "cloud-inventory", {"data": {SNAPSHOT_KEY: None}}, namespace=NS)
        stale = await eventually(lambda: ready_reason("Stale"))
        assert _cond(stale, "Valid")["reason"] == "SnapshotKeyMissing"
        assert await profiled(profile)
        # ... until maxStaleness: Expired flips no Ready status, and no Node label moves.
        await eventually(lambda: ready_reason("Expired"))
        await eventually(lambda: profiled(HOSTNAME_ONLY))
        assert {n: others(_labels(await admin.get(kinds.NODE, n))) for n in nodes} == labels_before
    finally:
        await admin.delete(kinds.TOPOLOGY_SOURCE, "cloud-inventory")
        await admin.delete(kinds.CONFIG_MAP, "cloud-inventory", NS)


def _secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


async def test_webhook_arm_holds_the_last_good_snapshot_until_it_expires(running: Running) -> None:
    run, admin = running, running.admin
    pki = Pki.create()
    client_pki = Pki.create("client CA")
    client_cert, client_key = client_pki.issue("gpustack-worker", server=False)
    bearer_body = snapshot_text("hook-1", {"hook-a": {ZONE: "zone-h"}}).encode()
    mtls_body = snapshot_text("mtls-1", {"hook-b": {ZONE: "zone-m"}}).encode()
    target = SnapshotServer(pki, bearer_token="never-forwarded").start()
    bearer = SnapshotServer(pki, body=bearer_body, bearer_token="s3cret", redirect_to=target.url).start()
    mtls = SnapshotServer(pki, body=mtls_body, require_client_cert=True, client_ca=client_pki).start()
    try:
        await admin.create(kinds.CONFIG_MAP, _config_map("hook-ca", {"ca.crt": pki.cert_pem.decode()}))
        await admin.create(kinds.SECRET, _secret("hook-token", {"token": b"  s3cret\n"}))
        await admin.create(
            kinds.SECRET, _secret("hook-client", {"tls.crt": client_cert, "tls.key": client_key})
        )
        common = {
            "pollInterval": "2s",
            "timeout": "1s",
            "maxStaleness": "40s",
            "caBundleConfigMapRef": {"namespace": NS, "name": "hook-ca"},
        }
        await admin.create(
            kinds.TOPOLOGY_SOURCE,
            _source(
                "hook-bearer",
                (ZONE,),
                {INVENTORY: "webhook-bearer"},
                webhook={
                    **common,
                    "url": bearer.url,
                    "bearerTokenSecretRef": {"namespace": NS, "name": "hook-token"},
                },
            ),
        )
        await admin.create(
            kinds.TOPOLOGY_SOURCE,
            _source(
                "hook-mtls",
                (ZONE,),
                {INVENTORY: "webhook-mtls"},
                webhook={
                    **common,
                    "url": mtls.url,
                    "tlsClientCertificateSecretRef": {"namespace": NS, "name": "hook-client"},
                },
            ),
        )

        async def ready(name: str) -> dict[str, Any] | None:
            src = await run.source(name)
            return src if _cond(src, "Ready").get("status") == "True" else None

        for name, node, zone in (("hook-bearer", "hook-a", "zone-h"), ("hook-mtls", "hook-b", "zone-m")):
            src = await eventually(lambda name=name: ready(name))
            assert src["status"]["sourceKind"] == "Webhook"

            async def zoned(node: str = node, zone: str = zone) -> bool:
                return _labels(await admin.get(kinds.NODE, node)).get(ZONE) == zone

            await eventually(zoned)
        assert all(r.authorization == "Bearer s3cret" for r in bearer.requests)
        assert mtls.requests and all(r.client_cert_cn == "gpustack-worker" for r in mtls.requests)

        uid = (await run.source("hook-bearer") or {})["metadata"]["uid"]
        kept = await run.owned_nodefeatures(uid)
        assert len(kept) == 1

        async def failing(fragment: str, reason: str = "WebhookReadFailed") -> dict[str, Any] | None:
            src = await run.source("hook-bearer")
            valid = _cond(src, "Valid")
            ok = valid.get("reason") == reason and fragment in valid.get("message", "")
            return src if ok and _cond(src, "Ready").get("reason") == "Stale" else None

        for mode, fragment, reason in (
            (Mode.REDIRECT, "redirect", "WebhookReadFailed"),
            (Mode.SLOW, "timed out", "WebhookReadFailed"),
            (Mode.HUGE, "1048576", "WebhookReadFailed"),
            (Mode.MALFORMED, "", "SnapshotInvalid"),
        ):
            bearer.mode = mode
            src = await eventually(lambda fragment=fragment, reason=reason: failing(fragment, reason))
            print(f"{mode.name}: Ready={_cond(src, 'Ready')['message']!r}")
            # The last good snapshot holds: the NodeFeature is still there, unchanged.
            now = await run.owned_nodefeatures(uid)
            assert {n: nf["spec"] for n, nf in now.items()} == {n: nf["spec"] for n, nf in kept.items()}
        # The redirect was refused: the other endpoint never saw a request, so never the token.
        assert target.request_count == 0 and target.connections == 0

        # Still failing after maxStaleness: Expired, and the NodeFeature is gone (so is the zone label).
        async def expired() -> dict[str, Any] | None:
            src = await run.source("hook-bearer")
            return src if _cond(src, "Ready").get("reason") == "Expired" else None

        await eventually(expired, within=180)
        assert await run.owned_nodefeatures(uid) == {}

        async def unzoned() -> bool:
            return ZONE not in _labels(await admin.get(kinds.NODE, "hook-a"))

        await eventually(unzoned)

        # Deleting a writing source removes its NodeFeatures and then its finalizer.
        mtls_uid = (await run.source("hook-mtls") or {})["metadata"]["uid"]
        await admin.delete(kinds.TOPOLOGY_SOURCE, "hook-mtls")

        async def gone() -> bool:
            return await run.source("hook-mtls") is None and await run.owned_nodefeatures(mtls_uid) == {}

        await eventually(gone)
    finally:
        for server in (bearer, mtls, target):
            server.stop()


async def test_an_edited_nodefeature_is_repaired(running: Running) -> None:
    """Someone edits an owned NodeFeature (a changed value, an added key): the next reconcile (the
    NodeFeature's own event) puts back exactly the snapshot's labels."""
    run, admin = running, running.admin
    src = await _data_center(run)
    uid = src["metadata"]["uid"]
    name = keys.topology_source_nodefeature_name(uid, "rack-node-1")
    await admin.patch(
        kinds.NODE_FEATURE,
        name,
        {"spec": {"labels": {RACK: "rack-9", "topology.gpustack.ai/extra": "x"}}},
        namespace=NS,
    )

    async def repaired() -> bool:
        nf = await admin.get(kinds.NODE_FEATURE, name, NS)
        return nf is not None and nf["spec"]["labels"] == _placement(1)

    await eventually(repaired)


async def _plan_cli(kubeconfig: str, *extra: str) -> tuple[int, str, str]:
    """``gpustack-worker plan --from-cluster ...`` as a subprocess: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpustack_worker", "plan", "--from-cluster", "--kubeconfig", kubeconfig, *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_a_source_selecting_12_nodes_whose_snapshot_describes_3_says_so_previewed_then_applied(
    running: Running, devcluster: DevCluster, tmp_path: Path
) -> None:
    """Every source removed, then ``plan --from-cluster --topology-source`` previews a source selecting all
    12 Nodes with a snapshot of 3: the coverage (3 of 12, names) and the 3 Nodes' profile change. Applied,
    the controller's condition says the same — Ready=True/Observed naming 9 left out — and the Nodes take
    the profiles the preview said."""
    run, admin = running, running.admin
    for src in (await admin.list(kinds.TOPOLOGY_SOURCE))[0]:
        await admin.delete(kinds.TOPOLOGY_SOURCE, src["metadata"]["name"])

    async def none_left() -> bool:
        return not (await admin.list(kinds.TOPOLOGY_SOURCE))[0]

    await eventually(none_left)
    described = {f"rack-node-{i}": _placement(i) for i in (1, 2, 3)}
    # the scenario's 12 Nodes (the control plane has a Node of its own too)
    all_nodes = sorted(n.name for n in packaged_scenario("topology-8").nodes)
    assert len(all_nodes) == 12
    left_out = [n for n in all_nodes if n not in described]
    await eventually(
        lambda: _when(run.profiles(("rack-node-1",)), lambda p: p["rack-node-1"] == HOSTNAME_ONLY)
    )
    await eventually(lambda: asyncio.sleep(0, result=run.stack.idle()))

    source = _source("partial", LEVELS, {}, **_cm_arm("partial-inventory"))
    source["spec"]["nodeSelector"] = {
        "matchExpressions": [{"key": keys.HOSTNAME, "operator": "In", "values": all_nodes}]
    }
    snap = snapshot_text("partial-1", described)
    (tmp_path / "source.yaml").write_text(yaml.safe_dump(source))
    (tmp_path / "snapshot.yaml").write_text(snap)
    code, out, err = await _plan_cli(
        str(devcluster.kubeconfig), "--topology-source", str(tmp_path / "source.yaml"),
        "--snapshot", str(tmp_path / "snapshot.yaml"), "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    preview = json.loads(out)["topologyPreview"]
    assert preview["source"]["action"] == "create"
    assert preview["source"]["selectedNodes"] == 12
    assert preview["source"]["undescribedNodes"] == left_out
    coverage = (
        "revision 'partial-1' describes 3 of 12 selected node(s); 9 selected node(s) not in it get none of "
        f"its labels: {', '.join(left_out[:3])} and 6 more"
    )
    assert preview["source"]["ready"] == {"status": "True", "reason": "Observed", "message": coverage}
    assert preview["profiles"] == [
        {"from": HOSTNAME_ONLY, "to": PROFILE, "count": 3, "nodes": sorted(described)}
    ]

    await admin.create(kinds.CONFIG_MAP, _config_map("partial-inventory", {SNAPSHOT_KEY: snap}))
    await admin.create(kinds.TOPOLOGY_SOURCE, source)

    async def reported() -> dict[str, Any] | None:
        got = await run.source("partial")
        return got if _cond(got, "Ready").get("message") == coverage else None

    got = await eventually(reported)
    assert (_cond(got, "Ready")["status"], _cond(got, "Ready")["reason"]) == ("True", "Observed")
    assert _cond(got, "Valid")["message"] == coverage
    assert got["status"]["selectedNodes"] == 12
    assert len(await run.owned_nodefeatures(got["metadata"]["uid"])) == 3
    moved = {n for entry in preview["profiles"] for n in entry["nodes"]}

    async def as_previewed() -> bool:
        profiles = await run.profiles(tuple(all_nodes))
        return all(profiles[n] == PROFILE for n in moved) and all(
            profiles[n] != PROFILE for n in all_nodes if n not in moved
        )

    await eventually(as_previewed)


async def test_plan_from_cluster_plans_through_a_settings_configmap_the_controllers_reject(
    running: Running, devcluster: DevCluster
) -> None:
    """A bad key in the settings ConfigMap: the controllers reject the revision and keep their settings
    (the running SettingsSource counts the rejection); ``plan --from-cluster`` exits 0 with one warning
    line naming the bad key, planned with the defaults."""
    run, admin = running, running.admin
    settings = run.stack.settings
    before, rejections = settings.current, settings.rejections
    await support.write_settings(admin, {"instance-type-mixed-on-nodes": "false"})
    try:
        await eventually(lambda: asyncio.sleep(0, result=settings.rejections > rejections))
        assert settings.current == before
        code, out, err = await _plan_cli(str(devcluster.kubeconfig))
        assert code == 0, err
        warnings = [line for line in err.splitlines() if line.startswith("plan: warning: ")]
        assert len(warnings) == 1, err
        assert "(bad key(s): instance-type-mixed-on-nodes)" in warnings[0]
        assert "did you mean instance-type-mixed-on-node?" in warnings[0]
        assert out.startswith("settings: defaults (ConfigMap gpustack-system/gpustack-settings rejected)")
    finally:
        await support.write_settings(admin, {})
