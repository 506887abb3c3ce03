"""The ``Devices`` bounds on a real API server: every out-of-range value of ``test_crds_bounds.py`` is
refused with 422 — in ``spec`` on create, in ``status`` on a write to the status subresource — and the
edge values are stored."""

from __future__ import annotations

import copy
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import ApiError, Client

from .test_crds_bounds import OUT_OF_BOUNDS, good

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

_SUFFIX = uuid.uuid4().hex[:8]


@pytest_asyncio.fixture(loop_scope="session")
async def client(devcluster: DevCluster) -> AsyncIterator[Client]:
    c = await Client.connect(str(devcluster.kubeconfig))
    try:
        yield c
    finally:
        await c.close()


def _named(obj: dict[str, Any], stem: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"] = {"name": f"bounds-{stem}-{_SUFFIX}"}
    return out


@pytest_asyncio.fixture(loop_scope="session")
async def stored(client: Client) -> AsyncIterator[str]:
    """One Devices at the edge of every bound, spec and status (both accepted)."""
    body = _named(good(), "edge")
    status = body.pop("status")
    name = body["metadata"]["name"]
    await client.create(kinds.DEVICES, body)
    try:
        await client.patch(kinds.DEVICES, name, {"status": status}, subresource="status")
        yield name
    finally:
        await client.delete(kinds.DEVICES, name)


async def test_edges_are_stored(client: Client, stored: str) -> None:
    obj = await client.get(kinds.DEVICES, stored)
    assert obj is not None
    assert obj["spec"] == good()["spec"]
    assert obj["status"] == good()["status"]


SPEC_CASES = [c for c in OUT_OF_BOUNDS if "status" not in c[1] or c[1]["status"] == good()["status"]]
STATUS_CASES = [c for c in OUT_OF_BOUNDS if c not in SPEC_CASES]


@pytest.mark.parametrize(("obj", "field"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
async def test_spec_out_of_bounds_is_refused(client: Client, obj: dict[str, Any], field: str) -> None:
    body = _named(obj, "spec")
    body.pop("status", None)
    with pytest.raises(ApiError) as err:
        await client.create(kinds.DEVICES, body)
        await client.delete(kinds.DEVICES, body["metadata"]["name"])  # pragma: no cover - a failure path
    assert err.value.status == 422, err.value
    assert field in str(err.value), err.value


@pytest.mark.parametrize(("obj", "field"), [c[1:] for c in STATUS_CASES], ids=[c[0] for c in STATUS_CASES])
async def test_status_out_of_bounds_is_refused(
    client: Client, stored: str, obj: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError) as err:
        await client.patch(kinds.DEVICES, stored, {"status": obj["status"]}, subresource="status")
    assert err.value.status == 422, err.value
    assert field in str(err.value), err.value
    after = await client.get(kinds.DEVICES, stored)
    assert after is not None and after["status"] == good()["status"]  # nothing of it landed


async def test_a_key_longer_than_a_label_name_is_refused(client: Client) -> None:
    body = _named(good(), "akey")
    body.pop("status")
    body["spec"]["groups"][0]["manufacturer"] = "cambricon"
    body["spec"]["groups"][0]["id"] = "m" * 60  # cambricon-mmm… is 70 characters
    with pytest.raises(ApiError) as err:
        await client.create(kinds.DEVICES, body)
    assert err.value.status == 422
    assert "aKey" in str(err.value)
