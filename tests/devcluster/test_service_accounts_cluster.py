"""The dev cluster installs our RBAC and mints ServiceAccount tokens: a client holds exactly its role."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import ApiError, Client

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster


async def test_agent_token_is_bound_to_the_agent_role_and_audited(devcluster: DevCluster) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    path = devcluster.service_account_kubeconfig(rbac.AGENT.name)
    ua = f"sa-test/{uuid.uuid4().hex[:8]}"
    client = await Client.connect(str(path), user_agent=ua)
    try:
        nodes, _ = await client.list(kinds.NODE)
        assert nodes, "the agent may list Nodes"
        await client.list(kinds.CONFIG_MAP, namespace=kinds.SYSTEM_NAMESPACE)
        with pytest.raises(ApiError) as denied:  # granted nowhere
            await client.list(kinds.SECRET, namespace=kinds.SYSTEM_NAMESPACE)
        assert denied.value.status == 403
        with pytest.raises(ApiError) as denied:  # list only in the system namespace
            await client.list(kinds.CONFIG_MAP, namespace="default")
        assert denied.value.status == 403
    finally:
        await client.close()
    events = audit.events(user_agent_prefix=ua)
    assert {e.username for e in events} == {
        f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{rbac.AGENT.name}"
    }
    # Reads of our ServiceAccounts are recorded too (the RBAC verbs test needs them), with their answer.
    got = {(e.resource, e.namespace, e.verb, e.code) for e in events if e.resource}
    assert got == {
        ("nodes", "", "list", 200),
        ("configmaps", kinds.SYSTEM_NAMESPACE, "list", 200),
        ("secrets", kinds.SYSTEM_NAMESPACE, "list", 403),
        ("configmaps", "default", "list", 403),
    }


async def test_a_new_service_account_is_created_and_holds_no_permission(devcluster: DevCluster) -> None:
    name = f"nobody-{uuid.uuid4().hex[:8]}"
    first = devcluster.service_account_kubeconfig(name)
    assert devcluster.service_account_kubeconfig(name) == first  # same path, fresh token
    client = await Client.connect(str(first))
    try:
        with pytest.raises(ApiError) as denied:
            await client.list(kinds.NODE)
        assert denied.value.status == 403
    finally:
        await client.close()
