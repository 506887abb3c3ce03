"""Observability: a reconcile carries controller/key/reconcileID in every log line and in its span, and
spans leave the process over OTLP exactly when the standard ``OTEL_*`` variables ask for it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any

import pytest
import structlog

from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.telemetry import otlp_requested

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.mark.parametrize(
    ("env", "requested"),
    [
        pytest.param({}, False, id="nothing-set"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True, id="endpoint"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"}, True, id="traces-endpoint"
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"}, True, id="exporter-otlp"),
        pytest.param({"OTEL_TRACES_EXPORTER": "console,otlp"}, True, id="exporter-list"),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"},
            False,
            id="exporter-none",
        ),
        pytest.param(
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False, id="sdk-disabled"
        ),
    ],
)
def test_otlp_requested(env: dict[str, str], requested: bool) -> None:
    assert otlp_requested(env) is requested


async def test_reconcile_binds_controller_key_and_reconcile_id() -> None:
    seen: list[dict[str, Any]] = []

    async def reconcile(key: str) -> Result:
        seen.append(dict(structlog.contextvars.get_contextvars()))
        return Result.done()

    ctl = Controller("telemetry-test", reconcile, WorkQueue("telemetry-test"))
    await ctl.process("ns/a")
    await ctl.process("ns/a")
    assert [(s["controller"], s["key"]) for s in seen] == [("telemetry-test", "ns/a")] * 2
    ids = [s["reconcileID"] for s in seen]
    assert len(set(ids)) == 2, "each reconcile gets its own id"
    assert structlog.contextvars.get_contextvars() == {}, "the context is unbound after the reconcile"


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A loopback OTLP/HTTP endpoint that records what it is sent."""
    received: list[tuple[str, str, bytes]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


_EMIT = """
import asyncio, sys
from opentelemetry import trace
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.telemetry import configure_tracing

installed = configure_tracing("telemetry-test")

async def reconcile(key):
    return Result.done()

asyncio.run(Controller("otlp-test", reconcile, WorkQueue("otlp-test")).process("ns/x"))
provider = trace.get_tracer_provider()
if hasattr(provider, "force_flush"):
    provider.force_flush()
print("installed" if installed else "not-installed")
"""


def _emit(env: dict[str, str]) -> str:
    # A fresh interpreter: the global tracer provider can be set only once per process.
    proc = subprocess.run(
        [sys.executable, "-c", _EMIT], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return proc.stdout.strip()


def test_spans_are_exported_over_otlp_when_asked(collector: tuple[str, list[tuple[str, str, bytes]]]) -> None:
    endpoint, received = collector
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    assert _emit(base) == "not-installed"
    assert received == []

    assert _emit({**base, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}) == "installed"
    assert received, "no OTLP request reached the collector"
    path, content_type, body = received[0]
    assert path == "/v1/traces"
    assert content_type == "application/x-protobuf"
    # The protobuf carries the span name and our attributes as plain strings.
    assert b"reconcile otlp-test" in body
    assert b"reconcileID" in body
    assert b"telemetry-test" in body  # service.name
