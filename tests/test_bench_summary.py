"""bench/summary.py: the growth of a figure over fleet sizes, the table, and the size plan of a run.

At the top of tests/ (not in a tests/bench package, which would shadow the repository's ``bench``
directory on the import path).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import summary
from tests.kit.properties import examples

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("points", "exponent", "per_node", "verdict"),
    [
        # linear: 20x the nodes, 20x the writes
        ([(1000, 1000.0), (5000, 5000.0), (20000, 20000.0)], 1.0, 1.0, "linear"),
        # constant: a rate or a ratio that holds
        ([(1000, 180.0), (20000, 180.0)], 0.0, 0.05, "constant"),
        # quadratic: 20x the nodes, 400x the time
        ([(1000, 2.0), (20000, 800.0)], 2.0, 20.0, "superlinear"),
        # square root
        ([(100, 10.0), (10000, 100.0)], 0.5, 0.1, "sublinear"),
        # within the tolerance of linear
        ([(1000, 100.0), (10000, 1100.0)], math.log10(11), 1.1, "linear"),
        # zero everywhere: constant, and the quiet-writes figure reads so
        ([(1000, 0.0), (5000, 0.0)], 0.0, 0.0, "constant"),
    ],
)
def test_growth(points: list[tuple[int, float]], exponent: float, per_node: float, verdict: str) -> None:
    g = summary.growth(points)
    assert g.exponent == pytest.approx(exponent, abs=1e-9)
    assert g.per_node == pytest.approx(per_node)
    assert g.verdict == verdict


@pytest.mark.parametrize(
    "points",
    [
        [(1000, 5.0)],  # one size
        [(1000, 5.0), (1000, 6.0)],  # one size twice
        [(1000, 0.0), (5000, 3.0)],  # zero somewhere, not everywhere
        [(1000, -1.0), (5000, 3.0)],
        [],
    ],
)
def test_growth_undefined(points: list[tuple[int, float]]) -> None:
    assert summary.growth(points) == summary.Growth(None, None, "-")


def test_growth_ignores_point_order() -> None:
    assert summary.growth([(20000, 40.0), (1000, 1.0), (5000, 9.0)]) == summary.growth(
        [(1000, 1.0), (5000, 9.0), (20000, 40.0)]
    )


@settings(max_examples=examples(200))
@given(
    k=st.floats(min_value=-2, max_value=3),
    c=st.floats(min_value=1e-3, max_value=1e6),
    sizes=st.lists(st.integers(min_value=1, max_value=100_000), min_size=2, max_size=5, unique=True),
)
def test_growth_recovers_a_power_law(k: float, c: float, sizes: list[int]) -> None:
    """value = c * n^k at any sizes: the fit's exponent is k and the per-node factor is the ratio's."""
    g = summary.growth([(n, c * n**k) for n in sizes])
    assert g.exponent == pytest.approx(k, abs=1e-6)
    lo, hi = min(sizes), max(sizes)
    assert g.per_node == pytest.approx((hi / lo) ** (k - 1), rel=1e-6)
    assert g.verdict == summary._verdict(g.exponent)


@pytest.mark.parametrize(
    ("k", "verdict"),
    [
        (0.0, "constant"),
        (0.1, "constant"),
        (-0.1, "constant"),
        (-0.5, "decreasing"),
        (0.5, "sublinear"),
        (0.9, "linear"),
        (1.1, "linear"),
        (1.2, "superlinear"),
    ],
)
def test_verdict(k: float, verdict: str) -> None:
    assert summary._verdict(k) == verdict


@pytest.mark.parametrize(
    ("nodes", "label"),
    [(1000, "1k"), (5000, "5k"), (20000, "20k"), (1500, "1.5k"), (500, "500"), (1234, "1234")],
)
def test_size_label(nodes: int, label: str) -> None:
    assert summary.size_label(nodes) == label


def test_table_one_column_per_size_and_growth(tmp_path: Path) -> None:
    summary.write_json(tmp_path / "chain-20000.json", "chain", 20000, {"writes": 40000, "ratio": 0.5})
    summary.write_json(tmp_path / "chain-1000.json", "chain", 1000, {"writes": 2000, "verdict": "ok"})
    (tmp_path / "notes.json").write_text('{"something": "else"}')
    runs = summary.load(tmp_path)
    assert set(runs) == {"chain"}
    lines = summary.table("chain", runs["chain"])
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["chain figure", "1k", "20k", "growth 1k → 20k"]
    rows = {r[0]: r[1:] for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    assert rows["writes"] == ["2,000", "40,000", "x1.00 per node (n^1.00, linear)"]
    # a figure missing at one size, or not a number, has no growth
    assert rows["ratio"] == ["–", "0.50", "-"]
    assert rows["verdict"] == ["ok", "–", "-"]


def test_table_of_one_size_has_no_growth_column(tmp_path: Path) -> None:
    lines = summary.table("simulate", {5000: {"cold apply s": 38.25, "writes": 21000}})
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["simulate figure", "5k"]
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["cold apply s", "38.2"]


def test_parse_sizes_defaults_and_overrides() -> None:
    assert summary.parse_sizes([]) == summary.SIZES
    every = summary.parse_sizes(["1000,2000"])
    assert set(every.values()) == {(1000, 2000)}
    one = summary.parse_sizes(["1000", "chain=1000,5000"], only=["chain", "simulate"])
    assert one == {"simulate": (1000,), "chain": (1000, 5000)}


@pytest.mark.parametrize(
    ("specs", "only", "message"),
    [
        (["1k"], None, "whole numbers"),
        (["nope=1000"], None, "no bench 'nope'"),
        (["chain="], None, "at least one positive size"),
        (["0"], None, "at least one positive size"),
        ([], ["chain", "nope"], "no bench nope"),
    ],
)
def test_parse_sizes_refuses(specs: list[str], only: list[str] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        summary.parse_sizes(specs, only)


def test_command_writes_json_per_bench_and_size(tmp_path: Path) -> None:
    argv = summary.command("chain", 5000, tmp_path, 600)
    assert argv[1].endswith("bench/chain_bench.py")
    assert argv[2:] == ["--nodes", "5000", "--json", str(tmp_path / "chain-5000.json"), "--quiet", "600"]
    assert "--quiet" not in summary.command("simulate", 5000, tmp_path, 600)
