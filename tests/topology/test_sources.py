"""The TopologySource decision, table-tested (reference §2.1 conditions table, §2.1.1, §6.4, §6.5).

Every row of the §2.1 "Conditions and reasons" table is a test here, plus the staleness clock of each
writing arm, the NodeFeatures applied and deleted, the finalizer and the requeue. Pure: a fixed ``NOW``,
no cluster, no wall clock. ``fold`` feeds a decision back into the source's status the way the step
does (``conditions.for_apply`` stamps ``lastTransitionTime``), so multi-pass scenarios run exactly.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime import conditions
from gpustack_worker.topology import hierarchy, sources
from gpustack_worker.topology.nodefeatures import nodefeature_body
from gpustack_worker.topology.sources import Fetched, ReadFailed, SourceDecision, SourceInputs, decide
from tests.kit.properties import examples

NOW = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
NS = kinds.SYSTEM_NAMESPACE
NAME = "inventory"
UID = "0b7c6f3e-5d1a-4e2b-9c8d-7a6f5e4d3c2b"
GEN = 7
R, Z, K = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
SR, SZ = keys.STANDARD_REGION, keys.STANDARD_ZONE
LEVELS = [R, Z, K]

#: Node name → labels of every Node the source selects.
SELECTED: dict[str, dict[str, str]] = {
    "worker-a": {keys.HOSTNAME: "worker-a", SR: "us-east-1"},
    "worker-b": {keys.HOSTNAME: "worker-b", SR: "us-east-1"},
    "worker-c": {keys.HOSTNAME: "worker-c", SR: "us-east-1"},
}
NODES_AB = {
    "worker-a": {R: "region-a", Z: "zone-a", K: "rack-01"},
    "worker-b": {R: "region-a", Z: "zone-a", K: "rack-02"},
}


def at(seconds_ago: float) -> str:
    """``NOW - seconds_ago`` as ``metav1.Time``."""
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def config_map_arm(max_staleness: str = "10m") -> dict[str, Any]:
    return {
        "configMap": {
            "configMapRef": {"namespace": NS, "name": "topology-inventory"},
            "key": "snapshot.yaml",
            "maxStaleness": max_staleness,
        }
    }


def webhook_arm(poll: str = "1m", timeout: str = "10s", max_staleness: str = "5m") -> dict[str, Any]:
    return {
        "webhook": {
            "url": "https://topology-inventory.gpustack-system.svc/snapshot",
            "pollInterval": poll,
            "timeout": timeout,
            "maxStaleness": max_staleness,
            "bearerTokenSecretRef": {"namespace": NS, "name": "topology-inventory-token"},
        }
    }


NODE_LABELS_ARM: dict[str, Any] = {"nodeLabels": {}}


def source(
    arm: dict[str, Any],
    *,
    status: dict[str, Any] | None = None,
    levels: list[str] | None = None,
    deleting: bool = False,
    extra_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME, "uid": UID, "generation": GEN, "resourceVersion": "42"}
    if deleting:
        meta["deletionTimestamp"] = at(5)
        meta["finalizers"] = [keys.FINALIZER_TOPOLOGY_SOURCE]
    obj: dict[str, Any] = {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": meta,
        "spec": {"nodeSelector": {}, "levels": list(LEVELS if levels is None else levels), **arm},
    }
    if extra_spec:
        obj["spec"].update(extra_spec)
    if status is not None:
        obj["status"] = status
    return obj


def snapshot(revision: str = "inventory-42", nodes: dict[str, dict[str, str]] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": keys.SNAPSHOT_API_VERSION,
            "revision": revision,
            "nodes": NODES_AB if nodes is None else nodes,
        }
    )


def nf(node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The NodeFeature this source owns for ``node`` (as cached)."""
    body = nodefeature_body(
        NAME, UID, node, labels if labels is not None else NODES_AB.get(node, {}), namespace=NS
    )
    body["metadata"]["resourceVersion"] = "100"
    return body


def nf_name(node: str) -> str:
    return keys.topology_source_nodefeature_name(UID, node)


def owned(*nodes: str) -> dict[str, dict[str, Any]]:
    return {nf_name(n): nf(n) for n in nodes}


def run(
    src: dict[str, Any],
    *,
    read: Fetched | ReadFailed | None = None,
    selected: dict[str, dict[str, str]] | None = None,
    own: dict[str, dict[str, Any]] | None = None,
    conflicts: dict[str, list[str]] | None = None,
    now: dt.datetime = NOW,
) -> SourceDecision:
    return decide(
        SourceInputs(
            source=src,
            namespace=NS,
            selected=SELECTED if selected is None else selected,
            read=read,
            owned=own or {},
            conflicts=conflicts or {},
            now=now,
        )
    )


def conds(decision: SourceDecision) -> dict[str, tuple[str, str]]:
    """type → (status, reason); also checks every condition carries the source's generation."""
    assert [c.type for c in decision.conditions] == ["Ready", "Valid", "OwnershipConflict"]
    assert all(c.observed_generation == GEN for c in decision.conditions), decision.conditions
    return {c.type: (c.status, c.reason) for c in decision.conditions}


def message(decision: SourceDecision, type_: str) -> str:
    return next(c.message for c in decision.conditions if c.type == type_)


