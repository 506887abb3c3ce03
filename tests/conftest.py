"""Shared fixtures: one real control plane per test session, started only when a test asks for it.

A component that cannot be built or started fails the requesting tests with the reason (BuildError /
StartupError carry go's or the component's own output) — they are never skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpustack_worker.devcluster.cluster import DevCluster
from tests.kit import properties

# Property-based tests (hypothesis): the ``ci`` and ``thorough`` profiles and the example counts
# (tests/kit/properties.py). Registered at import, before hypothesis' plugin reads --hypothesis-profile.
properties.register()

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """etcd + kube-apiserver + Kueue + nfd-master on 127.0.0.1, with Kueue's, NFD's and our CRDs installed,
    and kube-apiserver's audit log at ``<dir>/audit.log`` (see :mod:`gpustack_worker.devcluster.audit`).

    Its directory is not under pytest's basetemp: pytest prunes old basetemps, which would delete a
    running cluster's etcd data when several test sessions run at once.
    """
    directory = Path(tempfile.mkdtemp(prefix="gpustack-devcluster-"))
    # Always audited (cheap): tests count writes from the server's side with AuditLog(cluster.audit_log).
    cluster = DevCluster(
        directory, log=lambda msg: print(f"[devcluster] {msg}"), audit_log=directory / "audit.log"
    )
    cluster.start()
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


#: ``await eventually(predicate, within=30.0)``: poll until true, else TimeoutError.
Poll = Callable[..., Awaitable[None]]


@pytest.fixture
def eventually() -> Poll:
    """Poll a predicate over state that other tasks build from server events (there is no single event
    to await); fails with TimeoutError after ``within`` seconds."""

    async def poll(predicate: Callable[[], bool], within: float = 30.0) -> None:
        async with asyncio.timeout(within):
            while not predicate():  # noqa: ASYNC110 - state is built by other tasks; nothing to await
                await asyncio.sleep(0.05)

    return poll
