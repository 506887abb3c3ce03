"""Nodes as the chain sees them after stages 1-3: the labels NFD, the Device Manager and the agent publish.

The four-node mixed cluster of the chain's golden tests (issue 9): a CPU-only node, one single-A10G node
and two T4 nodes of different sizes and CPUs.
"""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import identity, keys
from gpustack_worker.api.normalize import sanitize_label_value

HOSTNAME_PROFILE = keys.topology_profile([keys.HOSTNAME])


def node(
    name: str,
    *,
    vendor: str,
    cpu_name: str,
    cores: int,
    devices: tuple[tuple[str, str, int, int], ...] = (),
    managed: str | None = "true",
    profile: str | None = HOSTNAME_PROFILE,
    cpu_only_label: bool | None = None,
    os: str = "linux",
    arch: str = "amd64",
) -> dict[str, Any]:
    """A Node dict; ``devices`` holds (manufacturer, product, cards, memory MiB) per model.
    ``cpu_only_label`` defaults to what the agent publishes with mixing off (on a node with no device
    model); with mixing on nothing reads it."""
    annotations = {keys.CPU_NAME_ANNOTATION: cpu_name, f"{keys.FEATURE_PREFIX}cpu-physical-cores": str(cores)}
    labels = {keys.HOSTNAME: name, keys.OS: os, keys.ARCH: arch, keys.NFD_CPU_VENDOR: vendor}
    g_key = identity.general_key(labels, annotations)
    labels[keys.general_key(g_key.split("-")[0])] = "true"
    labels[keys.general_key(g_key)] = "true"
    labels[keys.count_key(keys.general_key(g_key))] = str(cores)
    for mfr, product, cards, mib in devices:
        a_key = identity.accelerator_key(mfr, product)
        feature = keys.accelerator_key(a_key)
        labels.update(
            {
                keys.ACCELERATABLE: "true",
                keys.accelerator_key(mfr): "true",
                feature: "true",
                f"{feature}.product": sanitize_label_value(product),
                f"{feature}.memory": identity.memory_quantity(mib),
                f"{feature}.count": str(cards),
            }
        )
    if cpu_only_label if cpu_only_label is not None else not devices:
        labels[keys.CPU_ONLY] = "true"
    if managed is not None:
        labels[keys.MANAGED] = managed
    if profile is not None:
        labels[keys.TOPOLOGY_PROFILE] = profile
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    }


def mixed_cluster() -> list[dict[str, Any]]:
    """cpu-a (Intel, 4 cores), a10g-a (AMD EPYC 7R32, 8 cores, 1×A10G), t4-a (Intel, 4 cores, 1×T4),
    t4-b (AMD EPYC 7R13, 48 cores, 4×T4)."""
    intel = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
    return [
        node("cpu-a", vendor="Intel", cpu_name=intel, cores=4),
        node(
            "a10g-a",
            vendor="AMD",
            cpu_name="AMD EPYC 7R32",
            cores=8,
            devices=(("nvidia", "NVIDIA A10G", 1, 23028),),
        ),
        node("t4-a", vendor="Intel", cpu_name=intel, cores=4, devices=(("nvidia", "Tesla T4", 1, 15360),)),
        node(
            "t4-b",
            vendor="AMD",
            cpu_name="AMD EPYC 7R13 Processor",
            cores=48,
            devices=(("nvidia", "Tesla T4", 4, 15360),),
        ),
    ]
