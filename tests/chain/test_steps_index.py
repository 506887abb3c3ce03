"""The chain's per-Node index (``Steps``): a queue plan, an InstanceType's members and its capacity views
computed over the indexed candidates equal the ones computed over every Node — after Node additions,
relabels and deletions too, including the refusals a stale flavor causes."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, inputs, pools, queues
from gpustack_worker.chain.controller import Chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.frozen import thaw
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from tests.chain.builders import mixed_cluster, node

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer

TOPOLOGY = keys.topology_name(keys.topology_profile([keys.HOSTNAME]))


def _feed(informer: Informer, kind: str, obj: dict[str, Any]) -> None:
    """One watch event through the informer's own ingestion (store, then handlers)."""
    informer._apply({"type": kind, "object": copy.deepcopy(obj)})


EPYC_7R32, EPYC_7R13 = "AMD EPYC 7R32", "AMD EPYC 7R13 Processor"
XEON = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
A10G, T4 = ("nvidia", "NVIDIA A10G", 23028), ("nvidia", "Tesla T4", 15360)
ASCEND = (("ascend", "910B2", 8, 65536),)


def _gpu(
    name: str, cpu: str, cores: int, model: tuple[str, str, int], cards: int, **kw: Any
) -> dict[str, Any]:
    mfr, product, mib = model
    vendor = "AMD" if cpu.startswith("AMD") else "Intel"
    return node(name, vendor=vendor, cpu_name=cpu, cores=cores, devices=((mfr, product, cards, mib),), **kw)


def _fleet() -> list[dict[str, Any]]:
    nodes = mixed_cluster()
    nodes += [
        _gpu("a10g-b", EPYC_7R32, 48, A10G, 4),
        _gpu("a10g-c", EPYC_7R32, 8, A10G, 1),
        _gpu("a10g-off", EPYC_7R32, 8, A10G, 1, managed="false"),
        _gpu("t4-c", EPYC_7R13, 48, T4, 4),
        node("npu-a", vendor="ARM", cpu_name="Kunpeng-920", cores=192, devices=ASCEND, arch="arm64"),
        node("cpu-b", vendor="Intel", cpu_name=XEON, cores=96),
        node("cpu-noprofile", vendor="Intel", cpu_name=XEON, cores=96, profile=None),
    ]
    for n in nodes:
        n["metadata"]["resourceVersion"] = "1"
    return nodes


@pytest.fixture
def chain() -> Chain:
    client = cast("Client", object())
    settings = SettingsSource(client, model=WorkerSettings, env={}, post_events=False)
    chain = Chain(client, settings, InformerRegistry(client))
    nodes = _fleet()
    for n in nodes:
        _feed(chain.nodes, "ADDED", n)
    plans = flavors.plan_flavors(chain.steps.hardware(), mixed_on_node=True)
    for p in plans:
        _feed(chain.flavors, "ADDED", flavors.flavor_body(p, mixed_on_node=True, aware=False))
        it = pools.derived_instance_type(p, aware=False)
        if chain.types.store.get(it["metadata"]["name"]) is None:
            _feed(chain.types, "ADDED", it)
    return chain


def _decide(chain: Chain, it: Any, nodes: list[Any]) -> queues.QueueDecision:
    return queues.decide(
        queues.QueueInputs(
            instance_type=it,
            queue=None,
            flavors=chain.flavors.store.list(),
            nodes=nodes,
            topologies=frozenset({TOPOLOGY}),
            active_checks=frozenset(),
        )
    )


def _members(chain: Chain, it: Any, *, indexed: bool) -> set[str]:
    pool = pools.identity_of(it)
    selector = pools.flavor_selector(pools.schedule_labels(pool, aware=False))
    out: set[str] = set()
    for flavor in pools.flavors_of(selector, chain.flavors.store.list()):
        labels = flavor["spec"]["nodeLabels"]
        nodes = chain.steps._candidates([labels]) if indexed else chain.steps.hardware()
        out.update(flavors.flavor_nodes(flavor, nodes))
    return out


def _same_everywhere(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Compare every InstanceType's plan, members and status over the index and over every Node; returns
    the plan reasons seen (so a case can say which paths it covered)."""
    reasons: list[str] = []
    for it in chain.types.store.list():
        everything = _decide(chain, it, chain.steps.hardware())
        assert _decide(chain, it, chain.steps._queue_nodes(it)) == everything
        assert _members(chain, it, indexed=True) == _members(chain, it, indexed=False)
        decision, _queue = inputs.type_decision(it, None)
        indexed = chain.steps.pool_status(it, None, decision)
        with monkeypatch.context() as m:
            m.setattr(chain.steps, "_candidates", lambda _selectors, _extra=(): chain.steps.hardware())
            assert chain.steps.pool_status(it, None, decision) == indexed
        reasons.append(everything.condition.reason if everything.condition else "")
    return reasons


def test_index_gives_the_plans_of_every_node(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(_same_everywhere(chain, monkeypatch)) == {"Ready"}
    t4 = next(
        it for it in chain.types.store.list() if it["metadata"]["name"].endswith("tesla-t4-linux-amd64")
    )
    assert _members(chain, t4, indexed=True) == {"t4-a", "t4-b", "t4-c"}
    # Only accelerated pools are narrowed; the candidates hold the pool's Nodes and nothing of other models.
    names = {n.name for n in chain.steps._queue_nodes(t4)}
    assert {"t4-a", "t4-b", "t4-c"} <= names
    assert not names & {"a10g-a", "a10g-b", "npu-a", "cpu-a"}


def test_index_follows_relabels_and_deletions(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    # t4-c grows to 8 cards, a10g-c loses its profile, t4-a goes away, a new node of a new model arrives:
    # the flavors are now stale, so the plans are refusals — the same ones over the index.
    grown = _gpu("t4-c", EPYC_7R13, 48, T4, 8)
    grown["metadata"]["resourceVersion"] = "2"
    _feed(chain.nodes, "MODIFIED", grown)
    unprofiled = _gpu("a10g-c", EPYC_7R32, 8, A10G, 1, profile=None)
    unprofiled["metadata"]["resourceVersion"] = "2"
    _feed(chain.nodes, "MODIFIED", unprofiled)
    gone = chain.nodes.store.get("t4-a")
    assert gone is not None
    _feed(chain.nodes, "DELETED", thaw(gone))
    fresh = _gpu(
        "l40s-a", "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", 112, ("nvidia", "NVIDIA L40S", 46068), 8
    )
    fresh["metadata"]["resourceVersion"] = "3"
    _feed(chain.nodes, "ADDED", fresh)

    reasons = _same_everywhere(chain, monkeypatch)
    assert "NonConservedQuota" in reasons
    hardware = {h.name for h in chain.steps.hardware()}
    assert "t4-a" not in hardware and "a10g-c" not in hardware and "l40s-a" in hardware
    indexed = {n for names in chain.steps._by_label.values() for n in names}
    assert indexed == hardware  # every managed, profiled Node pins at least its CPU count
    t4_count = keys.count_key(keys.accelerator_key("nvidia-tesla-t4"))
    assert "t4-c" in chain.steps._by_label[(t4_count, "8")]
    assert "t4-c" not in chain.steps._by_label[(t4_count, "4")]  # t4-b still has 4: the pair stays
    assert not any("t4-a" in names for names in chain.steps._by_label.values())