def fold(src: dict[str, Any], decision: SourceDecision, now: dt.datetime) -> dict[str, Any]:
    """The source after the step applied ``decision``'s status at ``now``."""
    status = {
        **decision.status,
        "conditions": conditions.for_apply(
            (src.get("status") or {}).get("conditions"), decision.conditions, now=now
        ),
    }
    return {**src, "status": {k: v for k, v in status.items() if v is not None}}


def succeeded(src: dict[str, Any], *, last: str, revision: str = "inventory-42") -> dict[str, Any]:
    """``src`` with the status of a successful apply of ``revision`` at ``last`` (Valid True since then)."""
    valid = {"type": "Valid", "status": "True", "reason": "Observed", "lastTransitionTime": last}
    return {
        **src,
        "status": {
            "lastSuccessfulRevision": revision,
            "lastSuccessfulRefreshTime": last,
            "conditions": [valid],
        },
    }


def failing_since(src: dict[str, Any], *, last: str, began: str, reason: str) -> dict[str, Any]:
    """``src`` that last succeeded at ``last`` and whose ``Valid`` went False at ``began``."""
    valid = {"type": "Valid", "status": "False", "reason": reason, "lastTransitionTime": began}
    return {
        **src,
        "status": {
            "lastSuccessfulRevision": "inventory-42",
            "lastSuccessfulRefreshTime": last,
            "conditions": [valid],
        },
    }


def cm_failing(*, last: str, began: str) -> dict[str, Any]:
    return failing_since(source(config_map_arm()), last=last, began=began, reason="ConfigMapReadFailed")


def wh_failing(*, last: str, began: str) -> dict[str, Any]:
    return failing_since(source(webhook_arm()), last=last, began=began, reason="WebhookReadFailed")


ARMS = [
    pytest.param(config_map_arm(), id="configMap"),
    pytest.param(webhook_arm(), id="webhook"),
]


# --- nodeLabels ---------------------------------------------------------------------------------------
def test_node_labels_hierarchy_ok_is_observed_and_writes_nothing() -> None:
    selected = {
        "worker-a": {R: "region-a", Z: "zone-a", K: "rack-01"},
        "worker-b": {R: "region-a", Z: "zone-a"},  # a missing finer suffix is fine
        "worker-c": {},
    }
    d = run(source(NODE_LABELS_ARM), selected=selected)
    assert d.kind == "NodeLabels"
    assert conds(d) == {
        "Ready": ("True", "Observed"),
        "Valid": ("True", "Observed"),
        "OwnershipConflict": ("False", "ReadOnly"),
    }
    assert d.apply == {} and d.delete == []
    assert d.finalizer is False and d.requeue_after is None and not d.deleting
    assert d.status["sourceKind"] == "NodeLabels"
    assert d.status["selectedNodes"] == 3
    assert d.status["observedGeneration"] == GEN
    assert d.status["conflictedNodes"] == 0


def test_node_labels_child_without_parent_is_invalid_hierarchy_with_the_first_error() -> None:
    selected = {"worker-a": {R: "region-a", K: "rack-01"}}
    d = run(source(NODE_LABELS_ARM), selected=selected)
    assert conds(d) == {
        "Ready": ("False", "InvalidHierarchy"),
        "Valid": ("False", "InvalidHierarchy"),
        "OwnershipConflict": ("False", "ReadOnly"),
    }
    (only,) = hierarchy.hierarchy_errors(LEVELS, selected)
    assert message(d, "Valid") == only
    assert "worker-a" in only and K in only and "rack-01" in only
    assert d.apply == {} and d.delete == [] and d.finalizer is False


def test_node_labels_two_parent_chains_message_starts_with_the_first_error() -> None:
    selected = {
        "worker-a": {R: "region-a", Z: "zone-a", K: "rack-01"},
        "worker-b": {R: "region-a", Z: "zone-b", K: "rack-01"},  # rack-01 under two zones
        "worker-c": {R: "region-b", Z: "zone-a"},  # zone-a under two regions
    }
    d = run(source(NODE_LABELS_ARM), selected=selected)
    assert conds(d)["Valid"] == ("False", "InvalidHierarchy")
    found = hierarchy.hierarchy_errors(LEVELS, selected)
    assert len(found) == 2
    assert message(d, "Valid").startswith(found[0])
    assert message(d, "Ready") == message(d, "Valid")


def test_node_labels_reads_only_the_declared_levels_and_normalises_topograph_tiers() -> None:
    t1, t2 = f"{keys.TOPOGRAPH_TIER_PREFIX}1", f"{keys.TOPOGRAPH_TIER_PREFIX}2"
    # tier-1 (leaf switch) under tier-2 once normalised; a tier-1 value without tier-2 is an orphan
    ok = {"worker-a": {t2: "spine-1", t1: "leaf-1", "unrelated.example/x": "y"}, "worker-b": {t2: "spine-1"}}
    d = run(source(NODE_LABELS_ARM, levels=[t1, t2]), selected=ok)
    assert conds(d)["Ready"] == ("True", "Observed")
    orphan = {"worker-a": {t1: "leaf-1"}}
    d = run(source(NODE_LABELS_ARM, levels=[t1, t2]), selected=orphan)
    assert conds(d)["Ready"] == ("False", "InvalidHierarchy")


