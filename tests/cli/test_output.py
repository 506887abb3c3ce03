"""``-o text|json|yaml``: one flag, one printer (:mod:`gpustack_worker.cli.output`)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.cli.output import FORMATS, add_output_flag, emit, is_object, kube_list, render, to_data
from tests.kit import kueue
from tests.kit.properties import examples

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
FLAVOR = kueue.resource_flavor("f")


def _text(obj: Any) -> str:
    return f"{len(obj)} things"


def test_the_flag_takes_the_three_formats_and_defaults_to_text() -> None:
    parser = argparse.ArgumentParser()
    add_output_flag(parser)
    assert parser.parse_args([]).output == "text"
    assert [parser.parse_args(["-o", f]).output for f in FORMATS] == ["text", "json", "yaml"]
    assert parser.parse_args(["--output", "yaml"]).output == "yaml"
    with pytest.raises(SystemExit):
        parser.parse_args(["-o", "wide"])


def test_a_list_of_kubernetes_objects_is_a_kind_list_in_yaml_and_json() -> None:
    for fmt, load in (("yaml", yaml.safe_load), ("json", json.loads)):
        doc = load(render([NODE, FLAVOR], fmt, _text))
        assert doc == {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": [NODE, FLAVOR],
        }


def test_anything_else_is_printed_as_it_is() -> None:
    entries = [{"name": "a", "spec": {"x": 1}}]
    assert json.loads(render(entries, "json", _text)) == entries
    assert yaml.safe_load(render(entries, "yaml", _text)) == entries
    mixed = [NODE, {"name": "not an object"}]
    assert yaml.safe_load(render(mixed, "yaml", _text)) == mixed
    assert yaml.safe_load(render([], "yaml", _text)) == []
    assert json.loads(render(NODE, "json", _text)) == NODE  # one object stays one object


def test_text_is_the_renderers_with_one_final_newline() -> None:
    assert render([1, 2], "text", _text) == "2 things\n"
    assert render([1, 2], "text", lambda _: "two\n") == "two\n"
    assert render([], "text", lambda _: "") == ""
    with pytest.raises(ValueError, match="unknown output format 'wide'"):
        render([], "wide", _text)


@dataclasses.dataclass
class _Result:
    name: str
    ok: bool


class _HasAsDict:
    def as_dict(self) -> dict[str, Any]:
        return {"b": (1, 2)}


def test_dataclasses_and_as_dict_become_plain_data() -> None:
    assert to_data([_Result("a", True)]) == [{"name": "a", "ok": True}]
    assert to_data(_HasAsDict()) == {"b": [1, 2]}
    out = io.StringIO()
    emit(_Result("a", False), "yaml", _text, stream=out)
    assert yaml.safe_load(out.getvalue()) == {"name": "a", "ok": False}


def test_is_object_needs_both_api_version_and_kind() -> None:
    assert is_object(NODE)
    assert not is_object({"kind": "Node"})
    assert not is_object({"apiVersion": "v1", "kind": ""})
    assert not is_object(["apiVersion", "kind"])
    assert kube_list([])["items"] == []


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
_objects = st.builds(
    lambda kind, name, labels: {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
    },
    st.sampled_from(["Node", "ConfigMap", "Pod"]),
    _names,
    st.dictionaries(_names, st.text(max_size=10), max_size=3),
)


@settings(max_examples=examples(100))
@given(st.lists(_objects, min_size=1, max_size=6), st.sampled_from(["json", "yaml"]))
def test_every_list_of_objects_round_trips_as_a_list_in_both_formats(
    items: list[dict[str, Any]], fmt: str
) -> None:
    doc = (json.loads if fmt == "json" else yaml.safe_load)(render(items, fmt, _text))
    assert doc["kind"] == "List"
    assert doc["apiVersion"] == "v1"
    assert doc["items"] == items


@pytest.mark.parametrize("value", ["\x85", "\u2028", "ünïcode", "a\nb"])
def test_yaml_keeps_values_that_look_like_line_breaks(value: str) -> None:
    node = {**NODE, "metadata": {"name": "n1", "labels": {"k": value}}}
    assert yaml.safe_load(render([node], "yaml", _text))["items"] == [node]
