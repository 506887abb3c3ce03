from __future__ import annotations

from fractions import Fraction

import pytest

from gpustack_worker.agent.quantity import ceil_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("64", Fraction(64), id="plain-cores"),
        pytest.param("3500m", Fraction(7, 2), id="milli-cores"),
        pytest.param("16Gi", Fraction(16 * 2**30), id="binary-suffix"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param("100k", Fraction(100_000), id="decimal-suffix"),
        pytest.param("0.5", Fraction(1, 2), id="decimal-fraction"),
        pytest.param("-2", Fraction(-2), id="negative"),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        pytest.param("64", 64, id="whole"),
        pytest.param("3500m", 4, id="rounded-up"),
        pytest.param("4000m", 4, id="exact-milli"),
        pytest.param("1m", 1, id="tiny"),
        pytest.param(None, 0, id="absent"),
        pytest.param("", 0, id="empty"),
        pytest.param("lots", 0, id="unparsable"),
    ],
)
def test_ceil_quantity(text: str | None, cores: int) -> None:
    assert ceil_quantity(text) == cores


def test_parse_quantity_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity("12 cores")
