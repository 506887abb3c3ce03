"""The chain's three paths assemble the same inputs (:mod:`gpustack_worker.chain.inputs`) on a generated
fleet: the controllers from their informer caches (``chain.steps.Steps``), ``plan SCENARIO``
(``cli.planning.plan_chain``) and ``plan --from-cluster`` (``cli.cluster_plan``).

For each drawn fleet (:func:`tests.chain.fleets.fleets`: every manufacturer, CPU-only and accelerated
nodes, the admin's ``managed`` label in every form, both values of each grouping setting, sometimes a rack
TopologySource) the scenario plan is the reference, and:

- **projected labels** — the Nodes ``plan --from-cluster`` converges a freshly applied fleet to (its
  nfd-master emulation over the listed NodeFeatures) are the scenario plan's; reading back the cluster the
  scenario plan describes (its Nodes, with the NodeFeatures the agent and the TopologySource publish)
  gives each Node its labels, NodeFeature labels and chain view unchanged; and the controllers' view of
  those Nodes (``Steps.hardware``) is the plans' (``inputs.chain_nodes``);
- **queue inputs** — for every InstanceType, what the queue controller's decision reads
  (``Steps.queue_inputs`` over caches holding the settled Nodes, ``Devices``, flavors, Topologies and
  InstanceTypes) equals what both plans assembled for it (``inputs.queue_inputs``, recorded), and
  ``queues.decide`` makes the same ClusterQueue from each;
- **pool statuses** — every InstanceType's status is the same from the three: the controller's
  (``Steps.pool_status`` once the queue it wrote is cached), the scenario plan's and the from-cluster
  plan's (the step after the authored InstanceTypes and the queues are in its caches);
- the from-cluster plan of the settled cluster changes none of those objects.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import TYPE_CHECKING, Any, cast
from unittest import mock

from hypothesis import HealthCheck, event, given, settings

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import admissionchecks, inputs, managers, queues
from gpustack_worker.chain.controller import Chain
from gpustack_worker.cli.plan.cluster_plan import LiveCluster, desired_chain, live_nodes, plan_cluster
from gpustack_worker.cli.plan.planning import (
    PlanError,
    PlannedChain,
    converge,
    plan_chain,
    scenario_nodes,
    topology_ready_status,
)
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.frozen import thaw
from gpustack_worker.runtime.prune import stamp
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate import render
from gpustack_worker.topology import managers as topology_managers
from tests.chain.fleets import Fleet, fleets
from tests.cli.plan.test_cluster_plan import NS, applied_fleet
from tests.kit.properties import examples

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from gpustack_worker.chain.nodes import NodeHardware
    from gpustack_worker.cli.plan.planning import PlanNode
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer

#: The kinds whose settled objects the from-cluster plan must leave as they are.
SETTLED_KINDS = frozenset(
    {
        kinds.NODE.kind,
        kinds.TOPOLOGY.kind,
        kinds.RESOURCE_FLAVOR.kind,
        kinds.INSTANCE_TYPE.kind,
        kinds.CLUSTER_QUEUE.kind,
        kinds.ADMISSION_CHECK.kind,
    }
)


@contextlib.contextmanager
def _recording(name: str) -> Iterator[list[Any]]:
    """Every result of ``inputs.<name>`` while the block runs (each path calls it through the module)."""
    real = getattr(inputs, name)
    results: list[Any] = []

    def record(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        results.append(out)
        return out

    with mock.patch.object(inputs, name, record):
        yield results


def _name(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name", ""))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _identity(obj: Mapping[str, Any] | None) -> Any:
    """An object as a decision reads it: name, labels, annotations, spec (not the uid, generation and
    resourceVersion the API server assigns, nor the status its writers report)."""
    if obj is None:
        return None
    meta = thaw(obj.get("metadata") or {})
    return (meta.get("name"), meta.get("labels"), meta.get("annotations"), thaw(obj.get("spec")))


def _shape(inp: queues.QueueInputs) -> dict[str, Any]:
    """Everything a queue decision reads but the Nodes (the controllers narrow those to the pool's
    candidates; :func:`_nodes_agree` compares them)."""
    return {
        "instance_type": _identity(inp.instance_type),
        "queue": _identity(inp.queue),
        "flavors": sorted(_identity(f) for f in inp.flavors),
        "topologies": inp.topologies,
        "active_checks": inp.active_checks,
        "owns_stop_policy": inp.owns_stop_policy,
        "settings": (inp.aware, inp.mixed_on_node, inp.derived_from_node, inp.drain_when_no_flavors),
    }


def _by_name(nodes: Any) -> dict[str, NodeHardware]:
    return {n.name: n for n in nodes}


def _nodes_agree(narrowed: queues.QueueInputs, every: queues.QueueInputs) -> None:
    """The controllers' candidates are views of the plan's Nodes, and decide as every Node does."""
    all_nodes = _by_name(every.nodes)
    assert {n: all_nodes.get(n) for n in _by_name(narrowed.nodes)} == _by_name(narrowed.nodes)
    assert queues.decide(dataclasses.replace(narrowed, nodes=every.nodes)) == queues.decide(narrowed)


def _feed(informer: Informer, obj: Mapping[str, Any]) -> None:
    """One ADDED watch event through the informer's own ingestion (its transform, store and handlers)."""
    raw = copy.deepcopy(dict(obj))
    raw.setdefault("metadata", {}).setdefault("resourceVersion", "1")
    informer._apply({"type": "ADDED", "object": raw})


