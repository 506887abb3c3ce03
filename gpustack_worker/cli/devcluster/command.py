"""``gpustack-worker devcluster up|down --dir DIR``: a local control plane that outlives the command.

``up --jaeger`` also starts Jaeger (an optional component, built on first use) and prints its UI/API
address and the ``OTEL_EXPORTER_OTLP_ENDPOINT`` that sends spans to it.

``up --bare`` installs none of the chart's objects (by default our ServiceAccounts and their RBAC are
there, so the processes can run as them): ``helm install ./chart`` then works on it as on a team's cluster.

``up --kubelets N`` adds N real nodes (a kubelet each on its own containerd and runc, with a CNI
bridge), kube-controller-manager and kube-proxy (:mod:`gpustack_worker.devcluster.real_nodes`);
``--real-node-names t4-4,h100-1`` registers the first kubelets under those names, so ``simulate apply`` of
a scenario naming them dresses them as its machines (labels, the device plugins' pools, the ``Devices``
ledger) and the agent's Pod there has cards to count.

``up --audit-log FILE`` makes kube-apiserver keep an audit log of every write (and of every request
from the ``gpustack-system`` ServiceAccounts) in ``FILE``; read it with
:class:`gpustack_worker.devcluster.audit.AuditLog`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_worker.devcluster.supervise import read_state

if TYPE_CHECKING:
    import argparse

#: Covers a cold build of all four components on a 2-core machine (about 10 minutes measured) with margin.
UP_TIMEOUT_SECONDS = 45 * 60
DOWN_TIMEOUT_SECONDS = 60


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def up(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = read_state(directory)
    if state and state.get("status") in ("starting", "ready") and _alive(int(state["supervisor_pid"])):
        print(f"devcluster already {state['status']} in {directory} (kubeconfig {directory / 'kubeconfig'})")
        return 0
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "state.json").unlink(missing_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    log = (directory / "logs" / "supervisor.log").open("ab")
    argv = [sys.executable, "-m", "gpustack_worker.devcluster.supervise", str(directory)]
    audit_log = getattr(args, "audit_log", None)
    if audit_log:
        argv += ["--audit-log", str(Path(audit_log).resolve())]
    if getattr(args, "jaeger", False):
        argv.append("--jaeger")
    if getattr(args, "bare", False):
        argv.append("--bare")
    if getattr(args, "kubelets", 0):
        argv += ["--kubelets", str(args.kubelets)]
    if getattr(args, "real_node_names", None):
        argv += ["--real-node-names", args.real_node_names]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + UP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        state = read_state(directory) or {}
        if state.get("status") == "ready":
            print(f"devcluster ready: {state['server']}\nexport KUBECONFIG={state['kubeconfig']}")
            if not state.get("bare"):
                # Helm refuses to adopt objects it did not create: say so before an install is tried.
                print(
                    "our ServiceAccounts and RBAC (manifests/rbac) are installed, so the processes run as "
                    "them; to try helm install ./chart, start it with --bare"
                )
            if state.get("audit_log"):
                print(f"audit log: {state['audit_log']}")
            if state.get("real_nodes"):
                print(f"real nodes (kubelet, containerd, runc): {', '.join(state['real_nodes'])}")
            if state.get("jaeger_url"):
                url = state["jaeger_url"]
                print(f"jaeger UI/API: {url} (traces: {url}/api/traces?service=NAME)")
                print(f"export OTEL_EXPORTER_OTLP_ENDPOINT={state['otlp_endpoint']}")
            return 0
        if state.get("status") == "failed" or proc.poll() is not None:
            print(f"devcluster failed: {state.get('error', 'supervisor exited')}", file=sys.stderr)
            print(f"see {directory / 'logs'}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    proc.terminate()
    print(f"devcluster not ready after {UP_TIMEOUT_SECONDS}s; see {directory / 'logs'}", file=sys.stderr)
    return 1


def down(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    state = read_state(directory)
    if not state:
        print(f"no devcluster in {directory}")
        return 0
    pid = int(state["supervisor_pid"])
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT_SECONDS
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    # Components die with their supervisor (PDEATHSIG); make sure of it before reporting success.
    leftovers = [p for p in (state.get("components") or {}).values() if p and _alive(int(p))]
    for p in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(p), signal.SIGKILL)
    print(f"devcluster in {directory} stopped")
    return 0
