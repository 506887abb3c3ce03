"""Fault: the controller's ServiceAccount token expiring, and rotated in its file, mid-run (issue 17).

In a Pod the controller's token is a projected ServiceAccount token: a bound token, valid for an hour,
that the kubelet rewrites in the Pod's file before it expires (at 80 % of its life) and the client reads
again when the server answers 401. Here the controller's controllers run in this process
(:func:`tests.chain.fault_kit.running_chain`) with a kubeconfig of their own whose user is the
controller's ServiceAccount and whose token is a TokenRequest token bound to a Secret (``boundObjectRef``).

Real expiry is not practical in a test: a TokenRequest's ``expirationSeconds`` is at least 600. A bound
token is invalid as soon as its bound object is gone, so the test makes the token "expire" by deleting
the Secret: the API server answers 401 to it once its cache of successful token checks (10 s,
``TokenSuccessCacheTTL`` in kube-apiserver's authentication options) has let it go.

While the chain converges (after the controller's first write):

1. the kubelet's part: a fresh token, bound to a second Secret, is written into the kubeconfig file,
   atomically (a temporary file renamed over it, as the kubelet's atomic writer swaps its directory);
2. the old token expires: its Secret is deleted; the test waits until the server refuses the old token
   (a request of its own with it, outside the controller's client);
3. so that the controller certainly sends a request after that even if it had converged in between, an
   admin deletes one of the chain's LocalQueues (the chain writes it again: one accepted write,
   accounted for below).

The controller's client gets a 401, re-reads the file (``Client.reauthenticate``) and retries.

Asserted: ``Client.reauthentications > 0`` and ``rest_client_requests_total{code="401"}`` of this process
went up (what the process reports); the chain converges to the undisturbed run's objects
(:func:`fault_kit.baseline`; no write lost); no object that was at its final state when the token was
rotated got an accepted write afterwards, except the deleted LocalQueue, which got exactly one (no write
doubled). No duration is asserted.

The control plane is the session's, put back to its baseline (tests/kit/reset.py): the pools hold
exactly the scenario's Nodes and the chain starts from nothing. The fault is a token's, not the control
plane's; the audit log is read from the test's start.
"""

from __future__ import annotations

import datetime
import os
import ssl
from typing import TYPE_CHECKING, Any, Final

import httpx
import pytest
import yaml

from gpustack_worker.api import kinds, rbac
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from tests.chain import fault_kit
from tests.kit.cluster import shared_baseline
from tests.stack import eventually

if TYPE_CHECKING:
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NS: Final = kinds.SYSTEM_NAMESPACE
#: A TokenRequest's lifetime (a projected token's default); it never runs out during the test.
TOKEN_SECONDS: Final = 3600
UNAUTHORIZED: Final = {"name": "rest_client_requests_total", "code": "401"}


async def bound_token(cluster: DevCluster, admin: Client, secret: str) -> str:
    """A token of the controller's ServiceAccount bound to a new Secret ``secret``: valid while it exists."""
    created = await admin.create(
        kinds.SECRET,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": NS}},
        namespace=NS,
    )
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": TOKEN_SECONDS,
            "boundObjectRef": {
                "kind": "Secret",
                "apiVersion": "v1",
                "name": secret,
                "uid": created["metadata"]["uid"],
            },
        },
    }
    api = cluster.bootstrap()
    try:
        path = f"/api/v1/namespaces/{NS}/serviceaccounts/{rbac.CONTROLLER.name}/token"
        resp = api.request("POST", path, body)
    finally:
        api.close()
    assert resp.status_code == 201, resp.text
    token: str = resp.json()["status"]["token"]
    return token


def write_token(template: Path, path: Path, token: str) -> None:
    """``template`` (a kubeconfig of the controller's ServiceAccount) with ``token``, written to ``path``
    atomically: a reader sees the old file or the new one, never half of one."""
    config: dict[str, Any] = yaml.safe_load(template.read_text())
    config["users"][0]["user"] = {"token": token}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=True))
    tmp.chmod(0o600)
    os.replace(tmp, path)


