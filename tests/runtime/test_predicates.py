"""Watch predicates: ``labels_changed_except`` passes exactly the label changes outside the ignored
prefixes (and every create and delete)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.runtime.controller import labels_changed_except
from tests.kit.properties import examples

FIT = keys.FIT_LABEL_DOMAINS[0] + "nvidia"
OTHER = "feature.node.kubernetes.io/cpu-model"
ignore_fit = labels_changed_except(keys.FIT_LABEL_DOMAINS)


def node(labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n"}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta}


def test_table() -> None:
    assert ignore_fit("ADDED", None, node({FIT: "1"}))
    assert ignore_fit("DELETED", node({FIT: "1"}), None)
    assert not ignore_fit("MODIFIED", node({FIT: "1"}), node({FIT: "2"}))
    assert not ignore_fit("MODIFIED", node({OTHER: "a"}), node({OTHER: "a", FIT: "2"}))
    assert not ignore_fit("MODIFIED", node(None), node({FIT: "2"}))
    assert ignore_fit("MODIFIED", node({OTHER: "a", FIT: "1"}), node({OTHER: "b", FIT: "1"}))
    assert ignore_fit("MODIFIED", node({FIT: "1"}), node({FIT: "1", OTHER: "b"}))
    assert not ignore_fit("MODIFIED", node({OTHER: "a"}), node({OTHER: "a"}))


_keys = st.sampled_from([FIT, keys.FIT_LABEL_DOMAINS[1] + "x", OTHER, keys.TOPOLOGY_PROFILE])
_labels = st.none() | st.dictionaries(_keys, st.sampled_from(["1", "2"]), max_size=4)


@settings(max_examples=examples(300))
@given(_labels, _labels)
def test_passes_exactly_a_change_outside_the_ignored_prefixes(
    old: dict[str, str] | None, new: dict[str, str] | None
) -> None:
    def outside(labels: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in (labels or {}).items() if not k.startswith(keys.FIT_LABEL_DOMAINS)}

    assert ignore_fit("MODIFIED", node(old), node(new)) == (outside(old) != outside(new))
