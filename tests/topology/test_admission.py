"""The TopologySource AdmissionReview handler: what it allows, what it refuses and how it answers."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from gpustack_worker.topology.admission import review

NS = "gpustack-system"
VALID: dict[str, Any] = {
    "nodeSelector": {},
    "levels": ["topology.gpustack.ai/zone"],
    "configMap": {
        "configMapRef": {"namespace": NS, "name": "inventory"},
        "key": "snapshot.yaml",
        "maxStaleness": "10m",
    },
}
INVALID = copy.deepcopy(VALID)
INVALID["configMap"]["configMapRef"]["namespace"] = "default"
INVALID["levels"] = ["kubernetes.io/hostname"]
RESOURCE = {"group": "worker.gpustack.ai", "version": "v1alpha1", "resource": "topologysources"}


def source(spec: Any, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "TopologySource",
        "metadata": {"name": "inv", **meta},
        "spec": spec,
    }


def request(operation: str, obj: Any = None, old: Any = None, **extra: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"uid": "7f0c", "operation": operation, "resource": RESOURCE, **extra}
    if obj is not None:
        req["object"] = obj
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def response(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    orjson.dumps(answer)  # serialisable as the server will send it
    result: dict[str, Any] = answer["response"]
    return result


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_valid_source_is_allowed(operation: str) -> None:
    old = source({**VALID, "levels": ["topology.gpustack.ai/rack"]}) if operation == "UPDATE" else None
    assert response(review(request(operation, source(VALID), old), namespace=NS)) == {
        "uid": "7f0c",
        "allowed": True,
    }


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_an_invalid_source_is_denied_listing_every_field(operation: str) -> None:
    old = source(VALID) if operation == "UPDATE" else None
    res = response(review(request(operation, source(INVALID), old), namespace=NS))
    assert res["uid"] == "7f0c"
    assert res["allowed"] is False
    status = res["status"]
    assert (status["code"], status["reason"], status["status"]) == (403, "Forbidden", "Failure")
    assert status["message"] == (
        "TopologySource inv is invalid: spec.levels[0]: kubernetes.io/hostname is always appended "
        "implicitly as the finest level; do not list it; spec.configMap.configMapRef.namespace: must be the "
        "worker namespace gpustack-system (is default)"
    )
    assert status["details"]["kind"] == "TopologySource"
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("spec.levels[0]", "FieldValueInvalid"),
        ("spec.configMap.configMapRef.namespace", "FieldValueInvalid"),
    ]


def test_update_leaving_the_spec_alone_is_allowed_even_when_it_breaks_a_rule() -> None:
    # An object admitted before the rule (or before the webhook) must still take metadata edits and lose
    # its finalizer.
    old = source(INVALID, finalizers=["worker.gpustack.ai/topology-source"])
    new = source(INVALID, labels={"team": "infra"})
    assert response(review(request("UPDATE", new, old), namespace=NS))["allowed"] is True


def test_update_of_an_object_being_deleted_is_allowed() -> None:
    new = source({**INVALID, "levels": ["x y"]}, deletionTimestamp="2026-01-01T00:00:00Z")
    assert response(review(request("UPDATE", new, source(INVALID)), namespace=NS))["allowed"] is True


def test_update_that_changes_an_invalid_spec_is_checked() -> None:
    changed = {**INVALID, "levels": ["topology.gpustack.ai/zone"]}
    res = response(review(request("UPDATE", source(changed), source(INVALID)), namespace=NS))
    assert res["allowed"] is False
    assert "spec.configMap.configMapRef.namespace" in res["status"]["message"]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_are_allowed(operation: str) -> None:
    assert response(review(request(operation, old=source(INVALID)), namespace=NS)) == {
        "uid": "7f0c",
        "allowed": True,
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "no request"),
        ({"request": "x"}, "no request"),
        (request("CREATE"), "without a readable object"),
        (request("CREATE", obj=["not", "an", "object"]), "without a readable object"),
        (
            request("CREATE", source(VALID), resource={"group": "", "resource": "pods"}),
            "validates topologysources",
        ),
    ],
)
def test_unreadable_requests_are_denied_with_a_message(body: dict[str, Any], fragment: str) -> None:
    res = response(review(body, namespace=NS))
    assert res["allowed"] is False
    assert fragment in res["status"]["message"]


@pytest.mark.parametrize("spec", [None, "x", [], {"levels": 3}])
def test_an_unreadable_spec_is_denied_not_raised(spec: Any) -> None:
    res = response(review(request("CREATE", source(spec)), namespace=NS))
    assert res["allowed"] is False
    assert res["status"]["message"].startswith("TopologySource inv is invalid: spec")


def test_the_uid_is_echoed_and_a_missing_one_is_empty() -> None:
    body = request("CREATE", source(VALID))
    del body["request"]["uid"]
    assert response(review(body, namespace=NS))["uid"] == ""
