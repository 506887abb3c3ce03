"""Logging and tracing set-up: structlog JSON lines and OpenTelemetry spans.

Every log line is one JSON object; the controller binds ``controller``, ``key`` and ``reconcileID``
into structlog's context variables for the duration of a reconcile, so every line a reconciler (or the
client under it) writes carries them without passing a logger around. Spans are created per reconcile
and per API call through the global OpenTelemetry tracer; an OTLP exporter is installed only when the
standard ``OTEL_*`` environment variables ask for one, otherwise tracing stays the SDK's no-op.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Final

import structlog

__all__ = ("configure_logging", "configure_tracing", "otlp_requested", "set_log_level")

_OTLP_ENV: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_METHOD_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
#: The log threshold in force. structlog caches a logger on first use (a level fixed in its wrapper
#: class would stay with it), so the level is filtered by :func:`_below_threshold`, which reads this
#: per call: :func:`set_log_level` applies to every logger at once.
_live = {"threshold": logging.INFO}


def _numeric(level: str) -> int:
    numeric = logging.getLevelName(level.upper())
    return numeric if isinstance(numeric, int) else logging.INFO


def set_log_level(level: str) -> None:
    """Change the log level of every logger, structlog's and stdlib's, at once (a live setting)."""
    numeric = _numeric(level)
    _live["threshold"] = numeric
    logging.getLogger().setLevel(numeric)
    # httpx/httpcore log one plain-text line per request at INFO; requests are counted and traced by
    # the client instead, and every line on stderr stays JSON.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))


def _below_threshold(
    _logger: Any, method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    if _METHOD_LEVELS.get(method, logging.CRITICAL) < _live["threshold"]:
        raise structlog.DropEvent
    return event_dict


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written (not when logging was configured): a command run
    in-process (a test capturing its output, an embedding program) may replace and close the stream the
    configuration saw."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO", *, json: bool = True) -> None:
    """Route structlog (and stdlib logging) to stderr as JSON lines at ``level``."""
    logging.basicConfig(stream=_CurrentStderr(), level=_numeric(level), format="%(message)s")
    set_log_level(level)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            _below_threshold,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),  # the live filter decides
        logger_factory=structlog.PrintLoggerFactory(_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )


def otlp_requested(env: dict[str, str] | None = None) -> bool:
    """True when the standard OTEL variables ask for OTLP trace export."""
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "")
    if exporter:
        return "otlp" in [e.strip() for e in exporter.split(",")]
    return any(env.get(name) for name in _OTLP_ENV)


def configure_tracing(service_name: str = "gpustack-worker") -> bool:
    """Install an OTLP/HTTP span exporter if requested by the environment; returns whether it did."""
    if not otlp_requested():
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME", service_name)
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
