"""Two real controller processes: exactly one leads, the standby takes over after a kill -9, never two
leaders, and SIGTERM releases the Lease.

No hand-over duration is asserted (a loaded machine is slower; the fake-clock tests in test_leader.py pin
the arithmetic: takeover one lease duration after the standby last saw the record change). The time it
took is printed for the record.

"Never two leaders" is checked over a window closed by what happened in it, not by a number of seconds:
the leader renewed the Lease and the standby read it after each renewal, :data:`RENEWALS_SEEN` times
(the API server's audit log has both processes' Lease requests, in order)."""

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
from gpustack_worker.cli.controller_cmd import LEASE_NAME, USER_AGENT
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import Client
from tests.kit.waiting import eventually

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE
#: A generous bound for polling only (a failure here means 'never', not 'slow').
PATIENCE_S = 180.0
#: The stable window closes once the standby has read the Lease after this many renewals by the leader:
#: each read was a chance to take it (a standby that misjudged expiry would).
RENEWALS_SEEN = 2


def start(kubeconfig: str, identity: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "gpustack_worker.cli.main", "controller",
        "--kubeconfig", kubeconfig, "--namespace", NS, "--metrics-bind", f"127.0.0.1:{port}",
        "--identity", identity, "--settings-configmap", "gpustack-settings-leader-test",
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))


def of(identity: str, event: AuditEvent) -> bool:
    """Whether the controller process ``identity`` sent ``event`` (its User-Agent names it)."""
    return event.user_agent.startswith(f"{USER_AGENT}/{identity} ")


def lease_requests(audit: AuditLog) -> list[AuditEvent]:
    """Every request on the election Lease in the audit window, in the order the server logged them."""
    return [e for e in audit.events() if (e.resource, e.namespace, e.name) == ("leases", NS, LEASE_NAME)]


def renewals_seen(requests: list[AuditEvent], leader: str, standby: str) -> int:
    """Renewals by ``leader`` (a successful update of the Lease) that ``standby`` read afterwards."""
    seen, unread = 0, False
    for event in requests:
        if of(leader, event) and event.verb == "update" and event.code == 200:
            unread = True
        elif of(standby, event) and event.verb == "get" and unread:
            seen, unread = seen + 1, False
    return seen


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
        audit = AuditLog.from_now(devcluster.audit_log)  # the stable window opens
        lease = await client.get(LEASE, LEASE_NAME, NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == leader
        transitions = lease["spec"].get("leaseTransitions")
        standby = next(n for n in ports if n != leader)

        async def stable_window_closed() -> bool:
            """Stays stable: both gauges sampled at every look, and the standby, reading the Lease, never
            writes it; the window closes once it has read :data:`RENEWALS_SEEN` renewals."""
            await sample()
            requests = lease_requests(audit)
            taken = [(e.verb, e.code) for e in requests if of(standby, e) and e.is_write]
            assert not taken, f"the standby wrote the Lease {leader} held: {taken}"
            return renewals_seen(requests, leader, standby) >= RENEWALS_SEEN

        await eventually(stable_window_closed, within=PATIENCE_S, every=0.2)
        lease = await client.get(LEASE, LEASE_NAME, NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == leader
        assert lease["spec"].get("leaseTransitions") == transitions
        assert max_simultaneous == 1

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
