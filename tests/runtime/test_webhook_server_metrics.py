"""controller-runtime's webhook metrics, counted by the real webhook server over TLS: every answer on a
registered path by its HTTP status (allowed, denied, handler failure, 400, 405, 408, 411, 413), none for
an unknown path, the in-flight gauge back at zero, one latency observation per answer, and the names,
labels and buckets controller-runtime exports."""

from __future__ import annotations

import shutil
import uuid
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from prometheus_client import REGISTRY, generate_latest

from gpustack_worker.devcluster.pki import Pki, make_pki
from gpustack_worker.runtime.metrics import WEBHOOK_BUCKETS
from gpustack_worker.runtime.webhook_server import WebhookServer
from tests.kit.waiting import eventually
from tests.runtime.test_webhook_server import Conn, echo, explode, review

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki-metrics"))


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Paths:
    """Fresh registered paths per test (the registry is process-wide)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.ok = f"/validate-{tag}"
        self.boom = f"/explode-{tag}"

    def count(self, path: str, code: int) -> float:
        return _sample("controller_runtime_webhook_requests_total", webhook=path, code=str(code))

    def observed(self, path: str) -> float:
        return _sample("controller_runtime_webhook_latency_seconds_count", webhook=path)

    def in_flight(self, path: str) -> float:
        return _sample("controller_runtime_webhook_requests_in_flight", webhook=path)


@pytest.fixture
async def served(pki: Pki, tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, Paths]]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(pki.serving_cert, cert)
    shutil.copyfile(pki.serving_key, key)
    paths = Paths()
    srv = WebhookServer(
        "127.0.0.1:0", cert_file=cert, key_file=key, max_body=4096, header_timeout=0.5, body_timeout=30
    )
    srv.add(paths.ok, echo)
    srv.add(paths.boom, explode)
    await srv.start()
    try:
        yield srv, paths
    finally:
        await srv.close()


def test_names_help_labels_and_buckets_are_controller_runtimes() -> None:
    # pkg/webhook/internal/metrics/metrics.go: ExponentialBuckets(10e-9, 10, 12)
    assert tuple(WEBHOOK_BUCKETS) == tuple(10e-9 * 10**i for i in range(12))
    families = {m.name: m for m in REGISTRY.collect()}
    assert families["controller_runtime_webhook_requests"].type == "counter"
    assert families["controller_runtime_webhook_latency_seconds"].type == "histogram"
    assert families["controller_runtime_webhook_requests_in_flight"].type == "gauge"
    assert families["controller_runtime_webhook_requests"].documentation == (
        "Total number of admission requests by HTTP status code."
    )


async def test_registered_paths_start_at_zero_for_200_and_500(served: tuple[WebhookServer, Paths]) -> None:
    _, paths = served
    text = generate_latest(REGISTRY).decode()
    for code in ("200", "500"):
        assert f'controller_runtime_webhook_requests_total{{code="{code}",webhook="{paths.ok}"}} 0.0' in text
    assert f'controller_runtime_webhook_requests_in_flight{{webhook="{paths.ok}"}} 0.0' in text


async def test_every_answer_on_a_registered_path_is_counted_by_status(
    served: tuple[WebhookServer, Paths], pki: Pki
) -> None:
    server, paths = served
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        # allowed and denied reviews are both HTTP 200
        for value in (1, -1):
            status, _, body = await conn.request("POST", paths.ok, orjson.dumps(review("u", value)))
            assert status == 200
            assert orjson.loads(body)["response"]["allowed"] is (value >= 0)
        status, _, _ = await conn.request("POST", paths.ok, b"not json")
        assert status == 400
        status, _, _ = await conn.request("GET", paths.ok)
        assert status == 405
        status, _, _ = await conn.request("POST", paths.boom, orjson.dumps(review("b")))
        assert status == 200  # a handler failure is a denied review, not an HTTP 500
        status, _, _ = await conn.request("POST", f"/nope-{uuid.uuid4().hex[:6]}", b"{}")
        assert status == 404
    finally:
        await conn.close()
    assert paths.count(paths.ok, 200) == 2
    assert paths.count(paths.ok, 400) == 1
    assert paths.count(paths.ok, 405) == 1
    assert paths.count(paths.boom, 200) == 1
    assert paths.observed(paths.ok) == 4
    assert paths.observed(paths.boom) == 1
    assert paths.in_flight(paths.ok) == 0
    assert "nope-" not in generate_latest(REGISTRY).decode()  # an unknown path is no label value


@pytest.mark.parametrize(
    ("head", "status"),
    [
        ("Content-Length: 4097\r\n", 413),
        ("Transfer-Encoding: chunked\r\n", 411),
        ("Content-Length: x\r\n", 400),
        ("Content-Length: 10\r\n", 408),  # the body never comes: body_timeout
    ],
)
async def test_refusals_before_the_handler_are_counted(
    served: tuple[WebhookServer, Paths], pki: Pki, head: str, status: int
) -> None:
    server, paths = served
    server.body_timeout = 0.3
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        conn.writer.write(f"POST {paths.ok} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        got, _, _ = await conn.response()
        assert got == status
        assert await conn.closed_by_peer()
    finally:
        await conn.close()
    assert paths.count(paths.ok, status) == 1
    assert paths.observed(paths.ok) == 1
    assert paths.in_flight(paths.ok) == 0


async def test_a_request_in_progress_is_in_flight(served: tuple[WebhookServer, Paths], pki: Pki) -> None:
    server, paths = served
    seen: list[float] = []

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(paths.in_flight(paths.ok))
        return echo(body)

    server.add(paths.ok, slow)
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        payload = orjson.dumps(review("slow"))
        # The head first: the request is in flight while its body has not arrived.
        conn.writer.write(
            f"POST {paths.ok} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        )
        await conn.writer.drain()
        await eventually(lambda: paths.in_flight(paths.ok) == 1, within=10, every=0.01)
        conn.writer.write(payload)
        status, _, _ = await conn.response()
        assert status == 200
    finally:
        await conn.close()
    assert seen == [1.0]
    assert paths.in_flight(paths.ok) == 0


async def test_a_client_gone_mid_body_leaves_nothing_in_flight(
    served: tuple[WebhookServer, Paths], pki: Pki
) -> None:
    server, paths = served
    conn = await Conn.open(server.port, pki.ca_cert)
    conn.writer.write(f"POST {paths.ok} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode())
    await conn.writer.drain()
    await eventually(lambda: paths.in_flight(paths.ok) == 1, within=10, every=0.01)
    await conn.close()
    await eventually(lambda: paths.in_flight(paths.ok) == 0, within=10, every=0.01)
    assert paths.count(paths.ok, 200) == 0