def _as_written(queue: Mapping[str, Any]) -> dict[str, Any]:
    """A ClusterQueue as the queue controller left it: its apply entry owns what it set (the stop policy
    among it), and ``status`` holds its ``TopologyReady`` condition."""
    out = copy.deepcopy(dict(queue))
    fields: dict[str, Any] = {"f:spec": {"f:stopPolicy": {}}} if "stopPolicy" in out["spec"] else {}
    entry = {"manager": managers.QUEUE, "operation": "Apply", "fieldsV1": fields}
    out["metadata"] = {**out["metadata"], "uid": f"uid-{_name(out)}", "managedFields": [entry]}
    return out


def _authored(instance_type: Mapping[str, Any]) -> dict[str, Any]:
    """An InstanceType as authored (its status is the InstanceType controller's, not an input)."""
    return {k: copy.deepcopy(v) for k, v in instance_type.items() if k != "status"}


def _node_features(name: str, n: PlanNode, spec: Any) -> list[dict[str, Any]]:
    """The NodeFeatures a settled Node is projected from: the Device Manager's (rendered), the worker's
    and the TopologySource's (as the agent and the topology controller publish them)."""
    out = []
    dm = render.render_node_feature(spec, f"uid-{name}")
    if dm is not None:
        out.append(dm)
    worker = {
        "apiVersion": kinds.NODE_FEATURE.api_version,
        "kind": kinds.NODE_FEATURE.kind,
        "metadata": {
            "name": keys.worker_nodefeature_name(name),
            "namespace": NS,
            "labels": {keys.NFD_NODE_NAME: name, keys.PART_OF: keys.WORKER_PART_OF},
        },
        "spec": {"labels": dict(n.worker)},
    }
    out.append(worker)
    if n.topology:
        out.append(
            {
                "apiVersion": kinds.NODE_FEATURE.api_version,
                "kind": kinds.NODE_FEATURE.kind,
                "metadata": {
                    "name": f"{name}-topology",
                    "namespace": NS,
                    "labels": {keys.NFD_NODE_NAME: name, keys.TOPOLOGY_SOURCE_UID: "uid-source"},
                },
                "spec": {"labels": dict(n.topology)},
            }
        )
    return out


def _settled(fresh: LiveCluster, fleet: Fleet, nodes: dict[str, PlanNode], plan: PlannedChain) -> LiveCluster:
    """The cluster the scenario plan describes: its Nodes as they converged (with the NodeFeatures they
    are projected from) and the chain objects as the controllers wrote them."""
    specs = {spec.name: spec for spec in fleet.scenario.nodes}
    return dataclasses.replace(
        fresh,
        nodes=[copy.deepcopy(n.current) for n in nodes.values()],
        node_features=[nf for name, n in nodes.items() for nf in _node_features(name, n, specs[name])],
        flavors=[copy.deepcopy(b) for b in plan.flavors.values()],
        topologies=[stamp(b, topology_managers.OWNER_TOPOLOGIES) for b in plan.topologies.values()],
        instance_types=[copy.deepcopy(b) for b in plan.instance_types.values()],
        cluster_queues=[_as_written(q) for q in plan.cluster_queues.values()],
        admission_checks=list(admissionchecks.desired_admission_checks().values()),
    )


def _controllers(s: WorkerSettings) -> Chain:
    client = cast("Client", object())
    source = SettingsSource(client, model=WorkerSettings, env={}, post_events=False)
    chain = Chain(client, source, InformerRegistry(client))
    chain.steps.settings = lambda: s
    return chain


