"""The Applier's ``expected_change`` hook: a field another manager changed by its own protocol is written
back like any repair but not reported (no log line, no metric, no ``on_repair``); the fields the predicate
does not expect still are. And :func:`field_owners`, which such a predicate reads: the cached managedFields
entries owning a field, a part of it or a whole containing it, per subresource."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.runtime.apply import Applier, FieldPath, dotted, field_owners
from gpustack_worker.runtime.resources import Resource

CM = Resource("", "v1", "ConfigMap", "configmaps", namespaced=False)
MANAGER = "ours"
PROTOCOL = "the-protocol"


class Cache:
    field_managers = frozenset({MANAGER, PROTOCOL})


def _object(labels: dict[str, str], entries: dict[str, set[str]]) -> dict[str, Any]:
    managed = [
        {
            "manager": manager,
            "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in sorted(keys)}}},
        }
        for manager, keys in entries.items()
        if keys
    ]
    return {"metadata": {"name": "x", "labels": dict(labels), "managedFields": managed}}


def _body(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": labels}}


class Client:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.applied.append(body)
        labels = dict(body["metadata"]["labels"])
        return _object(labels, {MANAGER: set(labels)})


def _by_protocol(_resource: Resource, cached: Any, path: FieldPath) -> bool:
    """The predicate a caller would write: the protocol's manager owns the field now."""
    return PROTOCOL in field_owners(cached, path)


# (labels on the object, who owns which label, the labels reported as repaired)
CASES = [
    pytest.param({"a": "1", "b": "reset"}, {MANAGER: {"a"}, PROTOCOL: {"b"}}, [], id="protocol-only"),
    pytest.param({"a": "1", "b": "admin"}, {MANAGER: {"a"}, "kubectl": {"b"}}, ["b"], id="admin-only"),
    pytest.param(
        {"a": "admin", "b": "reset"},
        {MANAGER: {"z"}, "kubectl": {"a"}, PROTOCOL: {"b"}},
        ["a"],
        id="admin-and-protocol",
    ),
]


@pytest.mark.parametrize(("labels", "owners", "reported"), CASES)
async def test_expected_changes_are_written_back_but_not_reported(
    labels: dict[str, str], owners: dict[str, set[str]], reported: list[str]
) -> None:
    client = Client()
    repairs: list[tuple[str, ...]] = []
    applier = Applier(
        client,  # type: ignore[arg-type]
        MANAGER,
        cache=Cache(),
        on_repair=lambda _r, _o, fields: repairs.append(fields),
        expected_change=_by_protocol,
    )
    desired = _body({"a": "1", "b": "2", **({"z": "1"} if "z" in owners.get(MANAGER, ()) else {})})
    counted = {"field_manager": MANAGER, "kind": "ConfigMap"}
    before = REGISTRY.get_sample_value("gpustack_apply_repairs_total", counted) or 0.0
    written = await applier.apply(CM, desired, _object(labels, owners))
    assert written is not None and len(client.applied) == 1  # written back either way
    expected = [tuple(f"metadata.labels.{k}" for k in reported)] if reported else []
    assert repairs == expected
    after = REGISTRY.get_sample_value("gpustack_apply_repairs_total", counted) or 0.0
    assert after == before + (1 if reported else 0)


async def test_without_a_predicate_every_taken_field_is_reported() -> None:
    client = Client()
    repairs: list[tuple[str, ...]] = []
    applier = Applier(
        client,  # type: ignore[arg-type]
        MANAGER,
        cache=Cache(),
        on_repair=lambda _r, _o, fields: repairs.append(fields),
    )
    await applier.apply(
        CM, _body({"a": "1", "b": "2"}), _object({"a": "1", "b": "r"}, {MANAGER: {"a"}, PROTOCOL: {"b"}})
    )
    assert repairs == [("metadata.labels.b",)]


def test_field_owners_reads_the_entries_of_the_subresource_at_any_granularity() -> None:
    obj: dict[str, Any] = {
        "metadata": {
            "managedFields": [
                {
                    "manager": "m1",
                    "fieldsV1": {"f:status": {"f:x": {}, "f:y": {"f:z": {}}}},
                    "subresource": "status",
                },
                {"manager": "m2", "fieldsV1": {"f:status": {"f:y": {}}}, "subresource": "status"},
                {"manager": "m3", "fieldsV1": {"f:status": {"f:x": {}}}},
            ]
        }
    }
    x = ("f:status", "f:x")
    yz = ("f:status", "f:y", "f:z")
    assert field_owners(obj, x, "status") == {"m1"}
    assert field_owners(obj, x) == {"m3"}
    assert field_owners(obj, yz, "status") == {"m1", "m2"}  # m2 owns the whole y
    assert field_owners(obj, ("f:status", "f:y"), "status") == {"m1", "m2"}  # m1 owns a part of it
    assert field_owners(obj, ("f:status", "f:w"), "status") == frozenset()
    assert field_owners({}, x) == frozenset()
    assert dotted(yz) == "status.y.z"
