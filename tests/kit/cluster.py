"""The session's control plane, and control planes of a module's own where a module needs a different one.

- :func:`session` — the one control plane of the test session (etcd, kube-apiserver, Kueue, nfd-master,
  kube-scheduler; audited), started by whatever asks first: the ``devcluster`` fixture or
  :func:`shared_baseline`. ``tests/conftest.py`` stops it at the end of the session.
- :func:`shared_baseline` — the session's control plane put back to the baseline it had right after start
  (:mod:`tests.kit.reset`), for a module that reads every Node or every queue and must not see another
  module's objects. It replaces a control plane of the module's own: same isolation, no start-up.
- :func:`own` — a control plane of the module's own, for a module that needs a different one (no
  nfd-master, a bare API server, request bodies in the audit log, Jaeger …): the caller names why.

Every control plane's directory is outside pytest's basetemp: pytest prunes old basetemps, which would
delete a running cluster's etcd data when several test sessions run at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack_worker.devcluster.cluster import DevCluster
from tests.kit import phases, reset

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ("own", "session", "shared_baseline", "stop_session")


class _Session:
    cluster: DevCluster | None = None
    baseline: reset.Baseline | None = None
    kubeconfig_before: str | None = None


def session() -> DevCluster:
    """The session's control plane, started on first use (and its baseline taken then)."""
    if _Session.cluster is None:
        directory = Path(tempfile.mkdtemp(prefix="gpustack-devcluster-"))
        # Always audited (cheap): tests count writes from the server's side with AuditLog.from_now(...).
        cluster = DevCluster(
            directory, log=lambda msg: print(f"[devcluster] {msg}"), audit_log=directory / "audit.log"
        )
        try:
            cluster.start()
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        _Session.kubeconfig_before = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        api = cluster.bootstrap()
        try:
            _Session.baseline = reset.snapshot(api)
        finally:
            api.close()
        _Session.cluster = cluster
    return _Session.cluster


def stop_session() -> None:
    """Stop the session's control plane if it was started (the session's last fixture calls it)."""
    cluster, _Session.cluster = _Session.cluster, None
    if cluster is None:
        return
    cluster.stop()
    shutil.rmtree(cluster.dir, ignore_errors=True)
    if _Session.kubeconfig_before is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = _Session.kubeconfig_before


def shared_baseline() -> DevCluster:
    """The session's control plane, put back to its baseline first."""
    cluster = session()
    assert _Session.baseline is not None
    api = cluster.bootstrap()
    try:
        phases.timed(phases.RESET)(reset.reset)(api, _Session.baseline)
    finally:
        api.close()
    return cluster


def leftovers() -> list[str]:
    """What differs from the session's baseline now (the reset's own test asserts it is nothing)."""
    cluster = session()
    assert _Session.baseline is not None
    api = cluster.bootstrap()
    try:
        return reset.leftovers(api, _Session.baseline)
    finally:
        api.close()


@contextlib.contextmanager
def own(name: str, *, why: str, **options: Any) -> Iterator[DevCluster]:
    """A control plane of the caller's own with ``options`` (``DevCluster``'s), stopped and removed after.
    ``why``: what the module needs that the session's control plane does not give (printed at start)."""
    if not why.strip():
        raise ValueError("a control plane of a module's own needs the reason it cannot share the session's")
    directory = Path(tempfile.mkdtemp(prefix=f"gpustack-{name}-"))
    options.setdefault("log", lambda msg: print(f"[{name} devcluster] {msg}"))
    cluster = DevCluster(directory, **options)
    print(f"[{name} devcluster] a control plane of its own: {why}")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
