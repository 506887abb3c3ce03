"""``simulate apply`` benchmark: a synthetic fleet written to a fresh dev cluster, next to the API
server's raw server-side-apply rate measured in the same run.

1. **Cold** — ``apply_scenario`` of N synthetic nodes (default 5,000; :func:`synthetic`, the realistic
   mix) on an empty cluster, with the simulator's own settings (``simulate-apply-concurrency``):
   seconds, write requests (POST/PATCH/DELETE) and every request by method, writes per second; this
   process's CPU, the writes in flight on average and the mean seconds per write of each kind (when
   the writes in flight are close to the concurrency, the simulator is waiting on the server).
2. **Raw** — a bare client's server-side apply at 8 requests in flight: one label applied to each of
   the same Nodes under another field manager (a real change, so a real write), once right after the
   cold run and once after the warm one; the mean is the rate the ratio is taken against.
3. **Replay** — the cold apply's own writes sent again by a bare client, 8 in flight, to the same objects
   under another field manager (``bench/replay.py``): whole Nodes and their status, `Devices` and their
   status, NodeFeatures — each a real write of the same body, but an update by a second manager
   (context for the ratio below, not its reference).
4. **Warm** — the same file applied again: every apply a no-op on the server.

The ratio is the simulator's writes per second over the one-label raw rate (1.0: as fast as the API
server takes a bare client's writes from 8 concurrent requests). The replay's ratio is printed next to
it as context, not as the reference: a second manager's apply to an existing object costs the server
more than the simulator's first write of it (a create, or an apply into an empty managedFields entry),
so the replay is an upper bound of the writes' cost (measured 2026-12-04 at 5,000 Nodes: 176 /s for the
replay against the simulator's own 258 /s). Prints measured numbers;
never passes or fails. ``nox -s bench`` runs it; ``--nodes N`` changes the size, ``--json PATH`` also
writes the figures for ``bench/summary.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack_worker.api import kinds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import WriteRecorder, replay_rate
from summary import write_json  # bench/ is not a package: its own directory on the path

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

#: Requests in flight of the raw-rate client (the issue's reference concurrency).
RAW_CONCURRENCY = 8
RAW_MANAGER = "gpustack-bench-raw"
RAW_LABEL = "bench.gpustack.ai/raw"


async def raw_node_label_rate(
    client: Client, names: list[str], value: str, concurrency: int = RAW_CONCURRENCY
) -> tuple[int, float]:
    """Server-side apply of ``RAW_LABEL=value`` on each Node in ``names``, ``concurrency`` in flight;
    returns (writes, seconds)."""
    todo = iter(names)

    async def worker() -> None:
        for name in todo:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {RAW_LABEL: value}},
            }
            await client.apply(kinds.NODE, body, field_manager=RAW_MANAGER, force=True)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(names), time.perf_counter() - start


class TimedWrites:
    """The client as ``apply_scenario`` uses it, timing each write by kind: the sum of the writes'
    seconds over the wall time is how many were in flight on average (the simulator's concurrency is
    the limit when it is close to ``simulate-apply-concurrency``; then the server's time per write is)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.seconds: collections.Counter[str] = collections.Counter()
        self.count: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def _timed(self, key: str, call: Awaitable[Any]) -> Any:
        start = time.perf_counter()
        try:
            return await call
        finally:
            self.seconds[key] += time.perf_counter() - start
            self.count[key] += 1

    async def create(self, resource: Resource, body: dict[str, Any], *args: Any, **kw: Any) -> Any:
        return await self._timed(f"{resource.kind} create", self._client.create(resource, body, *args, **kw))

    async def apply(self, resource: Resource, body: dict[str, Any], **kw: Any) -> Any:
        sub = f"/{kw['subresource']}" if kw.get("subresource") else ""
        return await self._timed(f"{resource.kind}{sub} apply", self._client.apply(resource, body, **kw))

    async def patch(self, resource: Resource, *args: Any, **kw: Any) -> Any:
        return await self._timed(f"{resource.kind} patch", self._client.patch(resource, *args, **kw))

    async def delete(self, resource: Resource, *args: Any, **kw: Any) -> Any:
        return await self._timed(f"{resource.kind} delete", self._client.delete(resource, *args, **kw))


def _rate(measured: tuple[int, float]) -> str:
    writes, seconds = measured
    return f"{writes / seconds:.0f} /s ({writes} in {seconds:.1f} s)"


async def bench(count: int, seed: int, directory: Path, json_path: str | None = None) -> None:
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.simulate.apply import DEFAULT_CONCURRENCY, apply_scenario
    from gpustack_worker.simulate.synthetic import synthetic

    scenario = synthetic(count, seed=seed)
    width = DEFAULT_CONCURRENCY
    accelerated = sum(bool(spec.accelerators) for spec in scenario.nodes)
    cluster = DevCluster(directory, log=lambda msg: print(f"  [devcluster] {msg}"))
    cluster.start()
    try:
        client = await Client.connect(str(cluster.kubeconfig))
        names = [spec.name for spec in scenario.nodes]

        before = dict(client.requests_by_method)
        recorder = WriteRecorder(client)
        timed = TimedWrites(recorder)
        start = time.perf_counter()
        cpu_start = time.process_time()
        await apply_scenario(timed, scenario)  # type: ignore[arg-type]  # duck-typed Client
        cold_s = time.perf_counter() - start
        cold_cpu = time.process_time() - cpu_start
        in_flight = sum(timed.seconds.values()) / cold_s
        latency = {k: timed.seconds[k] / timed.count[k] for k in sorted(timed.count)}
        cold = {m: n - before.get(m, 0) for m, n in client.requests_by_method.items()}
        cold_writes = sum(n for m, n in cold.items() if m in ("POST", "PUT", "PATCH", "DELETE"))

        raw1 = await raw_node_label_rate(client, names, "1")
        replayed, replay_s = await replay_rate(client, recorder.applies, RAW_CONCURRENCY)
        replay = replayed / replay_s

        before = dict(client.requests_by_method)
        timed_warm = TimedWrites(client)
        start = time.perf_counter()
        await apply_scenario(timed_warm, scenario)  # type: ignore[arg-type]  # duck-typed Client
        warm_s = time.perf_counter() - start
        warm_latency = {k: timed_warm.seconds[k] / timed_warm.count[k] for k in sorted(timed_warm.count)}
        warm = {m: n - before.get(m, 0) for m, n in client.requests_by_method.items()}

        raw2 = await raw_node_label_rate(client, names, "2")
        raw_rate = (raw1[0] + raw2[0]) / (raw1[1] + raw2[1])
        raw_ms = RAW_CONCURRENCY * raw1[1] / raw1[0] * 1e3
        cold_rate = cold_writes / cold_s

        print(f"simulate apply: {count} synthetic nodes ({accelerated} accelerated), seed {seed}")
        rows: list[tuple[str, Any]] = [
            ("cold apply", f"{cold_s:.1f} s"),
            ("cold requests by method", dict(sorted(cold.items()))),
            ("cold writes", f"{cold_writes} ({cold_writes / count:.2f} per node)"),
            ("cold write rate", f"{cold_rate:.0f} /s"),
            ("this process's CPU in the cold apply", f"{cold_cpu:.1f} s ({cold_cpu / cold_s:.0%} of a core)"),
            ("cold writes in flight on average", f"{in_flight:.2f} (simulate-apply-concurrency {width})"),
            (
                "cold mean seconds per write, by kind",
                ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in latency.items()),
            ),
            (
                f"raw label SSA mean seconds per write ({RAW_CONCURRENCY} / rate, after cold)",
                f"{raw_ms:.0f} ms",
            ),
            (f"raw SSA rate, Node label, {RAW_CONCURRENCY} in flight (after cold)", _rate(raw1)),
            (f"raw SSA rate, Node label, {RAW_CONCURRENCY} in flight (after warm)", _rate(raw2)),
            (
                f"the cold writes sent again by a bare client, {RAW_CONCURRENCY} in flight",
                f"{replay:.0f} /s ({replayed} in {replay_s:.1f} s; {recorder.by_kind()})",
            ),
            ("ratio: cold write rate / the same writes' replay rate", f"{cold_rate / replay:.2f}"),
            ("ratio: cold write rate / raw label rate (mean of both)", f"{cold_rate / raw_rate:.2f}"),
            (
                "ratio against each raw rate (after cold / after warm)",
                f"{cold_rate * raw1[1] / raw1[0]:.2f} / {cold_rate * raw2[1] / raw2[0]:.2f}",
            ),
            ("least time of the cold writes at the raw rate", f"{cold_writes / raw_rate:.1f} s"),
            ("warm re-apply (every apply a no-op)", f"{warm_s:.1f} s"),
            ("warm requests by method", dict(sorted(warm.items()))),
            (
                "warm mean seconds per (no-op) write, by kind",
                ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in warm_latency.items()),
            ),
        ]
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            print(f"  {label:<{width}}  {value}")
        if json_path is not None:
            write_json(
                json_path,
                "simulate",
                count,
                {
                    "accelerated nodes": accelerated,
                    "cold apply, s": cold_s,
                    "cold writes": cold_writes,
                    "cold reads (GET, LIST)": cold.get("GET", 0),
                    "cold write rate, /s": cold_rate,
                    "cold apply: this process's CPU, s": cold_cpu,
                    "cold apply: writes in flight on average": in_flight,
                    **{f"cold apply: mean ms per {k}": v * 1e3 for k, v in latency.items()},
                    "raw label SSA: mean ms per write (after cold)": raw_ms,
                    f"raw SSA rate, {RAW_CONCURRENCY} in flight, /s (mean)": raw_rate,
                    "raw SSA rate after cold, /s": raw1[0] / raw1[1],
                    "raw SSA rate after warm, /s": raw2[0] / raw2[1],
                    "ratio: cold write rate / raw": cold_rate / raw_rate,
                    f"replay of the cold writes, {RAW_CONCURRENCY} in flight, /s": replay,
                    "ratio: cold write rate / replay rate": cold_rate / replay,
                    "ratio against the raw rate after cold": cold_rate * raw1[1] / raw1[0],
                    "ratio against the raw rate after warm": cold_rate * raw2[1] / raw2[0],
                    "least time of the cold writes at the raw rate, s": cold_writes / raw_rate,
                    "warm re-apply, s": warm_s,
                    **{f"warm re-apply: mean ms per {k}": v * 1e3 for k, v in warm_latency.items()},
                    "warm writes (no-op applies)": sum(
                        n for m, n in warm.items() if m in ("POST", "PUT", "PATCH", "DELETE")
                    ),
                },
            )
        await client.close()
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000, help="synthetic nodes (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="fleet seed (default: %(default)s)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="simulate-bench-") as tmp:
        asyncio.run(bench(args.nodes, args.seed, Path(tmp), args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
