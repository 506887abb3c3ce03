"""What a write costs the client: our ``Client.apply`` next to client-go and a bare httpx client.

One local control plane (etcd and kube-apiserver only: no Kueue, nfd-master or scheduler, so nothing
else writes or reads while the writers run), N objects created once, then each writer in turn
server-side applies the same N objects, ``--concurrency`` (8) requests in flight, force, one field
manager, a new label value per pass (so every apply is a real write, never a no-op):

- **client-go** (``bench/clientgo/``, built from the Go module cache by ``clientgo_build.py``): the
  dynamic client's ``Apply``, rate limiter off (QPS and burst unlimited), HTTP/2 as client-go negotiates
  it over TLS; **client-go h1**: the same over HTTP/1.1 only (what our Python clients speak);
- **bare httpx**: one ``httpx.AsyncClient`` (the kubeconfig's CA and token, keep-alive for every
  connection), a ``PATCH`` with the orjson body and the two query parameters — no kr8s, no retries, no
  fence, no metrics, no spans: the floor of a Python client on httpx;
- **bare httpcore**: httpcore's pool called directly (no httpx client around it), and **raw h1**: one
  ``write`` per request on asyncio's TLS transport, the answer parsed by hand — the floors a leaner
  request path can reach;
- **ours**: ``Client.apply`` of the runtime (what the agent and the controller write through: the
  session's httpcore pool on the fenced backend, retries, metrics, spans).

The kinds (``--kind``): ``nodefeature`` (default; the agent's object: ``NodeFeature`` ``bench-<node>``
with the nfd node-name label and one spec label) or ``nodelabel`` (one label on a Node: the benches' raw
reference write). Each writer runs once per round; the order rotates every round so the machine's drift
is spread over all of them. Printed per writer: writes/s (each round, and over all rounds) and the client's
CPU per write — process CPU time over the pass for the Python clients (measured in this process, nothing
else running in it), for client-go its own ``getrusage`` over the writes (start-up excluded) and
``getrusage(RUSAGE_CHILDREN)`` around the whole process (start-up included) — then the ratios **ours /
client-go** and **ours / bare httpx**. No pass or fail. ``--json PATH`` writes the figures for
``bench/summary.py``; ``--only`` picks writers (``py-spy record -- python bench/write_bench.py --only
ours`` profiles our path alone).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clientgo_build import ensure_writer
from summary import write_json  # bench/ is not a package: its own directory on the path

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

WRITERS = ("client-go", "client-go h1", "bare httpx", "bare httpcore", "raw h1", "ours")
MANAGER = "gpustack-write-bench"
LABEL = "bench.gpustack.ai/write"
NAMESPACE = kinds.SYSTEM_NAMESPACE
NODE_FEATURE_PATH = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"


def nodefeature_body(node: str, value: str) -> dict[str, Any]:
    """The NodeFeature every writer applies for ``node`` (clientgo/main.go builds the same)."""
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": f"bench-{node}",
            "namespace": NAMESPACE,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {"labels": {LABEL: value}},
    }


def node_label_body(node: str, value: str) -> dict[str, Any]:
    """One label on Node ``node`` (clientgo/main.go's ``-kind nodelabel``)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {LABEL: value}}}


@dataclass
class Pass:
    writes: int
    seconds: float
    cpu_s: float
    #: client-go only: getrusage(RUSAGE_CHILDREN) around the process (start-up included).
    process_cpu_s: float | None = None

    @property
    def rate(self) -> float:
        return self.writes / self.seconds

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s / self.writes * 1e3


@dataclass
class Results:
    passes: dict[str, list[Pass]] = field(default_factory=dict)

    def add(self, writer: str, measured: Pass) -> None:
        self.passes.setdefault(writer, []).append(measured)

    def rate(self, writer: str) -> float:
        ps = self.passes[writer]
        return sum(p.writes for p in ps) / sum(p.seconds for p in ps)

    def cpu_ms(self, writer: str) -> float:
        ps = self.passes[writer]
        return sum(p.cpu_s for p in ps) / sum(p.writes for p in ps) * 1e3


async def _workers(concurrency: int, items: list[Any], one: Callable[[Any], Awaitable[None]]) -> None:
    todo = iter(items)

    async def worker() -> None:
        for item in todo:
            await one(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _timed(concurrency: int, items: list[Any], one: Callable[[Any], Awaitable[None]]) -> Pass:
    cpu0, start = time.process_time(), time.perf_counter()
    await _workers(concurrency, items, one)
    return Pass(len(items), time.perf_counter() - start, time.process_time() - cpu0)


def _body_of(kind: str) -> Callable[[str, str], dict[str, Any]]:
    return node_label_body if kind == "nodelabel" else nodefeature_body


def _path_of(kind: str, body: dict[str, Any]) -> str:
    name = body["metadata"]["name"]
    return f"/api/v1/nodes/{name}" if kind == "nodelabel" else f"{NODE_FEATURE_PATH}/{name}"


async def run_ours(client: Any, kind: str, names: list[str], value: str, concurrency: int) -> Pass:
    resource_ = kinds.NODE if kind == "nodelabel" else kinds.NODE_FEATURE
    bodies = [_body_of(kind)(n, value) for n in names]

    async def one(body: dict[str, Any]) -> None:
        await client.apply(resource_, body, field_manager=MANAGER, force=True)

    return await _timed(concurrency, bodies, one)


def bare_client(kubeconfig: Path, concurrency: int) -> httpx.AsyncClient:
    """An httpx client from the kubeconfig's server, CA and token (the dev cluster's admin kubeconfig)."""
    server, ctx, token = _kubeconfig_parts(kubeconfig)
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    return httpx.AsyncClient(
        base_url=server,
        verify=ctx,
        limits=limits,
        headers={"Authorization": f"Bearer {token}", "User-Agent": "gpustack-write-bench-bare"},
        timeout=30.0,
    )


async def run_bare(
    http: httpx.AsyncClient, kind: str, names: list[str], value: str, concurrency: int
) -> Pass:
    bodies = [_body_of(kind)(n, value) for n in names]
    params = {"fieldManager": MANAGER, "force": "true"}
    headers = {"Content-Type": "application/apply-patch+yaml"}

    async def one(body: dict[str, Any]) -> None:
        response = await http.patch(
            _path_of(kind, body), params=params, headers=headers, content=orjson.dumps(body)
        )
        if response.status_code >= 400:
            raise RuntimeError(f"bare httpx: {response.status_code} {response.text[:300]}")
        orjson.loads(response.content)

    return await _timed(concurrency, bodies, one)


def _kubeconfig_parts(kubeconfig: Path) -> tuple[str, ssl.SSLContext, str]:
    """(server, TLS context trusting the kubeconfig's CA, bearer token) of the dev cluster's kubeconfig."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return str(cluster["server"]), ctx, str(config["users"][0]["user"]["token"])


async def run_httpcore(kubeconfig: Path, kind: str, names: list[str], value: str, concurrency: int) -> Pass:
    """httpcore's own pool, called directly (no httpx client around it): what a transport that skips
    httpx's request/response machinery costs."""
    import httpcore

    server, ctx, token = _kubeconfig_parts(kubeconfig)
    bodies = [_body_of(kind)(n, value) for n in names]
    query = "?fieldManager=" + MANAGER + "&force=true"
    headers = [
        (b"Authorization", f"Bearer {token}".encode()),
        (b"Content-Type", b"application/apply-patch+yaml"),
        (b"Accept", b"application/json"),
        (b"User-Agent", b"gpustack-write-bench-httpcore"),
    ]
    async with httpcore.AsyncConnectionPool(
        ssl_context=ctx, max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2
    ) as pool:

        async def one(body: dict[str, Any]) -> None:
            url = server + _path_of(kind, body) + query
            response = await pool.request("PATCH", url, headers=headers, content=orjson.dumps(body))
            if response.status >= 400:
                raise RuntimeError(f"bare httpcore: {response.status} {response.content[:300]!r}")
            orjson.loads(response.content)

        return await _timed(concurrency, bodies, one)


class _H1(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection, one request at a time: the request in one ``write``, the answer
    parsed from the bytes as they come (Content-Length or chunked). The floor of a Python client on
    asyncio's TLS transport; no pool, no retries, no fence."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        parsed = _parse_response(self._buf)
        if parsed is not None and self._waiter is not None and not self._waiter.done():
            self._buf.clear()
            self._waiter.set_result(parsed)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc or ConnectionError("closed"))

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        return await self._waiter


def _parse_response(buf: bytearray) -> tuple[int, bytes] | None:
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, chunked = -1, False
    for line in lines[1:]:
        name, _, val = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(val)
        elif name == b"transfer-encoding" and b"chunked" in val.lower():
            chunked = True
    start = end + 4
    if not chunked:
        if len(buf) - start < length:
            return None
        return status, bytes(buf[start : start + length])
    out, pos = bytearray(), start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        if size == 0:
            return (status, bytes(out)) if buf.find(b"\r\n", eol + 2) >= 0 else None
        if len(buf) < eol + 2 + size + 2:
            return None
        out += buf[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


async def run_raw_h1(kubeconfig: Path, kind: str, names: list[str], value: str, concurrency: int) -> Pass:
    server, ctx, token = _kubeconfig_parts(kubeconfig)
    host, _, port = server.removeprefix("https://").partition(":")
    loop = asyncio.get_running_loop()
    conns = [
        (await loop.create_connection(_H1, host, int(port), ssl=ctx, server_hostname=host))[1]
        for _ in range(concurrency)
    ]
    idle: asyncio.Queue[_H1] = asyncio.Queue()
    for conn in conns:
        idle.put_nowait(conn)
    bodies = [_body_of(kind)(n, value) for n in names]
    fixed = (
        f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n"
        "Content-Type: application/apply-patch+yaml\r\nUser-Agent: gpustack-write-bench-raw\r\n"
    )
    query = "?fieldManager=" + MANAGER + "&force=true"

    async def one(body: dict[str, Any]) -> None:
        content = orjson.dumps(body)
        head = (
            f"PATCH {_path_of(kind, body)}{query} HTTP/1.1\r\n{fixed}Content-Length: {len(content)}\r\n\r\n"
        )
        conn = await idle.get()
        try:
            status, answer = await conn.request(head.encode(), content)
        finally:
            idle.put_nowait(conn)
        if status >= 400:
            raise RuntimeError(f"raw h1: {status} {answer[:300]!r}")
        orjson.loads(answer)

    try:
        return await _timed(concurrency, bodies, one)
    finally:
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()


def run_clientgo(
    binary: Path, kubeconfig: Path, names_file: Path, kind: str, value: str, concurrency: int, *, http1: bool
) -> Pass:
    argv = [
        str(binary),
        f"-kubeconfig={kubeconfig}",
        f"-kind={kind}",
        f"-names={names_file}",
        f"-namespace={NAMESPACE}",
        f"-label={LABEL}",
        f"-value={value}",
        f"-manager={MANAGER}",
        f"-concurrency={concurrency}",
    ]
    if http1:
        argv.append("-http1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"client-go writer failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Pass(int(out["writes"]), float(out["seconds"]), float(out["cpu_s"]), process_cpu_s=child)


async def create_objects(client: Any, kind: str, names: list[str], concurrency: int) -> None:
    """The objects every writer then updates (a create costs the server more than an update)."""
    if kind == "nodelabel":

        async def one(name: str) -> None:
            await client.create(kinds.NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

        await _workers(concurrency, names, one)
    else:
        await run_ours(client, kind, names, "0", concurrency)


def report(results: Results, writers: list[str]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    print(f"{'writer':<14} {'writes/s (rounds)':<34} {'all':>7} {'CPU ms/write':>13}")
    for writer in writers:
        ps = results.passes[writer]
        rounds = ", ".join(f"{p.rate:.0f}" for p in ps)
        extra = ""
        if ps[0].process_cpu_s is not None:
            whole = sum(p.process_cpu_s or 0.0 for p in ps) / sum(p.writes for p in ps) * 1e3
            extra = f"  (whole process, start-up included: {whole:.2f})"
            figures[f"{writer} process CPU ms per write"] = round(whole, 3)
        print(
            f"{writer:<14} {rounds:<34} {results.rate(writer):>7.0f} {results.cpu_ms(writer):>13.2f}{extra}"
        )
        figures[f"{writer} writes per s"] = round(results.rate(writer), 1)
        figures[f"{writer} CPU ms per write"] = round(results.cpu_ms(writer), 3)
    pairs = [
        ("ours", "client-go"),
        ("ours", "client-go h1"),
        ("ours", "bare httpx"),
        ("ours", "bare httpcore"),
        ("ours", "raw h1"),
        ("bare httpx", "client-go"),
    ]
    for a, b in pairs:
        if a in results.passes and b in results.passes:
            ratio = results.rate(a) / results.rate(b)
            cpu = results.cpu_ms(a) / results.cpu_ms(b)
            print(f"  {a} / {b}: write rate {ratio:.2f}, CPU per write {cpu:.2f}x")
            figures[f"{a} / {b} write rate"] = round(ratio, 3)
            figures[f"{a} / {b} CPU per write"] = round(cpu, 3)
    return figures


async def bench(args: argparse.Namespace, directory: Path) -> None:
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

    writers = [w for w in WRITERS if not args.only or w in args.only]
    binary = ensure_writer() if any(w.startswith("client-go") for w in writers) else None
    cluster = DevCluster(
        directory,
        with_kueue=False,
        with_nfd=False,
        with_scheduler=False,
        log=lambda msg: print(f"  [devcluster] {msg}"),
    )
    cluster.start()
    try:
        client = await Client.connect(str(cluster.kubeconfig), user_agent="gpustack-write-bench-ours")
        http = bare_client(cluster.kubeconfig, args.concurrency)
        names = [f"node-{i:05d}" for i in range(args.objects)]
        names_file = directory / "names.txt"
        names_file.write_text("\n".join(names) + "\n")
        await create_objects(client, args.kind, names, args.concurrency)
        results = Results()
        print(
            f"write bench: {args.objects} {args.kind} objects, {args.concurrency} in flight, "
            f"{args.rounds} rounds, load {os.getloadavg()[0]:.2f}"
        )
        for r in range(args.rounds):
            order = writers[r % len(writers) :] + writers[: r % len(writers)]
            for writer in order:
                value = f"{writer.replace(' ', '-')}-{r}"
                if writer.startswith("client-go"):
                    assert binary is not None
                    measured = await asyncio.to_thread(
                        run_clientgo,
                        binary,
                        cluster.kubeconfig,
                        names_file,
                        args.kind,
                        value,
                        args.concurrency,
                        http1=writer.endswith("h1"),
                    )
                elif writer == "bare httpx":
                    measured = await run_bare(http, args.kind, names, value, args.concurrency)
                elif writer == "bare httpcore":
                    measured = await run_httpcore(
                        cluster.kubeconfig, args.kind, names, value, args.concurrency
                    )
                elif writer == "raw h1":
                    measured = await run_raw_h1(cluster.kubeconfig, args.kind, names, value, args.concurrency)
                else:
                    measured = await run_ours(client, args.kind, names, value, args.concurrency)
                results.add(writer, measured)
        figures = report(results, writers)
        figures["load average"] = round(os.getloadavg()[0], 2)
        await http.aclose()
        await client.close()
        if args.json:
            write_json(args.json, "write", args.objects, figures)
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", "--objects", dest="objects", type=int, default=2000)
    parser.add_argument("--kind", choices=("nodefeature", "nodelabel"), default="nodefeature")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", type=lambda s: [w.strip() for w in s.split(",")], default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--dir", default=None, help="cluster directory (default: a temporary one)")
    args = parser.parse_args()
    if args.only and not set(args.only) <= set(WRITERS):
        parser.error(f"--only takes writers of {', '.join(WRITERS)}")
    if args.dir:
        asyncio.run(bench(args, Path(args.dir)))
        return
    with tempfile.TemporaryDirectory(prefix="write-bench-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
