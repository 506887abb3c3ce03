"""Name and key formats of reference §2.1.2, §3.2, §3.3 and §8.2, built through :mod:`api.keys`."""

from __future__ import annotations

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.normalize import fnv64a_hex

DEFAULT_PROFILE = "fnv64-87bf574bea2a4f23"  # reference §2.1.2 (DERIVED)


def test_default_profile_is_the_hostname_only_hierarchy() -> None:
    assert keys.topology_profile([keys.HOSTNAME]) == DEFAULT_PROFILE
    assert keys.topology_profile((keys.HOSTNAME,)) == DEFAULT_PROFILE


def test_profile_joins_levels_with_nul() -> None:
    levels = ["topology.kubernetes.io/region", "topology.kubernetes.io/zone", keys.HOSTNAME]
    assert keys.topology_profile(levels) == "fnv64-" + fnv64a_hex("\x00".join(levels))
    # Order matters: coarsest first is a different hierarchy from the reverse.
    assert keys.topology_profile(levels) != keys.topology_profile(list(reversed(levels)))


@pytest.mark.parametrize(
    "cluster_queue",
    [
        "gpustack--nvidia-a10g-linux-amd64",
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
        "gpustack--generic-linux-amd64",
        "x" * 253,
    ],
    ids=["accelerated", "aware", "cpu", "longest-name"],
)
def test_local_queue_name(cluster_queue: str) -> None:
    name = keys.local_queue_name(cluster_queue)
    assert len(name) == 31
    assert name == "gpustack-fnv64-" + fnv64a_hex(cluster_queue)
    assert name.startswith(keys.LOCAL_QUEUE_PREFIX)


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (keys.general_key("amd"), "general.feature.gpustack.ai/amd"),
        (keys.general_key("amd-epyc-7r32"), "general.feature.gpustack.ai/amd-epyc-7r32"),
        (keys.accelerator_key("nvidia-a10g"), "acceleratable.feature.gpustack.ai/nvidia-a10g"),
        (keys.count_key(keys.general_key("amd-epyc-7r32")), keys.general_key("amd-epyc-7r32") + ".count"),
        (keys.sliced_max_free_units_key("nvidia-a10g"), "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"),
        (keys.shared_free_cards_key("nvidia-a10g"), "shared-free-cards.fit.gpustack.ai/nvidia-a10g"),
        (keys.credits_resource("nvidia"), "credits.gpustack.ai/nvidia"),
        (keys.sliced_resource("nvidia.com/gpu"), "nvidia.com/gpu.sliced"),
        (keys.sliced_resource("nvidia.com/gpu", "units"), "nvidia.com/gpu.sliced.units"),
        (keys.sliced_resource("amd.com/gpu", "memory-mib"), "amd.com/gpu.sliced.memory-mib"),
        (keys.partitioned_resource("nvidia.com/gpu"), "nvidia.com/gpu.partitioned"),
        (
            keys.partitioned_resource("nvidia.com/gpu", "mig-3g.40gb"),
            "nvidia.com/gpu.partitioned.mig-3g.40gb",
        ),
        (keys.worker_nodefeature_name("node-a"), "node-a-gpustack-worker"),
        (keys.device_manager_nodefeature_name("node-a"), "node-a-gpustack-device-manager"),
        (keys.topology_name(DEFAULT_PROFILE), "gpustack-fnv64-87bf574bea2a4f23"),
        (
            keys.cpu_flavor_name("amd-epyc-7r32", "linux", "amd64", 4, DEFAULT_PROFILE),
            "gpustack--amd-epyc-7r32-linux-amd64-4c-fnv64-87bf574bea2a4f23",
        ),
        (
            keys.device_flavor_name("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64", 1, DEFAULT_PROFILE),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-fnv64-87bf574bea2a4f23",
        ),
        (keys.pool_name("linux", "amd64"), "gpustack--generic-linux-amd64"),
        (keys.pool_name("linux", "amd64", "nvidia-a10g"), "gpustack--nvidia-a10g-linux-amd64"),
        (
            keys.pool_name("linux", "amd64", g_key="amd-epyc-7r32", aware=True),
            "gpustack--amd-epyc-7r32-linux-amd64",
        ),
        (
            keys.pool_name("linux", "amd64", "nvidia-a10g", "amd-epyc-7r32", aware=True),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
        ),
    ],
    ids=[
        "general-mfr",
        "general-gkey",
        "acceleratable-akey",
        "count",
        "fit-sliced",
        "fit-shared",
        "credits",
        "sliced-pool",
        "sliced-units",
        "sliced-memory-mib",
        "partitioned-pool",
        "partitioned-profile",
        "worker-nodefeature",
        "dm-nodefeature",
        "kueue-topology",
        "cpu-flavor",
        "device-flavor",
        "pool-generic",
        "pool-unaware-accelerated",
        "pool-aware-cpu",
        "pool-aware-accelerated",
    ],
)
def test_builders(built: str, expected: str) -> None:
    assert built == expected


@pytest.mark.parametrize(
    ("constant", "expected"),
    [
        (keys.UNITS_PER_ACCELERATOR, 1_600_000),
        (keys.UNITS_PER_SHARE, keys.UNITS_PER_ACCELERATOR // keys.SHARES_PER_ACCELERATOR),
        (keys.UNITS_PER_PERCENT, keys.UNITS_PER_ACCELERATOR // 100),
        (keys.SHARES_PER_ACCELERATOR, 10),
    ],
    ids=["M", "share", "percent", "shares-per-card"],
)
def test_unit_constants(constant: int, expected: int) -> None:
    assert constant == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (keys.MANAGED, "gpustack.ai/managed"),
        (keys.TOPOLOGY_PROFILE, "topology.gpustack.ai/profile"),
        (keys.RESOURCE_TYPE, "resource.gpustack.ai/type"),
        (keys.SCHEDULE_QUEUE_ANNOTATION, "schedule.gpustack.ai/queue"),
        (keys.DERIVED_FROM_NODE, "schedule.gpustack.ai/derived-from-node"),
        (keys.FINALIZER_CONTROLLED, "gpustack.ai/controlled"),
        (keys.CPU_NAME_ANNOTATION, "feature.gpustack.ai/cpu-name"),
        (keys.NFD_CPU_VENDOR, "feature.node.kubernetes.io/cpu-model.vendor_id"),
        (keys.RDMA_CAPABLE, "feature.gpustack.ai/rdma.capable"),
    ],
    ids=["managed", "profile", "type", "queue", "derived", "finalizer", "cpu-name", "vendor", "rdma"],
)
def test_catalogue_keys(key: str, expected: str) -> None:
    assert key == expected


def test_cpu_detail_annotations_cover_the_catalogue() -> None:
    suffixes = [k.removeprefix("feature.gpustack.ai/cpu-") for k in keys.CPU_DETAIL_ANNOTATIONS]
    assert suffixes == [
        "family",
        "physical-cores",
        "threads-per-core",
        "logical-cores",
        "stepping",
        "cache-line",
        "hz",
        "boost-freq",
        "cache-l1i",
        "cache-l1d",
        "cache-l2",
        "cache-l3",
    ]
