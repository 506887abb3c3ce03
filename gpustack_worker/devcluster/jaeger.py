"""Jaeger on 127.0.0.1: where the operator's OpenTelemetry spans go in the demo, in ``devcluster up
--jaeger`` and in the trace test.

``cmd/jaeger`` of Jaeger v1.75.0 is the v2 all-in-one binary: an OpenTelemetry Collector distribution
configured by one YAML file (``--config``). The file written here keeps only what is needed — an OTLP/HTTP
receiver, in-memory trace storage, and the query service (UI and HTTP API ``/api/...``; its gRPC API
needs a port too) — each on a free loopback port, so several instances run side by side. The Collector's
own metrics endpoint is switched off (it would bind a fixed port).

Processes are pointed at it with the standard ``OTEL_*`` variables (:meth:`Jaeger.otel_env`); the SDK's
OTLP/HTTP exporter appends ``/v1/traces`` to ``OTEL_EXPORTER_OTLP_ENDPOINT``.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpustack_worker.devcluster import build
from gpustack_worker.devcluster.procs import ManagedProcess, free_port

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("STORE", "Jaeger", "jaeger_config")

#: The name of the in-memory trace store inside the Jaeger configuration.
STORE = "memstore"
#: In-memory traces kept before the oldest are dropped: plenty for a demo or a test session.
MAX_TRACES = 50_000
#: Seconds to wait for Jaeger to answer its query API after it started.
READY_TIMEOUT_S = 60.0
#: How often (ms) the SDK's batch span processor exports; its default is 5000. Short enough that spans
#: show up in Jaeger promptly while someone is watching the UI or a test is polling.
BSP_SCHEDULE_DELAY_MS = 500


def jaeger_config(
    otlp_http_port: int, query_http_port: int, query_grpc_port: int, otlp_host: str = "127.0.0.1"
) -> dict[str, Any]:
    """The Jaeger v2 configuration: OTLP/HTTP in (on ``otlp_host``), memory storage, query UI/API out on
    loopback."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
        "extensions": {
            "jaeger_storage": {"backends": {STORE: {"memory": {"max_traces": MAX_TRACES}}}},
            "jaeger_query": {
                "storage": {"traces": STORE},
                "http": {"endpoint": f"127.0.0.1:{query_http_port}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc_port}"},
            },
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"{otlp_host}:{otlp_http_port}"}}}},
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": STORE}},
    }


@dataclass
class Jaeger:
    """One Jaeger all-in-one process whose files (config, log) live under ``dir``."""

    dir: Path
    log: Callable[[str], None] = print
    otlp_http_port: int = 0
    query_http_port: int = 0
    query_grpc_port: int = 0
    #: Where the OTLP receiver listens: loopback, or this machine's address when Pods on real nodes
    #: export to it (a Pod's loopback is its own).
    otlp_host: str = "127.0.0.1"
    proc: ManagedProcess | None = field(default=None, init=False)

    @property
    def otlp_endpoint(self) -> str:
        """The OTLP/HTTP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``; traces go to ``/v1/traces`` under it)."""
        return f"http://{self.otlp_host}:{self.otlp_http_port}"

    @property
    def ui_url(self) -> str:
        """The Jaeger UI; its HTTP API is under ``/api`` (``/api/services``, ``/api/traces?service=``)."""
        return f"http://127.0.0.1:{self.query_http_port}"

    def otel_env(self, service_name: str) -> dict[str, str]:
        """The standard OTEL variables that make a process of ours export its spans here."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service_name,
            "OTEL_BSP_SCHEDULE_DELAY": str(BSP_SCHEDULE_DELAY_MS),
        }

    def start(self, binary: Path | None = None) -> Jaeger:
        """Build (or reuse) the binary unless given, start it, and return once its query API answers."""
        self.dir = Path(self.dir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        binary = binary or build.ensure_optional("jaeger", self.log)
        self.otlp_http_port = self.otlp_http_port or free_port()
        self.query_http_port = self.query_http_port or free_port()
        self.query_grpc_port = self.query_grpc_port or free_port()
        config = self.dir / "jaeger-config.yaml"
        ports = (self.otlp_http_port, self.query_http_port, self.query_grpc_port)
        config.write_text(yaml.safe_dump(jaeger_config(*ports, self.otlp_host), sort_keys=True))
        self.proc = ManagedProcess(
            "jaeger", [str(binary), f"--config={config}"], self.dir / "logs" / "jaeger.log"
        )
        self.proc.start()
        try:
            self.proc.wait_ready(self._ready, READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.log(f"jaeger ready: UI/API {self.ui_url}, OTLP/HTTP {self.otlp_endpoint}")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    # --- the query API -----------------------------------------------------------------------------
    def api(self, path: str, **params: str | int) -> Any:
        """GET ``/api/<path>`` of the query service and return the decoded JSON body."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.ui_url}/api/{path}{query}", timeout=10) as resp:
            return json.loads(resp.read())

    def services(self) -> list[str]:
        """The service names Jaeger has received spans from."""
        return list(self.api("services").get("data") or [])

    def traces(self, service: str, *, limit: int = 100, lookback: str = "1h") -> list[dict[str, Any]]:
        """The most recent traces that contain a span of ``service`` (Jaeger's JSON trace model)."""
        return list(self.api("traces", service=service, limit=limit, lookback=lookback).get("data") or [])

    def _ready(self) -> bool:
        """The query API answers and the OTLP receiver (started after the extensions) accepts connections."""
        try:
            self.api("services")
            socket.create_connection((self.otlp_host, self.otlp_http_port), timeout=2).close()
        except (OSError, ValueError):
            return False
        return True
