"""The API server's audit log counts a client's writes exactly, per (User-Agent, resource, verb)."""

from __future__ import annotations

import collections
import datetime
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import DEFAULT_USER_AGENT, Client, Conflict, user_agent_of
from gpustack_worker.runtime.resources import CONFIG_MAP

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster


def _configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


async def test_audit_log_counts_each_write_by_user_agent_resource_and_verb(devcluster: DevCluster) -> None:
    assert devcluster.audit_log is not None and devcluster.audit_log.exists()
    log = AuditLog.from_now(devcluster.audit_log)
    run = uuid.uuid4().hex[:8]
    ua = f"audit-test/{run}"
    ns = f"audit-{run}"
    admin = await Client.connect(str(devcluster.kubeconfig))
    client = await Client.connect(str(devcluster.kubeconfig), user_agent=ua)
    try:
        await admin.create(
            kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        names = [f"cm-{i}" for i in range(3)]
        for name in names:  # 3 x configmaps create
            await client.create(CONFIG_MAP, _configmap(name, ns, {"v": "0"}))
        with pytest.raises(Conflict):  # a refused write is still a write the server saw: create, 409
            await client.create(CONFIG_MAP, _configmap(names[0], ns, {"v": "0"}))
        middle = datetime.datetime.now(datetime.UTC)
        for name in names[:2]:  # 2 x configmaps patch (merge)
            await client.patch(CONFIG_MAP, name, {"data": {"v": "1"}}, namespace=ns)
        # 1 x configmaps patch (server-side apply is a PATCH)
        await client.apply(CONFIG_MAP, _configmap(names[2], ns, {"w": "2"}), field_manager="audit-test")
        current = await client.get(CONFIG_MAP, names[0], ns)
        assert current is not None
        current["data"] = {"v": "3"}
        await client.replace(CONFIG_MAP, current)  # 1 x configmaps update
        for name in names[1:]:  # 2 x configmaps delete
            assert await client.delete(CONFIG_MAP, name, ns)
        # Reads are not writes (and a non-ServiceAccount user's reads are not recorded at all).
        await client.list(CONFIG_MAP, namespace=ns)
        await client.get(kinds.NAMESPACE, ns)
        client_count = client.writes
    finally:
        await client.close()
        await admin.close()

    # Blocking audit mode: every answered request is already in the file, no polling needed.
    sent = user_agent_of(ua)  # the client adds the version: "audit-test/<run> gpustack-worker/<version>"
    assert log.counts(user_agent_prefix=ua) == collections.Counter(
        {
            (sent, "configmaps", "create"): 4,
            (sent, "configmaps", "patch"): 3,
            (sent, "configmaps", "update"): 1,
            (sent, "configmaps", "delete"): 2,
        }
    )
    writes = log.writes(user_agent_prefix=ua)
    assert len(writes) == 10 == client_count
    assert {e.namespace for e in writes} == {ns}
    assert {e.username for e in writes} == {"devcluster-admin"}
    assert [e.code for e in writes if e.verb == "create"] == [201, 201, 201, 409]
    assert [(e.verb, e.name) for e in writes if e.verb == "delete"] == [("delete", n) for n in names[1:]]
    # No read of this non-ServiceAccount user was recorded.
    assert {e.verb for e in log.events(user_agent_prefix=ua)} == {"create", "patch", "update", "delete"}
    # ``since`` keeps the writes received at or after it.
    later = log.counts(ua, since=middle)
    assert later == collections.Counter(
        {
            (sent, "configmaps", "patch"): 3,
            (sent, "configmaps", "update"): 1,
            (sent, "configmaps", "delete"): 2,
        }
    )
    # The namespace create came from a client that did not name itself.
    assert (user_agent_of(None), "namespaces", "create") in log.counts(DEFAULT_USER_AGENT, since=None)
