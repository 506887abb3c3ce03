"""Capture what the real API server stores when our controllers apply, as fixtures for the no-op table tests.

For every kind the agent and the chain write, :data:`CASES` holds a representative apply body (with the
field manager and subresource a controller uses) and, for some, what another manager does afterwards
(taking a field over). :func:`capture` applies them to a running control plane and returns the object
the server then stores — its managedFields, canonicalised quantities, CRD defaults (Kueue's included)
and whatever Kueue's controllers add. The fixtures under ``fixtures/`` are these objects, so the table
tests in ``test_apply_noop.py`` run offline against what a real server wrote; ``test_capture_cluster.py``
re-captures them and checks every table verdict against the server again.

Run against the dev cluster (rewrites ``tests/runtime/fixtures/*.json``)::

    gpustack-worker devcluster up --dir /tmp/dc
    KUBECONFIG=/tmp/dc/kubeconfig python tests/runtime/capture_fixtures.py
"""

from __future__ import annotations

import asyncio
import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from gpustack_worker.runtime.resources import Resource

FIXTURES: Final = Path(__file__).parent / "fixtures"
#: Our field managers in the fixtures (what the agent and chain controllers are called).
CHAIN: Final = "gpustack-worker/chain"
AGENT_FIT: Final = "gpustack-worker-fit"
AGENT_CAPACITY: Final = "gpustack-worker-capacity"
AGENT_NODEFEATURE: Final = "gpustack-worker-nodefeature"
#: Someone else (an admin's kubectl, another controller).
OTHER: Final = "capture-other-manager"
NODE_NAME: Final = "capture-gpu-node"
NAMESPACE: Final = "capture-team"
KUEUE_FINALIZER: Final = "kueue.x-k8s.io/resource-in-use"
Body = dict[str, Any]


@dataclass(frozen=True)
class Step:
    """What another manager does after our apply: an apply (``force`` takes fields over) or, with
    ``patch_type="merge"``, an Update-operation merge patch."""

    manager: str
    body: Body
    subresource: str | None = None
    patch_type: str = "apply"


@dataclass(frozen=True)
class Case:
    """One captured object: ``manager`` applies ``body`` (forced, as our controllers do), then ``after``."""

    name: str
    resource: Resource
    manager: str
    body: Callable[[Mapping[str, str]], Body]
    subresource: str | None = None
    after: tuple[Step, ...] = field(default=())


def _meta(resource: Resource, name: str, **extra: Any) -> Body:
    meta: Body = {"name": name, **extra}
    if resource.namespaced:
        meta["namespace"] = NAMESPACE if resource is not kinds.NODE_FEATURE else kinds.SYSTEM_NAMESPACE
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}


def resource_flavor(_: Mapping[str, str]) -> Body:
    body = _meta(
        kinds.RESOURCE_FLAVOR,
        "capture-nvidia-a100-linux-amd64-4",
        labels={"resource.gpustack.ai/type": "nodes", "nvidia.com/gpu.count": "4"},
        annotations={"note.gpustack.ai/vram": "81920"},
    )
    body["spec"] = {
        "nodeLabels": {
            "acceleratable.feature.gpustack.ai/nvidia-a100": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.gpustack.ai/profile": "p1",
            "nvidia.com/cuda.driver.version": "535.1",
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": "capture-p1",
    }
    return body


def cluster_queue(_: Mapping[str, str]) -> Body:
    body = _meta(
        kinds.CLUSTER_QUEUE,
        "capture-gpustack--nvidia-a100-linux-amd64",
        labels={"resource.gpustack.ai/type": "instancetypes", "kubernetes.io/os": "linux"},
    )

    def resource(name: str, quota: str, borrow: str) -> Body:
        return {"name": name, "nominalQuota": quota, "borrowingLimit": borrow}

    body["spec"] = {
        "cohortName": "capture-cohort",  # borrowingLimit needs a cohort (Kueue's CEL rule)
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["credits.gpustack.ai/nvidia", "cpu"],
                "flavors": [
                    {
                        "name": "capture-flavor-a",
                        "resources": [
                            resource("credits.gpustack.ai/nvidia", "6400000", "0"),
                            resource("cpu", "1", "0"),
                        ],
                    },
                    {
                        "name": "capture-flavor-b",
                        "resources": [
                            resource("credits.gpustack.ai/nvidia", "3200000", "0"),
                            resource("cpu", "2", "0"),
                        ],
                    },
                ],
            }
        ],
        "stopPolicy": "Hold",
        "admissionChecksStrategy": {
            "admissionChecks": [
                {"name": "gpustack-node-devices", "onFlavors": ["capture-flavor-a", "capture-flavor-b"]},
                {"name": "gpustack-model-deployment-joint"},
            ]
        },
    }
    return body


