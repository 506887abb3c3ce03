"""Worker supervision on the real control plane (issue 17, defect 4).

A leader-elected process (``tests/runtime/supervision_app.py``: the real Manager, LeaderElector,
Informer and Controller, one worker) first meets a reconcile that awaits a future someone else
cancelled: the key is retried and reconciled, and the replica goes on reconciling. Then a reconcile
cancels its own worker — the only one: the Manager notices that the worker pool ended while leading,
logs ``runner stopped, exiting`` naming the controller, releases the Lease and the process exits 1.
No durations are asserted: every wait is a generous poll.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE
from tests.kit.waiting import eventually
from tests.runtime.supervision_app import CONTROLLER, LABEL
from tests.runtime.test_leader_fencing_cluster import SERVER_POLL, log_lines, start

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

APP = "tests.runtime.supervision_app"


def source(ns: str, name: str, misbehave: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL: "source"}},
        "data": {"misbehave": misbehave} if misbehave else {},
    }


async def test_a_leader_whose_only_worker_dies_exits_non_zero_and_releases_the_lease(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    ns = f"supervision-{run}"
    lease_name = f"supervision-{run}"
    identity = f"sup-{run}"
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent=f"supervision-test/{run}")
    log = tmp_path / "app.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        await admin.create(kinds.NAMESPACE, {"metadata": {"name": ns}})
        proc = start(devcluster.kubeconfig, ns, lease_name, identity, log, app=APP)

        async def holder() -> str:
            lease = await admin.get(LEASE, lease_name, ns)
            return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

        async def leads() -> bool:
            return await holder() == identity

        await eventually(leads, within=120, every=SERVER_POLL)

        async def seen(name: str) -> dict[str, str]:
            cm = await admin.get(CONFIG_MAP, f"{name}-seen", ns)
            return dict((cm or {}).get("data") or {})

        # 1. A CancelledError the worker did not get: retried, reconciled; the worker lives on.
        await admin.create(CONFIG_MAP, source(ns, "foreign", "foreign-cancel"), namespace=ns)

        async def foreign_retried() -> bool:
            return (await seen("foreign")).get("attempts") == "2"

        await eventually(foreign_retried, within=60, every=SERVER_POLL)
        await admin.create(CONFIG_MAP, source(ns, "after"), namespace=ns)

        async def after_reconciled() -> bool:
            return (await seen("after")).get("attempts") == "1"

        await eventually(after_reconciled, within=60, every=SERVER_POLL)
        assert proc.poll() is None, "the replica exited after a foreign CancelledError"

        # 2. The only worker is cancelled for good: the process exits non-zero and gives the Lease up.
        await admin.create(CONFIG_MAP, source(ns, "killer", "cancel-worker"), namespace=ns)

        async def exited() -> bool:
            return proc is not None and proc.poll() is not None

        await eventually(exited, within=60, every=SERVER_POLL)
        assert proc.returncode == 1
        stopped = [r for r in log_lines(log) if r.get("event") == "runner stopped, exiting"]
        assert [r.get("runner") for r in stopped] == [f"controller {CONTROLLER}"], log.read_text()[-4000:]
        assert await holder() == "", "the dead replica kept the Lease"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await admin.delete(kinds.NAMESPACE, ns)
        await admin.close()
