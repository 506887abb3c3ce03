"""Fenced leadership on the real control plane, counted from the API server's audit log.

Two processes of ``tests/runtime/fencing_app.py`` (the real Manager, LeaderElector, Controller and
Applier; each with its own ServiceAccount token and a User-Agent naming it) mirror source ConfigMaps
while the sources keep changing. The leader is frozen with SIGSTOP — one of its reconciles is in flight
(a source asks for an hour-long pause) and others are sleeping before their writes — until the standby
holds the Lease and writes itself; then it is resumed with SIGCONT, on which the app also tries one write
at once (pending work issued before the Manager can notice anything). The audit log must show no write at
all (any resource, the Lease included) from the old leader after the new leader acquired the Lease, and
the new leader's writes. No durations are asserted: every wait is a generous poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
import yaml

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE, Resource
from tests.kit.waiting import eventually
from tests.runtime.fencing_app import LABEL, MIRROR, SOURCE, USER_AGENT

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
ROLE = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", namespaced=True)
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", namespaced=True)
FAST_SOURCES = [f"src-{i}" for i in range(4)]
SLOW_SOURCE = "slow"
#: The pause between two reads of state the API server holds (the Lease, the mirrors).
SERVER_POLL = 0.2


def token_request(name: str) -> Resource:
    """``POST .../serviceaccounts/<name>/token`` addressed as a collection (TokenRequest subresource)."""
    return Resource("", "v1", "TokenRequest", f"serviceaccounts/{name}/token", namespaced=True)


async def service_account_kubeconfig(admin: Client, devcluster: DevCluster, ns: str, name: str) -> Path:
    """A ServiceAccount bound to exactly what the app needs in ``ns``, and a kubeconfig with its token."""
    await admin.create(SERVICE_ACCOUNT, {"metadata": {"name": name, "namespace": ns}}, namespace=ns)
    await admin.create(
        ROLE_BINDING,
        {
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fencing-app"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
        namespace=ns,
    )
    answer = await admin.create(
        token_request(name),
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
        namespace=ns,
    )
    config = yaml.safe_load(devcluster.kubeconfig.read_text())
    config["users"] = [{"name": name, "user": {"token": answer["status"]["token"]}}]
    for context in config["contexts"]:
        context["context"]["user"] = name
    path = devcluster.dir / f"kubeconfig-{ns}-{name}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def start(
    kubeconfig: Path, ns: str, lease: str, identity: str, log: Path, app: str = "tests.runtime.fencing_app"
) -> subprocess.Popen[bytes]:
    """Run the test ``app`` (a module with the fencing app's command line) as a subprocess."""
    cmd = [
        sys.executable, "-m", app,
        "--kubeconfig", str(kubeconfig), "--namespace", ns, "--lease", lease, "--identity", identity,
        "--metrics-bind", f"127.0.0.1:{free_port()}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as err:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)


def log_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            record = orjson.loads(line)
            if isinstance(record, dict):
                out.append(record)
    return out


def show(events: list[AuditEvent]) -> list[str]:
    return [f"{e.received.isoformat()} {e.verb} {e.resource_path} {e.name} code={e.code}" for e in events]


async def test_a_frozen_leader_writes_nothing_after_the_standby_acquired(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    run = uuid.uuid4().hex[:8]
    ns = f"fencing-{run}"
    lease_name = f"fencing-{run}"
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent=f"fencing-test/{run}")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    churn: asyncio.Task[None] | None = None
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
        await admin.create(CONFIG_MAP, source(ns, SLOW_SOURCE, {"v": "0", "delay": "3600"}), namespace=ns)
        logs = {k: tmp_path / f"{k}.log" for k in ids}
        procs = {k: start(configs[k], ns, lease_name, ids[k], logs[k]) for k in ids}

        # 1. one of them leads and mirrors every fast source
        holder: dict[str, str] = {}

        async def lease_spec() -> dict[str, Any]:
            lease = await admin.get(LEASE, lease_name, ns)
            return dict((lease or {}).get("spec") or {})

        async def poll_holder() -> None:
            holder["now"] = str((await lease_spec()).get("holderIdentity") or "")

        async def leader_known() -> bool:
            await poll_holder()
            return holder["now"] in ids.values()

        await eventually(leader_known, within=120, every=SERVER_POLL)
        old = next(k for k, v in ids.items() if v == holder["now"])
        new = next(k for k in ids if k != old)

        await eventually(lambda: mirrors_by(admin, ns, ids[old]), within=120, every=SERVER_POLL)

        # 2. keep the sources changing, so a leader always has reconciles in flight and writes
        churn = asyncio.create_task(keep_changing(admin, ns))

        def mirror_writes_by_old() -> int:
            writes = audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[old]}")
            return sum(1 for e in writes if e.resource == "configmaps")

        count = mirror_writes_by_old()
        await eventually(lambda: mirror_writes_by_old() >= count + 5, within=120, every=0.05)

        # 3. freeze the leader; the standby takes the Lease once it has expired on its own clock
        procs[old].send_signal(signal.SIGSTOP)

        async def standby_holds() -> bool:
            await poll_holder()
            return holder["now"] == ids[new]

        await eventually(standby_holds, within=180, every=SERVER_POLL)
        spec = await lease_spec()
        assert int(spec.get("leaseTransitions") or 0) >= 1

        # 4. the new leader writes while the old one is still frozen
        await eventually(lambda: mirrors_by(admin, ns, ids[new]), within=120, every=SERVER_POLL)

        # 5. resume the old leader: it must find its fence closed and exit 1 without writing
        procs[old].send_signal(signal.SIGCONT)
        code = await asyncio.to_thread(procs[old].wait, 120)
        assert code == 1, f"the old leader exited {code}, expected 1 (lost the Lease)"
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
        assert not late, f"the old leader wrote after the new leader acquired the Lease: {show(late)}"
        late_by_user = audit.writes(username=users[old], since=acquired_at)
        assert not late_by_user, f"the old leader's account wrote after the hand-over: {show(late_by_user)}"
        before = audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[old]}")
        assert [e for e in before if e.resource == "configmaps"], "the old leader never wrote a mirror"
        assert all(e.username == users[old] for e in before), "the old leader did not authenticate as itself"
        new_writes = [
            e
            for e in audit.writes(user_agent_prefix=f"{USER_AGENT}/{ids[new]}", since=acquired_at)
            if e.resource == "configmaps"
        ]
        assert new_writes and all(e.username == users[new] for e in new_writes)

        # 7. the old leader had work in flight when frozen, and it was cancelled or refused, not sent
        records = log_lines(logs[old])
        cancelled = [r for r in records if r.get("event") == "reconcile cancelled"]
        assert any(str(r.get("key", "")).endswith(f"/{SLOW_SOURCE}") for r in cancelled), (
            "the in-flight reconcile of the slow source was not cancelled"
        )
        assert any(r.get("event", "").startswith("leadership lost") for r in records)
        resume = [r for r in records if str(r.get("event", "")).startswith("resume write")]
        assert [(r["event"], r.get("fenced")) for r in resume] == [("resume write refused", True)], resume
        print(
            f"hand-over: old={ids[old]} new={ids[new]} acquired(server)={acquired_at.isoformat()} "
            f"acquireTime={spec.get('acquireTime')} old writes before={len(before)} "
            f"new writes after={len(new_writes)} cancelled={len(cancelled)} "
            f"fenced={sum(1 for r in records if 'Fenced' in str(r.get('exception', '')))}"
        )
    finally:
        if churn is not None:
            churn.cancel()
            await asyncio.gather(churn, return_exceptions=True)
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait(10)
        with contextlib.suppress(Exception):
            await admin.delete(kinds.NAMESPACE, ns)
        await admin.close()


async def mirrors_by(admin: Client, ns: str, identity: str) -> bool:
    """True once every fast source's mirror was last written by ``identity``."""
    items, _ = await admin.list(CONFIG_MAP, namespace=ns, label_selector=f"{LABEL}={MIRROR}")
    data = {i["metadata"]["name"]: i.get("data") or {} for i in items}
    written = {name for name, d in data.items() if d.get("writer") == identity}
    return written >= {f"{n}-{MIRROR}" for n in FAST_SOURCES}


async def keep_changing(admin: Client, ns: str) -> None:
    """Change the fast sources one after another until cancelled, so a leader always has writes to make."""
    i = 0
    while True:
        i += 1
        name = FAST_SOURCES[i % len(FAST_SOURCES)]
        await admin.patch(CONFIG_MAP, name, {"data": {"v": str(i)}}, namespace=ns)
        await asyncio.sleep(0.1)


def source(ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL: SOURCE}},
        "data": data,
    }
