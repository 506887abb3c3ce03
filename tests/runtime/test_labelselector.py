"""Label selectors in kubectl's syntax: what each form selects, what is refused, and a round trip over
random selectors against a direct reading of the requirements."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.runtime.labelselector import SelectorError, parse_selector
from tests.kit.properties import examples

LABELS = {"team": "a", "tier": "gpu", "example.com/zone": "z1", "size": "8", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ("", True),
        ("   ", True),
        ("team", True),
        ("!team", False),
        ("!missing", True),
        ("missing", False),
        ("team=a", True),
        ("team==a", True),
        ("team = a", True),
        ("team=b", False),
        ("team!=b", True),
        ("missing!=b", True),  # != selects objects without the label, as Kubernetes does
        ("team in (a,b)", True),
        ("team in (b, c)", False),
        ("missing in (a)", False),
        ("team notin (b,c)", True),
        ("missing notin (a)", True),
        ("example.com/zone=z1", True),
        ("example.com/zone in (z1),tier=gpu", True),
        ("tier=gpu,team=b", False),
        ("size>4", True),
        ("size<4", False),
        ("team>1", False),  # not an integer: never greater
        ("empty=", True),
        ("empty in (,x)", True),
    ],
)
def test_what_each_form_selects(selector: str, selected: bool) -> None:
    assert parse_selector(selector).matches(LABELS) is selected


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ("team=a,", "empty requirement"),
        (",team", "empty requirement"),
        ("team in a", "parenthesised"),
        ("team in (a", "unbalanced"),
        ("team=a)", "unbalanced"),
        ("team=(a)", "one value"),
        ("-team=a", "invalid label key"),
        ("Example.com/zone=a", "prefix"),
        ("/zone=a", "prefix"),
        ("team=a b", "cannot parse"),
        ("team=-a", "invalid value"),
        ("size>four", "integer"),
        ("!team=a", "key alone"),
        (f"team={'a' * 64}", "invalid value"),
    ],
)
def test_a_malformed_selector_is_refused_naming_what_is_wrong(selector: str, why: str) -> None:
    with pytest.raises(SelectorError, match=why):
        parse_selector(selector)


_KEYS = st.sampled_from(["team", "tier", "example.com/zone", "x"])
_VALUES = st.sampled_from(["a", "b", "z1", "gpu", "v-1"])


@st.composite
def _requirement(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    op = draw(st.sampled_from(["exists", "!", "=", "!=", "in", "notin"]))
    values = tuple(draw(st.lists(_VALUES, min_size=1, max_size=3)))
    return draw(_KEYS), op, values if op in ("in", "notin") else values[:1] if op in ("=", "!=") else ()


def _render(key: str, op: str, values: tuple[str, ...]) -> str:
    if op == "exists":
        return key
    if op == "!":
        return f"!{key}"
    if op in ("in", "notin"):
        return f"{key} {op} ({', '.join(values)})"
    return f"{key}{op}{values[0]}"


def _direct(key: str, op: str, values: tuple[str, ...], labels: dict[str, str]) -> bool:
    if op == "exists":
        return key in labels
    if op == "!":
        return key not in labels
    if op in ("=", "in"):
        return labels.get(key) in values
    return labels.get(key) not in values


@settings(max_examples=examples(300))
@given(
    requirements=st.lists(_requirement(), max_size=4),
    labels=st.dictionaries(_KEYS, _VALUES, max_size=4),
)
def test_a_rendered_selector_selects_what_its_requirements_say(
    requirements: list[tuple[str, str, tuple[str, ...]]], labels: dict[str, str]
) -> None:
    text = ",".join(_render(*r) for r in requirements)
    expected = all(_direct(*r, labels) for r in requirements)
    assert parse_selector(text).matches(labels) is expected
