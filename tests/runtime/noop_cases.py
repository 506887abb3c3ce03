"""The apply no-op table: one row per question the check must answer, over objects the real server stored.

Each row takes a fixture (``fixtures/<case>.json``: an apply body and the object the API server stored
after it, see ``capture_fixtures.py``), edits the body, and says whether applying the edited body would
change nothing (``noop``). ``test_apply_noop.py`` runs the rows offline against the committed fixtures;
``test_capture_cluster.py`` runs them against a fresh capture and then applies each edited body to the
server to confirm the verdict: a no-op row must leave the stored object unchanged, a write row must
change it (or be refused as Invalid: a ResourceFlavor with a topology is immutable, so the server
rejects the changed nodeLabels — a change all the same). ``semantic`` rows are no-ops by value only: a
CRD stores a quantity's spelling verbatim, so applying ``"1000m"`` over ``"1"`` would rewrite the string
without changing the quantity.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from capture_fixtures import CASES_BY_NAME

from gpustack_worker.runtime.apply import is_noop
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from collections.abc import Callable

Body = dict[str, Any]
Key = str | int
DELETE: Final = object()


def edit(*changes: tuple[tuple[Key, ...], Any]) -> Callable[[Body], Body]:
    """A body edit: set each path to its value (``DELETE`` removes it); list items by index."""

    def apply(body: Body) -> Body:
        out = copy.deepcopy(body)
        for path, value in changes:
            node: Any = out
            for key in path[:-1]:
                node = node[key]
            if value is DELETE:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        return out

    return apply


def same(body: Body) -> Body:
    return copy.deepcopy(body)


def bare(body: Body) -> Body:
    """The empty intent: identity only."""
    meta = {k: v for k, v in body["metadata"].items() if k in ("name", "namespace")}
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": meta}


def reverse(*path: Key) -> Callable[[Body], Body]:
    def apply(body: Body) -> Body:
        out = copy.deepcopy(body)
        node: Any = out
        for key in path:
            node = node[key]
        node.reverse()
        return out

    return apply


@dataclass(frozen=True)
class Row:
    """``fixture`` + ``change`` applied by ``manager`` (default: the fixture's) → ``noop``?"""

    id: str
    fixture: str
    change: Callable[[Body], Body]
    noop: bool
    manager: str | None = None
    #: A no-op by value only (a quantity respelt in a CRD, which stores the string as sent).
    semantic: bool = False


_RG = ("spec", "resourceGroups", 0, "flavors")
_CHECKS = ("spec", "admissionChecksStrategy", "admissionChecks")
_PROFILES = ("status", "acceleratorPartitioned", "remainingProfiles")
_FIT = "shared.fit.gpustack.ai/nvidia-a100"

ROWS: Final[tuple[Row, ...]] = (
    # -- unchanged intent against the stored object (CRD defaults, Kueue's finalizer and status present)
    *(
        Row(f"unchanged-{name}", name, same, noop=True)
        for name in (
            "resourceflavor",
            "localqueue",
            "topology",
            "admissioncheck",
            "admissioncheck-status",
            "nodefeature",
            "instancetype",
            "instancetype-status",
            "node-labels",
            "node-status",
        )
    ),
    Row("unchanged-clusterqueue-with-kueue-defaults", "clusterqueue", same, noop=True),
    # -- value changes
    Row("cq-stop-policy-changed", "clusterqueue", edit((("spec", "stopPolicy"), "None")), noop=False),
    Row(
        "cq-quota-changed-in-atomic-list",
        "clusterqueue",
        edit(((*_RG, 0, "resources", 0, "nominalQuota"), "3200000")),
        noop=False,
    ),
    Row(
        "rf-annotation-changed",
        "resourceflavor",
        edit((("metadata", "annotations", "note.gpustack.ai/vram"), "40960")),
        noop=False,
    ),
    Row("node-label-changed", "node-labels", edit((("metadata", "labels", _FIT), "2")), noop=False),
    Row(
        "node-capacity-changed",
        "node-status",
        edit((("status", "capacity", "nvidia.com/gpu.sliced.units"), "3200k")),
        noop=False,
    ),
    Row(
        "it-status-quantity-changed",
        "instancetype-status",
        edit((("status", "accelerator", "remaining"), "3")),
        noop=False,
    ),
    Row(
        "it-keyed-item-value-changed", "instancetype-status", edit(((*_PROFILES, 0, "count"), 6)), noop=False
    ),
    Row(
        "ac-condition-message-changed",
        "admissioncheck-status",
        edit((("status", "conditions", 0, "message"), "changed")),
        noop=False,
    ),
    # -- removals
    Row(
        "cq-removal-inside-atomic-list-item",
        "clusterqueue",
        edit(((*_RG, 0, "resources", 0, "borrowingLimit"), DELETE)),
        noop=False,
    ),
    Row(
        "cq-removal-inside-keyed-list-item",
        "clusterqueue",
        edit(((*_CHECKS, 0, "onFlavors"), DELETE)),
        noop=False,
    ),
    Row(
        "cq-set-item-removed",
        "clusterqueue",
        edit(((*_CHECKS, 0, "onFlavors"), ["capture-flavor-a"])),
        noop=False,
    ),
    Row(
        "cq-keyed-item-removed",
        "clusterqueue",
        edit(
            (
                (*_CHECKS,),
                [{"name": "gpustack-node-devices", "onFlavors": ["capture-flavor-a", "capture-flavor-b"]}],
            )
        ),
        noop=False,
    ),
    Row("cq-keyed-items-reordered", "clusterqueue", reverse(*_CHECKS), noop=False),
    Row(
        "it-removal-inside-keyed-list-item",
        "instancetype-status",
        edit(((*_PROFILES, 0, "count"), DELETE)),
        noop=False,
    ),
    Row("node-label-removed", "node-labels", edit((("metadata", "labels", _FIT), DELETE)), noop=False),
    Row("it-finalizer-removed", "instancetype", edit((("metadata", "finalizers"), [])), noop=False),
    Row(
        "rf-node-label-removed",
        "resourceflavor",
        edit((("spec", "nodeLabels", "kubernetes.io/arch"), DELETE)),
        noop=False,
    ),
    # -- additions
    Row(
        "node-label-added",
        "node-labels",
        edit((("metadata", "labels", "x.fit.gpustack.ai/a"), "1")),
        noop=False,
    ),
    Row("cq-field-added", "clusterqueue", edit((("spec", "queueingStrategy"), "StrictFIFO")), noop=False),
    # -- strings that look like numbers are strings unless the schema says quantity
    Row(
        "rf-node-label-535.1-to-535.10",
        "resourceflavor",
        edit((("spec", "nodeLabels", "nvidia.com/cuda.driver.version"), "535.10")),
        noop=False,
    ),
    Row(
        "nf-label-535.1-to-535.10",
        "nodefeature",
        edit((("spec", "labels", "nvidia.com/cuda.driver.version"), "535.10")),
        noop=False,
    ),
    Row("node-label-3-to-3000m", "node-labels", edit((("metadata", "labels", _FIT), "3000m")), noop=False),
    Row(
        "nf-count-label-64-to-64000m",
        "nodefeature",
        edit((("spec", "labels", "general.feature.gpustack.ai/generic.count"), "64000m")),
        noop=False,
    ),
    # -- quantities compared by value where the schema puts one
    Row(
        "cq-quota-1-vs-1000m",
        "clusterqueue",
        edit(((*_RG, 0, "resources", 1, "nominalQuota"), "1000m")),
        noop=True,
        semantic=True,
    ),
    Row(
        "node-capacity-canonical-spelling",
        "node-status",
        edit(
            (("status", "capacity", "nvidia.com/gpu.sliced.units"), "6400000"),
            (("status", "allocatable", "nvidia.com/gpu.sliced.units"), "6400000000m"),
        ),
        noop=True,
    ),
    Row(
        "it-status-5-vs-5000m",
        "instancetype-status",
        edit((("status", "accelerator", "capacity"), "5000m")),
        noop=True,
        semantic=True,
    ),
    # -- ownership: someone else took a field over (same body)
    Row("cq-field-taken-by-forced-apply", "clusterqueue-taken-over", same, noop=False),
    Row("node-label-changed-by-update", "node-labels-updated-by-other", same, noop=False),
    # -- owner references: each one atomic
    Row(
        "nf-owner-reference-changed",
        "nodefeature",
        edit((("metadata", "ownerReferences", 0, "name"), "another-node")),
        noop=False,
    ),
    # -- the empty intent
    Row("empty-intent-owning-nothing-node", "node-labels", bare, noop=True, manager="gpustack-worker-idle"),
    Row("empty-intent-owning-nothing-cq", "clusterqueue", bare, noop=True, manager="gpustack-worker-idle"),
    Row("empty-intent-owning-something", "node-labels", bare, noop=False),
)


def decide(row: Row, record: dict[str, Any]) -> bool:
    """The check's verdict for one row over one captured record (a fixture, or a fresh capture), with
    the object cached exactly as an informer caches it (through the ingest transform)."""
    case = CASES_BY_NAME[record["case"]]
    manager = row.manager or record["manager"]
    cached = make_transform([manager])(copy.deepcopy(record["object"]))
    body = row.change(record["body"])
    return is_noop(body, cached, manager, record["subresource"], hints=case.resource.hints)
