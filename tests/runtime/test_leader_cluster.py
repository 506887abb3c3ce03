"""Two real controller processes: exactly one leads, the standby takes over after a kill -9, never two
leaders, and SIGTERM releases the Lease.

No hand-over duration is asserted (a loaded machine is slower; the fake-clock tests in test_leader.py pin
the arithmetic: takeover one lease duration after the standby last saw the record change). The time it
took is printed for the record."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import Client
from tests.kit.waiting import eventually

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE
#: A generous bound for polling only (a failure here means 'never', not 'slow').
PATIENCE_S = 180.0


def start(kubeconfig: str, identity: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "gpustack_worker.cli.main", "controller",
        "--kubeconfig", kubeconfig, "--namespace", NS, "--metrics-bind", f"127.0.0.1:{port}",
        "--identity", identity, "--settings-configmap", "gpustack-settings-leader-test",
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))


def leader_gauge(port: int) -> float | None:
    """The process' own ``leader_election_master_status`` (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("leader_election_master_status{") and f'name="{LEASE_NAME}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_exactly_one_leader_and_handover_after_kill(devcluster: Any) -> None:
    kubeconfig = str(devcluster.kubeconfig)
    client = await Client.connect(kubeconfig)
    from gpustack_worker.runtime.resources import LEASE

    await client.delete(LEASE, LEASE_NAME, NS)
    ports = {"ctl-a": free_port(), "ctl-b": free_port()}
    # The controllers authenticate as their ServiceAccount (manifests/rbac); the admin client sets up.
    controller_kubeconfig = str(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name))
    procs = {name: start(controller_kubeconfig, name, port) for name, port in ports.items()}
    max_simultaneous = 0

    async def sample() -> dict[str, float | None]:
        nonlocal max_simultaneous
        gauges = {n: await asyncio.to_thread(leader_gauge, p) for n, p in ports.items()}
        max_simultaneous = max(max_simultaneous, sum(1 for g in gauges.values() if g == 1.0))
        return gauges

    async def the_one_leader() -> str | None:
        """The process that leads, once both answer and exactly one of them leads."""
        gauges = await sample()
        leading = [n for n, g in gauges.items() if g == 1.0]
        answering = all(g is not None for g in gauges.values())
        return leading[0] if answering and len(leading) == 1 else None

    async def leads(name: str) -> bool:
        return (await sample())[name] == 1.0

    try:
        # 1. exactly one of the two leads, and the Lease names it
        leader = await eventually(the_one_leader, within=PATIENCE_S, every=0.2)
        lease = await client.get(LEASE, LEASE_NAME, NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == leader
        for _ in range(15):  # stays stable: the standby does not grab the lease
            await sample()
            await asyncio.sleep(0.2)
        standby = next(n for n in ports if n != leader)

        # 2. kill -9 the leader; the standby leads once the Lease expired on its own clock
        procs[leader].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        procs[leader].wait(10)
        await eventually(lambda: leads(standby), within=PATIENCE_S, every=0.2)
        took = time.monotonic() - killed_at
        print(f"handover after kill -9: {took:.1f}s (informational)")
        lease = await client.get(LEASE, LEASE_NAME, NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == standby
        assert max_simultaneous == 1

        # 3. graceful stop releases the Lease
        procs[standby].send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(procs[standby].wait, 30) == 0
        lease = await client.get(LEASE, LEASE_NAME, NS)
        assert lease is not None and not lease["spec"].get("holderIdentity")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        await client.close()
