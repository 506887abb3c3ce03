"""LabelSelector validation and matching, with Kubernetes' semantics (labels.Requirement.Matches)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.topology.selector import compile_selector, matches, selector_errors

GPU = {"gpu": "true", "zone": "a", "example.com/rack": "r1", "empty": ""}
CPU = {"zone": "b"}
BARE: dict[str, str] = {}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


# selector, then whether it selects GPU, CPU, BARE
CASES: list[tuple[str, dict[str, Any] | None, tuple[bool, bool, bool]]] = [
    ("empty-selects-all", {}, (True, True, True)),
    ("empty-parts-select-all", {"matchLabels": {}, "matchExpressions": []}, (True, True, True)),
    ("null-parts-select-all", {"matchLabels": None, "matchExpressions": None}, (True, True, True)),
    ("none-selects-nothing", None, (False, False, False)),
    ("match-label", {"matchLabels": {"gpu": "true"}}, (True, False, False)),
    ("match-empty-value", {"matchLabels": {"empty": ""}}, (True, False, False)),
    ("match-labels-anded", {"matchLabels": {"gpu": "true", "zone": "b"}}, (False, False, False)),
    ("in", {"matchExpressions": [expr("zone", "In", "a", "b")]}, (True, True, False)),
    ("in-one", {"matchExpressions": [expr("zone", "In", "b")]}, (False, True, False)),
    ("notin-missing-key-matches", {"matchExpressions": [expr("zone", "NotIn", "a")]}, (False, True, True)),
    ("exists", {"matchExpressions": [expr("gpu", "Exists")]}, (True, False, False)),
    ("exists-empty-value", {"matchExpressions": [expr("empty", "Exists")]}, (True, False, False)),
    ("does-not-exist", {"matchExpressions": [expr("gpu", "DoesNotExist")]}, (False, True, True)),
    (
        "labels-and-expressions-anded",
        {"matchLabels": {"zone": "a"}, "matchExpressions": [expr("example.com/rack", "In", "r1", "r2")]},
        (True, False, False),
    ),
    ("invalid-selects-nothing", {"matchExpressions": [expr("zone", "In")]}, (False, False, False)),
    (
        "invalid-operator-selects-nothing",
        {"matchExpressions": [expr("zone", "Gt", "1")]},
        (False, False, False),
    ),
    ("invalid-key-selects-nothing", {"matchLabels": {"bad key": "x"}}, (False, False, False)),
    ("typo-selects-nothing", {"matchLabel": {"gpu": "true"}}, (False, False, False)),
]


@pytest.mark.parametrize(("selector", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matching(selector: dict[str, Any] | None, expected: tuple[bool, bool, bool]) -> None:
    predicate = compile_selector(selector)
    assert tuple(predicate(labels) for labels in (GPU, CPU, BARE)) == expected
    assert tuple(matches(selector, labels) for labels in (GPU, CPU, BARE)) == expected


def test_a_compiled_selector_does_not_see_later_edits() -> None:
    selector: dict[str, Any] = {"matchLabels": {"zone": "a"}}
    predicate = compile_selector(selector)
    selector["matchLabels"]["zone"] = "b"
    assert predicate(GPU) is True
    assert predicate(CPU) is False


@pytest.mark.parametrize(
    "selector",
    [
        {},
        {"matchLabels": {"node-role.kubernetes.io/worker": "", "a": "b"}},
        {"matchExpressions": [expr("a", "In", "x", "y"), expr("b", "NotIn", ""), expr("c", "Exists")]},
        {"matchExpressions": [{"key": "c", "operator": "DoesNotExist", "values": []}]},
        {"matchExpressions": [{"key": "c", "operator": "Exists", "values": None}]},
    ],
)
def test_valid_selectors(selector: dict[str, Any]) -> None:
    assert selector_errors(selector, "spec.nodeSelector") == []


@pytest.mark.parametrize(
    ("selector", "path", "fragment"),
    [
        ("zone=a", "sel", "must be a label selector object"),
        ({"matchLabels": ["zone"]}, "sel.matchLabels", "must be a map"),
        ({"matchLabels": {"-k": "v"}}, "sel.matchLabels[-k]", "not a valid label key"),
        ({"matchLabels": {"a/b/c": "v"}}, "sel.matchLabels[a/b/c]", "not a valid label key"),
        ({"matchLabels": {"k": "v" * 64}}, "sel.matchLabels[k]", "no more than 63"),
        ({"matchLabels": {"k": None}}, "sel.matchLabels[k]", "must be a string"),
        ({"matchLabels": {3: "v"}}, "sel.matchLabels[3]", "key must be a string"),
        ({"matchExpressions": {"key": "a"}}, "sel.matchExpressions", "must be a list"),
        ({"matchExpressions": "a"}, "sel.matchExpressions", "must be a list"),
        ({"matchExpressions": ["a"]}, "sel.matchExpressions[0]", "must be an object"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "sel.matchExpressions[0].key", "required"),
        (
            {"matchExpressions": [{"key": 5, "operator": "Exists"}]},
            "sel.matchExpressions[0].key",
            "must be a string",
        ),
        (
            {"matchExpressions": [{"key": "a b", "operator": "Exists"}]},
            "sel.matchExpressions[0].key",
            "label key",
        ),
        ({"matchExpressions": [{"key": "a"}]}, "sel.matchExpressions[0].operator", "required"),
        (
            {"matchExpressions": [expr("a", "in", "x")]},
            "sel.matchExpressions[0].operator",
            "'in' is not a valid",
        ),
        (
            {"matchExpressions": [expr("a", "Lt", "1")]},
            "sel.matchExpressions[0].operator",
            "'Lt' is not a valid",
        ),
        (
            {"matchExpressions": [expr("a", "In")]},
            "sel.matchExpressions[0].values",
            "at least one value for operator In",
        ),
        ({"matchExpressions": [expr("a", "NotIn")]}, "sel.matchExpressions[0].values", "operator NotIn"),
        ({"matchExpressions": [expr("a", "Exists", "x")]}, "sel.matchExpressions[0].values", "must be empty"),
        (
            {"matchExpressions": [expr("a", "DoesNotExist", "x")]},
            "sel.matchExpressions[0].values",
            "must be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            "sel.matchExpressions[0].values",
            "must be a list of strings",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            "sel.matchExpressions[0].values",
            "must be a list of strings",
        ),
        (
            {"matchExpressions": [expr("a", "In", "ok", "not ok")]},
            "sel.matchExpressions[0].values[1]",
            "label value",
        ),
        ({"matchLabels": {}, "extra": 1}, "sel", "unknown field(s): extra"),
    ],
)
def test_invalid_selectors_name_the_field(selector: Any, path: str, fragment: str) -> None:
    errors = selector_errors(selector, "sel")
    paths = [e.path for e in errors]
    assert path in paths, errors
    assert any(fragment in e.message for e in errors if e.path == path), errors
    assert compile_selector(selector)(GPU) is False


def test_none_is_not_an_error_here() -> None:
    assert selector_errors(None, "sel") == []
