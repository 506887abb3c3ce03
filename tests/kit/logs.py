"""Loggers are never cached in tests, so ``structlog.testing.capture_logs`` sees every logger.

The product configures structlog with ``cache_logger_on_first_use=True`` (one configuration per
process, so a logger is built once). In a test session, commands run in-process configure logging again
and again, and a module-level logger first used in between keeps the processor list of *that*
configuration for good; a later ``capture_logs()`` changes the current list and sees nothing from it.
Which test ran before then decides whether a log assertion passes (found under pytest-xdist, where
modules run in another order). :func:`never_cache_loggers` makes every configuration in the session
build loggers per use, so the order of modules cannot matter.
"""

from __future__ import annotations

import functools
from typing import Any

import structlog

__all__ = ("never_cache_loggers",)


def never_cache_loggers() -> None:
    """Make ``structlog.configure`` ignore ``cache_logger_on_first_use`` for the rest of the process."""
    configure = structlog.configure
    if getattr(configure, "never_caches", False):
        return

    @functools.wraps(configure)
    def uncached(*args: Any, **kwargs: Any) -> None:
        kwargs["cache_logger_on_first_use"] = False
        configure(*args, **kwargs)

    uncached.never_caches = True  # type: ignore[attr-defined]
    structlog.configure = uncached  # type: ignore[assignment]
    configure(cache_logger_on_first_use=False)
