"""Node agent benchmarks: pure reconcile cost per node, and time to label N simulated nodes.

1. **Pure cost** — N synthetic nodes (the four mixed-4 node shapes, cloned) rendered exactly as the
   simulator writes them and frozen like the informer cache holds them; per node the adapters, the
   three ``desired`` functions, the runtime Applier's no-op check (``is_noop``) on each apply body and
   the stale-key scans, i.e. everything a reconcile does except I/O.
2. **Cluster** (unless ``--no-cluster``) — a fresh dev cluster, N simulated nodes applied and their
   Device Manager labels projected by nfd-master; then the API server's raw server-side-apply rate
   (a bare client, 8 in flight, a label on each Node; ``simulate_bench.raw_node_label_rate``); then one
   ``--all-nodes`` agent started in this process with the default settings (``--set GPUSTACK_X=V``
   seeds others): seconds until its caches synced and until its last write (converged: nothing
   queued or in progress, no write for longer than the fit window), its writes and requests, and the
   ratio *least time of its writes at the raw rate / its time to the last write* (1.0: as fast as the
   API server accepts writes from 8 concurrent clients).
3. **Quiet per-node agent** (``--quiet S``, default 60; 0 skips) — ``gpustack-worker agent
   --node-name`` as a process on one node of the converged fleet: CPU seconds over S quiet seconds,
   RSS and its high-water mark.

Prints measured numbers and ratios; never passes or fails. ``nox -s bench`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.apply import is_noop
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario

if TYPE_CHECKING:
    from gpustack_worker.simulate.scenario import NodeSpec

READY_SINCE = "2026-01-01T00:00:00Z"


def synthetic_nodes(count: int) -> list[NodeSpec]:
    """``count`` nodes cycling through the mixed-4 shapes, renamed ``<shape>-<i>``."""
    shapes = packaged_scenario("mixed-4").nodes
    return [
        shapes[i % len(shapes)].model_copy(update={"name": f"{shapes[i % len(shapes)].name}-{i:05d}"})
        for i in range(count)
    ]


def rendered(spec: NodeSpec) -> tuple[Any, Any | None]:
    """(Node, Devices) as the API would serve them, frozen like cached objects."""
    node = render.render_node(spec, READY_SINCE)
    node["metadata"]["uid"] = f"uid-{spec.name}"
    devices = render.render_devices(spec, f"uid-{spec.name}")
    if devices is not None:
        devices["status"] = (render.render_devices_status(spec) or {}).get("status", {})
    return freeze(node), (freeze(devices) if devices is not None else None)


def reconcile_pure(node: Any, devices: Any | None) -> int:
    """Everything one reconcile of all three outputs computes; returns the number of keys produced."""
    n = node_facts(node)
    d = devices_facts(devices) if devices is not None else None
    feature = nodefeature.desired(n, d, manual=False, mixed_on_node=True)
    is_noop(feature, None, nodefeature.FIELD_MANAGER)
    counting = capacity.desired(n, d, manual=False)
    is_noop(capacity.apply_body(n.name, counting), node, capacity.FIELD_MANAGER, "status")
    stale = capacity.stale(n.capacity, counting) | capacity.stale(n.allocatable, counting)
    labels = fit.desired(n, d, manual=False)
    is_noop(fit.apply_body(n.name, labels), node, fit.FIELD_MANAGER)
    stale |= set(fit.observed(n)) - set(labels)
    return len(feature["spec"]["labels"]) + len(counting) + len(labels) + len(stale)


def bench_pure(count: int, rounds: int) -> None:
    objs = [rendered(spec) for spec in synthetic_nodes(count)]
    per_round: list[float] = []
    produced = 0
    for _ in range(rounds):
        start = time.perf_counter()
        produced = sum(reconcile_pure(node, devices) for node, devices in objs)
        per_round.append(time.perf_counter() - start)
    best = min(per_round)
    accelerated = [(n, d) for n, d in objs if d is not None]
    cpu_only = [(n, d) for n, d in objs if d is None]

    def cost(sample: list[tuple[Any, Any | None]]) -> float:
        start = time.perf_counter()
        for _ in range(rounds):
            for node, devices in sample:
                reconcile_pure(node, devices)
        return (time.perf_counter() - start) / (rounds * max(1, len(sample)))

    acc_cost, cpu_cost = cost(accelerated), cost(cpu_only)
    print(f"pure reconcile, {count} nodes x {rounds} rounds ({produced} keys/labels per round)")
    print(
        f"  per node: best {best / count * 1e6:.1f} us, "
        f"median {statistics.median(per_round) / count * 1e6:.1f} us"
    )
    print(
        f"  accelerated node {acc_cost * 1e6:.1f} us, CPU-only node {cpu_cost * 1e6:.1f} us, "
        f"ratio {acc_cost / cpu_cost:.1f}x"
    )
    print(f"  all {count} nodes: {best * 1e3:.1f} ms ({count / best:,.0f} node-reconciles/s on one core)")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _memory_kib(pid: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def _idle(*controllers: Any) -> bool:
    """No key queued or being reconciled (a key waiting for a fit window may remain)."""
    return all(not len(c.queue) and not c.queue.processing for c in controllers)


async def quiet_per_node_agent(kubeconfig: Path, node: str, quiet: float) -> None:
    """A per-node agent process (the DaemonSet mode) on ``node`` of a converged fleet: its RSS and the
    CPU it spends over ``quiet`` seconds once started."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpustack_worker", "agent", "--node-name", node,
        "--kubeconfig", str(kubeconfig), "--metrics-bind", "127.0.0.1:0",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.sleep(15)  # start-up, cache sync, its first (no-op) reconciles
        cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
        await asyncio.sleep(quiet)
        cpu = _cpu_seconds(proc.pid) - cpu0
        took = time.perf_counter() - t0
        mem = _memory_kib(proc.pid)
        print(
            f"  per-node agent ({node}), quiet {took:.0f} s: CPU {cpu:.2f} s "
            f"({cpu / took * 100:.2f} % of a core), "
            f"RSS {mem.get('VmRSS', 0) / 1024:.0f} MiB (high-water {mem.get('VmHWM', 0) / 1024:.0f} MiB)"
        )
    finally:
        proc.terminate()
        await proc.wait()