def test_node_labels_switched_from_a_writing_arm_deletes_what_it_owns_and_drops_the_finalizer() -> None:
    src = source(NODE_LABELS_ARM, status={"lastSuccessfulRevision": "inventory-42"})
    src["metadata"]["finalizers"] = [keys.FINALIZER_TOPOLOGY_SOURCE]
    d = run(src, own=owned("worker-a", "worker-b"))
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-b")])
    assert d.apply == {}
    assert d.finalizer is False
    assert conds(d)["Ready"] == ("True", "Observed")


def test_node_labels_with_an_invalid_spec_is_invalid_spec_and_read_only() -> None:
    src = source(NODE_LABELS_ARM, extra_spec={"additionalWritePrefix": "topology.example.com/"})
    d = run(src, own=owned("worker-a"))
    assert conds(d) == {
        "Ready": ("False", "InvalidSpec"),
        "Valid": ("False", "InvalidSpec"),
        "OwnershipConflict": ("False", "ReadOnly"),
    }
    assert "spec.additionalWritePrefix" in message(d, "Valid")
    assert d.delete == [nf_name("worker-a")] and d.finalizer is False


# --- no arm -------------------------------------------------------------------------------------------
def test_no_arm_is_pending_inventory_adapter_and_owns_nothing() -> None:
    src = source({})
    d = run(src, own=owned("worker-a"))
    assert d.kind == ""
    assert conds(d) == {
        "Ready": ("False", "PendingInventoryAdapter"),
        "Valid": ("Unknown", "PendingInventoryAdapter"),
        "OwnershipConflict": ("False", "NoConflict"),
    }
    assert d.status["sourceKind"] == ""
    assert d.status["selectedNodes"] == 3
    assert d.delete == [nf_name("worker-a")] and d.apply == {}
    assert d.finalizer is False and d.requeue_after is None


# --- writing arm: applied -----------------------------------------------------------------------------
@pytest.mark.parametrize(("arm", "kind", "requeue"), [
    pytest.param(config_map_arm(), "ConfigMap", None, id="configMap-no-timer"),
    pytest.param(webhook_arm(poll="1m"), "Webhook", 60.0, id="webhook-polls"),
    pytest.param(webhook_arm(poll="90s", timeout="10s"), "Webhook", 90.0, id="webhook-90s"),
])  # fmt: skip
def test_writing_arm_applied_publishes_one_nodefeature_per_described_node(
    arm: dict[str, Any], kind: str, requeue: float | None
) -> None:
    d = run(source(arm), read=Fetched(snapshot(), NOW))
    assert d.kind == kind
    assert conds(d) == {
        "Ready": ("True", "Observed"),
        "Valid": ("True", "Observed"),
        "OwnershipConflict": ("False", "NoConflict"),
    }
    assert "inventory-42" in message(d, "Ready")
    assert d.apply == {
        nf_name(n): nodefeature_body(NAME, UID, n, NODES_AB[n], namespace=NS) for n in NODES_AB
    }
    assert d.delete == []
    assert d.finalizer is True
    assert d.requeue_after == requeue
    assert d.status == {
        "observedGeneration": GEN,
        "sourceKind": kind,
        "selectedNodes": 3,
        "conflictedNodes": 0,
        "lastSuccessfulRevision": "inventory-42",
        "lastSuccessfulRefreshTime": stamp(NOW),
    }


def test_nodefeature_bodies_live_in_the_system_namespace_named_by_uid_and_node() -> None:
    d = run(source(config_map_arm()), read=Fetched(snapshot()))
    for name, body in d.apply.items():
        meta = body["metadata"]
        node = meta["labels"][keys.NFD_NODE_NAME]
        assert name == meta["name"] == nf_name(node)
        assert meta["namespace"] == NS
        assert meta["labels"][keys.TOPOLOGY_SOURCE_UID] == UID
        assert body["spec"]["labels"] == NODES_AB[node]


@pytest.mark.parametrize("arm", ARMS)
def test_a_node_omitted_from_the_snapshot_loses_its_nodefeature(arm: dict[str, Any]) -> None:
    src = succeeded(source(arm), last=at(30))
    d = run(
        src,
        read=Fetched(snapshot(revision="inventory-43"), NOW),
        own=owned("worker-a", "worker-b", "worker-c"),
    )
    assert set(d.apply) == {nf_name("worker-a"), nf_name("worker-b")}
    assert d.delete == [nf_name("worker-c")]
    assert conds(d)["Ready"] == ("True", "Observed")


def test_an_empty_snapshot_deletes_every_owned_nodefeature() -> None:
    d = run(source(config_map_arm()), read=Fetched(snapshot(nodes={})), own=owned("worker-a", "worker-b"))
    assert d.apply == {}
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-b")])
    assert conds(d)["Ready"] == ("True", "Observed")
    assert d.finalizer is True


