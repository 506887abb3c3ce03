"""A loop stall in the leader longer than the renew deadline, on the real control plane (issue 17).

Two processes of ``tests/runtime/fencing_app.py`` (the real Manager, LeaderElector, Controller and
Applier; each with its own ServiceAccount token and a User-Agent naming it) mirror source ConfigMaps while
the sources keep changing. A source then asks the leader for a loop stall: the leader issues writes, and
when the first of them has passed the write fence and is about to put its request on the wire, a loop
callback blocks the leader's event loop synchronously — no signal, the process runs, its loop does not —
with those writes queued right behind it. The standby takes the Lease once it expired on its own clock
and writes; only then does the test end the stall. The audit log must show no write at all (any resource,
the Lease included) from the stalled process after the other acquired the Lease, and none of the writes
queued behind the stall; the stalled process must report them refused (``Fenced``, counted in
``gpustack_fenced_writes_total``), log that it lost the Lease and exit 1. No durations are asserted: every
wait is a generous poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE
from tests.kit.waiting import eventually
from tests.runtime.fencing_app import STALL_WRITES, USER_AGENT
from tests.runtime.test_leader_fencing_cluster import (
    FAST_SOURCES,
    ROLE,
    SERVER_POLL,
    keep_changing,
    log_lines,
    mirrors_by,
    service_account_kubeconfig,
    show,
    source,
    start,
)

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

STALL_SOURCE = "stall"


async def test_a_leader_whose_loop_stalls_past_the_renew_deadline_writes_nothing_after_the_hand_over(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    run = uuid.uuid4().hex[:8]
    ns = f"stall-{run}"
    lease_name = f"stall-{run}"
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent=f"stall-test/{run}")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    churn: asyncio.Task[None] | None = None
    release = tmp_path / "end-the-stall"
    try:
        await admin.create(kinds.NAMESPACE, {"metadata": {"name": ns}})
        await admin.create(
            ROLE,
            {
                "metadata": {"name": "fencing-app", "namespace": ns},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "verbs": ["get", "list", "watch", "create", "update", "patch"],
                    },
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["get", "create", "update"],
                    },
                    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
                ],
            },
            namespace=ns,
        )
        ids = {"a": f"ctl-a-{run}", "b": f"ctl-b-{run}"}
        configs = {k: await service_account_kubeconfig(admin, devcluster, ns, f"ctl-{k}") for k in ids}
        users = {k: f"system:serviceaccount:{ns}:ctl-{k}" for k in ids}
        for name in FAST_SOURCES:
            await admin.create(CONFIG_MAP, source(ns, name, {"v": "0"}), namespace=ns)
        logs = {k: tmp_path / f"{k}.log" for k in ids}
        procs = {k: start(configs[k], ns, lease_name, ids[k], logs[k]) for k in ids}

        # 1. one of them leads and mirrors every fast source
        holder: dict[str, str] = {}

        async def lease_spec() -> dict[str, Any]:
            lease = await admin.get(LEASE, lease_name, ns)
            return dict((lease or {}).get("spec") or {})

        async def leader_is(identities: set[str]) -> bool:
            holder["now"] = str((await lease_spec()).get("holderIdentity") or "")
            return holder["now"] in identities

        await eventually(lambda: leader_is(set(ids.values())), within=120, every=SERVER_POLL)
        old = next(k for k, v in ids.items() if v == holder["now"])
        new = next(k for k in ids if k != old)

        await eventually(lambda: mirrors_by(admin, ns, ids[old]), within=120, every=SERVER_POLL)

        # 2. keep the sources changing, so a leader always has reconciles and writes to make
        churn = asyncio.create_task(keep_changing(admin, ns))

        def mirror_writes_by_old() -> int:
            writes = audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[old]}")
            return sum(1 for e in writes if e.resource == "configmaps")

        count = mirror_writes_by_old()
        await eventually(lambda: mirror_writes_by_old() >= count + 5, within=120, every=0.05)

        # 3. the leader stalls its own loop, writes queued right behind the stall
        stall = {"stall-who": ids[old], "stall-until": str(release)}
        await admin.create(CONFIG_MAP, source(ns, STALL_SOURCE, stall), namespace=ns)
        await eventually(
            lambda: any(r.get("event") == "loop stall begins" for r in log_lines(logs[old])),
            within=120,
            every=0.05,
        )

        # 4. the standby takes the Lease once it expired on its own clock, and writes
        await eventually(lambda: leader_is({ids[new]}), within=180, every=SERVER_POLL)
        spec = await lease_spec()
        assert int(spec.get("leaseTransitions") or 0) >= 1
        await eventually(lambda: mirrors_by(admin, ns, ids[new]), within=120, every=SERVER_POLL)
        assert procs[old].poll() is None, "the stalled leader exited before its stall ended"

        # 5. end the stall: the queued writes meet the closed fence; the process steps down and exits 1
        release.touch()
        code = await asyncio.to_thread(procs[old].wait, 120)
        assert code == 1, f"the stalled leader exited {code}, expected 1 (lost the Lease)"
        churn.cancel()
        await asyncio.gather(churn, return_exceptions=True)
        churn = None
        procs[new].send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(procs[new].wait, 120) == 0

        # 6. the server's record
        acquired = [
            e
            for e in audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[new]}")
            if e.resource == "leases" and e.name == lease_name and e.code is not None and e.code < 300
        ]
        assert acquired, "no successful Lease write from the new leader in the audit log"
        acquired_at = acquired[0].received
        late = audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[old]}", since=acquired_at)
        assert not late, f"the stalled leader wrote after the new leader acquired the Lease: {show(late)}"
        late_by_user = audit.writes(username=users[old], since=acquired_at)
        assert not late_by_user, f"the stalled account wrote after the hand-over: {show(late_by_user)}"
        before = audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[old]}")
        assert [e for e in before if e.resource == "configmaps"], "the stalled leader never wrote a mirror"
        queued = [e for e in before if e.name.startswith(f"{ids[old]}-stalled-")]
        assert not queued, f"a write queued behind the stall reached the server: {show(queued)}"
        new_writes = [
            e
            for e in audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[new]}", since=acquired_at)
            if e.resource == "configmaps"
        ]
        assert new_writes and all(e.username == users[new] for e in new_writes)

        # 7. the stalled process's own account: the queued writes refused by the fence, counted; Lease lost
        records = log_lines(logs[old])
        events = [str(r.get("event", "")) for r in records]
        assert "loop stall ends" in events
        assert any(e.startswith("leadership lost") for e in events)
        outcomes = [r for r in records if str(r.get("event", "")).startswith("stall write")]
        assert len(outcomes) == STALL_WRITES, outcomes
        assert all(r["event"] == "stall write refused" and r.get("fenced") for r in outcomes), outcomes
        assert all(r.get("outcome") == "refused" for r in outcomes), outcomes
        at_the_write = [r for r in outcomes if "before any byte of it was written" in str(r.get("error"))]
        assert at_the_write, f"no queued write was refused at the write itself: {outcomes}"
        stopped = [r for r in records if r.get("event") == "fencing app stopped"]
        assert stopped and stopped[0].get("exit_code") == 1
        assert float(stopped[0].get("fenced_writes") or 0) >= STALL_WRITES
        print(
            f"hand-over: old={ids[old]} new={ids[new]} acquired(server)={acquired_at.isoformat()} "
            f"old writes before={len(before)} new writes after={len(new_writes)} "
            f"refused at the write={len(at_the_write)} fenced_writes={stopped[0].get('fenced_writes')}"
        )
    finally:
        release.touch()
        if churn is not None:
            churn.cancel()
            await asyncio.gather(churn, return_exceptions=True)
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        with contextlib.suppress(Exception):
            await admin.delete(kinds.NAMESPACE, ns)
        await admin.close()
