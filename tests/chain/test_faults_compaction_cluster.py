"""Fault: etcd compacted while the controller's watches are open — 410 Gone on a watch and on a paged LIST
(issue 17).

The operator stack runs :data:`~tests.chain.fault_kit.SCENARIO` on an audited control plane of its own,
the controllers' informers with short watch timeouts (3-4 s: watches are resumed from their last
resourceVersion every few seconds, as the 5-10 min ones are in production) and two objects per LIST page.
ConfigMaps bypass kube-apiserver's watch cache in the dev cluster, so the topology controller's ConfigMap
informer (the namespace holds filler ConfigMaps, more than one page) is served by etcd directly:

1. while the chain converges and every informer's watch is open, etcd is compacted at its current
   revision. The open watches go on; the ConfigMap informer's next watch, resumed from a revision now
   compacted, is answered 410 Gone — it must relist;
2. that relist pages: between its first page and the request carrying the ``continue`` token, the test
   writes one ConfigMap and compacts again (an injection point on the controller's client, the one place
   a page is fetched), so the token's snapshot is compacted away: 410 on the LIST. The informer must
   relist from scratch (a consistent read), not loop on the token.

Asserted: the chain converges to the undisturbed run's objects; no object at rest before the compaction is
written again (no write doubled); the ConfigMap informer logged the expired watch, failed one LIST with
410 and then completed exactly one relist for reason ``gone`` (``gpustack_informer_relists_total``),
is healthy and holds every ConfigMap; the API server answered the controller's client 410 at least once
(``rest_client_requests_total{code="410"}``). No duration is asserted.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

import pytest
from structlog.testing import capture_logs

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.informer import InformerOptions
from tests.chain import fault_kit as fk
from tests.chain.controller_procs import audited_cluster
from tests.stack import eventually

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.informer import Informer

pytestmark = pytest.mark.cluster

NS = kinds.SYSTEM_NAMESPACE
FILLERS = 5
OPTIONS = InformerOptions(
    watch_timeout_min_s=3.0,
    watch_timeout_max_s=4.0,
    backoff_initial_s=0.2,
    backoff_max_s=2.0,
    page_size=2,
)


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    """A control plane of this module's own: the test compacts its etcd, which every watch and paged LIST
    open on it meets (410 Gone). The pools hold exactly the scenario's Nodes there, and its audit log, read
    from the start, holds this module's requests only."""
    why = "compacts etcd: every watch and paged LIST open on the control plane is answered 410 Gone"
    with audited_cluster("faults-compaction", why=why) as cluster:
        yield cluster


def filler(i: int, value: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"fault-filler-{i}", "namespace": NS},
        "data": {"v": value},
    }


class CompactBeforeContinue:
    """Wraps the controller client's page fetch: once armed, before the next ConfigMap LIST request that
    carries a ``continue`` token, write one ConfigMap (so the token's revision is older than etcd's) and
    compact etcd at its current revision; the request then reaches a server whose snapshot is gone."""

    def __init__(self, client: Client, admin: Client, cluster: DevCluster) -> None:
        self.admin = admin
        self.cluster = cluster
        self.path = kinds.CONFIG_MAP.collection_path(NS)
        self.armed = False
        self.fired = 0
        self._fetch = client._get_page  # the one place a LIST page is fetched
        client._get_page = self  # type: ignore[method-assign]

    async def __call__(self, path: str, params: dict[str, str]) -> bytes:
        if self.armed and path == self.path and "continue" in params:
            self.armed = False
            await self.admin.replace(kinds.CONFIG_MAP, filler(0, "compacted"))
            await asyncio.to_thread(self.cluster.compact_etcd)
            self.fired += 1
        return await self._fetch(path, params)


def configmap_informer(informers: list[Informer]) -> Informer:
    (informer,) = [i for i in informers if i.resource == kinds.CONFIG_MAP]
    return informer


async def test_compaction_gives_410_on_watch_and_on_list(devcluster: DevCluster) -> None:
    undisturbed = await fk.baseline()
    assert devcluster.audit_log is not None
    audit = AuditLog(devcluster.audit_log)
    host = devcluster.server.removeprefix("https://")
    admin = await Client.connect(str(devcluster.kubeconfig), user_agent="faults-compaction")
    try:
        for i in range(FILLERS):
            await admin.create(kinds.CONFIG_MAP, filler(i), namespace=NS)
        gone_before = fk.metric("rest_client_requests_total", code="410", host=host)
        async with fk.running_chain(devcluster, informer_options=OPTIONS) as stack:
            injector = CompactBeforeContinue(stack.controller_client, admin, devcluster)
            config_maps = configmap_informer(stack.registry.informers)

            async def converging() -> fk.Snapshot | None:
                now = await fk.snapshot(stack.admin)
                chain_done = {
                    k for k in fk.at_rest(now, undisturbed.objects) if not k.startswith("NodeFeature/")
                }
                watching = all(i.watching for i in stack.registry.informers)
                return now if watching and chain_done and now != undisturbed.objects else None

            with capture_logs() as logs:
                before = await eventually(converging, within=fk.CONVERGE_S, every=0.05)
                assert before is not None
                rest = fk.at_rest(before, undisturbed.objects) & fk.in_cache(stack)
                since = datetime.datetime.now(datetime.UTC)
                injector.armed = True
                await asyncio.to_thread(devcluster.compact_etcd)

                await eventually(_relisted_after_gone(config_maps), within=fk.CONVERGE_S)
                final = await fk.converged(stack, undisturbed.objects)

            fk.assert_same(undisturbed.objects, final)
            again = fk.rewritten(audit, (fk.CONTROLLER_USER, fk.AGENT_USER), since, rest)
            assert again == [], f"objects at rest before the compaction written again: {again}"

            assert injector.fired == 1
            plural = kinds.CONFIG_MAP.plural
            mine = [e for e in logs if e.get("resource") == plural and e.get("namespace") == NS]
            events = [e["event"] for e in mine]
            assert "watch expired, relisting" in events, events
            failed_lists = [
                e for e in mine if e["event"] == "list/watch failed, backing off" and e.get("status") == 410
            ]
            assert failed_lists, events
            assert config_maps.relists_by_reason["gone"] == 1
            assert fk.metric(
                "gpustack_informer_relists_total", resource=kinds.CONFIG_MAP.plural, reason="gone"
            ) >= 1
            assert fk.metric("rest_client_requests_total", code="410", host=host) > gone_before
            assert config_maps.healthy
            cached = {o["metadata"]["name"] for o in config_maps.store.list()}
            assert {f"fault-filler-{i}" for i in range(FILLERS)} <= cached
    finally:
        await admin.close()


def _relisted_after_gone(informer: Informer) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return informer.relists_by_reason["gone"] >= 1 and informer.watching

    return check