def test_standard_region_and_zone_are_checked_but_never_written() -> None:
    selected = {
        "worker-a": {SR: "us-east-1", SZ: "us-east-1a"},
        "worker-b": {SR: "us-east-1", SZ: "us-east-1b"},
    }
    nodes = {
        "worker-a": {SR: "us-east-1", SZ: "us-east-1a", K: "rack-01"},
        "worker-b": {SR: "us-east-1", SZ: "us-east-1b"},  # only standard keys: no NodeFeature at all
    }
    src = source(config_map_arm(), levels=[SR, SZ, K])
    d = run(src, read=Fetched(snapshot(nodes=nodes)), selected=selected, own=owned("worker-b"))
    assert conds(d)["Ready"] == ("True", "Observed")
    assert list(d.apply) == [nf_name("worker-a")]
    for body in d.apply.values():
        assert not set(body["spec"]["labels"]) & set(keys.STANDARD_TOPOLOGY_KEYS)
    assert d.apply[nf_name("worker-a")]["spec"]["labels"] == {K: "rack-01"}
    assert d.delete == [nf_name("worker-b")]


def test_a_standard_value_the_node_does_not_carry_rejects_the_whole_snapshot() -> None:
    selected = {"worker-a": {SR: "us-east-1"}, "worker-b": {SR: "us-east-1"}}
    nodes = {"worker-a": {SR: "us-east-1", K: "rack-01"}, "worker-b": {SR: "us-west-2", K: "rack-02"}}
    d = run(source(config_map_arm(), levels=[SR, K]), read=Fetched(snapshot(nodes=nodes)), selected=selected)
    assert conds(d)["Valid"] == ("False", "SnapshotInvalid")
    assert "us-west-2" in message(d, "Valid")
    assert d.apply == {}


# --- writing arm: overlapping writer ------------------------------------------------------------------
@pytest.mark.parametrize(("arm", "requeue"), [
    pytest.param(config_map_arm(), 60.0, id="configMap-conflict-retry"),
    pytest.param(webhook_arm(poll="5m", timeout="10s", max_staleness="10m"), 60.0, id="webhook-slow-poll"),
    pytest.param(webhook_arm(poll="30s"), 30.0, id="webhook-fast-poll"),
])  # fmt: skip
def test_overlapping_writer_removes_the_conflicted_nodes_nodefeatures(
    arm: dict[str, Any], requeue: float
) -> None:
    src = succeeded(source(arm), last=at(30))
    d = run(
        src,
        read=Fetched(snapshot(), NOW),
        own=owned("worker-a", "worker-b"),
        conflicts={"worker-b": ["other-inventory"], "worker-c": ["other-inventory", "third"], "worker-a": []},
    )
    assert conds(d) == {
        "Ready": ("False", "OwnershipConflict"),
        "Valid": ("True", "Observed"),
        "OwnershipConflict": ("True", "OverlappingSources"),
    }
    assert set(d.apply) == {nf_name("worker-a")}  # worker-b is described but conflicted
    assert d.delete == [nf_name("worker-b")]
    assert d.status["conflictedNodes"] == 2  # worker-b and worker-c; the snapshot need not describe them
    assert d.status["lastSuccessfulRevision"] == "inventory-42"
    assert d.finalizer is True
    assert d.requeue_after is not None and d.requeue_after <= sources.CONFLICT_RETRY_S
    assert d.requeue_after == requeue
    text = message(d, "OwnershipConflict")
    assert "other-inventory" in text and "third" in text and "worker-b" in text
    assert message(d, "Ready") == text


# --- writing arm: failures ----------------------------------------------------------------------------
INVALID_SNAPSHOT = snapshot(nodes={"worker-z": {R: "region-a"}})  # worker-z is not selected
BAD_CM_SPEC = {
    "configMap": {**config_map_arm()["configMap"], "configMapRef": {"namespace": "default", "name": "x"}}
}
BAD_WEBHOOK_SPEC = {"webhook": {**webhook_arm()["webhook"], "timeout": "2m"}}  # timeout > pollInterval

FAILURES = [
    pytest.param(
        config_map_arm(),
        ReadFailed("ConfigMapReadFailed", "ConfigMap gpustack-system/inventory not found"),
        "ConfigMapReadFailed",
        id="configMap-read",
    ),
    pytest.param(
        config_map_arm(),
        ReadFailed("SnapshotKeyMissing", "no key 'snapshot.yaml'"),
        "SnapshotKeyMissing",
        id="configMap-key-missing",
    ),
    pytest.param(config_map_arm(), Fetched(INVALID_SNAPSHOT), "SnapshotInvalid", id="configMap-invalid"),
    pytest.param(config_map_arm(), Fetched("{not yaml: ["), "SnapshotInvalid", id="configMap-undecodable"),
    pytest.param(config_map_arm(), None, "ConfigMapReadFailed", id="configMap-nothing-read"),
    pytest.param(BAD_CM_SPEC, Fetched(snapshot()), "InvalidSpec", id="configMap-invalid-spec"),
    pytest.param(
        webhook_arm(),
        ReadFailed("WebhookReadFailed", "GET returned 503"),
        "WebhookReadFailed",
        id="webhook-read",
    ),
    pytest.param(webhook_arm(), Fetched(INVALID_SNAPSHOT, NOW), "SnapshotInvalid", id="webhook-invalid"),
    pytest.param(webhook_arm(), None, "WebhookReadFailed", id="webhook-nothing-read"),
    pytest.param(BAD_WEBHOOK_SPEC, Fetched(snapshot(), NOW), "InvalidSpec", id="webhook-invalid-spec"),
]


