"""The fault kit's pure parts (normalization, diff, write counting from an audit log file) and the stall
proxy against a local echo server: the judges of the fault suite must themselves be right."""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from gpustack_worker.devcluster.audit import AuditLog
from tests.chain import fault_kit as fk
from tests.chain.stall_proxy import StallProxy

if TYPE_CHECKING:
    from pathlib import Path

CTL, AGENT, KUEUE = fk.CONTROLLER_USER, fk.AGENT_USER, "devcluster-admin"


def cq(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {
            "name": "q",
            "uid": "u1",
            "resourceVersion": "7",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "x"}],
            "labels": {"a": "b"},
            "ownerReferences": [{"kind": "X", "name": "o", "uid": "u2"}],
        },
        "spec": {"stopPolicy": "None"},
        "status": status,
    }


def test_normalize_drops_what_differs_between_runs_and_keeps_decisions() -> None:
    a = cq(
        conditions=[
            {"type": "b", "status": "True", "lastTransitionTime": "t1", "observedGeneration": 3},
            {"type": "a", "status": "False", "lastTransitionTime": "t1"},
        ]
    )
    b = cq(
        conditions=[
            {"type": "a", "status": "False", "lastTransitionTime": "t2"},
            {"type": "b", "status": "True", "lastTransitionTime": "t9", "observedGeneration": 5},
        ]
    )
    b["metadata"].update(uid="other", resourceVersion="99", generation=9)
    b["metadata"]["ownerReferences"][0]["uid"] = "u3"
    assert fk.normalize(a) == fk.normalize(b)
    out = fk.normalize(a)
    owners = [{"kind": "X", "name": "o"}]
    assert out["metadata"] == {"name": "q", "labels": {"a": "b"}, "ownerReferences": owners}
    assert [c["type"] for c in out["status"]["conditions"]] == ["a", "b"]
    changed = cq(conditions=[{"type": "a", "status": "True"}])
    assert fk.normalize(changed) != fk.normalize(cq(conditions=[{"type": "a", "status": "False"}]))
    assert fk.normalize({**a, "spec": {"stopPolicy": "Hold"}}) != fk.normalize(a)


def test_diff_names_missing_unexpected_and_differing_objects() -> None:
    expected = {"K//a": {"spec": 1}, "K//b": {"spec": 1}}
    actual = {"K//b": {"spec": 2}, "K//c": {"spec": 1}}
    text = fk.diff(expected, actual)
    assert "missing:    K//a" in text
    assert "unexpected: K//c" in text
    assert "differs:    K//b" in text
    assert '- "spec": 1' in text and '+ "spec": 2' in text
    fk.assert_same(expected, dict(expected))
    with pytest.raises(AssertionError, match="missing:    K//a"):
        fk.assert_same(expected, actual)


def _line(audit_id: str, user: str, verb: str, resource: str, name: str, code: int, **extra: str) -> bytes:
    return orjson.dumps(
        {
            "auditID": audit_id,
            "stage": "ResponseComplete",
            "verb": verb,
            "objectRef": {"resource": resource, "name": name, **extra},
            "user": {"username": user},
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": f"2026-01-01T00:00:0{audit_id}Z",
        }
    )


def test_writes_counted_per_user_and_object_accepted_apart_from_refused(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        _line("1", CTL, "patch", "clusterqueues", "q", 201),
        _line("2", CTL, "patch", "clusterqueues", "q", 200, subresource="status"),
        _line("3", CTL, "patch", "clusterqueues", "q", 409),
        _line("4", KUEUE, "update", "clusterqueues", "q", 200, subresource="status"),
        _line("5", CTL, "create", "events", "e", 201),
        _line("6", AGENT, "patch", "nodefeatures", "n", 200, namespace="gpustack-system"),
        _line("7", CTL, "patch", "clusterqueues", "q", 200),
    ]
    log.write_bytes(b"\n".join(lines) + b"\n")
    audit = AuditLog(log)
    accepted = fk.accepted_writes(audit, (CTL, AGENT))
    assert accepted == {
        (CTL, "clusterqueues", "", "q"): 2,
        (CTL, "clusterqueues/status", "", "q"): 1,
        (AGENT, "nodefeatures", "gpustack-system", "n"): 1,
    }
    assert fk.refused_writes(audit, (CTL,)) == {(CTL, "clusterqueues", "", "q"): 1}
    baseline = {(CTL, "clusterqueues", "", "q"): 1, (CTL, "clusterqueues/status", "", "q"): 1}
    assert fk.doubled_writes(accepted, baseline) == {
        (CTL, "clusterqueues", "", "q"): (2, 1),
        (AGENT, "nodefeatures", "gpustack-system", "n"): (1, 0),
    }
    since = datetime.datetime(2026, 1, 1, 0, 0, 4, tzinfo=datetime.UTC)
    before = {"ClusterQueue//q": {"x": 1}, "ClusterQueue//r": {"x": 1}}
    rest = fk.at_rest(before, {"ClusterQueue//q": {"x": 1}, "ClusterQueue//r": {"x": 2}})
    assert rest == {"ClusterQueue//q"}
    again = fk.rewritten(audit, (CTL,), since, rest)
    assert [e.audit_id for e in again] == ["7"]
    assert fk.rewritten(audit, (CTL,), since, set()) == []


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_stall_proxy_forwards_and_freezes_open_connections_without_closing_them() -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = await StallProxy(f"127.0.0.1:{port}").start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 10) == b"ping"
        assert proxy.freeze() == 1
        writer.write(b"lost")
        await writer.drain()
        done, _ = await asyncio.wait([asyncio.ensure_future(reader.read(4))], timeout=0.5)
        assert not done  # neither an answer nor an end: silence
        assert not reader.at_eof()
        fresh_reader, fresh_writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        fresh_writer.write(b"pong")
        assert await asyncio.wait_for(fresh_reader.readexactly(4), 10) == b"pong"
        assert proxy.accepted_since_freeze == 1
        for w in (writer, fresh_writer):
            w.close()
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()
