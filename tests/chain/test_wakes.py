"""What wakes the chain: a Node's hardware labels, not the fit labels the agent rewrites per allocation."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import keys
from gpustack_worker.chain import controller as chain_controller

FIT = keys.FIT_LABEL_DOMAINS[0] + "nvidia"
OTHER = "feature.node.kubernetes.io/cpu-model"


def node(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}}


def test_the_chain_wakes_on_hardware_labels_not_on_fit_labels() -> None:
    wakes = chain_controller._HARDWARE_LABELS_CHANGED
    assert not wakes("MODIFIED", node({OTHER: "a", FIT: "1"}), node({OTHER: "a", FIT: "0"}))
    assert wakes("MODIFIED", node({OTHER: "a"}), node({OTHER: "a", keys.TOPOLOGY_PROFILE: "fnv64-1"}))