@pytest.mark.parametrize(("arm", "read", "reason"), FAILURES)
def test_failure_never_succeeded_owns_nothing(
    arm: dict[str, Any], read: Fetched | ReadFailed | None, reason: str
) -> None:
    d = run(source(arm), read=read, own=owned("worker-a", "worker-b"))
    assert conds(d) == {
        "Ready": ("False", reason),
        "Valid": ("False", reason),
        "OwnershipConflict": ("False", "NoConflict"),
    }
    assert message(d, "Ready") == message(d, "Valid")
    if isinstance(read, ReadFailed):
        assert message(d, "Valid") == read.message
    assert d.apply == {}
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-b")])
    assert d.finalizer is True
    assert "lastSuccessfulRefreshTime" not in d.status and "lastSuccessfulRevision" not in d.status
    assert d.status["selectedNodes"] == 3 and d.status["observedGeneration"] == GEN


@pytest.mark.parametrize(("arm", "read", "reason"), FAILURES)
def test_failure_younger_than_max_staleness_is_stale_and_changes_nothing(
    arm: dict[str, Any], read: Fetched | ReadFailed | None, reason: str
) -> None:
    # configMap maxStaleness 10m, webhook 5m: a success 60 s ago that has been failing for 30 s
    src = failing_since(source(arm), last=at(60), began=at(30), reason=reason)
    d = run(src, read=read, own=owned("worker-a", "worker-b"))
    assert conds(d) == {
        "Ready": ("False", "Stale"),
        "Valid": ("False", reason),
        "OwnershipConflict": ("False", "NoConflict"),
    }
    assert d.apply == {} and d.delete == []  # the last valid NodeFeatures stay in effect
    assert d.finalizer is True
    assert "inventory-42" in message(d, "Ready")
    assert d.status["lastSuccessfulRevision"] == "inventory-42"
    assert d.status["lastSuccessfulRefreshTime"] == at(60)
    if "configMap" in arm:  # the deadline: 10m after the failure began 30 s ago
        assert d.requeue_after == 570.0
        assert stamp(NOW + dt.timedelta(seconds=570)) in message(d, "Ready")
    else:  # the poll interval (1m) is sooner than the deadline (5m after the success 60 s ago)
        assert d.requeue_after == 60.0
        assert stamp(NOW + dt.timedelta(seconds=240)) in message(d, "Ready")


@pytest.mark.parametrize(("arm", "read", "reason"), FAILURES)
def test_failure_older_than_max_staleness_is_expired_and_removes_what_it_owns(
    arm: dict[str, Any], read: Fetched | ReadFailed | None, reason: str
) -> None:
    src = failing_since(source(arm), last=at(3600), began=at(1800), reason=reason)
    d = run(src, read=read, own=owned("worker-a", "worker-b"))
    assert conds(d) == {
        "Ready": ("False", "Expired"),
        "Valid": ("False", reason),
        "OwnershipConflict": ("False", "NoConflict"),
    }
    assert d.apply == {}
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-b")])
    assert d.finalizer is True
    assert d.status["lastSuccessfulRevision"] == "inventory-42"
    assert d.requeue_after == (None if "configMap" in arm else 60.0)  # no timer left but the poll


def test_an_unselected_node_in_the_snapshot_changes_no_nodefeature_while_stale() -> None:
    src = cm_failing(last=at(60), began=at(30))
    d = run(src, read=Fetched(INVALID_SNAPSHOT), own=owned("worker-a"))
    assert "worker-z" in message(d, "Valid")
    assert d.apply == {} and d.delete == []


# --- the staleness clock ------------------------------------------------------------------------------
@pytest.mark.parametrize(("src", "ready", "requeue"), [
    # configMap: maxStaleness 10m counted from the later of the last apply and when the failure began
    pytest.param(succeeded(source(config_map_arm()), last=at(7200)), "Stale", 600.0,
                 id="cm-quiet-2h-then-first-failure-starts-the-clock-now"),
    pytest.param(cm_failing(last=at(7200), began=at(300)), "Stale", 300.0,
                 id="cm-failing-5m-of-10m"),
    pytest.param(cm_failing(last=at(7200), began=at(599)), "Stale", 1.0,
                 id="cm-one-second-left"),
    pytest.param(cm_failing(last=at(7200), began=at(600)), "Expired", None,
                 id="cm-deadline-reached"),
    pytest.param(cm_failing(last=at(120), began=at(900)), "Stale", 480.0,
                 id="cm-later-of-last-apply-and-failure-start"),
    # webhook: maxStaleness 5m counted from lastSuccessfulRefreshTime only; requeue ≤ pollInterval 1m
    pytest.param(succeeded(source(webhook_arm()), last=at(7200)), "Expired", 60.0,
                 id="wh-first-failure-after-2h-is-already-expired"),
    pytest.param(wh_failing(last=at(360), began=at(10)), "Expired", 60.0,
                 id="wh-failure-start-does-not-count"),
    pytest.param(wh_failing(last=at(100), began=at(10)), "Stale", 60.0,
                 id="wh-poll-sooner-than-deadline"),
    pytest.param(wh_failing(last=at(270), began=at(10)), "Stale", 30.0,
                 id="wh-deadline-sooner-than-poll"),
])  # fmt: skip
def test_staleness_anchor_and_requeue(src: dict[str, Any], ready: str, requeue: float | None) -> None:
    kind = sources.arm_of(src["spec"])
    fail = ReadFailed("ConfigMapReadFailed" if kind == "ConfigMap" else "WebhookReadFailed", "boom")
    d = run(src, read=fail, own=owned("worker-a"))
    assert conds(d)["Ready"] == ("False", ready)
    assert d.requeue_after == requeue
    assert d.delete == ([] if ready == "Stale" else [nf_name("worker-a")])