async def refused(cluster: DevCluster, token: str) -> bool:
    """The API server answers 401 to ``token`` (a request outside the controller's client and metrics)."""
    assert cluster.pki is not None
    ctx = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    async with httpx.AsyncClient(verify=ctx, timeout=10) as http:
        resp = await http.get(f"{cluster.server}/api", headers={"Authorization": f"Bearer {token}"})
    return resp.status_code == 401


async def test_the_controller_reauthenticates_with_the_rotated_token_and_the_chain_converges(
    tmp_path: Path,
) -> None:
    undisturbed = await fault_kit.baseline()
    queue_key = sorted(k for k in undisturbed.objects if k.startswith("LocalQueue/"))[0]
    _, queue_ns, queue_name = queue_key.split("/")
    cluster = shared_baseline()
    assert cluster.audit_log is not None
    audit = AuditLog.from_now(cluster.audit_log)
    admin = await Client.connect(str(cluster.kubeconfig), user_agent="faults-token")
    template = cluster.service_account_kubeconfig(rbac.CONTROLLER.name)
    kubeconfig = tmp_path / "controller.kubeconfig"
    old = await bound_token(cluster, admin, "controller-token-1")
    write_token(template, kubeconfig, old)
    unauthorized_before = fault_kit.metric(**UNAUTHORIZED)
    reloads_before = fault_kit.metric("gpustack_client_reauthentications_total")
    try:
        async with fault_kit.running_chain(cluster, controller_kubeconfig=kubeconfig) as stack:
            ctl = stack.controller_client

            async def writing() -> bool:
                return ctl.writes > 0

            await eventually(writing, within=fault_kit.CONVERGE_S, every=0.05)
            done = fault_kit.at_rest(await fault_kit.snapshot(admin), undisturbed.objects)
            since = datetime.datetime.now(datetime.UTC)
            rotated_at_writes = ctl.writes
            # 1. the kubelet's part: the fresh token is in the file before the old one expires
            write_token(template, kubeconfig, await bound_token(cluster, admin, "controller-token-2"))
            # 2. the old token expires
            await admin.delete(kinds.SECRET, "controller-token-1", namespace=NS)
            await eventually(lambda: refused(cluster, old), within=fault_kit.CONVERGE_S)
            # 3. a request of the controller's after that, certainly
            deleted_at = datetime.datetime.now(datetime.UTC)
            await admin.delete(kinds.LOCAL_QUEUE, queue_name, namespace=queue_ns)
            final = await fault_kit.converged(stack, undisturbed.objects)
            reauthentications = ctl.reauthentications
            reloads = fault_kit.metric("gpustack_client_reauthentications_total") - reloads_before
            unauthorized = fault_kit.metric(**UNAUTHORIZED) - unauthorized_before
            total_writes = ctl.writes
    finally:
        await admin.close()
    users = (fault_kit.CONTROLLER_USER, fault_kit.AGENT_USER)
    again = fault_kit.rewritten(audit, users, since, done - {queue_key})
    queue_writes = fault_kit.rewritten(audit, (fault_kit.CONTROLLER_USER,), deleted_at, {queue_key})
    writes = fault_kit.accepted_writes(audit, users)

    print(
        f"[faults-token] rotated after {rotated_at_writes} of {total_writes} controller writes;"
        f" {unauthorized:.0f} requests answered 401; {reauthentications} re-authentications"
    )
    more = fault_kit.doubled_writes(writes, undisturbed.writes)
    print(f"[faults-token] written more often than undisturbed (diagnostic): {more}")
    # what the process reports
    assert reauthentications > 0
    assert reloads > 0  # gpustack_client_reauthentications_total: what an operator graphs
    assert unauthorized > 0
    # the same objects, nothing lost, nothing written twice
    fault_kit.assert_same(undisturbed.objects, final)
    assert [f"{e.verb} {e.resource_path} {e.name}" for e in again] == []
    assert [(e.verb, e.resource_path, e.namespace, e.name) for e in queue_writes] == [
        ("patch", "localqueues", queue_ns, queue_name)
    ]
