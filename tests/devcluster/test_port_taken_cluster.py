"""A port taken between choosing it and binding it does not fail a start-up: new ports, start again.

A control plane chooses its ports free (``free_port``), and each component binds its own a moment
later; a second cluster or test session on the machine can take one in between — CI saw kube-apiserver
exit with ``bind: address already in use``. Here the first etcd client port handed out is one this test
holds open: etcd cannot bind it, the start-up is tried again on new ports, and the API server answers.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from gpustack_worker.devcluster import cluster as cluster_module
from gpustack_worker.devcluster.cluster import DevCluster
from gpustack_worker.devcluster.procs import free_port

pytestmark = pytest.mark.cluster


def test_a_port_taken_before_it_is_bound_is_chosen_again(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    handed: list[int] = []

    def first_one_taken() -> int:
        port = int(taken.getsockname()[1]) if not handed else free_port()
        handed.append(port)
        return port

    monkeypatch.setattr(cluster_module, "free_port", first_one_taken)
    said: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix="gpustack-port-taken-"))
    bare = {"with_kueue": False, "with_nfd": False, "with_scheduler": False, "with_worker_rbac": False}
    cluster = DevCluster(directory, log=said.append, **bare)
    try:
        cluster.start()
        api = cluster.bootstrap()
        try:
            assert api.request("GET", "/version").json()["gitVersion"].startswith("v")
        finally:
            api.close()
        assert cluster.etcd_port != handed[0]
        assert any("a port was taken before it was bound (attempt 1)" in line for line in said), said
    finally:
        cluster.stop()
        taken.close()
        shutil.rmtree(directory, ignore_errors=True)
