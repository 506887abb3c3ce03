"""``gpustack-worker demo``: the main job, end to end on a real local control plane.

1. start etcd, kube-apiserver, Kueue and nfd-master on 127.0.0.1 (built from Go modules on first use);
2. publish a simulated mixed GPU cluster (what NFD and the Device Manager would, stages 1–2);
3. run the node agent (``--all-nodes``) and the leader-elected controller as real processes, the
   controller serving its admission webhook, registered in the API server as the chart registers it;
4. wait until every simulated node carries what stage 3 publishes — the worker NodeFeature labels projected
   by nfd-master, the counting capacities, the fit labels — and print it;
5. wait until every queue of the stage-4 chain is Active in Kueue and TopologyReady, and print the
   flavors and queues with their stop policy, phase and capacity views.

With ``--keep`` everything stays up until Ctrl-C (the kubeconfig is printed for kubectl).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from gpustack_worker.api import keys
from gpustack_worker.cli import simulate_cmd
from gpustack_worker.devcluster import worker_webhooks
from gpustack_worker.devcluster.cluster import NFD_MASTER_NODE, DevCluster
from gpustack_worker.devcluster.procs import ManagedProcess, free_port

__all__ = ("run",)

CONVERGE_TIMEOUT_SECONDS = 120
_COUNTING = (".sliced.", ".partitioned.")


def _stage3_done(node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    if labels.get(keys.MANAGED) != "true" or not any(k.startswith(keys.GENERAL_PREFIX) for k in labels):
        return False
    pools = [k for k in capacity if k.endswith((keys.SLICED_SUFFIX, keys.PARTITIONED_SUFFIX))]
    counted = all(any(k.startswith(pool + ".") for k in capacity) for pool in pools)
    # Cards that serve the shared or sliced family also get their per-card fit label (after the 3 s window).
    fit_domains = {
        keys.SHARED_SUFFIX: keys.SHARED_FIT_PREFIX,
        keys.SLICED_SUFFIX: keys.SLICED_FIT_PREFIX,
    }
    fitted = all(
        any(label.startswith(domain) for label in labels)
        for suffix, domain in fit_domains.items()
        if any(k.endswith(suffix) for k in capacity)
    )
    return counted and fitted


def _summary(node: dict[str, Any]) -> list[str]:
    labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    shown = (keys.GENERAL_PREFIX, keys.FEATURE_PREFIX, keys.MANAGED, *keys.FIT_LABEL_DOMAINS)
    return [
        f"node {node['metadata']['name']}",
        *(f"  label    {k}={labels[k]}" for k in sorted(labels) if k.startswith(shown)),
        *(f"  capacity {k}={capacity[k]}" for k in sorted(capacity) if any(p in k for p in _COUNTING)),
    ]


_KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
_WORKER = "/apis/worker.gpustack.ai/v1alpha1"


def _condition(obj: dict[str, Any], type_: str) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return "?"


def _print_chain(api: Any, started: float) -> None:
    """Stage 4: wait until every operator queue is Active in Kueue and TopologyReady, then print the chain."""
    queues: list[dict[str, Any]] = []
    while time.monotonic() - started < CONVERGE_TIMEOUT_SECONDS:
        queues = api.request(
            "GET", f"{_KUEUE}/clusterqueues?labelSelector={keys.RESOURCE_TYPE}%3D{keys.TYPE_INSTANCE_TYPES}"
        ).json()["items"]
        ready = [q for q in queues if _condition(q, "Active") == _condition(q, keys.TOPOLOGY_READY) == "True"]
        if queues and len(ready) == len(queues):
            break
        time.sleep(1)
    print(f"\nstage 4 ({time.monotonic() - started:.1f}s): {len(queues)} queue(s)")
    flavors = api.request(
        "GET", f"{_KUEUE}/resourceflavors?labelSelector={keys.RESOURCE_TYPE}%3D{keys.TYPE_NODES}"
    ).json()["items"]
    for flavor in sorted(flavors, key=lambda f: f["metadata"]["name"]):
        labels = flavor["metadata"].get("labels") or {}
        capacity = next((v for k, v in labels.items() if k.endswith(".capacity")), "?")
        print(f"  flavor        {flavor['metadata']['name']}  capacity={capacity}")
    types = {t["metadata"]["name"]: t for t in api.request("GET", f"{_WORKER}/instancetypes").json()["items"]}
    for queue in sorted(queues, key=lambda q: q["metadata"]["name"]):
        name = queue["metadata"]["name"]
        status = (types.get(name) or {}).get("status") or {}
        cpu = status.get("cpu") or {}
        view = (
            status.get("acceleratorSummary")
            or f"cpu {cpu.get('onceMaxRequest', '?')}/{cpu.get('remaining', '?')}"
        )
        print(
            f"  queue         {name}  stopPolicy={queue['spec'].get('stopPolicy')} "
            f"Active={_condition(queue, 'Active')} TopologyReady={_condition(queue, keys.TOPOLOGY_READY)} "
            f"phase={status.get('phase')} EX/SH/SL/PT={view} entrance={status.get('entrance')}"
        )


def _print_jaeger(url: str) -> None:
    print(
        f"\ntraces in Jaeger: UI {url} (services gpustack-worker-agent, gpustack-worker-controller)\n"
        f"  API: {url}/api/traces?service=gpustack-worker-controller&limit=20"
    )


def _spawn(cluster: DevCluster, name: str, *args: str) -> ManagedProcess:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    if cluster.jaeger is not None:  # spans go to the demo's Jaeger over OTLP (runtime/telemetry.py)
        env.update(cluster.jaeger.otel_env(f"gpustack-worker-{name}"))
    proc = ManagedProcess(
        name, [sys.executable, "-m", "gpustack_worker", *args], cluster.dir / "logs" / f"{name}.log", env
    )
    proc.start()
    cluster.procs[name] = proc  # stopped with the cluster
    return proc


def _webhook_certs(cluster: DevCluster) -> Path:
    """The controller's webhook serving certificate: the local control plane's (its CA signs it for
    127.0.0.1), under the names the chart's mounted Secret uses."""
    assert cluster.pki is not None
    directory = cluster.dir / "webhook-certs"
    directory.mkdir(exist_ok=True)
    shutil.copyfile(cluster.pki.serving_cert, directory / "tls.crt")
    shutil.copyfile(cluster.pki.serving_key, directory / "tls.key")
    return directory


