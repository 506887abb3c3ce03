"""Kubernetes quantities by value: exact parsing, rounding up (``3500m`` is 4 cores, not 3), equality."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpustack_worker.runtime.quantity import ceil_quantity, parse, same_quantity


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
    ("text", "whole"),
    [
        pytest.param("64", 64, id="whole"),
        pytest.param("3500m", 4, id="milli-rounded-up"),
        pytest.param("4000m", 4, id="exact-milli"),
        pytest.param("1m", 1, id="tiny"),
        pytest.param("1e3", 1000, id="exponent"),
        pytest.param("1Ki", 1024, id="binary-suffix"),
        pytest.param(None, 0, id="absent"),
        pytest.param("", 0, id="empty"),
        pytest.param("lots", 0, id="unparsable"),
    ],
)
def test_ceil_quantity(text: str | None, whole: int) -> None:
    assert ceil_quantity(text) == whole


def test_parse_quantity_rejects_garbage() -> None:
    assert parse("12 cores") is None


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param("64", "64000m", True, id="milli"),
        pytest.param("1Gi", "1024Mi", True, id="binary"),
        pytest.param("6400k", "6400000", True, id="server-canonical"),
        pytest.param("1G", "1Gi", False, id="decimal-vs-binary"),
        pytest.param("1", "x", False, id="not-a-quantity"),
    ],
)
def test_same_quantity(a: str, b: str, same: bool) -> None:
    assert same_quantity(a, b) is same


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1e1000000", id="issue-8-cpu-as-written"),
        pytest.param("10e999999", id="issue-8-cpu-as-stored"),
        pytest.param("1e99999999999", id="exponent-beyond-int-conversion"),
        pytest.param("9" * 5000, id="5000-digit-mantissa"),
        pytest.param("1e65", id="just-above-range"),
        pytest.param("1e-65", id="just-below-range"),
        pytest.param("1e-1000000000", id="tiny"),
        pytest.param("1" * 70 + "Ei", id="huge-binary"),
    ],
)
def test_out_of_range_is_none_never_an_exception(text: str) -> None:
    """Parsing never raises: what cannot be evaluated in range reads as "not a quantity"."""
    assert parse(text) is None
    assert ceil_quantity(text) == 0
    assert same_quantity(text, text) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(12, Decimal(12), id="bare-int-from-the-server"),
        pytest.param(True, None, id="bool"),
        pytest.param(1.5, None, id="float"),
        pytest.param(None, None, id="none"),
        pytest.param({"a": 1}, None, id="mapping"),
        pytest.param(10**80, None, id="int-out-of-range"),
        pytest.param("0e999999", Decimal(0), id="zero-with-huge-exponent"),
        pytest.param("1e64", Decimal("1e64"), id="upper-edge"),
        pytest.param("007", Decimal(7), id="leading-zeros"),
    ],
)
def test_parse_any_input(value: object, expected: Decimal | None) -> None:
    assert parse(value) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (8, "8"),
        (48, "48"),
        (1000, "1k"),
        (1_600_000, "1600k"),
        (16_000_000, "16M"),
        (1_234_567, "1234567"),
    ],
)
def test_format_integer_is_the_canonical_form(value: int, text: str) -> None:
    from gpustack_worker.runtime.quantity import format_integer, parse

    assert format_integer(value) == text
    assert parse(text) == value
