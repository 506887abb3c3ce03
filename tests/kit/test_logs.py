"""A log assertion does not depend on which module configured logging before it (tests/kit/logs.py)."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from gpustack_worker.runtime import informer, telemetry


def test_a_logger_bound_between_two_configurations_is_still_captured() -> None:
    saved = structlog.get_config()
    try:
        telemetry.configure_logging("INFO")  # a command run in-process: caching asked for
        informer._log.bind(resource="first-use")  # an informer built then (first use of the module logger)
        telemetry.configure_logging("INFO")  # another command: a new processor list
        with capture_logs() as logs:
            informer._log.bind(resource="configmaps").info("watch expired, relisting")
        assert [e["event"] for e in logs] == ["watch expired, relisting"]
        assert structlog.get_config()["cache_logger_on_first_use"] is False
    finally:
        structlog.configure(**saved)
