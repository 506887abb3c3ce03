"""The cache-based no-op checks that keep a steady state at zero writes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.agent import capacity, nodefeature
from gpustack_worker.api import keys

from .builders import node

M = keys.UNITS_PER_ACCELERATOR
WANT = {"nvidia.com/gpu.sliced.units": 4 * M, "nvidia.com/gpu.sliced.memory-mib": 327680}


@pytest.mark.parametrize(
    ("cap", "current"),
    [
        pytest.param(
            {"nvidia.com/gpu.sliced.units": "6400k", "nvidia.com/gpu.sliced.memory-mib": "327680"},
            True,
            id="canonical-quantity-equal",
        ),
        pytest.param(
            {"nvidia.com/gpu.sliced.units": "6400000", "nvidia.com/gpu.sliced.memory-mib": "327680"},
            True,
            id="plain-equal",
        ),
        pytest.param({"nvidia.com/gpu.sliced.units": "6400k"}, False, id="wiped-key"),
        pytest.param(
            {"nvidia.com/gpu.sliced.units": "1600k", "nvidia.com/gpu.sliced.memory-mib": "327680"},
            False,
            id="changed-value",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.sliced.units": "6400k",
                "nvidia.com/gpu.sliced.memory-mib": "327680",
                "nvidia.com/gpu.partitioned.mig-1g.10gb": "7",
            },
            False,
            id="stale-profile-key",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.sliced.units": "6400k",
                "nvidia.com/gpu.sliced.memory-mib": "327680",
                "nvidia.com/gpu.sliced": "512",
                "cpu": "8",
            },
            True,
            id="foreign-keys-ignored",
        ),
    ],
)
def test_capacity_up_to_date(cap: dict[str, str], current: bool) -> None:
    assert capacity.up_to_date(node(capacity=cap), WANT) is current


def test_capacity_apply_body_mirrors_allocatable() -> None:
    body = capacity.apply_body("n1", WANT)
    assert body["metadata"] == {"name": "n1"}
    assert body["status"]["capacity"] == body["status"]["allocatable"] == {k: str(v) for k, v in WANT.items()}


WANTED_FEATURE = nodefeature.desired(node("n1"), None, manual=False, mixed_on_node=True)


def _edited(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(WANTED_FEATURE)
    obj["metadata"]["uid"] = "nf-uid"
    obj["metadata"]["labels"]["extra"] = "kept"  # extra metadata does not count as drift
    for path, value in changes.items():
        *head, last = path.split("__")
        target = obj
        for part in head:
            target = target[part]
        target[last] = value
    return obj


@pytest.mark.parametrize(
    ("observed", "current"),
    [
        pytest.param(None, False, id="missing"),
        pytest.param(_edited(), True, id="same"),
        pytest.param(_edited(spec__labels={}), False, id="labels-edited"),
        pytest.param(_edited(metadata__ownerReferences=[]), False, id="owner-dropped"),
        pytest.param(_edited(metadata__labels={}), False, id="selector-labels-dropped"),
    ],
)
def test_nodefeature_up_to_date(observed: dict[str, Any] | None, current: bool) -> None:
    assert nodefeature.up_to_date(observed, WANTED_FEATURE) is current
