"""rest_client_requests_total means what client-go's does: the HTTP verb, so a WATCH is a ``GET``."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.runtime.client import Client, Gone
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.runtime.test_informer_client import FakeApi, FakeResponse

HOST = "127.0.0.1:6443"


def requests_total(method: str, code: str) -> float:
    labels = {"code": code, "method": method, "host": HOST}
    return REGISTRY.get_sample_value("rest_client_requests_total", labels) or 0.0


async def test_a_watch_is_counted_as_get_and_kept_apart_per_client() -> None:
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    client = Client(FakeApi(FakeResponse(200, [expired])))
    gets = requests_total("GET", "200")
    with pytest.raises(Gone):
        await anext(client.watch(CONFIG_MAP, resource_version="10", timeout_seconds=300))
    assert requests_total("GET", "200") == gets + 1
    assert requests_total("WATCH", "200") == 0.0, "client-go has no WATCH verb"
    assert client.requests_by_method["WATCH"] == 1
    assert client.requests_by_method["GET"] == 0
