from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.agent.rdma import desired_labels
from gpustack_worker.api import keys

from .builders import devices


def link(
    name: str,
    *,
    rdma: bool = True,
    state: str = "Active",
    numa: str | None = None,
    distance: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "rdma": rdma, "state": state, "linkLayer": "InfiniBand"}
    if numa is not None:
        out["numaAffinity"] = numa
    if distance is not None:
        out["distance"] = distance
    return out


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        pytest.param([], {}, id="no-links"),
        pytest.param([link("eth0", rdma=False)], {}, id="plain-ethernet"),
        pytest.param([link("ib0", state="Down"), link("ib1", state="Init")], {}, id="no-active-link"),
        pytest.param([link("ib0")], {keys.RDMA_CAPABLE: "true"}, id="capable-no-details"),
        pytest.param(
            [
                link("ib0", numa="1", distance="PHB"),
                link("ib1", numa="0", distance="PIX"),
                link("ib2", numa="1", distance="SYS"),
            ],
            {keys.RDMA_CAPABLE: "true", keys.RDMA_NUMA: "0_1", keys.RDMA_DISTANCE: "PIX"},
            id="numa-sorted-unique-closest-distance",
        ),
        pytest.param(
            [
                link("ib0", numa="10", distance="NODE"),
                link("ib1", numa="2"),
                link("ib2", state="Down", numa="0", distance="PIX"),
            ],
            {keys.RDMA_CAPABLE: "true", keys.RDMA_NUMA: "2_10", keys.RDMA_DISTANCE: "NODE"},
            id="down-links-do-not-count-numeric-sort",
        ),
        pytest.param(
            [link("ib0", distance="weird")], {keys.RDMA_CAPABLE: "true"}, id="unknown-distance-omitted"
        ),
    ],
)
def test_rdma_labels(links: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert desired_labels(devices([], interfaces=links).interfaces) == expected
