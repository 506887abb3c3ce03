"""The topologyAssignment decoder of the cluster helpers (Kueue v1beta2 slices) on hand-written inputs."""

from __future__ import annotations

import pytest

from tests.topology.cluster_helpers import Domain, decode_topology_assignment, topology_assignments, workload

HOST = "kubernetes.io/hostname"
ZONE = "topology.gpustack.ai/zone"


def test_universal_values_and_counts_cover_every_domain_of_a_slice() -> None:
    levels, domains = decode_topology_assignment(
        {
            "levels": [ZONE, HOST],
            "slices": [
                {
                    "domainCount": 2,
                    "valuesPerLevel": [
                        {"universal": "za"},
                        {"individual": {"prefix": "gpu-za-", "roots": ["1", "2"]}},
                    ],
                    "podCounts": {"universal": 2},
                }
            ],
        }
    )
    assert levels == (ZONE, HOST)
    assert domains == [Domain(("za", "gpu-za-1"), 2), Domain(("za", "gpu-za-2"), 2)]


def test_slices_are_concatenated_with_individual_counts_and_suffixes() -> None:
    _, domains = decode_topology_assignment(
        {
            "levels": [HOST],
            "slices": [
                {
                    "domainCount": 2,
                    "valuesPerLevel": [{"individual": {"suffix": "-x", "roots": ["a", "b"]}}],
                    "podCounts": {"individual": [1, 3]},
                },
                {"domainCount": 1, "valuesPerLevel": [{"universal": "c"}], "podCounts": {"universal": 1}},
            ],
        }
    )
    assert domains == [Domain(("a-x",), 1), Domain(("b-x",), 3), Domain(("c",), 1)]


@pytest.mark.parametrize(
    ("piece", "message"),
    [
        ({"domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["a"]}}]}, "1 roots"),
        ({"domainCount": 1, "valuesPerLevel": [{}], "podCounts": {"universal": 1}}, "neither"),
        (
            {"domainCount": 2, "valuesPerLevel": [{"universal": "a"}], "podCounts": {"individual": [1]}},
            "podCounts",
        ),
        ({"domainCount": 1, "valuesPerLevel": [], "podCounts": {"universal": 1}}, "0 levels"),
    ],
)
def test_malformed_slices_are_refused(piece: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_topology_assignment({"levels": [HOST], "slices": [piece]})


def test_assignments_by_pod_set_and_the_workload_builder() -> None:
    body = workload("w", "ns", "q", required_level=ZONE)
    assert body["spec"]["podSets"][0]["topologyRequest"] == {"required": ZONE}
    assert "topologyRequest" not in workload("w", "ns", "q")["spec"]["podSets"][0]
    body["status"] = {
        "admission": {
            "podSetAssignments": [
                {
                    "name": "main",
                    "topologyAssignment": {
                        "levels": [HOST],
                        "slices": [
                            {
                                "domainCount": 1,
                                "valuesPerLevel": [{"universal": "n"}],
                                "podCounts": {"universal": 1},
                            }
                        ],
                    },
                },
                {"name": "other"},
            ]
        }
    }
    assert topology_assignments(body) == {"main": ((HOST,), [Domain(("n",), 1)])}
