"""The no-op table against the real API server (with Kueue running): the committed fixtures still describe
what the server stores, and every verdict is the server's own.

For each row, the fixture's state is re-established on the server (our apply, Kueue's reaction, the
other managers' steps), the check decides on the fresh object, and then the row's body is applied for
real: a no-op verdict must leave the stored object unchanged (values and ownership, compared without
timestamps and resourceVersion), a write verdict must change it or be refused as Invalid (a change to
an immutable field). So the check neither misses a write nor writes when the server would change
nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from capture_fixtures import CASES, CASES_BY_NAME, capture, load, prepare
from noop_cases import ROWS, Row, decide

from gpustack_worker.runtime.apply import owned_fields
from gpustack_worker.runtime.client import ApiError, Client

pytestmark = pytest.mark.cluster
#: HTTP status of a request the API server found invalid.
INVALID = 422


def _our_fields(record: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    entry = next(
        (
            e
            for e in record["object"]["metadata"].get("managedFields") or ()
            if e["manager"] == record["manager"] and e.get("subresource") == record["subresource"]
        ),
        None,
    )
    return owned_fields(entry["fieldsV1"]) if entry else frozenset()


def _stored(obj: dict[str, Any], subresource: str | None) -> dict[str, Any]:
    """What an apply can change, without what only says *when* (times) or what others write meanwhile
    (Kueue's status, for an apply to the main resource)."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta.pop("resourceVersion", None)
    entries = []
    for entry in meta.get("managedFields") or ():
        entry.pop("time", None)
        if subresource is None and entry.get("subresource") == "status":
            continue
        entries.append(entry)
    meta["managedFields"] = sorted(
        entries, key=lambda e: (e["manager"], e["operation"], e.get("subresource", ""))
    )
    if subresource is None:
        out.pop("status", None)
    return out


async def test_fixtures_still_describe_the_server(devcluster: Any) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    try:
        ctx = await prepare(client)
        for case in CASES:
            fresh = await capture(client, case, ctx)
            fixture = load(case.name)
            ours_now, ours_then = _our_fields(fresh), _our_fields(fixture)
            if case.resource.kind == "NodeFeature":  # the owner reference names this run's Node uid
                then_uid = fixture["body"]["metadata"]["ownerReferences"][0]["uid"]
                ours_now = frozenset(tuple(p.replace(ctx["node_uid"], then_uid) for p in f) for f in ours_now)
            assert ours_now == ours_then, case.name
    finally:
        await client.close()


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_verdict_is_the_servers(devcluster: Any, row: Row) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    try:
        ctx = await prepare(client)
        case = CASES_BY_NAME[row.fixture]
        before = await capture(client, case, ctx)
        assert decide(row, before) is row.noop
        body = row.change(before["body"])
        try:
            after = await client.apply(
                case.resource,
                body,
                field_manager=row.manager or case.manager,
                force=True,
                subresource=case.subresource,
            )
        except ApiError as err:
            # refused as Invalid: a change to an immutable field (never what a no-op apply gets)
            assert err.status == INVALID and not row.noop, err
            return
        changed = _stored(after, case.subresource) != _stored(before["object"], case.subresource)
        if row.semantic:
            # a CRD keeps a quantity's spelling: only the string changes, never the quantity
            assert changed
        else:
            assert changed is not row.noop
    finally:
        await client.close()
