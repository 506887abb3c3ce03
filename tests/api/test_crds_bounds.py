"""The ``Devices`` schema says the physical bounds the readers enforce (``api/bounds.py``): the model
refuses each out-of-range value, and the generated CRD carries the same maxima, so the API server
refuses them too (``test_crds_bounds_cluster.py`` proves that on a real server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from gpustack_worker.api import bounds, crdgen
from gpustack_worker.api.crds import Devices

M = bounds.MAX_UNITS


def good() -> dict[str, Any]:
    """A Devices object at the edges of every bound (all accepted)."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": "edge"},
        "spec": {
            "groups": [
                {
                    "id": "a100-sxm4-80gb",
                    "manufacturer": "nvidia",
                    "name": "NVIDIA A100-SXM4-80GB",
                    "memory": bounds.MAX_CARD_MEMORY_MIB,
                    "accelerators": [
                        {
                            "id": "GPU-0",
                            "index": 0,
                            "status": {
                                "logicalSliced": {"count": bounds.MAX_SLICES_PER_CARD},
                                "physicalSliced": {
                                    "count": bounds.MAX_PROFILE_INSTANCES,
                                    "profiles": [
                                        {"name": "1g.10gb+me", "count": bounds.MAX_PROFILE_INSTANCES}
                                    ],
                                },
                            },
                        }
                    ],
                }
            ],
            "interfaces": [{"name": "ib0", "rdma": True, "numaAffinity": "0-1"}],
        },
        "status": {
            "groups": [
                {
                    "id": "a100-sxm4-80gb",
                    "manufacturer": "nvidia",
                    "accelerators": [
                        {
                            "id": "GPU-0",
                            "mode": 3,
                            "allocated": M,
                            "remaining": M,
                            "allocatedSlices": bounds.MAX_SLICES_PER_CARD,
                            "remainingProfiles": [
                                {"name": "1g.10gb+me", "count": bounds.MAX_PROFILE_INSTANCES}
                            ],
                        }
                    ],
                }
            ]
        },
    }


def at(path: list[Any], value: Any) -> dict[str, Any]:
    obj = good()
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return obj


GROUP = ["spec", "groups", 0]
CARD = [*GROUP, "accelerators", 0, "status"]
LEDGER = ["status", "groups", 0, "accelerators", 0]

#: (id, object, the field pydantic names) — each one value past a bound.
OUT_OF_BOUNDS: list[tuple[str, dict[str, Any], str]] = [
    ("memory-1e16", at([*GROUP, "memory"], 10**16), "memory"),
    ("memory-above-4TiB", at([*GROUP, "memory"], bounds.MAX_CARD_MEMORY_MIB + 1), "memory"),
    ("logical-count-9e18", at([*CARD, "logicalSliced", "count"], 9 * 10**18), "count"),
    ("logical-count-513", at([*CARD, "logicalSliced", "count"], 513), "count"),
    ("profile-ceiling-9", at([*CARD, "physicalSliced", "profiles", 0, "count"], 9), "count"),
    ("physical-count-9", at([*CARD, "physicalSliced", "count"], 9), "count"),
    ("profile-memory", at([*CARD, "physicalSliced", "profiles", 0, "memoryMib"], 10**16), "memoryMib"),
    ("group-id-slash", at([*GROUP, "id"], "k100/ai"), "id"),
    ("group-id-uppercase", at([*GROUP, "id"], "A100"), "id"),
    ("group-id-space", at([*GROUP, "id"], "a100 80gb"), "id"),
    ("too-many-cards", at([*GROUP, "accelerators"], [{"id": f"c{i}", "index": i} for i in range(257)]),
     "accelerators"),
    ("too-many-groups",
     at(["spec", "groups"], [{**good()["spec"]["groups"][0], "id": f"g{i}"} for i in range(33)]), "groups"),
    ("numa-with-space", at(["spec", "interfaces", 0, "numaAffinity"], "0 1"), "numaAffinity"),
    ("numa-too-long", at(["spec", "interfaces", 0, "numaAffinity"], "1" * 64), "numaAffinity"),
    ("remaining-99999999999", at([*LEDGER, "remaining"], 99_999_999_999), "remaining"),
    ("remaining-m-plus-one", at([*LEDGER, "remaining"], M + 1), "remaining"),
    ("remaining-negative", at([*LEDGER, "remaining"], -1), "remaining"),
    ("allocated-above-m", at([*LEDGER, "allocated"], M + 1), "allocated"),
    ("allocated-slices-513", at([*LEDGER, "allocatedSlices"], 513), "allocatedSlices"),
    ("ledger-profile-count-9", at([*LEDGER, "remainingProfiles", 0, "count"], 9), "count"),
    ("ledger-group-id-slash", at(["status", "groups", 0, "id"], "a/b"), "id"),
    ("mode-6", at([*LEDGER, "mode"], 6), "mode"),
]  # fmt: skip


