"""The NodeFeature a writing TopologySource owns per Node (reference §2.1.1), and the edit detection
that makes the step repair it."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.topology.nodefeatures import nodefeature_body, same_content

if TYPE_CHECKING:
    from collections.abc import Callable

NS = "gpustack-system"
SOURCE = "inventory"
UID = "0b7c6f3e-5d1a-4e2b-9c8d-7a6f5e4d3c2b"
LABELS = {keys.PRIVATE_REGION: "region-a", keys.PRIVATE_ZONE: "zone-a", keys.PRIVATE_RACK: "rack-01"}


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3), written out for the test."""
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) % 2**64
    return h


def body(node: str = "worker-a", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return nodefeature_body(SOURCE, UID, node, LABELS if labels is None else labels, namespace=NS)


@pytest.mark.parametrize("node", ["worker-a", "gpu-node-17.example.internal", "n"])
def test_name_is_fnv1a64_of_uid_nul_node(node: str) -> None:
    digest = fnv1a64(UID.encode() + b"\x00" + node.encode())
    expected = f"gpustack-topology-{digest:016x}"
    assert body(node)["metadata"]["name"] == expected
    assert len(expected) == len("gpustack-topology-") + 16


def test_the_reference_hash_matches_the_published_fnv1a64_vectors() -> None:
    # the FNV test vectors (Landon Curt Noll's FNV page): "" and "a" and "foobar"
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_names_differ_per_node_and_per_source() -> None:
    names = {
        body("worker-a")["metadata"]["name"],
        body("worker-b")["metadata"]["name"],
        nodefeature_body(SOURCE, "another-uid", "worker-a", LABELS, namespace=NS)["metadata"]["name"],
    }
    assert len(names) == 3
    # the NUL separator keeps ("ab", "c") and ("a", "bc") apart
    assert (
        nodefeature_body(SOURCE, "ab", "c", {}, namespace=NS)["metadata"]["name"]
        != nodefeature_body(SOURCE, "a", "bc", {}, namespace=NS)["metadata"]["name"]
    )


def test_body_shape() -> None:
    got = body()
    assert got["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert got["kind"] == "NodeFeature"
    meta = got["metadata"]
    assert meta["namespace"] == NS
    assert meta["labels"] == {
        "nfd.node.kubernetes.io/node-name": "worker-a",
        "topology.gpustack.ai/source-uid": UID,
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "TopologySource",
            "name": SOURCE,
            "uid": UID,
            "controller": True,
        }
    ]  # control without block: blockOwnerDeletion is not set
    assert got["spec"] == {"labels": LABELS}


def test_spec_labels_are_a_copy() -> None:
    labels = dict(LABELS)
    got = body(labels=labels)
    labels[keys.PRIVATE_RACK] = "changed"
    assert got["spec"]["labels"][keys.PRIVATE_RACK] == "rack-01"


# --- same_content ---------------------------------------------------------------------------------------
def cached() -> dict[str, Any]:
    """The desired body as it comes back from the API server (server fields added)."""
    obj = copy.deepcopy(body())
    obj["metadata"].update({"resourceVersion": "17", "uid": "nf-uid", "generation": 1, "managedFields": []})
    obj["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = False
    return obj


def test_same_content_ignores_server_fields() -> None:
    assert same_content(body(), cached())
    assert same_content(body(), body())


def test_same_content_none_is_a_difference() -> None:
    assert not same_content(body(), None)


def edit_added_foreign_key(obj: dict[str, Any]) -> None:
    obj["spec"]["labels"]["feature.gpustack.ai/acceleratable"] = "true"


def edit_changed_value(obj: dict[str, Any]) -> None:
    obj["spec"]["labels"][keys.PRIVATE_RACK] = "rack-99"


def edit_removed_key(obj: dict[str, Any]) -> None:
    del obj["spec"]["labels"][keys.PRIVATE_ZONE]


def edit_no_spec(obj: dict[str, Any]) -> None:
    del obj["spec"]


def edit_missing_owner(obj: dict[str, Any]) -> None:
    del obj["metadata"]["ownerReferences"]


def edit_owner_not_controller(obj: dict[str, Any]) -> None:
    obj["metadata"]["ownerReferences"][0]["controller"] = False


def edit_owner_other_uid(obj: dict[str, Any]) -> None:
    obj["metadata"]["ownerReferences"][0]["uid"] = "someone-else"


def edit_node_name_label(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = "worker-b"


def edit_source_uid_label_dropped(obj: dict[str, Any]) -> None:
    del obj["metadata"]["labels"]["topology.gpustack.ai/source-uid"]


@pytest.mark.parametrize(
    "edit",
    [
        edit_added_foreign_key,
        edit_changed_value,
        edit_removed_key,
        edit_no_spec,
        edit_missing_owner,
        edit_owner_not_controller,
        edit_owner_other_uid,
        edit_node_name_label,
        edit_source_uid_label_dropped,
    ],
)
def test_same_content_detects_an_edit(edit: Callable[[dict[str, Any]], None]) -> None:
    obj = cached()
    edit(obj)
    assert not same_content(body(), obj)


def test_same_content_keeps_an_extra_owner_reference_and_metadata_label() -> None:
    # Non-controller owners and foreign metadata labels do not change what nfd-master projects.
    obj = cached()
    obj["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "y"}
    )
    obj["metadata"]["labels"]["example.com/team"] = "infra"
    assert same_content(body(), obj)
