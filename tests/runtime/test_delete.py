"""Deletes: the DeleteOptions ``Client.delete`` sends (fake transport), and the UID precondition on a real
server — it survives changes to the object (a controller churning its status) and refuses a recreated one."""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Client, Conflict
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class _Auth:
    server = "https://fake.invalid:6443"


class RecordingApi:
    """The shape of kr8s' ``Api`` the Client calls; answers every request with ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.auth = _Auth()
        self.status = status
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []

    @contextlib.asynccontextmanager
    async def call_api(
        self, method: str, *, base: str, url: str, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        content = kwargs.get("content")
        self.requests.append((method, f"{base}/{url}", orjson.loads(content) if content else None))
        body = {"kind": "Status", "code": self.status, "reason": "NotFound" if self.status == 404 else ""}
        yield httpx.Response(self.status, content=orjson.dumps(body))


@pytest.mark.parametrize(
    ("kwargs", "options"),
    [
        ({}, {}),
        ({"uid": "u1"}, {"preconditions": {"uid": "u1"}}),
        (
            {"uid": "u1", "resource_version": "42", "propagation_policy": "Foreground"},
            {"preconditions": {"uid": "u1", "resourceVersion": "42"}, "propagationPolicy": "Foreground"},
        ),
        ({"propagation_policy": "Orphan"}, {"propagationPolicy": "Orphan"}),
        ({"propagation_policy": "Background"}, {"propagationPolicy": "Background"}),
    ],
    ids=["bare", "uid", "uid-rv-foreground", "orphan", "background"],
)
async def test_client_delete_sends_delete_options(kwargs: dict[str, Any], options: dict[str, Any]) -> None:
    api = RecordingApi()
    assert await Client(api).delete(kinds.CLUSTER_QUEUE, "q", **kwargs) is True
    assert api.requests == [
        (
            "DELETE",
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/q",
            {"apiVersion": "v1", "kind": "DeleteOptions", **options},
        )
    ]


async def test_client_delete_of_a_missing_object_is_false_and_a_bad_policy_is_refused() -> None:
    api = RecordingApi(status=404)
    assert await Client(api).delete(kinds.CONFIG_MAP, "c", "ns", uid="u") is False
    with pytest.raises(ValueError, match="propagation_policy must be one of"):
        await Client(api).delete(kinds.CONFIG_MAP, "c", "ns", propagation_policy="Cascade")
    assert len(api.requests) == 1  # the refused policy never reached the server


async def test_applier_delete_sends_the_uid_only_by_default() -> None:
    api = RecordingApi()
    applier = Applier(Client(api), "m", cache=make_transform(["m"]))
    cached = {"metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "9"}}
    await applier.delete(kinds.CONFIG_MAP, cached, propagation_policy="Background")
    await applier.delete(kinds.CONFIG_MAP, cached, check_resource_version=True)
    assert [body for _, _, body in api.requests] == [
        {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": "u1"},
            "propagationPolicy": "Background",
        },
        {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "u1", "resourceVersion": "9"}},
    ]


def _config_map(name: str, namespace: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": value},
    }


@pytest.mark.cluster
async def test_uid_precondition_on_the_real_server(devcluster: Any) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    namespace = "default"
    name = f"delete-{uuid.uuid4().hex[:8]}"
    applier = Applier(
        client,
        "delete-test",
        cache=Informer(client, kinds.CONFIG_MAP, transform=make_transform(["delete-test"])),
    )
    try:
        # read, then the object changes (as a status-churning controller would change a ClusterQueue)
        read = await client.create(kinds.CONFIG_MAP, _config_map(name, namespace, "1"))
        await client.patch(kinds.CONFIG_MAP, name, {"data": {"k": "2"}}, namespace=namespace)
        with pytest.raises(Conflict):  # what a resourceVersion precondition does on such an object
            await applier.delete(kinds.CONFIG_MAP, read, check_resource_version=True)
        assert await applier.delete(kinds.CONFIG_MAP, read, propagation_policy="Background") is True
        assert await client.get(kinds.CONFIG_MAP, name, namespace) is None

        # read, then the object is deleted and recreated under the same name: a new UID
        stale = await client.create(kinds.CONFIG_MAP, _config_map(name, namespace, "1"))
        await client.delete(kinds.CONFIG_MAP, name, namespace)
        recreated = await client.create(kinds.CONFIG_MAP, _config_map(name, namespace, "new"))
        assert recreated["metadata"]["uid"] != stale["metadata"]["uid"]
        with pytest.raises(Conflict):
            await applier.delete(kinds.CONFIG_MAP, stale)
        kept = await client.get(kinds.CONFIG_MAP, name, namespace)
        assert kept is not None and kept["metadata"]["uid"] == recreated["metadata"]["uid"]
        assert await applier.delete(kinds.CONFIG_MAP, recreated) is True
    finally:
        await client.delete(kinds.CONFIG_MAP, name, namespace)
        await client.close()
