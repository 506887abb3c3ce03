"""Golden pools of the four-node mixed cluster under both values of instance-type-aware-cpu-manufacturer:
every InstanceType (name, identity, unit spec, schedule labels) and LocalQueue name."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, pools
from gpustack_worker.chain.nodes import node_hardware
from tests.chain.builders import mixed_cluster

INTEL = "intel-xeon-platinum-8259cl"


def _types(aware: bool) -> dict[str, dict[str, Any]]:
    hw = [h for h in (node_hardware(n) for n in mixed_cluster()) if h is not None]
    out: dict[str, dict[str, Any]] = {}
    for plan in flavors.plan_flavors(hw, mixed_on_node=True):
        body = pools.derived_instance_type(plan, aware=aware)
        out.setdefault(body["metadata"]["name"], body)
    return out


UNAWARE = {
    "gpustack--generic-linux-amd64": ("CPU-only", False, None, "generic", ("1", "2Gi")),
    "gpustack--nvidia-a10g-linux-amd64": ("NVIDIA-A10G", True, "nvidia-a10g", "generic", ("8", "64Gi")),
    "gpustack--nvidia-tesla-t4-linux-amd64": ("Tesla-T4", True, "nvidia-tesla-t4", "generic", ("8", "32Gi")),
}
AWARE = {
    "gpustack--amd-epyc-7r13-linux-amd64": (
        "AMD EPYC 7R13 Processor",
        False,
        None,
        "amd-epyc-7r13",
        ("1", "2Gi"),
    ),
    "gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64": (
        "Tesla-T4",
        True,
        "nvidia-tesla-t4",
        "amd-epyc-7r13",
        ("8", "32Gi"),
    ),
    "gpustack--amd-epyc-7r32-linux-amd64": ("AMD EPYC 7R32", False, None, "amd-epyc-7r32", ("1", "2Gi")),
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64": (
        "NVIDIA-A10G",
        True,
        "nvidia-a10g",
        "amd-epyc-7r32",
        ("8", "64Gi"),
    ),
    f"gpustack--{INTEL}-linux-amd64": (
        "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
        False,
        None,
        INTEL,
        ("1", "2Gi"),
    ),
    f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64": (
        "Tesla-T4",
        True,
        "nvidia-tesla-t4",
        INTEL,
        ("8", "32Gi"),
    ),
}


@pytest.mark.parametrize(
    ("aware", "want"), [(False, UNAWARE), (True, AWARE)], ids=["aware=false", "aware=true"]
)
def test_derived_instance_types(aware: bool, want: dict[str, tuple[Any, ...]]) -> None:
    got = _types(aware)
    assert {
        name: (
            b["spec"]["displayName"],
            b["spec"]["acceleratable"],
            b["spec"].get("acceleratorGroup"),
            b["spec"]["generalGroup"],
            (b["spec"]["unitResources"]["cpu"], b["spec"]["unitResources"]["ram"]),
        )
        for name, b in got.items()
    } == want
    for name, body in got.items():
        assert body["spec"]["localStorage"] == "100Gi"
        labels = body["metadata"]["labels"]
        assert labels[keys.DERIVED_FROM_NODE] == "true"
        assert labels[keys.QUEUE_ENTRANCE] == keys.local_queue_name(name)
        assert len(labels[keys.QUEUE_ENTRANCE]) == 31
        assert labels[keys.ACCELERATABLE] == str(body["spec"]["acceleratable"]).lower()
        general = {k for k in labels if k.startswith(keys.GENERAL_PREFIX)}
        assert general == ({keys.general_key(body["spec"]["generalGroup"])} if aware else set())


def test_local_queue_names_golden() -> None:
    # FNV-1a 64 of the queue name (reference Appendix A.1), computed independently.
    assert {name: keys.local_queue_name(name) for name in UNAWARE} == {
        "gpustack--generic-linux-amd64": "gpustack-fnv64-3b93966fd73eb9ec",
        "gpustack--nvidia-a10g-linux-amd64": "gpustack-fnv64-c4680bb149644f1c",
        "gpustack--nvidia-tesla-t4-linux-amd64": "gpustack-fnv64-6b371caa2da0b799",
    }
