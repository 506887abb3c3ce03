"""Real ``gpustack-worker controller`` processes for the fault suite, each its own ServiceAccount.

``controller_account`` makes a ServiceAccount in the system namespace with exactly the controller's RBAC
(bound to the ``gpustack-worker-controller`` ClusterRole and Role that ``manifests/rbac`` installs), so
two processes are two users in the API server's audit log as well as two User-Agents
(``gpustack-worker-controller/<identity>``). ``ControllerProcs`` starts the real command as subprocesses
with short Lease timings (the start-up-only ``GPUSTACK_LEADER_*`` settings) and kills them with SIGKILL
(no Lease release, no last write). ``writer_spans`` reads, from the audit log, when each identity wrote —
the instants a fault test compares to prove there was never a second writer. ``audited_cluster`` is an
audited control plane of a module's own (:func:`tests.kit.cluster.own`, with the reason it cannot share
the session's); ``no_leader_lease`` clears the controller Lease another module's processes left on the
session's control plane.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx

from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.controller_cmd import LEASE_NAME, USER_AGENT
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import Client, Conflict
from gpustack_worker.runtime.resources import Resource
from tests.kit.cluster import own

if TYPE_CHECKING:
    import datetime
    from collections.abc import Iterator

    from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
    from gpustack_worker.devcluster.cluster import DevCluster

__all__ = (
    "LEASE_ENV",
    "ControllerProcs",
    "Span",
    "audited_cluster",
    "controller_account",
    "lease_acquired",
    "lease_holder",
    "no_leader_lease",
    "writer_spans",
)

REPO: Final = Path(__file__).resolve().parents[2]
#: Short Lease timings (start-up-only settings, read from the environment by ``controller``).
LEASE_ENV: Final = {
    "GPUSTACK_LEADER_LEASE_SECONDS": "6",
    "GPUSTACK_LEADER_RENEW_DEADLINE_SECONDS": "4",
    "GPUSTACK_LEADER_RETRY_PERIOD_SECONDS": "1",
}
_CLUSTER_ROLE_BINDING: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
_ROLE_BINDING: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", namespaced=True
)


#: The reason of a caller that names none: its audit log read from the start holds its own requests only.
_WHOLE_LOG: Final = "an audit log of its own, read from its start: every request in it is the module's"


@contextlib.contextmanager
def audited_cluster(
    name: str, *, why: str = _WHOLE_LOG, request_bodies: tuple[str, ...] = ()
) -> Iterator[DevCluster]:
    """A control plane of the module's own (:func:`tests.kit.cluster.own`; ``why`` says what the session's
    does not give), with the API server's audit log — and the request bodies of the writes to
    ``request_bodies``' API groups in it. The log lives in a directory of its own, removed afterwards
    (``own`` makes the control plane's directory itself)."""
    logs = Path(tempfile.mkdtemp(prefix=f"gpustack-{name}-audit-"))
    try:
        with own(
            name, why=why, audit_log=logs / "audit.log", audit_request_bodies=request_bodies
        ) as cluster:
            yield cluster
    finally:
        shutil.rmtree(logs, ignore_errors=True)


async def no_leader_lease(admin: Client) -> None:
    """Delete the controller Lease, if another module's controller left one on the session's control
    plane (a reset leaves Leases alone: the scheduler's and Kueue's churn). This module's controllers then
    elect among themselves at once — instead of waiting out a dead holder's Lease — and the first of them
    creates the Lease, as on a control plane no controller ever ran on. Call it while none of this
    module's controllers runs."""
    await admin.delete(kinds.LEASE, LEASE_NAME, kinds.SYSTEM_NAMESPACE)


async def controller_account(cluster: DevCluster, admin: Client, suffix: str) -> tuple[Path, str]:
    """ServiceAccount ``gpustack-worker-controller-<suffix>`` with the controller's roles: its kubeconfig
    and its user name."""
    role = rbac.CONTROLLER.name
    name = f"{role}-{suffix}"
    ns = kinds.SYSTEM_NAMESPACE
    path = cluster.service_account_kubeconfig(name, ns)
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    bindings = (
        (_CLUSTER_ROLE_BINDING, None, "ClusterRole"),
        (_ROLE_BINDING, ns, "Role"),
    )
    for resource, namespace, kind in bindings:
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": resource.kind,
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": subject,
        }
        with contextlib.suppress(Conflict):  # already there (a second test of the module)
            await admin.create(resource, body, namespace=namespace)
    return path, f"system:serviceaccount:{ns}:{name}"


