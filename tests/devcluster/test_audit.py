"""AuditLog parsing: one event per request (watch stages folded), filters, counts, a growing file."""

from __future__ import annotations

import collections
import datetime
from typing import TYPE_CHECKING, Any

import orjson

from gpustack_worker.devcluster.audit import AUDITED_SA_GROUP, AuditLog, audit_policy

if TYPE_CHECKING:
    from pathlib import Path

T0 = datetime.datetime(2026, 12, 2, 10, 0, 0, tzinfo=datetime.UTC)


def line(
    audit_id: str,
    verb: str,
    resource: str | None,
    *,
    stage: str = "ResponseComplete",
    ua: str = "gpustack-worker-agent/n1",
    user: str = "system:serviceaccount:gpustack-system:agent",
    subresource: str | None = None,
    group: str | None = None,
    code: int | None = 200,
    seconds: float = 0.0,
    uri: str = "/api/v1/nodes",
) -> bytes:
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id,
        "stage": stage,
        "requestURI": uri,
        "verb": verb,
        "user": {"username": user, "groups": [AUDITED_SA_GROUP, "system:authenticated"]},
        "userAgent": ua,
        "requestReceivedTimestamp": (T0 + datetime.timedelta(seconds=seconds)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        ),
    }
    if resource is not None:
        ref: dict[str, Any] = {"resource": resource, "apiVersion": "v1"}
        if subresource:
            ref["subresource"] = subresource
        if group:
            ref["apiGroup"] = group
        event["objectRef"] = ref
    if code is not None:
        event["responseStatus"] = {"metadata": {}, "code": code}
    return orjson.dumps(event) + b"\n"


def test_policy_records_sa_requests_first_then_writes_then_nothing() -> None:
    rules = audit_policy()["rules"]
    assert audit_policy()["omitStages"] == ["RequestReceived"]
    assert rules[0] == {"level": "Metadata", "userGroups": [AUDITED_SA_GROUP]}
    assert rules[1]["level"] == "Metadata"
    assert set(rules[1]["verbs"]) == {"create", "update", "patch", "delete", "deletecollection"}
    assert rules[-1] == {"level": "None"}


def test_policy_records_request_bodies_of_the_named_groups_first() -> None:
    rules = audit_policy(["kueue.x-k8s.io", "", "kueue.x-k8s.io"])["rules"]
    assert rules[0]["level"] == "Request"
    assert rules[0]["resources"] == [{"group": ""}, {"group": "kueue.x-k8s.io"}]
    assert set(rules[0]["verbs"]) == {"create", "update", "patch", "delete", "deletecollection"}
    assert rules[1:] == audit_policy()["rules"]


def test_request_body_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    raw = orjson.loads(line("p1", "patch", "clusterqueues", group="kueue.x-k8s.io"))
    raw |= {"level": "Request", "requestObject": {"spec": {"cohort": "x"}}}
    path.write_bytes(orjson.dumps(raw) + b"\n" + line("p2", "patch", "nodes"))
    with_body, without = AuditLog(path).events()
    assert with_body.request_object == {"spec": {"cohort": "x"}}
    assert without.request_object is None


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "absent.log")
    assert log.events() == []
    assert log.counts() == collections.Counter()


def test_events_parse_fields_and_fold_watch_stages(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(
        line("w1", "watch", "nodes", stage="ResponseStarted", code=200, seconds=0)
        + line("p1", "patch", "nodes", subresource="status", uri="/api/v1/nodes/n1/status", seconds=1)
        + line("w1", "watch", "nodes", stage="ResponseComplete", code=200, seconds=0)
        + line("l1", "list", "leases", group="coordination.k8s.io", code=403, seconds=2)
        + line("v1", "get", None, uri="/version?timeout=32s", seconds=3)
    )
    events = AuditLog(path).events()
    assert [e.audit_id for e in events] == ["w1", "p1", "l1", "v1"]
    watch, patch, lst, version = events
    assert (watch.verb, watch.stage, watch.code) == ("watch", "ResponseComplete", 200)
    assert (patch.resource, patch.subresource, patch.resource_path, patch.is_write) == (
        "nodes",
        "status",
        "nodes/status",
        True,
    )
    assert (lst.api_group, lst.code, lst.is_write) == ("coordination.k8s.io", 403, False)
    assert version.resource == "" and version.resource_path == "/version"
    assert patch.received == T0 + datetime.timedelta(seconds=1)
    assert patch.username == "system:serviceaccount:gpustack-system:agent"
    assert AUDITED_SA_GROUP in patch.groups


def test_open_watch_counts_once_with_started_stage(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(line("w1", "watch", "nodes", stage="ResponseStarted", code=None))
    (watch,) = AuditLog(path).events()
    assert (watch.stage, watch.code) == ("ResponseStarted", None)


def test_writes_filters_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(
        line("a", "create", "configmaps", ua="gpustack-worker-controller/x", seconds=0)
        + line("b", "patch", "configmaps", ua="gpustack-worker-controller/x", seconds=1)
        + line("c", "patch", "configmaps", ua="gpustack-worker-controller/x", seconds=2)
        + line("d", "get", "configmaps", ua="gpustack-worker-controller/x", seconds=3)
        + line("e", "update", "leases", ua="gpustack-worker-controller/y", seconds=4, user="other")
        + line("f", "delete", "nodes", ua="kueue/v0.19", seconds=5)
    )
    log = AuditLog(path)
    assert [e.audit_id for e in log.writes()] == ["a", "b", "c", "e", "f"]
    assert [e.audit_id for e in log.writes(user_agent_prefix="gpustack-worker-controller/")] == [
        "a",
        "b",
        "c",
        "e",
    ]
    since = T0 + datetime.timedelta(seconds=2)
    assert [e.audit_id for e in log.writes("gpustack-worker-controller/x", since)] == ["c"]
    # A naive datetime is UTC.
    assert [e.audit_id for e in log.writes(since=since.replace(tzinfo=None))] == ["c", "e", "f"]
    assert [e.audit_id for e in log.writes(username="other")] == ["e"]
    assert log.counts("gpustack-worker-controller/") == collections.Counter(
        {
            ("gpustack-worker-controller/x", "configmaps", "create"): 1,
            ("gpustack-worker-controller/x", "configmaps", "patch"): 2,
            ("gpustack-worker-controller/y", "leases", "update"): 1,
        }
    )
    assert (
        log.counts("gpustack-worker-controller/x", writes_only=False)[
            ("gpustack-worker-controller/x", "configmaps", "get")
        ]
        == 1
    )


def test_reads_only_appended_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    first = line("a", "create", "configmaps")
    second = line("b", "delete", "configmaps")
    path.write_bytes(first + second[:20])  # the server is mid-way through writing "b"
    log = AuditLog(path)
    assert [e.audit_id for e in log.events()] == ["a"]
    with path.open("ab") as f:
        f.write(second[20:])
    assert [e.audit_id for e in log.events()] == ["a", "b"]
    # A new, shorter file at the same path is read from its start.
    path.write_bytes(line("z", "patch", "nodes"))
    assert [e.audit_id for e in log.events()] == ["z"]
