"""Node agent benchmarks: pure reconcile cost per node, and time to label N simulated nodes.

1. **Pure cost** — N synthetic nodes (the four mixed-4 node shapes, cloned) rendered exactly as the
   simulator writes them and frozen like the informer cache holds them; per node the adapters, the
   three ``desired`` functions, the runtime Applier's no-op check (``is_noop``) on each apply body and
   the stale-key scans, i.e. everything a reconcile does except I/O.
2. **Cluster** (unless ``--no-cluster``) — a fresh dev cluster, N simulated nodes applied, then one
   ``--all-nodes`` agent started (runtime Manager, 8 workers per controller through the settings env
   seed ``GPUSTACK_CONTROLLER_WORKERS``): time until every NodeFeature is written, until nfd-master has
   projected ``gpustack.ai/managed`` onto every node, and until every accelerated node carries its
   counting keys; plus the agent's requests per node.

Prints measured numbers and ratios; never passes or fails. ``nox -s bench`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def bench_cluster(count: int, directory: Path) -> None:
    from gpustack_worker.agent.controller import Agent
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.settings import SettingsSource
    from gpustack_worker.simulate.apply import ApplyReport, apply_node

    cluster = DevCluster(directory, log=lambda msg: print(f"  [devcluster] {msg}"))
    cluster.start()
    try:
        admin = await Client.connect(str(cluster.kubeconfig))
        specs = synthetic_nodes(count)
        gate = asyncio.Semaphore(32)
        report = ApplyReport()

        async def one(spec: NodeSpec) -> None:
            async with gate:
                await apply_node(admin, spec, report)

        start = time.perf_counter()
        await asyncio.gather(*(one(s) for s in specs))
        print(f"cluster: {count} simulated nodes applied in {time.perf_counter() - start:.1f} s")

        agent_client = await Client.connect(str(cluster.kubeconfig))
        settings = SettingsSource(
            agent_client, model=WorkerSettings, env={"GPUSTACK_CONTROLLER_WORKERS": "8"}
        )
        agent = Agent(agent_client, settings, node_name=None)
        names = {s.name for s in specs}
        accelerated = {s.name for s in specs if s.accelerators}
        start = time.perf_counter()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        await agent.ready.wait()
        synced = time.perf_counter() - start
        features_at = projected_at = capacity_at = None
        while projected_at is None or capacity_at is None:
            await asyncio.sleep(0.5)
            now = time.perf_counter() - start
            if features_at is None and agent.steps.writes[nodefeature.FIELD_MANAGER] >= count:
                features_at = now
            nodes, _ = await admin.list(kinds.NODE)
            by_name = {n["metadata"]["name"]: n for n in nodes if n["metadata"]["name"] in names}
            managed = sum(
                (n["metadata"].get("labels") or {}).get(keys.MANAGED) == "true" for n in by_name.values()
            )
            counted = sum(
                any(".sliced." in k or ".partitioned." in k for k in by_name[n]["status"].get("capacity", {}))
                for n in accelerated
                if n in by_name
            )
            if projected_at is None and managed == count:
                projected_at = now
            if capacity_at is None and counted == len(accelerated):
                capacity_at = now
            if now > 600:
                print(
                    f"  gave up after 600 s: {managed}/{count} projected, "
                    f"{counted}/{len(accelerated)} counted"
                )
                break
        await asyncio.sleep(4)  # let the fit windows close before counting requests
        stop.set()
        await task
        requests = dict(agent_client.requests_by_method)
        print(f"  agent caches synced after {synced:.2f} s")
        print(f"  all NodeFeatures written after {features_at or float('nan'):.2f} s")
        print(
            f"  nfd-master projected managed=true on all {count} nodes "
            f"after {projected_at or float('nan'):.2f} s"
        )
        print(
            f"  counting keys on all {len(accelerated)} accelerated nodes "
            f"after {capacity_at or float('nan'):.2f} s"
        )
        print(f"  agent requests: {requests}; writes per node {agent_client.writes / count:.2f}")
        print(f"  writes by field manager: {dict(agent.steps.writes)}")
        await agent_client.close()
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
    args = parser.parse_args(argv)
    bench_pure(args.nodes, args.rounds)
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
            asyncio.run(bench_cluster(args.nodes, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
