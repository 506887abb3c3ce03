"""The per-PodSet accelerator demand parser: each family, the counting keys, U and N, and bad input."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.placement.demand import Claim, Family, demand_of_podset

M = keys.UNITS_PER_ACCELERATOR


def template(*containers: dict[str, Any], init: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = [init]
    return {"metadata": {"labels": {"app": "x"}}, "spec": spec}


def container(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


@pytest.mark.parametrize(
    ("requests", "claims"),
    [
        pytest.param(
            {"nvidia.com/gpu": "2", "cpu": "4"},
            [Claim("main", Family.EXCLUSIVE, "nvidia", 2, M)],
            id="exclusive",
        ),
        pytest.param(
            {"amd.com/gpu.shared": 3},
            [Claim("main", Family.SHARED, "amd", 3, keys.UNITS_PER_SHARE)],
            id="shared",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.units": "480000",
                "nvidia.com/gpu.sliced.memory-percentage": "30",
                "nvidia.com/gpu.sliced.cores-percentage": "100",
            },
            [Claim("main", Family.SLICED, "nvidia", 1, 480_000)],
            id="sliced-folded",
        ),
        pytest.param(
            {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-percentage": "25"},
            [Claim("main", Family.SLICED, "ascend", 1, 25 * keys.UNITS_PER_PERCENT)],
            id="sliced-percentage-unfolded",
        ),
        pytest.param(
            {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.memory-mib": "8192"},
            [Claim("main", Family.SLICED, "hygon", 1, 0, memory_mib=8192)],
            id="sliced-mib-folded-per-card",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.partitioned": "1",
                "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                "nvidia.com/gpu.partitioned.units": "800000",
            },
            [Claim("main", Family.PARTITIONED, "nvidia", 1, 800_000, profile="3g.40gb")],
            id="partitioned",
        ),
        pytest.param(
            {"alibabacloud.com/ppu.partitioned": "1", "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1"},
            [Claim("main", Family.PARTITIONED, "thead", 1, 0, profile="4g.48gb")],
            id="partitioned-thead-unfolded",
        ),
        pytest.param(
            {"device.gpustack.ai/nvidia.visibility": "1", "cpu": "1", "example.com/foo": "3"},
            [],
            id="outside-the-families",
        ),
    ],
)
def test_families(requests: dict[str, Any], claims: list[Claim]) -> None:
    demand = demand_of_podset(template(container("main", requests)))
    assert list(demand.claims) == claims
    assert demand.problems == ()
    assert bool(demand) == bool(claims)


def test_limits_stand_in_for_missing_requests() -> None:
    demand = demand_of_podset(template(container("main", limits={"nvidia.com/gpu": "1"})))
    assert demand.claims == (Claim("main", Family.EXCLUSIVE, "nvidia", 1, M),)


def test_u_and_n_over_containers() -> None:
    demand = demand_of_podset(
        template(
            container("a", {"nvidia.com/gpu.shared": "2"}),
            container("b", {"nvidia.com/gpu.shared": "4"}),
            container("c", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "160000"}),
        )
    )
    assert demand.shared_cards == 4
    assert demand.slice_units == 160_000
    assert demand.families == {Family.SHARED, Family.SLICED}
    assert demand.manufacturers == {"nvidia"}


def test_u_and_n_zero_without_those_families() -> None:
    demand = demand_of_podset(template(container("a", {"nvidia.com/gpu": "1"})))
    assert (demand.slice_units, demand.shared_cards) == (0, 0)
    unfolded = demand_of_podset(template(container("a", {"hygon.com/dcu.sliced": "1"})))
    assert unfolded.slice_units == 0 and unfolded.claims[0].family is Family.SLICED


def test_init_containers_are_not_read() -> None:
    demand = demand_of_podset(
        template(container("main", {"cpu": "1"}), init=container("warm", {"nvidia.com/gpu": "1"}))
    )
    assert demand.claims == ()


def test_bare_pod_spec_is_read() -> None:
    demand = demand_of_podset({"containers": [container("main", {"nvidia.com/gpu": "1"})]})
    assert demand.claims == (Claim("main", Family.EXCLUSIVE, "nvidia", 1, M),)


@pytest.mark.parametrize(
    ("requests", "fragment"),
    [
        ({"nvidia.com/gpu": "1.5"}, "nvidia.com/gpu='1.5' is not a positive integer"),
        ({"nvidia.com/gpu": "0"}, "is not a positive integer"),
        ({"nvidia.com/gpu.shared": "lots"}, "nvidia.com/gpu.shared='lots'"),
        ({"nvidia.com/gpu.sliced": "2"}, "must be 1 (one slice per container)"),
        ({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "130"}, "within 1..100"),
        ({"nvidia.com/gpu.partitioned": "1"}, "must name exactly one profile key (found: none)"),
        (
            {
                "nvidia.com/gpu.partitioned": "1",
                "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                "nvidia.com/gpu.partitioned.mig-2g.20gb": "1",
            },
            "found: mig-1g.10gb, mig-2g.20gb",
        ),
        ({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "2"}, "must be 1"),
    ],
)
def test_bad_requests_are_reported_not_claimed(requests: dict[str, Any], fragment: str) -> None:
    demand = demand_of_podset(template(container("main", requests)))
    assert demand.claims == ()
    assert len(demand.problems) == 1
    assert "container 'main'" in demand.problems[0]
    assert fragment in demand.problems[0]


def test_a_bad_claim_keeps_the_good_ones() -> None:
    demand = demand_of_podset(
        template(container("a", {"nvidia.com/gpu": "x"}), container("b", {"nvidia.com/gpu": "1"}))
    )
    assert demand.claims == (Claim("b", Family.EXCLUSIVE, "nvidia", 1, M),)
    assert demand.problems and "container 'a'" in demand.problems[0]


def test_describe_names_the_claim() -> None:
    assert Claim("m", Family.EXCLUSIVE, "nvidia", 2, M).describe() == "2 whole nvidia card(s)"
    assert "480,000 units" in Claim("m", Family.SLICED, "nvidia", 1, 480_000).describe()
    assert "8192 MiB" in Claim("m", Family.SLICED, "hygon", 1, 0, memory_mib=8192).describe()
    assert "3g.40gb" in Claim("m", Family.PARTITIONED, "nvidia", 1, 0, profile="3g.40gb").describe()
    assert "2 distinct" in Claim("m", Family.SHARED, "amd", 2, keys.UNITS_PER_SHARE).describe()
