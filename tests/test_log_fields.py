"""No log call names a field ``event``: structlog's first positional argument is already called
``event`` (the message), so ``log.warning("...", event=x)`` raises ``TypeError`` inside the very code
path that was reporting a failure — an informer handler error once lost the event for every handler after
the failing one this way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpustack_worker"
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg"}
)


def reserved_field_calls(source: str) -> list[int]:
    """Line numbers of ``<anything>.<log method>(..., event=...)`` calls in ``source``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LOG_METHODS
        and any(k.arg == "event" for k in node.keywords)
    ]


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ('log.warning("x", event=e)', [1]),
        ('self._log.exception(\n  "handler failed",\n  event=kind,\n)', [1]),
        ('log.warning("x", watch_event=e)', []),
        ("recorder.post(event=e)", []),  # not a log method
        ('log.info("x", **fields)', []),
    ],
)
def test_the_scan_finds_a_reserved_field(source: str, lines: list[int]) -> None:
    assert reserved_field_calls(source) == lines


def test_no_log_call_in_the_package_names_a_field_event() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in reserved_field_calls(path.read_text())
    ]
    assert offenders == []