def run(args: argparse.Namespace) -> int:
    cluster = DevCluster(Path(args.dir), with_jaeger=True)
    try:
        cluster.start()
        scenario = args.scenario or "mixed-4"
        sim = argparse.Namespace(file=scenario, kubeconfig=str(cluster.kubeconfig))
        if asyncio.run(simulate_cmd.run(sim)) != 0:
            return 1
        _spawn(cluster, "agent", "agent", "--all-nodes", "--metrics-bind=127.0.0.1:0")
        certs = _webhook_certs(cluster)
        port = free_port()
        _spawn(
            cluster,
            "controller",
            "controller",
            "--metrics-bind=127.0.0.1:0",
            "--identity=demo",
            f"--webhook-bind=127.0.0.1:{port}",
            f"--webhook-cert-dir={certs}",
        )
        api = cluster.bootstrap()
        # As the chart does: TopologySources are validated by the controller's webhook (failurePolicy Fail).
        assert cluster.pki is not None
        worker_webhooks.register(api, f"https://127.0.0.1:{port}", cluster.pki.ca_cert.read_bytes())
        worker_webhooks.wait_served(api, timeout=CONVERGE_TIMEOUT_SECONDS)
        started = time.monotonic()
        nodes: list[dict[str, Any]] = []
        while time.monotonic() - started < CONVERGE_TIMEOUT_SECONDS:
            nodes = [
                n
                for n in api.request("GET", "/api/v1/nodes").json()["items"]
                if n["metadata"]["name"] != NFD_MASTER_NODE
            ]
            if nodes and all(_stage3_done(n) for n in nodes):
                break
            for name in ("agent", "controller"):
                if not cluster.procs[name].alive():
                    print(f"{name} exited:\n{cluster.procs[name].log_tail()}", file=sys.stderr)
                    return 1
            time.sleep(1)
        else:
            print(
                f"stage 3 did not converge in {CONVERGE_TIMEOUT_SECONDS}s; logs in {cluster.dir / 'logs'}",
                file=sys.stderr,
            )
            return 1
        print(f"stage 3 converged on {len(nodes)} nodes in {time.monotonic() - started:.1f}s\n")
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            print("\n".join(_summary(node)))
        _print_chain(api, started)
        lease = api.request(
            "GET", "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases/worker.gpustack.ai"
        )
        if lease.is_success:
            print(f"\ncontroller leader: {lease.json()['spec'].get('holderIdentity')}")
        if cluster.jaeger is not None:
            _print_jaeger(cluster.jaeger.ui_url)
        api.close()
        if args.keep:
            print(f"\nrunning; export KUBECONFIG={cluster.kubeconfig} — Ctrl-C to stop")
            while all(p.alive() for p in cluster.procs.values()):
                time.sleep(1)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()
