"""The manufacturer table of reference §8.3 and the published partition-profile spelling (§8.2)."""

from __future__ import annotations

import pytest

from gpustack_worker.api import manufacturers


@pytest.mark.parametrize(
    ("name", "pci_vendor", "resource", "runtime", "partition_kind"),
    [
        ("amd", "1002", "amd.com/gpu", "amd", ""),
        ("ascend", "19e5", "huawei.com/npu", "ascend", ""),
        ("cambricon", "cabc", "cambricon.com/mlu", "cambricon", ""),
        ("hygon", "1d94", "hygon.com/dcu", "hygon", ""),
        ("iluvatar", "1e3e", "iluvatar.com/gpu", "iluvatar", ""),
        ("metax", "9999", "metax-tech.com/gpu", "metax", ""),
        ("mthreads", "1ed5", "mthreads.com/gpu", "mthreads", ""),
        ("nvidia", "10de", "nvidia.com/gpu", "nvidia", "mig"),
        ("thead", "1ded", "alibabacloud.com/ppu", "", "mig"),
    ],
    ids=["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"],
)
def test_table_rows(name: str, pci_vendor: str, resource: str, runtime: str, partition_kind: str) -> None:
    row = manufacturers.get(name)
    assert row is not None
    assert (row.pci_vendor, row.resource, row.runtime, row.partition_kind) == (
        pci_vendor,
        resource,
        runtime,
        partition_kind,
    )
    assert manufacturers.by_resource(resource) is row


def test_table_has_exactly_the_reference_rows() -> None:
    assert sorted(manufacturers.MANUFACTURERS) == [
        "amd",
        "ascend",
        "cambricon",
        "hygon",
        "iluvatar",
        "metax",
        "mthreads",
        "nvidia",
        "thead",
    ]


@pytest.mark.parametrize(
    ("name", "slices", "overcommittable"),
    [("nvidia", 128, True), ("ascend", 63, True), ("cambricon", 16, False), ("hygon", 4, False)],
    ids=["nvidia", "ascend", "cambricon", "hygon"],
)
def test_logical_slices_from_the_doc_table(name: str, slices: int, overcommittable: bool) -> None:
    row = manufacturers.get(name)
    assert row is not None
    assert (row.logical_slices, row.overcommittable) == (slices, overcommittable)


@pytest.mark.parametrize(
    ("lookup", "found"),
    [("NVIDIA", "nvidia"), ("Nvidia", "nvidia"), ("intel", None), ("", None)],
    ids=["upper", "mixed", "unknown", "empty"],
)
def test_get_is_case_insensitive(lookup: str, found: str | None) -> None:
    row = manufacturers.get(lookup)
    assert (row.name if row else None) == found


def test_by_resource_unknown() -> None:
    assert manufacturers.by_resource("example.com/gpu") is None


@pytest.mark.parametrize(
    ("manufacturer", "profile", "published"),
    [
        ("thead", "4g48gb", "4g.48gb"),
        ("nvidia", "3g.40gb", "3g.40gb"),
        ("nvidia", "4g48gb", "4g48gb"),
        ("nvidia", "1g.5gb", "1g.5gb"),
        ("thead", "4g.48gb", "4g.48gb"),
        ("thead", "full", "full"),
    ],
    ids=[
        "thead-joined-gets-dot",
        "nvidia-untouched",
        "nvidia-joined-untouched",
        "nvidia-1g",
        "thead-already-dotted",
        "thead-other-shape",
    ],
)
def test_publish_profile_name(manufacturer: str, profile: str, published: str) -> None:
    row = manufacturers.get(manufacturer)
    assert row is not None
    assert manufacturers.publish_profile_name(row, profile) == published