def local_queue(_: Mapping[str, str]) -> Body:
    body = _meta(
        kinds.LOCAL_QUEUE,
        "gpustack-fnv64-0123456789abcdef",
        annotations={"schedule.gpustack.ai/queue": "capture-gpustack--nvidia-a100-linux-amd64"},
    )
    body["spec"] = {"clusterQueue": "capture-gpustack--nvidia-a100-linux-amd64"}
    return body


def topology(_: Mapping[str, str]) -> Body:
    body = _meta(kinds.TOPOLOGY, "capture-p1", labels={"resource.gpustack.ai/type": "topologies"})
    body["spec"] = {
        "levels": [{"nodeLabel": "topology.gpustack.ai/block"}, {"nodeLabel": "kubernetes.io/hostname"}]
    }
    return body


def admission_check(_: Mapping[str, str]) -> Body:
    body = _meta(kinds.ADMISSION_CHECK, "capture-gpustack-node-devices")
    body["spec"] = {"controllerName": "gpustack.ai/node-devices"}
    return body


def admission_check_status(_: Mapping[str, str]) -> Body:
    body = _meta(kinds.ADMISSION_CHECK, "capture-gpustack-node-devices")
    body["status"] = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Active",
                "message": "the node-devices check is served",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    return body


def node_feature(ctx: Mapping[str, str]) -> Body:
    body = _meta(
        kinds.NODE_FEATURE,
        f"{NODE_NAME}-gpustack-worker",
        labels={
            "nfd.node.kubernetes.io/node-name": NODE_NAME,
            "app.kubernetes.io/part-of": "gpustack-worker",
        },
        ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": NODE_NAME, "uid": ctx["node_uid"]}],
    )
    body["spec"] = {
        "labels": {
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/generic": "true",
            "general.feature.gpustack.ai/generic.count": "64",
            "nvidia.com/cuda.driver.version": "535.1",
        }
    }
    return body


