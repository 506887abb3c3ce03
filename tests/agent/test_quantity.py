"""The agent reads quantities through the runtime's exact parser: ``3500m`` is 4 cores, not 3."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpustack_worker.runtime.quantity import ceil_quantity, parse


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("64", Decimal(64), id="plain-cores"),
        pytest.param("3500m", Decimal("3.5"), id="milli-cores"),
        pytest.param("16Gi", Decimal(16 * 2**30), id="binary-suffix"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("100k", Decimal(100_000), id="decimal-suffix"),
        pytest.param("0.5", Decimal("0.5"), id="decimal-fraction"),
        pytest.param("-2", Decimal(-2), id="negative"),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse(text) == value


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
    assert parse("12 cores") is None
