"""``docs/examples/`` on a real control plane (kube-apiserver with our CRDs, Kueue, nfd-master), with the
node agent, the topology and chain controllers and the ModelDeployment controller running as their
ServiceAccounts over the ``topology-8`` scenario (the Nodes the examples name):

- every object of every example file is accepted by server-side apply with ``fieldValidation=Strict``
  (an unknown, misplaced or duplicated field is refused) and without a warning;
- the three TopologySources reach ``Ready=True`` and place their Nodes: the nodeLabels source as it is,
  the configMap source with its snapshot, the webhook source with its snapshot served by a local HTTPS
  server (its URL and CA swapped in, the example's own token checked by the server);
- the InstanceType override is kept and served: the worker derives no other unit resources, its phase is
  ``Active``, and the Pods of the deployments get its unit resources as limits;
- both ModelDeployments render their Pods (the two-role one's ``requiredLevel`` is a level of the rack
  hierarchy the configMap source gives the L4 pool);
- the settings ConfigMap is read by the running processes.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import ssl
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.deployments import ModelDeployments
from tests import stack as support
from tests.docs.examples import EXAMPLES, SNAPSHOT_FILES, objects
from tests.stack import Stack, module_cluster, running_stack
from tests.stack import condition as _cond
from tests.topology.https_server import Pki, SnapshotServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

pytestmark = pytest.mark.cluster

#: A fresh CI machine is slower than a warm one: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)
FIELD_MANAGER = "docs-examples"
RESOURCES: dict[str, Resource] = {
    r.kind: r
    for r in (
        kinds.CONFIG_MAP,
        kinds.SECRET,
        kinds.TOPOLOGY_SOURCE,
        kinds.INSTANCE_TYPE,
        kinds.MODEL_DEPLOYMENT,
    )
}
#: Inventories first (a source reads them), then the pool, the sources, the deployments.
ORDER = {"ConfigMap": 0, "Secret": 0, "InstanceType": 1, "TopologySource": 2, "ModelDeployment": 3}


def _ordered() -> list[tuple[str, dict[str, Any]]]:
    return sorted(objects(), key=lambda fo: ORDER[fo[1]["kind"]])


def _named(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for _, o in objects() if o["kind"] == kind}


def _apply(api: httpx.Client, obj: dict[str, Any]) -> httpx.Response:
    meta = obj["metadata"]
    return api.patch(
        RESOURCES[obj["kind"]].object_path(meta["name"], meta.get("namespace")),
        params={"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"},
        content=json.dumps(obj).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )


def _webhook_swapped(server: SnapshotServer, pki: Pki) -> list[dict[str, Any]]:
    """The webhook source and its CA ConfigMap with the local server's URL and CA in place of the
    example's (which name a host the test cannot reach)."""
    source = copy.deepcopy(next(s for s in _named("TopologySource").values() if "webhook" in s["spec"]))
    hook = source["spec"]["webhook"]
    hook["url"] = server.url
    ca_ref = hook["caBundleConfigMapRef"]
    (ca,) = [
        copy.deepcopy(o)
        for _, o in objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ca_ref["name"]
    ]
    ca["data"]["ca.crt"] = pki.cert_pem.decode()
    return [ca, source]


def _bearer_token() -> str:
    source = next(s for s in _named("TopologySource").values() if "webhook" in s["spec"])
    ref = source["spec"]["webhook"]["bearerTokenSecretRef"]
    (secret,) = [o for _, o in objects() if o["kind"] == "Secret" and o["metadata"]["name"] == ref["name"]]
    return str(secret["stringData"]["token"])


class Running:
    def __init__(self, stack: Stack, applied: dict[str, httpx.Response], server: SnapshotServer) -> None:
        self.stack = stack
        self.admin: Client = stack.admin
        self.applied = applied
        self.server = server

    async def ready_source(self, name: str) -> dict[str, Any] | None:
        src = await self.admin.get(kinds.TOPOLOGY_SOURCE, name)
        return src if _cond(src, "Ready").get("status") == "True" else None


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane for this module alone: the chain reads every Node of the cluster."""
    with module_cluster("examples") as cluster:
        yield cluster


def _apply_examples(cluster: DevCluster, server: SnapshotServer, pki: Pki) -> dict[str, httpx.Response]:
    """Create the deployments' namespaces, apply every example object as it is (each answer kept), then
    point the webhook source at ``server``."""
    assert cluster.pki is not None
    with httpx.Client(
        base_url=cluster.server,
        verify=ssl.create_default_context(cafile=str(cluster.pki.ca_cert)),
        headers={"Authorization": f"Bearer {cluster.pki.admin_token}"},
        timeout=60.0,
    ) as api:
        for ns in sorted({o["metadata"]["namespace"] for o in _named("ModelDeployment").values()}):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            created = api.post(kinds.NAMESPACE.collection_path(), json=body)
            assert created.status_code == 201, created.text
        applied = {f"{f}: {obj['kind']} {obj['metadata']['name']}": _apply(api, obj) for f, obj in _ordered()}
        for obj in _webhook_swapped(server, pki):
            resp = _apply(api, obj)
            assert resp.status_code == 200, resp.text
    return applied


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[Running]:
    """Every example applied as it is (before any Node exists, as the InstanceType override asks), the
    webhook source pointed at a local server, then the scenario's Nodes and the controllers."""
    pki = Pki.create()
    body = (EXAMPLES / SNAPSHOT_FILES[0]).read_bytes()
    with SnapshotServer(pki, body=body, bearer_token=_bearer_token()) as server:
        applied = await asyncio.to_thread(_apply_examples, devcluster, server, pki)

        def extra(client: Client, settings: Any, registry: Any) -> list[Any]:
            return [ModelDeployments(client, registry, settings)]

        async with running_stack(devcluster, "topology-8", extra=extra) as stack:
            yield Running(stack, applied, server)