class ControllerProcs:
    """``gpustack-worker controller`` subprocesses by identity, each with its own kubeconfig; every one is
    stopped at :meth:`stop_all`. stderr (the JSON log) goes to ``<logs>/<identity>.log``."""

    def __init__(self, logs: Path, env: dict[str, str] | None = None, kubeconfig: Path | None = None) -> None:
        self.logs = logs
        #: The kubeconfig of a process started without one of its own.
        self.kubeconfig = kubeconfig
        self.env = {**LEASE_ENV, **(env or {})}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: The health/metrics port of each process.
        self.ports: dict[str, int] = {}

    def start(self, identity: str, kubeconfig: Path | None = None) -> None:
        kubeconfig = kubeconfig or self.kubeconfig
        if kubeconfig is None:
            raise ValueError(f"no kubeconfig for controller {identity}")
        cmd = [
            sys.executable, "-m", "gpustack_worker", "controller",
            f"--kubeconfig={kubeconfig}", f"--identity={identity}",
            f"--metrics-bind=127.0.0.1:{self.ports.setdefault(identity, free_port())}",
            "--webhook-bind=",  # no admission webhook server: two processes would collide on :9443
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
        env.update(self.env)
        env["PYTHONPATH"] = str(REPO)
        with (self.logs / f"{identity}.log").open("ab") as err:
            self.procs[identity] = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err
            )

    def kill(self, identity: str) -> None:
        """SIGKILL: the process cannot release its Lease or finish any write."""
        proc = self.procs[identity]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def alive(self, identity: str) -> bool:
        return self.procs[identity].poll() is None

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    async def metric(self, identity: str, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``, read from the process's
        ``/metrics`` (0 when it serves none yet)."""
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                text = (await http.get(f"http://127.0.0.1:{self.ports[identity]}/metrics")).text
        except httpx.HTTPError:
            return 0.0
        total = 0.0
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        for line in text.splitlines():
            if line.startswith((f"{name}{{", f"{name} ")) and all(w in line for w in wanted):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def tail(self, identity: str, lines: int = 40) -> str:
        path = self.logs / f"{identity}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


async def lease_holder(admin: Client) -> str:
    """The controller Lease's ``holderIdentity`` (``""`` when none)."""
    lease = await admin.get(kinds.LEASE, LEASE_NAME, kinds.SYSTEM_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _is_lease(e: AuditEvent) -> bool:
    return e.resource == "leases" and e.name == LEASE_NAME


def lease_acquired(audit: AuditLog, identity: str, since: datetime.datetime) -> datetime.datetime | None:
    """When the server received ``identity``'s first successful Lease write at or after ``since`` (a
    standby writes the Lease only to take it over, so this is the acquisition)."""
    for e in audit.writes(f"{USER_AGENT}/{identity}", since=since):
        if _is_lease(e) and e.code is not None and e.code < 300:
            return e.received
    return None


@dataclass(frozen=True, slots=True)
class Span:
    """The writes of one identity other than its Lease (chain objects, Events): first and last instants."""

    identity: str
    writes: tuple[AuditEvent, ...]

    @property
    def first(self) -> datetime.datetime:
        return self.writes[0].received

    @property
    def last(self) -> datetime.datetime:
        return self.writes[-1].received


def writer_spans(audit: AuditLog, identities: list[str]) -> dict[str, Span]:
    """Each identity's non-Lease writes, as the server received them (identities that wrote nothing are
    left out). Two spans that overlap would mean two writers at once."""
    out = {}
    for identity in identities:
        chosen = [e for e in audit.writes(f"{USER_AGENT}/{identity}") if not _is_lease(e)]
        writes = tuple(sorted(chosen, key=lambda e: e.received))
        if writes:
            out[identity] = Span(identity, writes)
    return out