async def bench_cluster(count: int, directory: Path, env: dict[str, str], quiet: float) -> None:
    from simulate_bench import RAW_CONCURRENCY, raw_node_label_rate

    from gpustack_worker.agent.controller import Agent
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.settings import SettingsSource
    from gpustack_worker.simulate.apply import apply_scenario
    from gpustack_worker.simulate.scenario import Scenario

    cluster = DevCluster(directory, log=lambda msg: print(f"  [devcluster] {msg}"))
    cluster.start()
    try:
        admin = await Client.connect(str(cluster.kubeconfig))
        specs = synthetic_nodes(count)
        start = time.perf_counter()
        await apply_scenario(admin, Scenario(nodes=specs))
        print(f"cluster: {count} simulated nodes applied in {time.perf_counter() - start:.1f} s")
        names = [s.name for s in specs]
        accelerated = {s.name for s in specs if s.accelerators}
        # nfd-master projects the Device Manager labels before the agent starts: the agent is measured
        # alone, on the state a restarted or newly installed agent finds.
        while True:
            nodes, _ = await admin.list(kinds.NODE)
            projected = sum(
                (n["metadata"].get("labels") or {}).get(keys.ACCELERATABLE) == "true"
                for n in nodes
                if n["metadata"]["name"] in accelerated
            )
            if projected == len(accelerated):
                break
            await asyncio.sleep(1)
        raw_writes, raw_s = await raw_node_label_rate(admin, names, "1")
        raw_rate = raw_writes / raw_s

        agent_client = await Client.connect(str(cluster.kubeconfig))
        settings = SettingsSource(agent_client, model=WorkerSettings, env=env)
        agent = Agent(agent_client, settings, node_name=None)
        controllers = (agent.nodefeature, agent.capacity, agent.fit)
        start = time.perf_counter()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        await agent.ready.wait()
        synced = time.perf_counter() - start
        # Converged: no key queued or in progress and no write for longer than the fit window.
        writes, last_write = agent_client.writes, synced
        settle = settings.current.fit_label_coalesce_seconds + 3
        while True:
            await asyncio.sleep(0.05)
            now = time.perf_counter() - start
            if agent_client.writes != writes:
                writes, last_write = agent_client.writes, now
            elif _idle(*controllers) and now - last_write > settle:
                break
            if now > 900:
                print("  gave up after 900 s")
                break
        # nfd-master's projection of the worker NodeFeatures (not the agent's writes; polled only now,
        # so the polling never competes with the agent above).
        while True:
            nodes, _ = await admin.list(kinds.NODE)
            managed = sum((n["metadata"].get("labels") or {}).get(keys.MANAGED) == "true" for n in nodes)
            if managed >= count or time.perf_counter() - start > 900:
                break
            await asyncio.sleep(0.5)
        projected_at = time.perf_counter() - start
        stop.set()
        await task
        requests = dict(agent_client.requests_by_method)
        nodes, _ = await admin.list(kinds.NODE)
        by_name = {n["metadata"]["name"]: n for n in nodes}
        counted = sum(
            any(".sliced." in k or ".partitioned." in k for k in by_name[n]["status"].get("capacity", {}))
            for n in accelerated
        )
        labelled = sum(
            any(".fit.gpustack.ai/" in k for k in (by_name[n]["metadata"].get("labels") or {}))
            for n in accelerated
        )
        workers = {c.name: c.workers for c in controllers}
        print(f"  agent --all-nodes, settings env {env or '{}'}: workers {workers}")
        print(f"  caches synced after {synced:.2f} s")
        print(f"  last write after {last_write:.2f} s ({writes} writes, {writes / count:.2f} per node)")
        print(f"  counting keys on {counted}/{len(accelerated)}, fit labels on {labelled}/{len(accelerated)}")
        print(f"  nfd-master projected managed=true on {managed}/{count} nodes by {projected_at:.1f} s")
        print(f"  agent requests: {requests}")
        print(f"  writes by field manager: {dict(agent.steps.writes)}")
        print(
            f"  raw SSA rate, Node label, {RAW_CONCURRENCY} in flight (bare client): {raw_rate:.0f} /s "
            f"({raw_writes} in {raw_s:.1f} s)"
        )
        print(
            f"  ratio: least time of the agent's writes at the raw rate / its time to the last write: "
            f"{writes / raw_rate:.1f} s / {last_write:.1f} s = {writes / raw_rate / last_write:.2f}"
        )
        await agent_client.close()
        if quiet > 0:
            await quiet_per_node_agent(cluster.kubeconfig, sorted(accelerated)[0], quiet)
        await admin.close()
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="pure-cost repetitions (default: %(default)s)")
    parser.add_argument("--no-cluster", action="store_true", help="skip the dev-cluster part")
    parser.add_argument(
        "--quiet", type=float, default=60, help="seconds a per-node agent is watched idle (0: skip)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="GPUSTACK_X=V",
        help="a settings environment seed for the --all-nodes agent (default: none, the defaults)",
    )
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.set)
    bench_pure(args.nodes, args.rounds)
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
            asyncio.run(bench_cluster(args.nodes, Path(tmp), env, args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
