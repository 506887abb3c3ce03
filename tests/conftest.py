"""Shared fixtures: one real control plane per test session, started only when a test asks for it.

A component that cannot be built or started fails the requesting tests with the reason (BuildError /
StartupError carry go's or the component's own output) — they are never skipped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from tests.kit import cluster as kit_cluster
from tests.kit import logs, per_run, phases, properties, scheduling, waiting

# Property-based tests (hypothesis): the ``ci`` and ``thorough`` profiles and the example counts
# (tests/kit/properties.py). Registered at import, before hypothesis' plugin reads --hypothesis-profile.
properties.register()
# Loggers built per use, so capture_logs() sees them whichever module configured logging before
# (tests/kit/logs.py).
logs.never_cache_loggers()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Modules with real nodes together on one worker (tests/kit/scheduling.py)."""
    return scheduling.scheduler_for(config, log)


def pytest_configure(config: pytest.Config) -> None:
    # Where the time went (start-ups, resets, cluster and other tests), printed at the end of the run.
    config.pluginmanager.register(phases.Phases(), "gpustack-phases")
    # The run's directory for values computed once and shared by the workers (tests/kit/per_run.py).
    per_run.start_run()


def pytest_unconfigure(config: pytest.Config) -> None:
    per_run.end_run()


if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.cluster import DevCluster


@pytest.fixture(scope="session", autouse=True)
def _session_control_plane_stopped() -> Iterator[None]:
    """Stops the session's control plane at the end, whoever started it (tests/kit/cluster.py)."""
    try:
        yield
    finally:
        kit_cluster.stop_session()


@pytest.fixture(scope="session")
def devcluster() -> DevCluster:
    """The session's control plane: etcd + kube-apiserver + Kueue + nfd-master + kube-scheduler on
    127.0.0.1, with Kueue's, NFD's and our CRDs installed, and kube-apiserver's audit log at
    ``<dir>/audit.log`` (see :mod:`gpustack_worker.devcluster.audit`). Shared with every module; a module
    that must see no other module's objects asks for :func:`tests.kit.cluster.shared_baseline`."""
    return kit_cluster.session()


#: ``await eventually(predicate, within=30.0)``: the kit's wait (tests/kit/waiting.py) as a fixture.
Poll = Callable[..., Awaitable[object]]


@pytest.fixture
def eventually() -> Poll:
    """The kit's :func:`tests.kit.waiting.eventually`, polling every 50 ms (a predicate over in-memory state
    that other tasks build from server events; there is no single event to await), 30 s by default."""

    async def poll(predicate: Callable[[], object], within: float = 30.0) -> object:
        return await waiting.eventually(predicate, within=within, every=0.05)

    return poll