def test_config_map_stale_then_expired_across_passes() -> None:
    """Success, an hour of quiet, then a broken revision: Stale for exactly maxStaleness, then Expired."""
    t0 = NOW - dt.timedelta(hours=1)
    src = source(config_map_arm("10m"))
    d = run(src, read=Fetched(snapshot()), now=t0)
    src = fold(src, d, t0)
    assert src["status"]["lastSuccessfulRefreshTime"] == stamp(t0)

    broken = Fetched(INVALID_SNAPSHOT)
    d = run(src, read=broken, own=owned("worker-a", "worker-b"), now=NOW)
    assert conds(d)["Ready"] == ("False", "Stale")
    assert d.requeue_after == 600.0
    src = fold(src, d, NOW)
    valid = conditions.find(src["status"]["conditions"], "Valid")
    assert valid is not None and valid["lastTransitionTime"] == stamp(NOW)

    later = NOW + dt.timedelta(minutes=4)
    d = run(src, read=broken, own=owned("worker-a", "worker-b"), now=later)
    assert conds(d)["Ready"] == ("False", "Stale")
    assert d.requeue_after == 360.0 and d.delete == []
    src = fold(src, d, later)

    deadline = NOW + dt.timedelta(minutes=10)
    d = run(src, read=broken, own=owned("worker-a", "worker-b"), now=deadline)
    assert conds(d)["Ready"] == ("False", "Expired")
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-b")])
    src = fold(src, d, deadline)

    fixed = deadline + dt.timedelta(minutes=1)
    d = run(src, read=Fetched(snapshot()), now=fixed)
    assert conds(d)["Ready"] == ("True", "Observed")
    assert d.status["lastSuccessfulRefreshTime"] == stamp(fixed)  # a recovery moves the clock


# --- lastSuccessfulRefreshTime ------------------------------------------------------------------------
def test_webhook_success_moves_the_clock_to_when_it_was_fetched() -> None:
    fetched = NOW - dt.timedelta(seconds=20)  # reused within its poll interval
    src = succeeded(source(webhook_arm()), last=at(80))
    d = run(src, read=Fetched(snapshot(), fetched))
    assert d.status["lastSuccessfulRefreshTime"] == stamp(fetched)
    assert d.status["lastSuccessfulRevision"] == "inventory-42"


def test_webhook_answer_reused_within_the_poll_interval_converges() -> None:
    fetched = NOW - dt.timedelta(seconds=20)
    src = source(webhook_arm())
    first = run(src, read=Fetched(snapshot(), fetched))
    src = fold(src, first, fetched)
    second = run(src, read=Fetched(snapshot(), fetched), own=first.apply)
    assert fold(src, second, NOW)["status"] == src["status"]


def test_config_map_unchanged_revision_keeps_the_clock_and_converges() -> None:
    src = source(config_map_arm())
    t0 = NOW - dt.timedelta(hours=3)
    first = run(src, read=Fetched(snapshot()), now=t0)
    src = fold(src, first, t0)
    second = run(src, read=Fetched(snapshot()), own=first.apply, now=NOW)
    assert second.status["lastSuccessfulRefreshTime"] == stamp(t0)
    assert second.apply == first.apply and second.delete == []
    assert fold(src, second, NOW)["status"] == src["status"]  # zero-write convergence


def test_config_map_new_revision_moves_the_clock() -> None:
    src = succeeded(source(config_map_arm()), last=at(3600))
    d = run(src, read=Fetched(snapshot(revision="inventory-43")))
    assert d.status["lastSuccessfulRefreshTime"] == stamp(NOW)
    assert d.status["lastSuccessfulRevision"] == "inventory-43"


def test_config_map_recovery_with_the_same_revision_moves_the_clock() -> None:
    src = cm_failing(last=at(3600), began=at(60))
    d = run(src, read=Fetched(snapshot()))
    assert conds(d)["Ready"] == ("True", "Observed")
    assert d.status["lastSuccessfulRefreshTime"] == stamp(NOW)


def test_config_map_first_success_sets_the_clock() -> None:
    d = run(source(config_map_arm()), read=Fetched(snapshot()))
    assert d.status["lastSuccessfulRefreshTime"] == stamp(NOW)


