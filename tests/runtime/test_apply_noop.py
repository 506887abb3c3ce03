"""The client-side no-op decision of server-side apply (pure; managedFields as the server writes them)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.runtime.apply import desired_fields, is_noop, owned_fields
from gpustack_worker.runtime.transform import make_transform

MANAGER = "gpustack-worker/node-agent"

# managedFields exactly as kube-apiserver v1.35 returned them for the two applies below.
SPEC_ENTRY = {
    "manager": MANAGER,
    "operation": "Apply",
    "apiVersion": "v1",
    "time": "2026-01-01T00:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:taints": {}}},
}
STATUS_ENTRY = {
    "manager": MANAGER,
    "operation": "Apply",
    "apiVersion": "v1",
    "time": "2026-01-01T00:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {
        "f:status": {
            "f:capacity": {"f:cpu": {}, "f:memory": {}},
            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}},
        }
    },
    "subresource": "status",
}
OTHER_ENTRY = {
    "manager": "kubelet",
    "operation": "Update",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:labels": {"f:b": {}}}},
}

SPEC_BODY: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"a": "1"}},
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "value": "v"}]},
}
STATUS_BODY: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {
        "capacity": {"cpu": "64000m", "memory": "1024Mi"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    },
}
SERVER_NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "uid": "u1",
        "resourceVersion": "42",
        "labels": {"a": "1", "b": "from-kubelet"},
        "managedFields": [SPEC_ENTRY, STATUS_ENTRY, OTHER_ENTRY],
    },
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "value": "v"}]},
    "status": {
        "capacity": {"cpu": "64", "memory": "1Gi"},  # canonicalised by the server
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
        "images": [{"names": ["x"], "sizeBytes": 1}],
    },
}
CACHED = make_transform([MANAGER])(copy.deepcopy(SERVER_NODE))


def changed(body: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("body", "subresource", "expected"),
    [
        (SPEC_BODY, None, True),
        (STATUS_BODY, "status", True),
        (changed(SPEC_BODY, ("metadata", "labels", "a"), "2"), None, False),
        (changed(SPEC_BODY, ("metadata", "labels"), None), None, False),
        (changed(SPEC_BODY, ("metadata", "labels", "c"), "new"), None, False),
        (changed(SPEC_BODY, ("metadata", "labels", "b"), "from-kubelet"), None, False),
        (changed(SPEC_BODY, ("spec", "taints"), []), None, False),
        (changed(STATUS_BODY, ("status", "capacity", "cpu"), "64"), "status", True),
        (changed(STATUS_BODY, ("status", "capacity", "cpu"), "63"), "status", False),
        (changed(STATUS_BODY, ("status", "conditions"), []), "status", False),
        (SPEC_BODY, "status", False),
    ],
    ids=[
        "same-spec",
        "same-status-canonical-quantities",
        "label-value-changed",
        "label-removed-needs-release",
        "label-added",
        "field-owned-by-someone-else",
        "list-emptied",
        "quantity-same-spelling",
        "quantity-changed",
        "owned-list-item-removed",
        "wrong-subresource-entry",
    ],
)
def test_is_noop(body: dict[str, Any], subresource: str | None, expected: bool) -> None:
    assert is_noop(body, CACHED, MANAGER, subresource) is expected


def test_not_noop_without_cache_or_without_our_entry() -> None:
    assert not is_noop(SPEC_BODY, None, MANAGER)
    assert not is_noop(SPEC_BODY, CACHED, "someone-else")


def test_label_values_are_not_compared_as_quantities() -> None:
    cached = make_transform([MANAGER])(changed(SERVER_NODE, ("metadata", "labels", "a"), "1000m"))
    assert not is_noop(SPEC_BODY, cached, MANAGER)


@pytest.mark.parametrize(
    ("fields_v1", "expected"),
    [
        ({"f:metadata": {"f:labels": {"f:a": {}}}}, {("metadata", "labels", "a"): None}),
        ({"f:spec": {"f:taints": {}}}, {("spec", "taints"): None}),
        (
            {"f:status": {"f:conditions": {'k:{"type":"A"}': {".": {}}, 'k:{"type":"B"}': {".": {}}}}},
            {("status", "conditions"): 2},
        ),
        ({"f:spec": {"f:finalizers": {'v:"x"': {}}}}, {("spec", "finalizers"): 1}),
    ],
    ids=["map-leaf", "atomic-list", "keyed-list", "set-list"],
)
def test_owned_fields(fields_v1: dict[str, Any], expected: dict[tuple[str, ...], int | None]) -> None:
    assert owned_fields(fields_v1) == expected


def test_desired_fields_ignores_identity() -> None:
    assert desired_fields(SPEC_BODY) == {("metadata", "labels", "a"): None, ("spec", "taints"): 1}


def test_empty_intent_is_noop_only_while_we_own_nothing() -> None:
    # The server drops a manager's managedFields entry once it owns nothing: applying nothing again
    # would be a write every reconcile.
    empty = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert is_noop(empty, CACHED, "manager-that-owns-nothing")
    # While we still own fields, an empty intent must be sent so the server removes them.
    assert not is_noop(empty, CACHED, MANAGER)
    assert not is_noop(empty, None, MANAGER)
