"""Fault: the controller's watch streams silently stall (issue 17).

The controller's client reaches kube-apiserver through a loopback TCP proxy (:mod:`tests.chain.
stall_proxy`; TLS passes through unchanged). While the chain converges and every one of its informers is
watching, the proxy freezes every connection open at that moment: no byte moves in either direction and
nothing is closed, so each watch looks open and simply goes quiet — no error, no end of stream. New
connections are forwarded. The informers run with a 10 s inactivity watchdog (production: 120 s;
``watch-inactivity-seconds``) and the default 5-10 min watch timeouts, so only the watchdog can notice.

Asserted: the chain converges to the undisturbed run's objects (it needs its informers' events to finish,
so this alone shows every stalled watch was replaced); no object at rest before the stall is written
again (no write doubled); every informer that was watching logged ``watch inactive, reconnecting`` after
the stall and is watching again on a new connection through the proxy, and is healthy.

A second case is a watch that never opens: the proxy terminates TLS (with the API server's own serving
certificate) so it can tell watch requests apart, and the informers resume their watches every 3-4 s
(short watch timeouts). While the chain converges, the proxy holds back the responses of the next
watches, one per informer: the server gets each request, the client never a status line. Asserted, as
above, the same objects and nothing at rest written again; and each held watch was logged ``watch never
opened, relisting`` and ended in a relist (reason ``error``), every informer watching and healthy again.
No duration is asserted.

Each case runs on the session's control plane put back to its baseline (tests/kit/reset.py): the pools
hold exactly the scenario's Nodes and the chain starts from nothing, so the fault meets it converging.
The fault is the proxy's, in front of the API server: the control plane itself is never touched.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from gpustack_worker.api import rbac
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.informer import InformerOptions
from tests.chain import fault_kit as fk
from tests.chain.stall_proxy import StallProxy, TlsTermination, proxied_kubeconfig
from tests.kit.cluster import shared_baseline
from tests.stack import eventually

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.informer import Informer
    from tests.stack import Stack

pytestmark = pytest.mark.cluster

OPTIONS = InformerOptions(inactivity_timeout_s=10.0, backoff_initial_s=0.2, backoff_max_s=2.0)
#: Watches resumed every 3-4 s, so held ones are met soon.
SHORT_WATCHES = InformerOptions(
    watch_timeout_min_s=3.0,
    watch_timeout_max_s=4.0,
    inactivity_timeout_s=10.0,
    backoff_initial_s=0.2,
    backoff_max_s=2.0,
)


@pytest.fixture
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline for each case (the pools must hold exactly the
    scenario's Nodes, and the fault must meet a chain that is still converging)."""
    return shared_baseline()


def _converging(stack: Stack, final: fk.Snapshot) -> Callable[[], Awaitable[fk.Snapshot | None]]:
    """The chain's objects once some are at their final state, some are not, and every informer watches:
    the moment to inject a fault mid-convergence."""

    async def check() -> fk.Snapshot | None:
        now = await fk.snapshot(stack.admin)
        chain_done = {k for k in fk.at_rest(now, final) if not k.startswith("NodeFeature/")}
        watching = all(i.watching for i in stack.registry.informers)
        return now if watching and chain_done and now != final else None

    return check


async def test_stalled_watch_streams_are_noticed_and_replaced(devcluster: DevCluster) -> None:
    undisturbed = await fk.baseline()
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    proxy = await StallProxy(devcluster.server.removeprefix("https://")).start()
    direct = devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)
    kubeconfig = proxied_kubeconfig(direct, direct.with_name("controller-via-proxy.kubeconfig"), proxy)
    try:
        async with fk.running_chain(
            devcluster, controller_kubeconfig=kubeconfig, informer_options=OPTIONS
        ) as stack:
            assert stack.controller_client.host == proxy.address
            informers = stack.registry.informers

            with capture_logs() as logs:
                converging = _converging(stack, undisturbed.objects)
                before = await eventually(converging, within=fk.CONVERGE_S, every=0.05)
                assert before is not None
                rest = fk.at_rest(before, undisturbed.objects) & fk.in_cache(stack)
                since = datetime.datetime.now(datetime.UTC)
                inactive_before = fk.metric("gpustack_informer_watch_inactive_total")
                frozen = proxy.freeze()
                assert frozen >= len(informers)
                final = await fk.converged(stack, undisturbed.objects)
                await eventually(_all_watching(informers), within=fk.CONVERGE_S)

            fk.assert_same(undisturbed.objects, final)
            again = fk.rewritten(audit, (fk.CONTROLLER_USER, fk.AGENT_USER), since, rest)
            assert again == [], f"objects at rest before the stall written again: {again}"

            noticed = {
                (e.get("resource"), e.get("namespace"), e.get("selector"))
                for e in logs
                if e["event"] == "watch inactive, reconnecting"
            }
            watched = {(i.resource.plural, i.namespace, i.label_selector) for i in informers}
            assert watched <= noticed, watched - noticed
            # the counter an operator graphs says the same as the log lines
            assert fk.metric("gpustack_informer_watch_inactive_total") - inactive_before >= len(watched)
            assert proxy.accepted_since_freeze >= len(informers)
            assert all(i.healthy for i in informers)
    finally:
        await proxy.close()


async def test_a_watch_that_never_opens_is_a_failure_and_is_retried(devcluster: DevCluster) -> None:
    undisturbed = await fk.baseline()
    assert devcluster.audit_log is not None
    assert devcluster.pki is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    pki = devcluster.pki
    tls = TlsTermination(pki.serving_cert, pki.serving_key, pki.ca_cert)
    proxy = await StallProxy(devcluster.server.removeprefix("https://"), tls=tls).start()
    direct = devcluster.service_account_kubeconfig(rbac.CONTROLLER.name)
    kubeconfig = proxied_kubeconfig(direct, direct.with_name("controller-via-tls-proxy.kubeconfig"), proxy)
    try:
        async with fk.running_chain(
            devcluster, controller_kubeconfig=kubeconfig, informer_options=SHORT_WATCHES
        ) as stack:
            informers = stack.registry.informers

            with capture_logs() as logs:
                converging = _converging(stack, undisturbed.objects)
                before = await eventually(converging, within=fk.CONVERGE_S, every=0.05)
                assert before is not None
                rest = fk.at_rest(before, undisturbed.objects) & fk.in_cache(stack)
                since = datetime.datetime.now(datetime.UTC)
                errors_before = fk.relists(stack, "error")
                never_before = fk.metric("gpustack_informer_failures_total", reason="watch_never_opened")
                proxy.hold_watches(len(informers))
                await eventually(_held(proxy, len(informers)), within=fk.CONVERGE_S)
                final = await fk.converged(stack, undisturbed.objects)
                await eventually(_all_watching(informers), within=fk.CONVERGE_S)

            fk.assert_same(undisturbed.objects, final)
            again = fk.rewritten(audit, (fk.CONTROLLER_USER, fk.AGENT_USER), since, rest)
            assert again == [], f"objects at rest before the held watches written again: {again}"
            never = [e for e in logs if e["event"] == "watch never opened, relisting"]
            assert len(never) == proxy.held == len(informers), [e.get("resource") for e in never]
            assert fk.relists(stack, "error") - errors_before >= proxy.held
            never_counted = fk.metric("gpustack_informer_failures_total", reason="watch_never_opened")
            assert never_counted - never_before == proxy.held
            assert all(i.healthy for i in informers)
    finally:
        await proxy.close()


def _held(proxy: StallProxy, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return proxy.held >= n

    return check


def _all_watching(informers: list[Informer]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return all(i.watching for i in informers)

    return check