def test_edges_are_accepted() -> None:
    devices = Devices.model_validate(good())
    assert devices.spec.groups is not None and devices.status is not None and devices.status.groups
    assert devices.spec.groups[0].memory == bounds.MAX_CARD_MEMORY_MIB
    ledger = devices.status.groups[0].accelerators or []
    assert (ledger[0].remaining, ledger[0].allocated_slices) == (M, bounds.MAX_SLICES_PER_CARD)


@pytest.mark.parametrize(("obj", "field"), [c[1:] for c in OUT_OF_BOUNDS], ids=[c[0] for c in OUT_OF_BOUNDS])
def test_out_of_bounds_is_refused_by_the_model(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        Devices.model_validate(obj)
    assert field in str(err.value)


def _schema() -> dict[str, Any]:
    (crd,) = [c for c in crdgen.all_crds() if c["spec"]["names"]["kind"] == "Devices"]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    node = schema
    for part in path:
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


@pytest.mark.parametrize(
    ("path", "keyword", "value"),
    [
        (("spec", "groups"), "maxItems", bounds.MAX_GROUPS),
        (("spec", "groups", "[]", "memory"), "maximum", bounds.MAX_CARD_MEMORY_MIB),
        (("spec", "groups", "[]", "id"), "pattern", "^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"),
        (("spec", "groups", "[]", "accelerators"), "maxItems", bounds.MAX_ACCELERATORS_PER_GROUP),
        (
            ("spec", "groups", "[]", "accelerators", "[]", "status", "logicalSliced", "count"),
            "maximum",
            bounds.MAX_SLICES_PER_CARD,
        ),
        (("spec", "interfaces", "[]", "numaAffinity"), "maxLength", 63),
        (("status", "groups", "[]", "accelerators", "[]", "remaining"), "maximum", M),
        (("status", "groups", "[]", "accelerators", "[]", "remaining"), "minimum", 0),
        (("status", "groups", "[]", "accelerators", "[]", "allocated"), "maximum", M),
        (("status", "groups", "[]", "accelerators", "[]", "allocatedSlices"), "maximum", 512),
        (
            ("status", "groups", "[]", "accelerators", "[]", "remainingProfiles", "[]", "count"),
            "maximum",
            bounds.MAX_PROFILE_INSTANCES,
        ),
    ],
)
def test_generated_crd_carries_the_bound(path: tuple[str, ...], keyword: str, value: object) -> None:
    assert _walk(_schema(), *path)[keyword] == value


def test_a_key_length_is_a_cel_rule_on_both_sides() -> None:
    schema = _schema()
    for side in ("spec", "status"):
        rules = _walk(schema, side, "groups", "[]")["x-kubernetes-validations"]
        assert any(r["rule"] == "size(self.manufacturer) + 1 + size(self.id) <= 63" for r in rules)


def test_profile_names_keep_the_manufacturer_spelling() -> None:
    """No label pattern on profile names: ``1g.10gb+me`` is NVIDIA's own name and must be storable."""
    profile = _walk(_schema(), "spec", "groups", "[]", "accelerators", "[]", "status", "physicalSliced")
    assert "pattern" not in profile["properties"]["profiles"]["items"]["properties"]["name"]
    obj = copy.deepcopy(good())
    assert Devices.model_validate(obj).spec.groups is not None
