"""The background owner of a ``devcluster up`` control plane.

``devcluster up`` starts this module as a detached process: it starts the cluster, records its state in
``DIR/state.json`` and then sleeps until SIGTERM/SIGINT, when it stops every component. Because each
component dies with its parent (``PR_SET_PDEATHSIG``), even a ``kill -9`` of this process leaves nothing
running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from gpustack_worker.devcluster.cluster import DevCluster

__all__ = ("STATE_FILE", "main", "read_state")

STATE_FILE = "state.json"


def read_state(directory: Path) -> dict[str, Any] | None:
    """The last state the supervisor of ``directory`` wrote, if any."""
    try:
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state


def _write_state(directory: Path, **state: Any) -> None:
    tmp = directory / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps({"supervisor_pid": os.getpid(), **state}, indent=2, sort_keys=True))
    tmp.replace(directory / STATE_FILE)


def main(argv: list[str]) -> int:
    """``python -m gpustack_worker.devcluster.supervise DIR [--audit-log FILE] [--jaeger] [--bare]
    [--kubelets N] [--real-node-names A,B]``."""
    parser = argparse.ArgumentParser(prog="gpustack_worker.devcluster.supervise")
    parser.add_argument("dir")
    parser.add_argument("--audit-log", default=None)
    parser.add_argument("--jaeger", action="store_true")
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--kubelets", type=int, default=0)
    parser.add_argument("--real-node-names", default="")
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    audit_log = Path(args.audit_log).resolve() if args.audit_log else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cluster = DevCluster(
        directory,
        log=lambda msg: print(msg, flush=True),
        audit_log=audit_log,
        with_jaeger=args.jaeger,
        with_worker_rbac=not args.bare,
        kubelets=args.kubelets,
        real_node_names=tuple(n for n in args.real_node_names.split(",") if n),
    )
    _write_state(directory, status="starting")
    try:
        cluster.start()
    except Exception as exc:  # report any start-up failure to the waiting CLI, then exit non-zero
        traceback.print_exc()
        _write_state(directory, status="failed", error=f"{type(exc).__name__}: {exc}")
        return 1
    _write_state(
        directory,
        status="ready",
        kubeconfig=str(cluster.kubeconfig),
        server=cluster.server,
        audit_log=str(cluster.audit_log) if cluster.audit_log else None,
        jaeger_url=cluster.jaeger_url,
        bare=args.bare,
        otlp_endpoint=cluster.otlp_endpoint,
        components={name: proc.pid for name, proc in cluster.all_processes().items()},
        real_nodes=cluster.real_nodes.names if cluster.real_nodes else [],
    )
    while not stop.wait(1.0):
        dead = [name for name, proc in cluster.all_processes().items() if not proc.alive()]
        if dead:
            print(f"component(s) exited: {dead}; stopping the cluster", flush=True)
            break
    cluster.stop()
    _write_state(directory, status="stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