@settings(max_examples=examples(80), suppress_health_check=[HealthCheck.too_slow])
@given(fleets(min_nodes=1, max_nodes=6, long_names=False))
def test_the_controllers_and_both_plans_assemble_the_same_chain_inputs(fleet: Fleet) -> None:
    s = fleet.grouping.settings()
    racks = fleet.racks
    source = racks.source() if racks is not None else None
    snapshot = racks.snapshot() if racks is not None else None

    # plan SCENARIO: the reference (and the Nodes it converged, with their NodeFeatures' labels).
    try:
        with _recording("queue_inputs") as scenario_inputs, _recording("chain_nodes") as scenario_views:
            plan = plan_chain(
                fleet.scenario, s, topology_source=source, snapshot=snapshot, checks_active=False
            )
    except PlanError:
        return  # the scenario plan refuses it (a source not in effect): nothing to compare with
    nodes = scenario_nodes(fleet.scenario)
    converge(nodes, s, source, snapshot, NS)
    assert {name: _labels(n.current) for name, n in nodes.items()} == plan.node_labels
    refused = {r["name"] for r in plan.refused}
    types = {name: it for name, it in plan.instance_types.items() if name not in refused}
    event(f"pools: {min(len(types), 3)}{'+' if len(types) > 3 else ''}")
    event(f"topology source: {'rack' if source is not None else 'none'}; refused: {bool(refused)}")

    # plan --from-cluster over the fleet as applied (no controller of ours ran yet).
    fresh = applied_fleet(fleet.scenario, source=source, snapshot=snapshot)
    with _recording("queue_inputs") as cluster_inputs, _recording("chain_nodes") as cluster_views:
        desired = desired_chain(fresh, s, namespace=NS)
    assert desired.node_labels == plan.node_labels
    (scenario_hardware,) = scenario_views
    (cluster_hardware,) = cluster_views
    assert cluster_hardware == scenario_hardware

    # The controllers, over caches holding the settled cluster (no ClusterQueue yet).
    settled = _settled(fresh, fleet, nodes, plan)
    chain = _controllers(s)
    for node in settled.nodes:
        _feed(chain.nodes, node)
    for dev in (n.devices for n in nodes.values()):
        if dev is not None:
            _feed(chain.devices, dev)
    for flavor in settled.flavors:
        _feed(chain.flavors, flavor)
    for topology in settled.topologies:
        _feed(chain.topologies, topology)
    for it in types.values():
        _feed(chain.types, _authored(it))
    assert _by_name(chain.steps.hardware()) == _by_name(scenario_hardware)

    # Queue inputs: the same from the three, and the same ClusterQueue decided from them.
    by_scenario = {_name(i.instance_type): i for i in scenario_inputs}
    by_cluster = {_name(i.instance_type): i for i in cluster_inputs}
    for name in types:
        ours = chain.steps.queue_inputs(name)
        assert _shape(ours) == _shape(by_scenario[name]) == _shape(by_cluster[name]), name
        _nodes_agree(ours, by_scenario[name])
        assert by_cluster[name].nodes == by_scenario[name].nodes
        decided = queues.decide(ours)
        assert decided.body is not None and decided.condition is not None
        written = {**decided.body, "status": topology_ready_status(decided.condition)}
        assert written == plan.cluster_queues[name]
        assert desired.then[kinds.CLUSTER_QUEUE.kind][name] == written

    # Pool statuses: the controller's once its queue is cached, the scenario plan's, the from-cluster one's.
    for queue in settled.cluster_queues:
        if _name(queue) in types:
            _feed(chain.queues, queue)
    for name, it in types.items():
        cached_type = chain.types.store.get(name)
        cached_queue = chain.queues.store.get(name)
        assert cached_type is not None and cached_queue is not None
        decision, read = inputs.type_decision(cached_type, cached_queue)
        status = thaw(chain.steps.pool_status(cached_type, read, decision))
        assert status == it["status"], name
        assert desired.then[kinds.INSTANCE_TYPE.kind][name]["status"] == it["status"], name

    # Reading the settled cluster back: each Node as converged, and nothing of the chain to change.
    if not refused:
        read_back = live_nodes(settled, with_sources=source is not None)
        for name, n in nodes.items():
            back = read_back[name]
            assert (_labels(back.current), back.worker, back.topology) == (
                _labels(n.current),
                n.worker,
                n.topology,
            ), name
        report = plan_cluster(settled, s, namespace=NS, settings_source="test")
        assert [c for c in report.changes if c.kind in SETTLED_KINDS] == []
