"""Relist benchmark: how long a Node relist holds the event loop, and how much memory it needs on the way.

Run with ``python bench/relist_bench.py [SIZES...] [--nodes N] [--json PATH]`` (default 5000 20000; or
``nox -s bench``). It prints
what it measured in this one run; there is no pass/fail.

The API server is a local HTTP server in a process of its own (so its CPU and memory are not counted)
serving API-shaped, paged ``NodeList`` JSON (``limit``/``continue``, a list resourceVersion) of the
bench-shaped GPU Nodes of ``runtime_bench.py`` (~20 KiB of JSON each). It is not a kube-apiserver (one
with 20,000 Nodes is slow to fill); what is measured is ours and real: the :class:`Client` over kr8s'
HTTP session, and :meth:`Informer._list` (fetch, decode, ingest transform, ``Store.replace``) exactly as
a relist runs it.

Each size is measured in a fresh subprocess, which

* lists once into an empty cache (the start-up list), then relists with the cache full (a relist after a
  watch failure: the old cache is alive while the new list comes in);
* runs the loop-lag monitor (:mod:`gpustack_worker.runtime.looplag`, waking every 5 ms here): the longest
  lag during a list is the longest stretch the loop could not answer a lease renewal, a webhook or a probe;
* reads the peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` before each list) against the RSS
  before the list: the transient memory of a list, the figure the chart's memory limit must cover.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = (5_000, 20_000)
PROBE_S = 0.005
OUR_MANAGER = "gpustack-worker/node-agent"


# -- the API server (own process) -----------------------------------------------------------------------


def _items(nodes: int) -> list[bytes]:
    """Each Node's JSON as the server puts it inside a List (without apiVersion/kind)."""
    from runtime_bench import synthetic_node

    out: list[bytes] = []
    for i in range(nodes):
        item = synthetic_node(i)
        del item["apiVersion"], item["kind"]
        out.append(orjson.dumps(item))
    return out


def _page(items: list[bytes], start: int, limit: int) -> bytes:
    """The NodeList page of ``limit`` items from ``start``, with a continue token unless it is the last."""
    end = min(start + limit, len(items)) if limit > 0 else len(items)
    meta = b'{"resourceVersion":"999999"' + (b',"continue":"c%d"}' % end if end < len(items) else b"}")
    return b'{"kind":"NodeList","apiVersion":"v1","metadata":' + meta + b',"items":[' + b",".join(
        items[start:end]
    ) + b"]}"


def serve(nodes: int, ready: Any) -> None:
    """A minimal HTTP/1.1 API server for ``GET /api/v1/nodes`` (keep-alive, Content-Length)."""
    items = _items(nodes)
    wire = sum(len(i) for i in items)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                query = parse_qs(urlsplit(target).query)
                if target.startswith("/version"):
                    body = b'{"major": "1", "minor": "35", "gitVersion": "v1.35.4"}'
                else:
                    start = int(query.get("continue", ["c0"])[0][1:])
                    body = _page(items, start, int(query.get("limit", ["0"])[0]))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.send((server.sockets[0].getsockname()[1], wire))
        await server.serve_forever()

    asyncio.run(main())


# -- the measured process ---------------------------------------------------------------------------------


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


async def measure(port: int, nodes: int) -> dict[str, float]:
    from gpustack_worker.api.kinds import NODE
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.looplag import LoopLagMonitor
    from gpustack_worker.runtime.transform import make_transform

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
            f"clusters: [{{name: bench, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: bench, user: {}}]\n"
            "contexts: [{name: bench, context: {cluster: bench, user: bench}}]\n"
        )
    client = await Client.connect(f.name)
    os.unlink(f.name)
    informer = Informer(client, NODE, transform=make_transform([OUR_MANAGER]))
    probe = LoopLagMonitor(PROBE_S)  # the process's own loop-lag monitor, sampling more often
    task = asyncio.ensure_future(probe.run())
    out: dict[str, float] = {}
    await asyncio.sleep(0.05)
    gc.collect()
    out["base_b"] = _status("VmRSS")
    for phase in ("initial", "relist"):
        gc.collect()
        before = _status("VmRSS")
        _reset_peak()
        probe.worst = 0.0
        start = time.perf_counter()
        await informer._list(phase if phase == "initial" else "error")
        out[f"{phase}_s"] = time.perf_counter() - start
        await asyncio.sleep(0.02)  # the probe's last lateness
        out[f"{phase}_stall_s"] = probe.worst
        out[f"{phase}_peak_b"] = _status("VmHWM") - before
        out[f"{phase}_hwm_b"] = _status("VmHWM")
        gc.collect()
        out[f"{phase}_after_b"] = _status("VmRSS") - before
    assert len(informer.store) == nodes, len(informer.store)
    task.cancel()
    await client.close()
    return out


def child(port: int, nodes: int) -> None:
    print(orjson.dumps(asyncio.run(measure(port, nodes))).decode())


# -- orchestration -----------------------------------------------------------------------------------------


def run(nodes: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    server = ctx.Process(target=serve, args=(nodes, theirs), daemon=True)
    server.start()
    port, wire = ours.recv()
    try:
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(port), str(nodes)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
    finally:
        server.terminate()
        server.join()
    m = orjson.loads(result.stdout.strip().splitlines()[-1])
    kib, mib = 1024, 1024 * 1024
    from gpustack_worker.runtime.informer import InformerOptions

    page = InformerOptions().page_size
    print(f"relist of {nodes} Nodes ({wire / nodes / kib:.1f} KiB JSON each, pages of {page}):")
    print(f"  process RSS before the first list (imports, client, loop): {m['base_b'] / mib:.1f} MiB")
    for phase, title in (("initial", "start-up list, empty cache"), ("relist", "relist, full cache")):
        print(
            f"  {title:28s} {m[f'{phase}_s']:6.2f} s;  longest loop stall {m[f'{phase}_stall_s']:6.3f} s;"
            f"  peak RSS +{m[f'{phase}_peak_b'] / mib:6.1f} MiB ({m[f'{phase}_peak_b'] / nodes / kib:5.1f}"
            f" KiB/Node);  after +{m[f'{phase}_after_b'] / mib:6.1f} MiB;  process peak"
            f" {m[f'{phase}_hwm_b'] / mib:6.1f} MiB"
        )
    figures = {"process RSS before the first list, MiB": m["base_b"] / mib}
    for phase, title in (("initial", "start-up list"), ("relist", "relist")):
        figures[f"{title}, s"] = m[f"{phase}_s"]
        figures[f"{title}: longest loop stall, s"] = m[f"{phase}_stall_s"]
        figures[f"{title}: peak RSS over before, MiB"] = m[f"{phase}_peak_b"] / mib
        figures[f"{title}: process peak RSS, MiB"] = m[f"{phase}_hwm_b"] / mib
    return figures


def main() -> None:
    import argparse

    from summary import write_json

    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sizes", nargs="*", type=int, help=f"Node counts (default: {SIZES})")
    parser.add_argument("--nodes", type=int, action="append", default=[], help="a Node count (repeatable)")
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also write the figures here (PATH-N.json per size)"
    )
    args = parser.parse_args()
    sizes = [*args.sizes, *args.nodes] or list(SIZES)
    for nodes in sizes:
        figures = run(nodes)
        if args.json is not None:
            path = Path(args.json)
            if len(sizes) > 1:
                path = path.with_name(f"{path.stem}-{nodes}{path.suffix}")
            write_json(path, "relist", nodes, dict(figures))


if __name__ == "__main__":
    main()
