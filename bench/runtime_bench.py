"""Runtime benchmark: informer ingest of 5,000 GPU Nodes and workqueue throughput.

Run with ``python bench/runtime_bench.py [--nodes N] [--json PATH]`` (or ``nox -s bench``). It prints
measurements and ratios taken in this one run; there is no pass/fail. The Nodes are synthetic but shaped
like the "realistic GPU node" of the engineering notes: ~60 GFD/NFD labels, 50 images, 6 managedFields
entries, full conditions, nodeInfo and addresses (~20 KB of JSON each). They go through exactly the
informer's ingest path — ``orjson.loads`` → :func:`make_transform` → :meth:`Store.replace` — and
retained memory is measured with tracemalloc after the raw bytes are dropped (the goal is <= 4 KiB per
cached Node).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpustack_worker.runtime.clock import MonotonicClock
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.ratelimit import default
from gpustack_worker.runtime.store import Store
from gpustack_worker.runtime.transform import make_transform

NODES = 5_000
QUEUE_KEYS = 200_000
OUR_MANAGER = "gpustack-worker/node-agent"


def synthetic_node(i: int) -> dict[str, Any]:
    """One realistic GPU node as the API server would return it."""
    name = f"gpu-node-{i:05d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "topology.kubernetes.io/region": "region-1",
        "topology.gpustack.ai/rack": f"rack-{i // 16}",
        "topology.gpustack.ai/block": f"block-{i // 256}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.present": "true",
        "gpustack.ai/managed": "true",
        "feature.gpustack.ai/acceleratable": "true",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/cpu-model.family": "6",
        "feature.node.kubernetes.io/cpu-model.id": "143",
        "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1015-aws",
        "feature.node.kubernetes.io/kernel-version.major": "6",
        "feature.node.kubernetes.io/kernel-version.minor": "8",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/pci-1d0f.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "feature.node.kubernetes.io/rdma.capable": "true",
        "feature.node.kubernetes.io/rdma.available": "true",
        "feature.node.kubernetes.io/network-sriov.capable": "true",
        "feature.node.kubernetes.io/memory-numa": "true",
        "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
    }
    labels.update({f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in (
        "AVX", "AVX2", "AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL", "AMXBF16", "AMXINT8",
        "FMA3", "SHA", "VAES", "VPCLMULQDQ", "AESNI", "ADX",
    )})  # fmt: skip
    ts = "2026-01-01T00:00:00Z"
    managed = [
        {"manager": m, "operation": op, "apiVersion": "v1", "time": ts, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in list(labels)[:20]}}}}
        for m, op in (("kubelet", "Update"), ("nfd-master", "Update"), ("gpu-feature-discovery", "Update"),
                      ("kube-controller-manager", "Update"), (OUR_MANAGER, "Apply"), ("kubectl", "Update"))
    ]  # fmt: skip
    capacity = {
        "cpu": "192", "memory": "2097152000Ki", "pods": "110", "nvidia.com/gpu": "8",
        "ephemeral-storage": "3750000000Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        "vpc.amazonaws.com/efa": "32",
    }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"6f1c2f6e-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": ts,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "nfd.node.kubernetes.io/feature-labels": ",".join(k for k in labels if "feature" in k),
            },
            "managedFields": managed,
        },
        "spec": {"providerID": f"aws:///zone-{i % 3}/i-{i:017x}", "podCIDR": f"10.{i // 256}.{i % 256}.0/24"},
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": "191450m"},
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t} is {s}",
                    "lastHeartbeatTime": ts,
                    "lastTransitionTime": f"2026-01-01T00:{i % 60:02d}:{i // 60 % 60:02d}Z",  # per node
                }
                for t, s in (
                    ("MemoryPressure", "False"),
                    ("DiskPressure", "False"),
                    ("PIDPressure", "False"),
                    ("Ready", "True"),
                )
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.{i // 256}.{i % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"ec2{i:029x}",
                "bootID": f"{i:032x}",
                "kernelVersion": "6.8.0-1015-aws",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.12",
                "kubeletVersion": "v1.35.4",
                "kubeProxyVersion": "v1.35.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/team/image-{j}@sha256:{j:064x}",
                        f"registry.example.com/team/image-{j}:v{j}",
                    ],
                    "sizeBytes": 1_000_000 * j,
                }
                for j in range(50)
            ],
        },
    }


def ingest(payloads: list[bytes]) -> Store:
    transform = make_transform([OUR_MANAGER])
    store = Store()
    store.replace([transform(orjson.loads(p)) for p in payloads])
    return store


def bench_ingest(nodes: int = NODES) -> dict[str, float]:
    payloads = [orjson.dumps(synthetic_node(i)) for i in range(nodes)]
    wire = sum(len(p) for p in payloads)
    print(f"informer ingest: {nodes} Nodes, {wire / nodes / 1024:.1f} KiB JSON each on the wire")

    gc.collect()
    start = time.perf_counter()
    store = ingest(payloads)
    took = time.perf_counter() - start
    print(f"  ingest time (parse + transform + store): {took:.3f} s  ({took / nodes * 1e6:.0f} us/Node)")
    del store
    gc.collect()

    gc.disable()
    start = time.perf_counter()
    store = ingest(payloads)
    took_nogc = time.perf_counter() - start
    gc.enable()
    print(
        f"  ingest time with GC paused:            {took_nogc:.3f} s  (GC share {1 - took_nogc / took:.0%})"
    )
    del store
    gc.collect()

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = ingest(payloads)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    per_node = retained / len(store)
    print(f"  retained memory per cached Node:        {per_node / 1024:.2f} KiB  (goal <= 4 KiB)")
    print(f"  wire size / cached size:                {wire / retained:.1f}x")
    gc.freeze()
    return {
        "ingest, s": took,
        "ingest with GC paused, s": took_nogc,
        "retained memory per cached Node, KiB": per_node / 1024,
        "wire size / cached size": wire / retained,
    }


async def bench_queue() -> dict[str, float]:
    clock = MonotonicClock()
    q = WorkQueue("bench", clock=clock, rate_limiter=default(clock))
    keys = [f"ns/object-{i}" for i in range(QUEUE_KEYS)]
    done = 0

    async def worker() -> None:
        nonlocal done
        while (key := await q.get()) is not None:
            q.done(key)
            done += 1

    start = time.perf_counter()
    for key in keys:
        q.add(key)
    for key in keys[: QUEUE_KEYS // 2]:  # duplicates collapse
        q.add(key)
    adds = time.perf_counter() - start
    workers = [asyncio.ensure_future(worker()) for _ in range(4)]
    q.shutdown()
    await asyncio.gather(*workers)
    total = time.perf_counter() - start
    print(f"workqueue: {QUEUE_KEYS} distinct keys (+{QUEUE_KEYS // 2} duplicate adds), 4 workers")
    print(f"  add rate:        {1.5 * QUEUE_KEYS / adds:,.0f} adds/s")
    print(f"  end-to-end rate: {done / total:,.0f} keys/s  (processed {done}, each distinct key once)")
    return {
        "workqueue add rate, /s": 1.5 * QUEUE_KEYS / adds,
        "workqueue end-to-end rate, keys/s": done / total,
    }


def main(argv: list[str] | None = None) -> None:
    import argparse

    from summary import write_json

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=NODES, help="Nodes ingested (default: %(default)s)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    figures = bench_ingest(args.nodes)
    figures.update(asyncio.run(bench_queue()))
    if args.json is not None:
        write_json(args.json, "runtime", args.nodes, dict(figures))


if __name__ == "__main__":
    main()
