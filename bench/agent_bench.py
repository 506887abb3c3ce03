"""Node agent benchmarks: pure reconcile cost per node, and time to label N simulated nodes.

1. **Pure cost** — N synthetic nodes (the four mixed-4 node shapes, cloned) rendered exactly as the
   simulator writes them and frozen like the informer cache holds them; per node the adapters, the
   three ``desired`` functions, the runtime Applier's no-op check (``is_noop``) on each apply body and
   the stale-key scans, i.e. everything a reconcile does except I/O.
2. **Cluster** (unless ``--no-cluster``) — a fresh dev cluster, N simulated nodes applied and their
   Device Manager labels projected by nfd-master; then the API server's raw server-side-apply rate
   (a bare client, 8 in flight, a label on each Node; ``simulate_bench.raw_node_label_rate``; measured
   again after the agent and nfd-master are done and before the replay below, the ratios use the
   mean); then one ``--all-nodes`` agent started in this process with the default settings
   (``--set GPUSTACK_X=V`` seeds others) and the process's log level: seconds until its caches synced
   and until its last write (nothing queued or in progress, no write for longer than the fit window),
   its writes, requests and reconciles per controller, CPU seconds of the agent and of every cluster
   process (until its last write, with how many of the machine's cores were busy meanwhile, and until it
   settled), and the writes per 5 s of the agent and of nfd-master from the API server's audit log.
   Two ratios (1.0: as fast as the API server accepts writes from 8 concurrent clients):

   - **stage 3 converged** (``ratio``): the needed writes — the agent's, plus nfd-master's Node
     updates that project its NodeFeatures (``managed=true``, the capacity labels: the chain reads
     them on the Node, so stage 3 is not done before them) — at the raw rate, divided by the time
     until the last of them;
   - **the agent alone** (``agent_ratio``): its writes at the raw rate / its time to its last write.
   - **the agent against its own writes** (``replay_ratio``): the agent's applies are recorded and sent
     again by a bare client, 8 in flight, to the same objects under another field manager
     (``bench/replay.py``): the same NodeFeatures, Node status and Node labels, each a real write (a
     NodeFeature is not a one-label Node apply); the agent's writes at that rate / its time to its last
     write. Context only: a second manager's update can cost the server more than the agent's own
     first write (its NodeFeature creates), so ``agent_ratio`` stays the reference.

   ``--nfd-api-parallelism N`` starts nfd-master with that many Node updaters (default: NFD's and the
   Helm chart's, 10; each has its own client-go client at the default 5 QPS, and a Node update is a
   GET and a PATCH). ``--profile FILE`` runs the agent under cProfile (CPU time, not wall: the API
   server shares the cores).
3. **Quiet per-node agent** (``--quiet S``, default 60; 0 skips) — ``gpustack-worker agent
   --node-name`` as a process on one node of the converged fleet: CPU seconds over S quiet seconds,
   RSS and its high-water mark.

``--json PATH`` writes ``{"bench": "agent", "nodes": N, "figures": {...}}`` (ratios, raw rate, times,
writes, CPU, RSS). Prints measured numbers and ratios; never passes or fails. ``nox -s bench`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
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
    from collections.abc import Iterable

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


#: User-Agents the audit log tells apart (the agent's, nfd-master's: client-go names it after the binary).
AGENT_UA = "gpustack-worker-agent/bench"
NFD_MASTER_UA = "nfd-master/"


def _process_cpu(cluster: Any) -> dict[str, float]:
    """CPU seconds spent so far by this process (the in-process agent) and by each cluster process."""
    found = {"bench": time.process_time()}
    for name, proc in cluster.procs.items():
        if proc.pid is not None:
            found[name] = _cpu_seconds(proc.pid)
    return found


def _timeline(events: list[Any], start: datetime.datetime, step: float) -> list[collections.Counter[str]]:
    """Writes per ``step`` seconds after ``start``, by resource path."""
    buckets: list[collections.Counter[str]] = []
    for e in events:
        i = max(0, int((e.received - start).total_seconds() // step))
        while len(buckets) <= i:
            buckets.append(collections.Counter())
        buckets[i][e.resource_path] += 1
    return buckets


async def quiet_per_node_agent(kubeconfig: Path, node: str, quiet: float) -> dict[str, float]:
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
    finally:
        proc.terminate()
        await proc.wait()
    figures = {
        "quiet_seconds": round(took, 1),
        "quiet_cpu_seconds": round(cpu, 3),
        "quiet_cpu_percent": round(cpu / took * 100, 3),
        "quiet_rss_mib": round(mem.get("VmRSS", 0) / 1024, 1),
        "quiet_rss_high_water_mib": round(mem.get("VmHWM", 0) / 1024, 1),
    }
    print(
        f"  per-node agent ({node}), quiet {took:.0f} s: CPU {cpu:.2f} s "
        f"({figures['quiet_cpu_percent']:.2f} % of a core), "
        f"RSS {figures['quiet_rss_mib']:.0f} MiB (high-water {figures['quiet_rss_high_water_mib']:.0f} MiB)"
    )
    return figures


async def bench_cluster(
    count: int,
    directory: Path,
    env: dict[str, str],
    quiet: float,
    profile: Path | None,
    nfd_api_parallelism: int | None,
) -> dict[str, Any]:
    from replay import WriteRecorder, replay_rate
    from simulate_bench import RAW_CONCURRENCY, raw_node_label_rate

    from gpustack_worker.agent.controller import Agent
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.devcluster.audit import AuditLog
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.settings import SettingsSource
    from gpustack_worker.runtime.telemetry import configure_logging
    from gpustack_worker.simulate.apply import apply_scenario
    from gpustack_worker.simulate.scenario import Scenario

    audit_path = directory / "audit.log"
    # Passed only when set: the bench also runs over older trees (before/after) with today's defaults.
    extra = {"nfd_api_parallelism": nfd_api_parallelism} if nfd_api_parallelism else {}
    cluster = DevCluster(
        directory, audit_log=audit_path, log=lambda msg: print(f"  [devcluster] {msg}"), **extra
    )
    cluster.start()
    audit = AuditLog(audit_path)
    figures: dict[str, Any] = {}
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
        raw_cpu0 = time.process_time()
        raw_writes, raw_s = await raw_node_label_rate(admin, names, "1")
        raw_cpu = time.process_time() - raw_cpu0
        raw_before = raw_writes / raw_s

        agent_client = await Client.connect(str(cluster.kubeconfig), user_agent=AGENT_UA)
        settings = SettingsSource(agent_client, model=WorkerSettings, env=env)
        configure_logging(settings.current.log_level)  # as the agent process does (cli/process.py)
        recorder = WriteRecorder(agent_client)  # keeps every apply for the replay below
        agent = Agent(recorder, settings, node_name=None)  # type: ignore[arg-type]  # duck-typed Client
        controllers = (agent.nodefeature, agent.capacity, agent.fit)
        profiler = None
        if profile is not None:
            import cProfile

            profiler = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
            profiler.enable()
        cpu0 = _process_cpu(cluster)
        started_at = datetime.datetime.now(datetime.UTC)
        start = time.perf_counter()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        await agent.ready.wait()
        synced = time.perf_counter() - start
        # Converged: no key queued or in progress and no write for longer than the fit window.
        writes, last_write = agent_client.writes, synced
        settle = settings.current.fit_label_coalesce_seconds + 3
        cpu_at_last_write = cpu0
        while True:
            await asyncio.sleep(0.05)
            now = time.perf_counter() - start
            if agent_client.writes != writes:
                writes, last_write = agent_client.writes, now
                cpu_at_last_write = _process_cpu(cluster)
            elif _idle(*controllers) and now - last_write > settle:
                break
            if now > 900:
                print("  gave up after 900 s")
                break
        cpu1 = _process_cpu(cluster)
        reconciles = reconcile_counts(c.name for c in controllers)
        if profiler is not None:
            profiler.disable()
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
        # The raw rate again once the agent and nfd-master are done — on the Nodes as they left them,
        # before the replay below adds its own field manager to every one: the machine's load moves within
        # a run, and the ratios divide by the mean of the two.
        raw_writes_after, raw_s_after = await raw_node_label_rate(admin, names, "2")
        raw_after = raw_writes_after / raw_s_after
        raw_rate = (raw_before + raw_after) / 2
        # The agent's own writes sent again by a bare client (bench/replay.py).
        replayed, replay_s = await replay_rate(admin, recorder.applies, RAW_CONCURRENCY)
        replay = replayed / replay_s
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
        # The server's side of the same window (audit log): the agent's writes and nfd-master's. nfd-master
        # projects each worker NodeFeature onto its Node (managed=true, the capacity labels): stage 3 is
        # converged once those Node writes are done too, so they are needed writes.
        agent_writes = audit.writes(AGENT_UA, started_at)
        nfd_writes = [e for e in audit.writes(NFD_MASTER_UA, started_at) if e.resource != "leases"]
        nfd_first = min((e.received for e in nfd_writes), default=started_at)
        nfd_last = max((e.received for e in nfd_writes), default=started_at)
        nfd_done = (nfd_last - started_at).total_seconds()
        nfd_span = max((nfd_last - nfd_first).total_seconds(), 1e-9)
        converged = max(last_write, nfd_done)
        needed = writes + len(nfd_writes)
        workers = {c.name: c.workers for c in controllers}
        cpu = {k: cpu1[k] - cpu0[k] for k in cpu1 if k in cpu0}
        # The same until the agent's last write: how busy the machine's two cores were while it wrote.
        cpu_window = {k: cpu_at_last_write[k] - cpu0[k] for k in cpu_at_last_write if k in cpu0}
        busy_cores = sum(cpu_window.values()) / max(last_write, 1e-9)
        print(f"  agent --all-nodes, settings env {env or '{}'}: workers {workers}")
        print(f"  caches synced after {synced:.2f} s")
        print(f"  last write after {last_write:.2f} s ({writes} writes, {writes / count:.2f} per node)")
        print(f"  counting keys on {counted}/{len(accelerated)}, fit labels on {labelled}/{len(accelerated)}")
        print(f"  nfd-master projected managed=true on {managed}/{count} nodes by {projected_at:.1f} s")
        print(f"  agent requests: {requests}")
        print(
            f"  reconciles until the last write + settle: {reconciles} "
            f"({sum(reconciles.values()) / max(1, writes):.2f} per write)"
        )
        print(f"  writes by field manager: {dict(agent.steps.writes)}")
        print(f"  agent writes (audit log): {dict(by_resource(agent_writes))}")
        print(
            f"  nfd-master writes (audit log, after the agent started): {dict(by_resource(nfd_writes))}, "
            f"from {(nfd_first - started_at).total_seconds():.1f} s to {nfd_done:.1f} s "
            f"({len(nfd_writes) / nfd_span:.0f} /s; "
            f"-nfd-api-parallelism {nfd_api_parallelism or 'default (10)'})"
        )
        print(
            "  CPU seconds from start to the agent's last write + settle: "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
        )
        print(
            "  CPU seconds from start to the agent's last write: "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu_window.items())
            + f" ({busy_cores:.2f} cores busy on average; the machine has {os.cpu_count()})"
        )
        print(
            f"  client CPU per write: agent {cpu.get('bench', 0.0) / max(1, writes) * 1e3:.1f} ms "
            f"(events and reconciles included), raw bare client {raw_cpu / raw_writes * 1e3:.1f} ms"
        )
        step = 5.0
        agent_tl = _timeline(agent_writes, started_at, step)
        nfd_tl = _timeline(nfd_writes, started_at, step)
        print(f"  writes per {step:.0f} s (agent | nfd-master):")
        for i in range(max(len(agent_tl), len(nfd_tl))):
            a = agent_tl[i] if i < len(agent_tl) else collections.Counter()
            n = nfd_tl[i] if i < len(nfd_tl) else collections.Counter()
            print(f"    {i * step:5.0f} s  {dict(a)}  |  {dict(n)}")
        print(
            f"  raw SSA rate, Node label, {RAW_CONCURRENCY} in flight (bare client): before the agent "
            f"{raw_before:.0f} /s ({raw_writes} in {raw_s:.1f} s), after it {raw_after:.0f} /s "
            f"({raw_writes_after} in {raw_s_after:.1f} s), mean {raw_rate:.0f} /s"
        )
        agent_ratio = writes / raw_rate / last_write
        replay_ratio = writes / replay / last_write
        ratio = needed / raw_rate / converged
        print(
            f"  ratio, stage 3 converged (the agent's writes + nfd-master's projection of its NodeFeatures, "
            f"at the raw rate / time until the last of them): {writes} + {len(nfd_writes)} = {needed} "
            f"writes, {needed / raw_rate:.1f} s / {converged:.1f} s = {ratio:.2f}"
        )
        print(
            f"  ratio, the agent's writes alone (at the raw rate / its time to the last write): "
            f"{writes / raw_rate:.1f} s / {last_write:.1f} s = {agent_ratio:.2f}"
        )
        print(
            f"  the agent's applies by kind {recorder.by_kind()}; sent again by a bare client, "
            f"{RAW_CONCURRENCY} in flight: {replay:.0f} /s ({replayed} in {replay_s:.1f} s)"
        )
        print(
            f"  ratio, the agent's writes at the rate of the same writes from a bare client / its time to "
            f"the last write: {writes / replay:.1f} s / {last_write:.1f} s = {replay_ratio:.2f}"
        )
        figures.update(
            {
                "raw_rate_per_s": round(raw_rate, 1),
                "raw_rate_before_per_s": round(raw_before, 1),
                "raw_rate_after_per_s": round(raw_after, 1),
                "caches_synced_s": round(synced, 2),
                "last_write_s": round(last_write, 2),
                "agent_writes": writes,
                "agent_reconciles": sum(reconciles.values()),
                "nfd_master_writes": len(nfd_writes),
                "nfd_master_last_write_s": round(nfd_done, 2),
                "nfd_master_rate_per_s": round(len(nfd_writes) / nfd_span, 1),
                "nfd_api_parallelism": nfd_api_parallelism or 10,
                "needed_writes": needed,
                "converged_s": round(converged, 2),
                "managed_projected_s": round(projected_at, 1),
                "agent_cpu_s": round(cpu.get("bench", 0.0), 2),
                "agent_cpu_ms_per_write": round(cpu.get("bench", 0.0) / max(1, writes) * 1e3, 2),
                "raw_cpu_ms_per_write": round(raw_cpu / raw_writes * 1e3, 2),
                "apiserver_cpu_s": round(cpu.get("kube-apiserver", 0.0), 1),
                "agent_cpu_to_last_write_s": round(cpu_window.get("bench", 0.0), 2),
                "cores_busy_to_last_write": round(busy_cores, 2),
                "ratio": round(ratio, 3),
                "agent_ratio": round(agent_ratio, 3),
                "replay_rate_per_s": round(replay, 1),
                "replay_ratio": round(replay_ratio, 3),
            }
        )
        if profiler is not None and profile is not None:
            import pstats

            profiler.dump_stats(str(profile))
            pstats.Stats(str(profile)).sort_stats("cumulative").print_stats(40)
            pstats.Stats(str(profile)).sort_stats("tottime").print_stats(30)
        await agent_client.close()
        if quiet > 0:
            figures.update(await quiet_per_node_agent(cluster.kubeconfig, sorted(accelerated)[0], quiet))
        await admin.close()
    finally:
        cluster.stop()
    return figures


def reconcile_counts(names: Iterable[str]) -> dict[str, int]:
    """Reconciles run so far by each named controller of this process (``controller_runtime_reconcile_total``
    over every result)."""
    from gpustack_worker.runtime.metrics import RECONCILE_TOTAL

    wanted = set(names)
    found: collections.Counter[str] = collections.Counter()
    for metric in RECONCILE_TOTAL.collect():
        for sample in metric.samples:
            ctl = sample.labels.get("controller", "")
            if sample.name.endswith("_total") and ctl in wanted:
                found[ctl] += int(sample.value)
    return dict(found)


def by_resource(events: list[Any]) -> collections.Counter[str]:
    return collections.Counter(f"{e.resource_path} {e.verb}" for e in events)


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
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the agent, stats to FILE")
    parser.add_argument(
        "--nfd-api-parallelism",
        type=int,
        default=None,
        help="nfd-master's concurrent Node updaters (default: NFD's and the Helm chart's, 10)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON to PATH")
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
    figures: dict[str, Any] = {}
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
            figures = asyncio.run(
                bench_cluster(
                    args.nodes, Path(tmp), env, args.quiet, args.profile, args.nfd_api_parallelism
                )
            )
    if args.json is not None:
        doc = {"bench": "agent", "nodes": args.nodes, "figures": figures}
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