# --- deletion -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arm", [*ARMS, pytest.param(NODE_LABELS_ARM, id="nodeLabels"), pytest.param({}, id="no-arm")]
)
def test_deletion_deletes_every_owned_nodefeature_and_keeps_the_finalizer_until_none_is_left(
    arm: dict[str, Any],
) -> None:
    src = succeeded(source(arm, deleting=True), last=at(10))
    d = run(src, read=None, own=owned("worker-a", "worker-c"))
    assert d.deleting is True
    assert sorted(d.delete) == sorted([nf_name("worker-a"), nf_name("worker-c")])
    assert d.apply == {}
    assert d.finalizer is None  # not yet: the deletes must land first
    assert d.conditions == [] and d.status == {} and d.requeue_after is None

    d = run(src, read=None, own={})
    assert d.deleting is True and d.delete == [] and d.apply == {}
    assert d.finalizer is False


def test_deletion_wins_over_a_readable_snapshot() -> None:
    src = source(config_map_arm(), deleting=True)
    d = run(src, read=Fetched(snapshot()), own=owned("worker-a"))
    assert d.apply == {} and d.delete == [nf_name("worker-a")] and d.deleting


# --- status fields ------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, 1, 3])
def test_selected_nodes_counts_the_selector_matches(count: int) -> None:
    selected = dict(list(SELECTED.items())[:count])
    d = run(source(config_map_arm()), read=Fetched(snapshot(nodes={})), selected=selected)
    assert d.status["selectedNodes"] == count
    d = run(source(NODE_LABELS_ARM), selected=selected)
    assert d.status["selectedNodes"] == count


def test_observed_generation_is_on_every_condition_of_every_outcome() -> None:
    cases = [
        run(source(NODE_LABELS_ARM)),
        run(source(NODE_LABELS_ARM), selected={"a": {K: "r"}}),
        run(source({})),
        run(source(config_map_arm()), read=Fetched(snapshot())),
        run(source(config_map_arm()), read=Fetched(snapshot()), conflicts={"worker-a": ["x"]}),
        run(source(config_map_arm()), read=ReadFailed("ConfigMapReadFailed", "x")),
        run(succeeded(source(webhook_arm()), last=at(10)), read=ReadFailed("WebhookReadFailed", "x")),
        run(succeeded(source(webhook_arm()), last=at(9999)), read=ReadFailed("WebhookReadFailed", "x")),
    ]
    for d in cases:
        conds(d)  # asserts the three types, each with observedGeneration == GEN
        assert d.status["observedGeneration"] == GEN


def test_every_condition_renders_as_valid_metav1_conditions() -> None:
    d = run(source(config_map_arm()), read=Fetched(snapshot()), conflicts={"worker-a": ["x"]})
    rendered = conditions.for_apply(None, d.conditions, now=NOW)
    assert [(c["type"], c["lastTransitionTime"], c["observedGeneration"]) for c in rendered] == [
        ("Ready", stamp(NOW), GEN),
        ("Valid", stamp(NOW), GEN),
        ("OwnershipConflict", stamp(NOW), GEN),
    ]


# --- arm_of / is_writing ------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "arm", "writing"), [
    pytest.param({"nodeLabels": {}}, "NodeLabels", False, id="nodeLabels"),
    pytest.param(config_map_arm(), "ConfigMap", True, id="configMap"),
    pytest.param(webhook_arm(), "Webhook", True, id="webhook"),
    pytest.param({}, "", False, id="none"),
    pytest.param({"nodeLabels": None, **webhook_arm()}, "Webhook", True, id="null-arm-is-unset"),
])  # fmt: skip
def test_arm_of(spec: dict[str, Any], arm: str, writing: bool) -> None:
    assert sources.arm_of(spec) == arm
    assert sources.is_writing({"spec": spec}) is writing


@pytest.mark.parametrize("poll", ["0s", "0.0s"])
def test_an_invalid_zero_poll_interval_still_requeues_a_stale_source_at_its_deadline(poll: str) -> None:
    # A spec the admission webhook would refuse (pollInterval must be > 0) reached the API server: the
    # source is InvalidSpec and Stale; it must still look again when maxStaleness runs out, or its last
    # NodeFeatures would outlive the deadline until some unrelated event.
    src = wh_failing(last=at(60), began=at(30))
    src["spec"]["webhook"]["pollInterval"] = poll
    d = run(src, read=Fetched(snapshot(), NOW), own=owned("worker-a"))
    assert conds(d)["Ready"] == ("False", "Stale")
    assert conds(d)["Valid"] == ("False", "InvalidSpec")
    assert d.requeue_after == 240.0


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("seconds_failing", [30, 3600], ids=["stale", "expired"])
def test_a_failing_source_converges_to_zero_status_writes(arm: dict[str, Any], seconds_failing: int) -> None:
    """A second pass over the same failure a little later changes nothing in status (the messages
    carry the fixed deadline, never ``now``)."""
    src = succeeded(source(arm), last=at(seconds_failing + 30))
    kind = sources.arm_of(src["spec"])
    fail = ReadFailed("ConfigMapReadFailed" if kind == "ConfigMap" else "WebhookReadFailed", "boom")
    began = NOW - dt.timedelta(seconds=seconds_failing)
    src = fold(src, run(src, read=fail, now=began), began)
    first = run(src, read=fail, now=NOW)
    src = fold(src, first, NOW)
    later = NOW + dt.timedelta(seconds=5)
    second = run(src, read=fail, now=later)
    assert conds(second) == conds(first)
    assert fold(src, second, later)["status"] == src["status"]