def instance_type(_: Mapping[str, str]) -> Body:
    body = _meta(
        kinds.INSTANCE_TYPE,
        "capture-gpustack--nvidia-a100-linux-amd64",
        labels={"resource.gpustack.ai/type": "instancetypes"},
        finalizers=["gpustack.ai/controlled"],
    )
    body["spec"] = {  # generalGroup left out: the CRD defaults it to "generic"
        "displayName": "NVIDIA A100",
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a100",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    }
    return body


def instance_type_status(_: Mapping[str, str]) -> Body:
    body = _meta(kinds.INSTANCE_TYPE, "capture-gpustack--nvidia-a100-linux-amd64")
    body["status"] = {
        "phase": "Active",
        "entrance": "gpustack-fnv64-0123456789abcdef",
        "accelerator": {"capacity": "5", "remaining": "4", "onceMaxRequest": "4"},
        "acceleratorShared": {"capacity": "50", "remaining": "40", "onceMaxRequest": "40"},
        "acceleratorPartitioned": {
            "capacity": "7",
            "remaining": "7",
            "onceMaxRequest": "1",
            "remainingProfiles": [{"name": "1g.10gb", "count": 7}, {"name": "2g.20gb", "count": 3}],
        },
        "detail": {"manufacturer": "nvidia", "product": "A100", "memory": "80Gi"},
    }
    return body


def node_labels(_: Mapping[str, str]) -> Body:
    return _meta(
        kinds.NODE,
        NODE_NAME,
        labels={
            "shared.fit.gpustack.ai/nvidia-a100": "3",
            "sliced.fit.gpustack.ai/nvidia-a100": "100",
        },
    )


def node_status(_: Mapping[str, str]) -> Body:
    body = _meta(kinds.NODE, NODE_NAME)
    values = {"nvidia.com/gpu.sliced": "512", "nvidia.com/gpu.sliced.units": "6400k"}
    body["status"] = {"capacity": dict(values), "allocatable": dict(values)}
    return body


CASES: Final[tuple[Case, ...]] = (
    Case("resourceflavor", kinds.RESOURCE_FLAVOR, CHAIN, resource_flavor),
    Case("clusterqueue", kinds.CLUSTER_QUEUE, CHAIN, cluster_queue),
    Case(
        "clusterqueue-taken-over",
        kinds.CLUSTER_QUEUE,
        CHAIN,
        cluster_queue,
        after=(
            Step(
                OTHER,
                {
                    "apiVersion": kinds.CLUSTER_QUEUE.api_version,
                    "kind": "ClusterQueue",
                    "metadata": {"name": "capture-gpustack--nvidia-a100-linux-amd64"},
                    "spec": {"stopPolicy": "None"},
                },
            ),
        ),
    ),
    Case("localqueue", kinds.LOCAL_QUEUE, CHAIN, local_queue),
    Case("topology", kinds.TOPOLOGY, CHAIN, topology),
    Case("admissioncheck", kinds.ADMISSION_CHECK, CHAIN, admission_check),
    Case("admissioncheck-status", kinds.ADMISSION_CHECK, CHAIN, admission_check_status, "status"),
    Case("nodefeature", kinds.NODE_FEATURE, AGENT_NODEFEATURE, node_feature),
    Case("instancetype", kinds.INSTANCE_TYPE, CHAIN, instance_type),
    Case("instancetype-status", kinds.INSTANCE_TYPE, CHAIN, instance_type_status, "status"),
    Case("node-labels", kinds.NODE, AGENT_FIT, node_labels),
    Case(
        "node-labels-updated-by-other",
        kinds.NODE,
        AGENT_FIT,
        node_labels,
        after=(
            Step(
                OTHER,
                {"metadata": {"labels": {"shared.fit.gpustack.ai/nvidia-a100": "2"}}},
                patch_type="merge",
            ),
        ),
    ),
    Case("node-status", kinds.NODE, AGENT_CAPACITY, node_status, "status"),
)
CASES_BY_NAME: Final = {case.name: case for case in CASES}


async def prepare(client: Client) -> dict[str, str]:
    """Create what the cases reference (a Node, a namespace); returns the context bodies are built from."""
    node = await client.get(kinds.NODE, NODE_NAME)
    if node is None:
        node = await client.create(
            kinds.NODE,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": {"capture": "1"}}},
        )
    if await client.get(kinds.NAMESPACE, NAMESPACE) is None:
        await client.create(
            kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
    return {"node_uid": str(node["metadata"]["uid"])}


def object_name(body: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = body["metadata"]
    return str(meta["name"]), meta.get("namespace")


async def wait_for_kueue(client: Client, case: Case, body: Mapping[str, Any]) -> None:
    """Wait for Kueue's controllers to react to a new Kueue object (a finalizer; status on a LocalQueue):
    their first Update can take fields over, and the fixtures show the state after it."""
    if case.resource.group != kinds.KUEUE_GROUP:
        return
    name, namespace = object_name(body)
    for _ in range(150):
        obj = await client.get(case.resource, name, namespace)
        if obj is not None:
            if case.resource is kinds.LOCAL_QUEUE:
                if (obj.get("status") or {}).get("conditions"):
                    return
            elif KUEUE_FINALIZER in (obj["metadata"].get("finalizers") or ()):
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"Kueue did not act on {case.resource.kind} {name} within 30 s (is it running?)")


async def establish(client: Client, case: Case, ctx: Mapping[str, str]) -> Body:
    """Bring the object to the case's state: our apply (forced, as our controllers apply), Kueue's
    reaction, our next reconcile's apply (the steady state), then the other managers' steps."""
    body = case.body(ctx)
    name, namespace = object_name(body)

    async def ours() -> None:
        await client.apply(
            case.resource, copy.deepcopy(body), field_manager=case.manager, force=True,
            subresource=case.subresource,
        )  # fmt: skip

    if case.subresource == "status":
        # a status apply needs the object: apply the main body of the same kind first
        base = next(c for c in CASES if c.resource is case.resource and c.subresource is None)
        await client.apply(case.resource, base.body(ctx), field_manager=base.manager, force=True)
    await ours()
    await wait_for_kueue(client, case, body)
    await ours()
    for step in case.after:
        if step.patch_type == "apply":
            await client.apply(
                case.resource, copy.deepcopy(step.body), field_manager=step.manager, force=True,
                subresource=step.subresource,
            )  # fmt: skip
        else:
            await client.patch(
                case.resource, name, step.body, namespace=namespace, patch_type=step.patch_type,
                subresource=step.subresource, field_manager=step.manager,
            )  # fmt: skip
    return body


async def read(client: Client, case: Case, body: Mapping[str, Any]) -> Body:
    name, namespace = object_name(body)
    obj = await client.get(case.resource, name, namespace)
    if obj is None:
        raise NotFound(404, "NotFound", {}, f"{case.resource.kind} {name} vanished")
    return obj


async def capture(client: Client, case: Case, ctx: Mapping[str, str]) -> dict[str, Any]:
    """Establish the case's state and return the fixture record (the body and the stored object)."""
    body = await establish(client, case, ctx)
    return record(case, body, await read(client, case, body))


def record(case: Case, body: Body, obj: Body) -> dict[str, Any]:
    return {
        "case": case.name,
        "kind": case.resource.kind,
        "manager": case.manager,
        "subresource": case.subresource,
        "body": body,
        "object": obj,
    }


def load(name: str) -> dict[str, Any]:
    """A committed fixture record."""
    data: dict[str, Any] = orjson.loads((FIXTURES / f"{name}.json").read_bytes())
    return data


async def main(kubeconfig: str | None = None) -> None:
    client = await Client.connect(kubeconfig)
    try:
        ctx = await prepare(client)
        FIXTURES.mkdir(exist_ok=True)
        for case in CASES:
            rec = await capture(client, case, ctx)
            path = FIXTURES / f"{case.name}.json"
            path.write_bytes(orjson.dumps(rec, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
            print(f"captured {path}")
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