async def test_every_example_object_is_accepted_strictly(running: Running) -> None:
    assert len(running.applied) == len(objects())
    refused = {
        what: f"HTTP {resp.status_code}: {resp.text[:600]}"
        for what, resp in running.applied.items()
        if resp.status_code not in (200, 201)
    }
    assert refused == {}
    warned = {what: r.headers["Warning"] for what, r in running.applied.items() if "Warning" in r.headers}
    assert warned == {}


async def test_the_topology_sources_are_ready_and_place_their_nodes(running: Running) -> None:
    admin = running.admin
    sources = _named("TopologySource")
    assert len(sources) == 3
    for name, source in sources.items():
        src = await eventually(lambda name=name: running.ready_source(name))
        assert _cond(src, "Valid")["status"] == "True", (name, src["status"])
        assert _cond(src, "OwnershipConflict")["status"] == "False", (name, src["status"])
        kind = src["status"]["sourceKind"]
        assert kind == {"nodeLabels": "NodeLabels", "configMap": "ConfigMap", "webhook": "Webhook"}[
            next(a for a in ("nodeLabels", "configMap", "webhook") if a in source["spec"])
        ]
    assert running.server.request_count >= 1
    assert running.server.requests[0].authorization == f"Bearer {_bearer_token()}"

    # each source's Nodes end up with its hierarchy (hostname appended)
    expected = {
        "rack-node-1": {keys.PRIVATE_ZONE: "zone-a", keys.PRIVATE_RACK: "rack-1"},
        "rack-node-8": {keys.PRIVATE_ZONE: "zone-b", keys.PRIVATE_RACK: "rack-4"},
        "hook-a": {keys.PRIVATE_ZONE: "zone-c", keys.PRIVATE_RACK: "rack-9"},
    }
    for node, labels in expected.items():

        async def placed(node: str = node, labels: dict[str, str] = labels) -> bool:
            got = ((await admin.get(kinds.NODE, node)) or {}).get("metadata", {}).get("labels") or {}
            return all(got.get(k) == v for k, v in labels.items())

        await eventually(placed)
    for node, levels in {
        "rack-node-1": sources["data-center"]["spec"]["levels"],
        "hook-a": sources["dcim"]["spec"]["levels"],
        "cloud-a": sources["cloud-zones"]["spec"]["levels"],
    }.items():
        profile = keys.topology_profile([*levels, keys.HOSTNAME])

        async def profiled(node: str = node, profile: str = profile) -> bool:
            got = ((await admin.get(kinds.NODE, node)) or {}).get("metadata", {}).get("labels") or {}
            return got.get(keys.TOPOLOGY_PROFILE) == profile

        await eventually(profiled)


async def test_the_instance_type_override_is_served_with_its_unit_resources(running: Running) -> None:
    ((name, example),) = _named("InstanceType").items()

    async def active() -> dict[str, Any] | None:
        it = await running.admin.get(kinds.INSTANCE_TYPE, name)
        return it if ((it or {}).get("status") or {}).get("phase") == "Active" else None

    it = await eventually(active)
    assert it["spec"]["unitResources"] == example["spec"]["unitResources"]
    assert it["spec"]["displayName"] == example["spec"]["displayName"]
    assert it["status"]["entrance"] == keys.local_queue_name(name)


async def test_both_model_deployments_render_their_pods(running: Running) -> None:
    admin = running.admin
    (unit,) = [it["spec"]["unitResources"] for it in _named("InstanceType").values()]
    for name, example in _named("ModelDeployment").items():
        ns = example["metadata"]["namespace"]

        async def rendered(name: str = name, ns: str = ns) -> dict[str, Any] | None:
            md = await admin.get(kinds.MODEL_DEPLOYMENT, name, ns)
            return md if _cond(md, "Rendered").get("status") == "True" else None

        md = await eventually(rendered)
        want = sum(r["replicas"] * r["size"] for r in example["spec"]["roles"])

        async def pods(md: dict[str, Any] = md, ns: str = ns, want: int = want) -> list[dict[str, Any]]:
            items, _ = await admin.list(
                kinds.POD, namespace=ns, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={md['metadata']['uid']}"
            )
            return items if len(items) == want else []

        for pod in await eventually(pods):
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            # one card per Pod: the override's unit resources, not the preset
            assert (limits["cpu"], limits["memory"]) == (unit["cpu"], unit["ram"]), pod["metadata"]["name"]


async def test_the_settings_are_read(running: Running) -> None:
    ((_, cm),) = [(n, o) for n, o in _named("ConfigMap").items() if n == "gpustack-settings"]

    async def read() -> bool:
        return running.stack.settings.current.model_artifact_delivery_mode == cm["data"][
            "model-artifact-delivery-mode"
        ]

    await eventually(read)