def test_webhook_success_then_failure_expires_maxstaleness_after_the_last_good_answer() -> None:
    src = source(webhook_arm(poll="1m", timeout="10s", max_staleness="5m"))
    t0 = NOW - dt.timedelta(minutes=10)
    d = run(src, read=Fetched(snapshot(), t0), now=t0)
    src = fold(src, d, t0)
    fail = ReadFailed("WebhookReadFailed", "GET returned 503")
    seen: list[tuple[int, str, float | None, bool]] = []
    for minute in range(1, 7):
        when = t0 + dt.timedelta(minutes=minute)
        d = run(src, read=fail, own=owned("worker-a"), now=when)
        seen.append((minute, conds(d)["Ready"][1], d.requeue_after, bool(d.delete)))
        src = fold(src, d, when)
    assert seen == [
        (1, "Stale", 60.0, False),
        (2, "Stale", 60.0, False),
        (3, "Stale", 60.0, False),
        (4, "Stale", 60.0, False),
        (5, "Expired", 60.0, True),
        (6, "Expired", 60.0, True),
    ]
    assert src["status"]["lastSuccessfulRefreshTime"] == stamp(t0)


# --- coverage: selected Nodes the applied snapshot does not describe -----------------------------------


def _fleet(count: int) -> dict[str, dict[str, str]]:
    return {f"node-{i:02d}": {keys.HOSTNAME: f"node-{i:02d}"} for i in range(1, count + 1)}


def _racked(names: list[str]) -> dict[str, dict[str, str]]:
    return {n: {R: "region-a", Z: "zone-a", K: "rack-01"} for n in names}


@pytest.mark.parametrize("arm", ARMS)
def test_a_snapshot_describing_3_of_12_selected_nodes_names_how_many_and_which_are_left_out(
    arm: dict[str, Any],
) -> None:
    """The issue's case: 12 Nodes selected, 3 described — Ready stays True/Observed (the spec's reasons)
    and the message says 3 of 12 and names the 9 others (three, then "and 6 more")."""
    selected = _fleet(12)
    d = run(
        source(arm),
        read=Fetched(snapshot(nodes=_racked(["node-01", "node-02", "node-03"]))),
        selected=selected,
    )
    assert conds(d)["Ready"] == ("True", "Observed")
    for type_ in ("Ready", "Valid"):
        assert message(d, type_) == LEFT.format(3, 9) + "of its labels: node-04, node-05, node-06 and 6 more"
    assert d.undescribed == [f"node-{i:02d}" for i in range(4, 13)]
    assert d.status["selectedNodes"] == 12
    assert len(d.apply) == 3


#: The message of a revision describing some of 12 selected nodes, before the names left out.
LEFT = "revision 'inventory-42' describes {} of 12 selected node(s); {} selected node(s) not in it get none "


@pytest.mark.parametrize(
    ("described", "expected"),
    [
        (12, "revision 'inventory-42' describes 12 of 12 selected node(s)"),
        (11, LEFT.format(11, 1) + "of its labels: node-12"),
        (9, LEFT.format(9, 3) + "of its labels: node-10, node-11, node-12"),
        (0, LEFT.format(0, 12) + "of its labels: node-01, node-02, node-03 and 9 more"),
    ],
)
def test_coverage_says_every_left_out_node_up_to_three_names(described: int, expected: str) -> None:
    selected = _fleet(12)
    names = sorted(selected)[:described]
    d = run(source(config_map_arm()), read=Fetched(snapshot(nodes=_racked(names))), selected=selected)
    assert message(d, "Ready") == expected
    assert d.undescribed == sorted(selected)[described:]


def test_coverage_is_said_under_an_ownership_conflict_too() -> None:
    selected = _fleet(5)
    d = run(
        source(config_map_arm()),
        read=Fetched(snapshot(nodes=_racked(["node-01"]))),
        selected=selected,
        conflicts={"node-05": ["other"]},
    )
    assert conds(d)["Valid"] == ("True", "Observed")
    assert "describes 1 of 5 selected node(s); 4 selected node(s) not in it" in message(d, "Valid")
    assert "node-02, node-03, node-04 and 1 more" in message(d, "Valid")


@settings(max_examples=examples(200), deadline=None)
@given(
    total=st.integers(min_value=0, max_value=30),
    picks=st.sets(st.integers(min_value=1, max_value=30)),
)
def test_the_message_counts_every_selected_node_and_names_only_left_out_ones(
    total: int, picks: set[int]
) -> None:
    """Property: described + left out = selected; every name shown is selected and left out; the count
    of names shown plus "and N more" is the number left out."""
    selected = _fleet(total)
    names = sorted(f"node-{i:02d}" for i in picks if i <= total)
    d = run(source(config_map_arm()), read=Fetched(snapshot(nodes=_racked(names))), selected=selected)
    msg = message(d, "Ready")
    assert f"describes {len(names)} of {total} selected node(s)" in msg
    left = sorted(set(selected) - set(names))
    assert d.undescribed == left
    if not left:
        assert ";" not in msg
        return
    shown = msg.split("labels: ", 1)[1]
    head, _, more = shown.partition(" and ")
    listed_names = head.split(", ")
    assert listed_names == left[: len(listed_names)]
    assert len(listed_names) + (int(more.split()[0]) if more else 0) == len(left)
