"""Large, realistic scenarios for benchmarks: a seeded mix of the node shapes a GPUStack fleet has.

The mix is fixed by a weighted table of node *shapes* (CPU-only, NVIDIA 8-card with and without MIG
cards, Ascend, Hygon, AMD, T-Head), and a seeded RNG picks shapes, rack labels and pre-existing
allocations. The same ``(n_nodes, seed)`` always yields the same scenario, so benchmark runs are
comparable; the result goes through the same validation as a hand-written file.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys
from gpustack_worker.simulate.load import parse_scenario

if TYPE_CHECKING:
    from gpustack_worker.simulate.scenario import Scenario

__all__ = ("SHAPES", "synthetic")

_A100_MIG: Final = {
    "kind": "mig",
    "profiles": [
        {"name": "1g.10gb", "memoryMiB": 9728, "computeSlices": 1, "memorySlices": 1},
        {"name": "2g.20gb", "memoryMiB": 19968, "computeSlices": 2, "memorySlices": 2},
        {"name": "3g.40gb", "memoryMiB": 40192, "computeSlices": 3, "memorySlices": 4},
        {"name": "7g.80gb", "memoryMiB": 80384, "computeSlices": 7, "memorySlices": 8},
    ],
}
_EPYC: Final = {
    "vendor": "AMD",
    "model": "AMD EPYC 7763 64-Core Processor",
    "cores": 128,
    "family": 25,
    "id": 1,
}
_XEON: Final = {"vendor": "Intel", "model": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "cores": 96}

#: (weight, node template without name/labels).
SHAPES: Final[tuple[tuple[int, dict[str, Any]], ...]] = (
    (25, {"cpu": _XEON, "memory": "384Gi"}),
    (
        25,
        {
            "cpu": _EPYC,
            "memory": "1024Gi",
            "accelerators": [
                {
                    "manufacturer": "nvidia",
                    "product": "NVIDIA H100 80GB HBM3",
                    "memoryMiB": 81559,
                    "cores": 16896,
                    "count": 8,
                    "family": "Hopper",
                    "computeCapability": "9.0",
                }
            ],
        },
    ),
    (
        15,
        {
            "cpu": _EPYC,
            "memory": "1024Gi",
            "accelerators": [
                {
                    "manufacturer": "nvidia",
                    "product": "NVIDIA A100-SXM4-80GB",
                    "memoryMiB": 81920,
                    "cores": 6912,
                    "count": 8,
                    "family": "Ampere",
                    "computeCapability": "8.0",
                    "partitioning": {**_A100_MIG, "cards": [4, 5, 6, 7]},
                }
            ],
        },
    ),
    (
        10,
        {
            "cpu": {"vendor": "ARM", "model": "Kunpeng-920", "cores": 192},
            "arch": "arm64",
            "memory": "1536Gi",
            "accelerators": [{"manufacturer": "ascend", "product": "910B2", "memoryMiB": 65536, "count": 8}],
        },
    ),
    (
        10,
        {
            "cpu": {"vendor": "Hygon", "model": "Hygon C86 7285 32-core Processor", "cores": 64},
            "memory": "512Gi",
            "accelerators": [{"manufacturer": "hygon", "product": "K100_AI", "memoryMiB": 65536, "count": 8}],
        },
    ),
    (
        10,
        {
            "cpu": _EPYC,
            "memory": "256Gi",
            "accelerators": [
                {
                    "manufacturer": "amd",
                    "product": "AMD Radeon RX 7800 XT",
                    "memoryMiB": 16368,
                    "cores": 60,
                    "count": 4,
                    "computeCapability": "gfx1101",
                }
            ],
        },
    ),
    (
        5,
        {
            "cpu": _XEON,
            "memory": "1024Gi",
            "accelerators": [
                {
                    "manufacturer": "thead",
                    "product": "PPU ZW810E",
                    "memoryMiB": 98304,
                    "count": 8,
                    "partitioning": {
                        "kind": "mig",
                        "profiles": [
                            {"name": "2g24gb", "memoryMiB": 24576, "computeSlices": 2, "memorySlices": 2},
                            {"name": "4g48gb", "memoryMiB": 49152, "computeSlices": 4, "memorySlices": 4},
                        ],
                    },
                }
            ],
        },
    ),
)


def _allocations(rng: random.Random, acc: dict[str, Any]) -> list[dict[str, Any]]:
    """A few plausible pre-existing allocations on the entry's cards."""
    parted = (
        set(acc.get("partitioning", {}).get("cards", range(acc["count"]))) if "partitioning" in acc else set()
    )
    out: list[dict[str, Any]] = []
    for card in range(acc["count"]):
        roll = rng.random()
        if roll > 0.3:
            continue
        if card in parted:
            name = acc["partitioning"]["profiles"][0]["name"]
            out.append({"card": card, "mode": "partitioned", "profiles": {name: 1}})
        elif roll < 0.1:
            out.append({"card": card, "mode": "exclusive"})
        elif roll < 0.2:
            out.append(
                {"card": card, "mode": "shared", "shares": rng.randint(1, keys.SHARES_PER_ACCELERATOR)}
            )
        elif acc["manufacturer"] != "iluvatar":
            units = rng.randint(1, 8) * keys.UNITS_PER_ACCELERATOR // 8
            out.append({"card": card, "mode": "sliced", "units": units, "slices": 1})
    return out


def synthetic(n_nodes: int, seed: int = 0) -> Scenario:
    """A validated scenario of ``n_nodes`` nodes named ``sim-00000``…, spread over racks of 16."""
    rng = random.Random(seed)
    weights = [w for w, _ in SHAPES]
    nodes: list[dict[str, Any]] = []
    for i in range(n_nodes):
        (_, shape) = rng.choices(SHAPES, weights=weights)[0]
        node: dict[str, Any] = {
            "name": f"sim-{i:05d}",
            "labels": {"topology.gpustack.ai/rack": f"rack-{i // 16:03d}"},
            **{k: v for k, v in shape.items() if k != "accelerators"},
        }
        accs = [dict(a) for a in shape.get("accelerators", [])]
        for acc in accs:
            acc["allocations"] = _allocations(rng, acc)
        if accs:
            node["accelerators"] = accs
        nodes.append(node)
    return parse_scenario({"nodes": nodes}, f"synthetic({n_nodes}, seed={seed})")
