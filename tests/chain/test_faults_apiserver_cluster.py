"""Fault: kube-apiserver killed and restarted while the chain converges (issue 17).

The operator stack (agent + the controller's topology and chain controllers, in-process, each with its
ServiceAccount) runs :data:`~tests.chain.fault_kit.SCENARIO` on an audited control plane of its own. As
soon as the chain has written some of its objects but not all, kube-apiserver is stopped and started again
on the same port while the stack keeps running: in-flight requests and every open watch break, new
requests are refused until it is back.

Asserted: the chain converges to the undisturbed run's objects (no write lost); no object that was
already at rest when the API server went down is written again after it (no write doubled: the no-op
check held after every informer re-listed or re-watched); and the process says what happened — each of
the controller's informers logged its watch cut (``watch stream broke``) or an attempt that failed while
the server was away or starting (``list/watch failed, backing off``: connection refused, 503 before its
paths are installed, 403 before its RBAC cache is filled, 410 from the new watch cache), and is healthy
again; ``rest_client_requests_total{code="<error>"}`` for the API server's host grew. No duration is
asserted.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
from tests.chain import fault_kit as fk
from tests.chain.controller_procs import audited_cluster
from tests.stack import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.informer import Informer

pytestmark = pytest.mark.cluster

#: The informer's log lines for a watch cut by the server, and for an attempt refused or failed.
NOTICED = frozenset({"watch stream broke", "list/watch failed, backing off", "watch expired, relisting"})


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane of this module's own: the test stops and restarts its kube-apiserver. The pools
    hold exactly the scenario's Nodes there, and its audit log, read from the start, holds this module's
    requests only."""
    why = "kills and restarts kube-apiserver while the chain converges"
    with audited_cluster("faults-apiserver", why=why) as cluster:
        yield cluster


async def test_apiserver_restarted_mid_convergence(devcluster: DevCluster) -> None:
    undisturbed = await fk.baseline()
    assert devcluster.audit_log is not None
    audit = AuditLog(devcluster.audit_log)
    host = devcluster.server.removeprefix("https://")
    errors_before = fk.metric("rest_client_requests_total", code="<error>", host=host)
    async with fk.running_chain(devcluster) as stack:

        async def converging() -> fk.Snapshot | None:
            now = await fk.snapshot(stack.admin)
            done = fk.at_rest(now, undisturbed.objects)
            chain_done = {k for k in done if not k.startswith(kinds.NODE_FEATURE.kind)}
            return now if chain_done and now != undisturbed.objects else None

        before = await eventually(converging, within=fk.CONVERGE_S, every=0.05)
        assert before is not None
        rest = fk.at_rest(before, undisturbed.objects) & fk.in_cache(stack)
        watched = {_name(i) for i in stack.registry.informers}
        since = datetime.datetime.now(datetime.UTC)
        with capture_logs() as logs:
            await asyncio.to_thread(devcluster.restart_apiserver)
            final = await fk.converged(stack, undisturbed.objects)
        fk.assert_same(undisturbed.objects, final)
        again = fk.rewritten(audit, (fk.CONTROLLER_USER, fk.AGENT_USER), since, rest)
        assert again == [], f"objects at rest before the restart written again: {again}"
        # the fault hit while converging: the chain still had objects to write after it
        assert fk.accepted_writes(audit, (fk.CONTROLLER_USER,), since)
        run = fk.accepted_writes(audit, (fk.CONTROLLER_USER, fk.AGENT_USER))
        print("writes beyond the undisturbed run's:", fk.doubled_writes(run, undisturbed.writes))

        informers = stack.registry.informers
        for i in informers:
            print(f"{_name(i)}: lists {dict(i.relists_by_reason)}, last error {i.last_error}")
        noticed = {
            (e.get("resource"), e.get("namespace"), e.get("selector")) for e in logs if e["event"] in NOTICED
        }
        assert watched <= noticed, watched - noticed
        assert all(i.healthy and i.has_synced for i in informers)
        assert fk.metric("rest_client_requests_total", code="<error>", host=host) > errors_before


def _name(informer: Informer) -> tuple[str, str | None, str | None]:
    """An informer as its log lines name it."""
    return (informer.resource.plural, informer.namespace, informer.label_selector)
