"""The chain a scenario yields, computed with no cluster: the controllers' own pure functions, composed.

What the live cluster does, step by step, and the pure function each step runs here:

1. stages 1-2 (:mod:`gpustack_worker.simulate.render`): every scenario node's Node, the Device
   Manager's NodeFeature and the ``Devices`` object with its ledger;
2. stage 3 (:mod:`gpustack_worker.agent`): the inputs checked (``validate.check``), the worker
   NodeFeature's labels (``nodefeature.desired_labels``) and the per-card fit labels (``fit.desired``);
3. nfd-master's projection (:func:`~gpustack_worker.chain.inputs.project`, over :meth:`PlanNode.features`):
   the union of a Node's NodeFeature labels onto the Node, each projected key listed in
   ``nfd.node.kubernetes.io/feature-labels`` (the agent reads that list to tell its own
   ``gpustack.ai/managed`` from an admin's);
4. topology (:mod:`gpustack_worker.topology`): an optional TopologySource (its spec checked, its
   snapshot decoded and validated by ``sources.decide`` exactly as the controller does, with the Nodes it
   selects), its NodeFeatures projected, then every managed Node's hierarchy profile
   (``profiles.node_assignment``) and the Kueue Topologies of those profiles;
5. the chain (:mod:`gpustack_worker.chain`): flavors (``flavors.plan_flavors`` / ``flavor_body``), the
   derived InstanceTypes (``pools.derived_instance_type``), each ClusterQueue (``queues.decide`` over
   ``inputs.queue_inputs``), each InstanceType's status (``inputs.type_decision``, ``inputs.pool_status``:
   the InstanceType controller's own functions, fed the flavors the plan writes as its cache) and the
   LocalQueues (``localqueues``). The inputs of each decision are assembled by
   :mod:`gpustack_worker.chain.inputs`, as the controllers and ``plan --from-cluster`` assemble theirs.

Steps 2-4 feed each other (the agent reads the labels nfd-master projected, the TopologySource selects by
them), so they are repeated until the Nodes stop changing, as the controllers converge. The result is the
cluster's steady state right after the scenario is applied: no Workload holds quota yet, and — unless
``checks_active`` is False — the placement controllers have marked both AdmissionChecks ``Active``, as
the controller process does.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.agent import fit, nodefeature, validate
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys, kinds, validation
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.chain import admissionchecks, inputs, localqueues, managers, pools, queues
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain.inputs import project
from gpustack_worker.runtime.prune import stamp
from gpustack_worker.simulate import render
from gpustack_worker.topology import levels as lv
from gpustack_worker.topology import profiles, sources
from gpustack_worker.topology.selector import compile_selector

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.runtime.conditions import Condition
    from gpustack_worker.simulate.scenario import Scenario

__all__ = (
    "PlanError",
    "PlanNode",
    "PlannedChain",
    "accepted",
    "converge",
    "facts_of",
    "in_effect",
    "own_keys",
    "parsed_facts",
    "plan_chain",
    "project",
    "reproject",
    "scenario_nodes",
    "set_own",
)

#: The namespace the plan's LocalQueues are shown in (every non-system namespace gets the same ones).
PLAN_NAMESPACE: Final = "default"
#: Rounds of agent → nfd-master → topology before the Nodes must have stopped changing.
_MAX_ROUNDS: Final = 6
#: A placeholder time for the rendered Node's Ready condition and the source's decision (never read).
_EPOCH: Final = "1970-01-01T00:00:00Z"


class PlanError(ValueError):
    """The inputs cannot yield a chain (a TopologySource that is not in effect); ``str`` says why."""


@dataclass(frozen=True, slots=True)
class PlannedChain:
    """Everything the plan computed, as the API objects the controllers would write."""

    #: Node name → the Node's labels once every writer has converged.
    node_labels: dict[str, dict[str, str]]
    #: Node name → its hierarchy profile ("" for a Node the chain does not read).
    profiles: dict[str, str]
    #: Kueue Topology name → body (the topology controller's).
    topologies: dict[str, dict[str, Any]]
    #: ResourceFlavor name → body (as applied, owner label included).
    flavors: dict[str, dict[str, Any]]
    #: InstanceType name → body, with the ``status`` the InstanceType controller writes.
    instance_types: dict[str, dict[str, Any]]
    #: ClusterQueue name → body (as applied; ``status.conditions`` holds ``TopologyReady``).
    cluster_queues: dict[str, dict[str, Any]]
    #: LocalQueue name → the ClusterQueue it fronts (the same in every non-system namespace).
    local_queues: dict[str, str]
    #: The TopologySource's decided status (None without one).
    topology_source: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: Objects the API server would refuse (``api.validation.object_problems``): kind, name, field path
    #: and rule. A refused object is not in the maps above — it would not exist — and a queue it feeds
    #: is planned without it (so it is not Ready).
    refused: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The plan as plain JSON values (``-o json`` / ``-o yaml``)."""
        return {
            "nodes": {
                name: {"profile": self.profiles.get(name, ""), "labels": labels}
                for name, labels in sorted(self.node_labels.items())
            },
            "topologySource": self.topology_source,
            "topologies": sorted(self.topologies),
            "resourceFlavors": list(self.flavors.values()),
            "instanceTypes": list(self.instance_types.values()),
            "clusterQueues": list(self.cluster_queues.values()),
            "localQueues": [{"name": n, "clusterQueue": q} for n, q in sorted(self.local_queues.items())],
            "notes": list(self.notes),
            "refused": list(self.refused),
        }


@dataclass(slots=True)
class PlanNode:
    """One node as the cluster holds it: the Node with no NodeFeature projected, the labels of the
    NodeFeatures neither the agent nor a TopologySource writes (``dm_labels``: the Device Manager's) and
    the ``Devices`` object with its ledger. A scenario's are rendered; ``plan --from-cluster`` reads them
    (:mod:`gpustack_worker.cli.plan.cluster_plan`)."""

    base: dict[str, Any]
    dm_labels: dict[str, str]
    devices: dict[str, Any] | None
    #: The parsed ``Devices`` (what the agent and the chain read), None without one.
    facts: DevicesFacts | None
    #: The Node as it stands (projections, the profile and the fit labels applied: :func:`reproject`).
    current: dict[str, Any] = field(default_factory=dict)
    #: What the worker NodeFeature carries now (its ``published`` labels).
    worker: dict[str, str] = field(default_factory=dict)
    topology: dict[str, str] = field(default_factory=dict)

    def features(self) -> list[dict[str, str]]:
        """The labels of the Node's NodeFeatures in the order the emulated nfd-master merges them (a key
        set by two takes the later's value): the Device Manager's (and any other not ours), the worker's,
        the TopologySource's."""
        return [self.dm_labels, self.worker, self.topology]


def reproject(n: PlanNode, own: Mapping[str, str] | None = None) -> None:
    """``n.current``: nfd-master's projection of the node's NodeFeatures onto its base (:func:`~gpustack_
    worker.chain.inputs.project`), then ``own`` — the labels our controllers write on the Node directly —
    in place of the base's (None: the Node as projected, nothing put back or taken off)."""
    n.current = project(n.base, n.features())
    if own is not None:
        set_own(n, own)


def scenario_nodes(scenario: Scenario) -> dict[str, PlanNode]:
    """Every scenario node as the cluster holds it once stages 1-2 ran and nfd-master projected the
    Device Manager's NodeFeature: the rendered Node, NodeFeature and ``Devices`` with its ledger."""
    out: dict[str, PlanNode] = {}
    for spec in scenario.nodes:
        uid = f"plan-{spec.name}"
        node = render.render_node(spec, _EPOCH)
        node["metadata"]["uid"] = uid
        feature = render.render_node_feature(spec, uid)
        dm = dict((feature or {}).get("spec", {}).get("labels") or {})
        devices = render.render_devices(spec, uid)
        ledger = render.render_devices_status(spec)
        if devices is not None and ledger is not None:
            devices = {**devices, "status": ledger["status"]}
        out[spec.name] = PlanNode(node, dm, devices, parsed_facts(devices))
        reproject(out[spec.name])
    return out


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def in_effect(conditions: Sequence[Condition]) -> tuple[bool, str]:
    """Whether a TopologySource whose decided conditions are ``conditions`` is in effect, and why."""
    for cond in conditions:
        if cond.type == sources.READY:
            # the controllers' own rule (``Ready=True`` or ``Stale``), not a copy of it
            return profiles.ready_in_effect(cond.status, cond.reason), f"{cond.reason}: {cond.message}"
    return False, "no Ready condition"


def _source_round(
    source: Mapping[str, Any], snapshot: bytes | str | None, nodes: dict[str, PlanNode], namespace: str
) -> tuple[dict[str, dict[str, str]], sources.SourceDecision]:
    """One decision of the TopologySource over the Nodes as they stand: its NodeFeature labels by Node."""
    spec = source.get("spec") or {}
    matches = compile_selector(spec.get("nodeSelector"))
    selected = {name: _labels(n.current) for name, n in nodes.items() if matches(_labels(n.current))}
    arm = sources.arm_of(spec)
    read: sources.Fetched | None = None
    if arm in ("ConfigMap", "Webhook") and snapshot is not None:
        read = sources.Fetched(snapshot)
    decision = sources.decide(
        sources.SourceInputs(
            source=source,
            namespace=namespace,
            selected=selected,
            read=read,
            owned={},
            conflicts={},
            now=dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        )
    )
    by_node = {
        str(body["metadata"]["labels"][keys.NFD_NODE_NAME]): dict(body["spec"]["labels"])
        for body in decision.apply.values()
    }
    return by_node, decision


def _ready_sources(source: Mapping[str, Any] | None) -> list[profiles.ReadySource]:
    if source is None:
        return []
    spec = source.get("spec") or {}
    levels = spec.get("levels")
    return [
        profiles.ReadySource(
            str((source.get("metadata") or {}).get("name", "")),
            compile_selector(spec.get("nodeSelector")),
            lv.normalize_tiers([str(x) for x in levels] if isinstance(levels, list | tuple) else ()),
        )
    ]


def converge(
    nodes: dict[str, PlanNode],
    settings: WorkerSettings,
    source: Mapping[str, Any] | None,
    snapshot: bytes | str | None,
    namespace: str,
) -> tuple[dict[str, str], dict[str, tuple[str, ...]], sources.SourceDecision | None]:
    """Agent, nfd-master and topology over every Node until nothing changes: (profiles, levels by
    profile, the source's last decision)."""
    decision: sources.SourceDecision | None = None
    assigned: dict[str, str] = {}
    levels_of: dict[str, tuple[str, ...]] = {}
    for _round in range(_MAX_ROUNDS):
        before = {name: _labels(n.current) for name, n in nodes.items()}
        # Stage 3: the worker NodeFeature, from the Node as nfd-master left it.
        for n in nodes.values():
            checked = validate.check(node_facts(n.current), n.facts)
            n.worker = nodefeature.desired_labels(
                checked.node,
                checked.devices,
                manual=settings.node_management_manual,
                mixed_on_node=settings.instance_type_mixed_on_node,
                holds=checked.holds(),
                published=n.worker,
            )
        _reproject(nodes)
        # The TopologySource's NodeFeatures, then every Node's profile.
        if source is not None:
            by_node, decision = _source_round(source, snapshot, nodes, namespace)
            for name, n in nodes.items():
                n.topology = by_node.get(name, {})
            _reproject(nodes)
        effective = decision is not None and in_effect(decision.conditions)[0]
        ready = _ready_sources(source if effective else None)
        assigned, levels_of = {}, {}
        for name, n in nodes.items():
            assignment = profiles.node_assignment(_labels(n.current), ready)
            if assignment is not None:
                assigned[name] = assignment.profile
                levels_of[assignment.profile] = assignment.levels
        # The profile label (the topology controller's) and the fit labels (the agent's), on the Node.
        for name, n in nodes.items():
            extra: dict[str, str] = {}
            if name in assigned:
                extra[keys.TOPOLOGY_PROFILE] = assigned[name]
            checked = validate.check(node_facts(n.current), n.facts)
            extra.update(
                fit.desired(
                    checked.node,
                    checked.devices,
                    manual=settings.node_management_manual,
                    holds=checked.holds(),
                    published=checked.node.labels,
                )
            )
            set_own(n, extra)
        if {name: _labels(n.current) for name, n in nodes.items()} == before:
            return assigned, levels_of, decision
    # The writers feed each other a bounded number of times (agent → NodeFeature → source → profile →
    # fit); a plan still changing after that is a bug to report, never a plan to print.
    raise PlanError(f"the Nodes' labels still changed after {_MAX_ROUNDS} rounds of agent, NFD and topology")


def own_keys(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels written directly on the Node by our controllers: the profile and the fit labels."""
    return {k: v for k, v in labels.items() if k == keys.TOPOLOGY_PROFILE or fit.is_fit_label(k)}


def set_own(n: PlanNode, own: Mapping[str, str]) -> None:
    """The Node's profile and fit labels replaced by ``own``."""
    meta = dict(n.current["metadata"])
    current: Mapping[str, str] = meta.get("labels") or {}
    drop = own_keys(current)
    labels = {k: v for k, v in current.items() if k not in drop}
    labels.update(own)
    meta["labels"] = dict(sorted(labels.items()))
    n.current = {**n.current, "metadata": meta}


def _reproject(nodes: dict[str, PlanNode]) -> None:
    """Every Node re-projected from its base and its NodeFeatures (nfd-master removes a key no NodeFeature
    carries any more); the labels our controllers write on the Node directly are kept."""
    for n in nodes.values():
        reproject(n, own_keys(_labels(n.current)))


def parsed_facts(devices: Mapping[str, Any] | None) -> DevicesFacts | None:
    return devices_facts(devices) if devices is not None else None


def facts_of(nodes: Mapping[str, PlanNode]) -> dict[str, DevicesFacts]:
    """Each node's parsed ``Devices`` by name (the nodes without one left out): what the chain's
    ``Devices`` cache gives the InstanceType status."""
    return {name: f for name, n in nodes.items() if (f := n.facts) is not None}


def accepted(body: Mapping[str, Any], refused: list[dict[str, str]]) -> bool:
    """Whether the API server would accept ``body``; each problem it would refuse it for is recorded."""
    problems = validation.object_problems(body)
    name = str((body.get("metadata") or {}).get("name", ""))
    kind = str(body.get("kind", ""))
    refused.extend({"kind": kind, "name": name, "path": path, "rule": rule} for path, rule in problems)
    return not problems


def plan_chain(
    scenario: Scenario,
    settings: WorkerSettings,
    *,
    topology_source: Mapping[str, Any] | None = None,
    snapshot: bytes | str | None = None,
    checks_active: bool = True,
    namespace: str = kinds.SYSTEM_NAMESPACE,
) -> PlannedChain:
    """The chain ``scenario`` (and ``topology_source`` with its ``snapshot``) yields under ``settings``.

    Raises :class:`PlanError` when the TopologySource would not be in effect (an invalid spec, a snapshot
    missing or refused): the controller would fall back to hostname-only profiles, which is never what
    someone asking for a plan with that source means.
    """
    nodes = scenario_nodes(scenario)
    assigned, levels_of, decision = converge(nodes, settings, topology_source, snapshot, namespace)
    source_status: dict[str, Any] | None = None
    notes: list[str] = []
    if topology_source is not None and decision is not None:
        effective, why = in_effect(decision.conditions)
        if not effective:
            raise PlanError(f"the TopologySource is not in effect ({why})")
        source_status = {
            **decision.status,
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in decision.conditions
            ],
        }
        source_status.pop("lastSuccessfulRefreshTime", None)

    refused: list[dict[str, str]] = []
    topologies = {
        keys.topology_name(profile): profiles.topology_body(levels) for profile, levels in levels_of.items()
    }
    topologies = {name: body for name, body in topologies.items() if accepted(body, refused)}
    hardware = inputs.chain_nodes(n.current for n in nodes.values())
    aware = settings.instance_type_aware_cpu_manufacturer
    mixed = settings.instance_type_mixed_on_node
    plans = chain_flavors.plan_flavors(hardware, mixed_on_node=mixed)
    flavor_bodies = {
        p.name: stamp(chain_flavors.flavor_body(p, mixed_on_node=mixed, aware=aware), managers.OWNER_FLAVORS)
        for p in plans
    }
    flavor_bodies = {name: body for name, body in flavor_bodies.items() if accepted(body, refused)}
    instance_types: dict[str, dict[str, Any]] = {}
    if settings.instance_type_derived_from_node:
        for p in plans:
            body = pools.derived_instance_type(p, aware=aware)
            if body["metadata"]["name"] not in instance_types and accepted(body, refused):
                instance_types[body["metadata"]["name"]] = body
    else:
        notes.append(
            "instance-type-derived-from-node=false: no InstanceType is authored, so no ClusterQueue exists "
            "until an admin creates InstanceTypes"
        )
    # The placement controllers mark both AdmissionChecks Active (unless ``checks_active`` is False).
    checks = frozenset(admissionchecks.CHECKS) if checks_active else frozenset()
    facts = facts_of(nodes)
    cluster_queues: dict[str, dict[str, Any]] = {}
    flavor_list = list(flavor_bodies.values())
    for name, it in sorted(instance_types.items()):
        # The queue controller's decision over the caches once the chain settled: no queue yet.
        decision_q = queues.decide(
            inputs.queue_inputs(
                it,
                None,
                flavors=flavor_list,
                nodes=hardware,
                topologies=topologies,
                active_checks=checks,
                settings=settings,
            )
        )
        if decision_q.body is None:
            continue
        body = dict(decision_q.body)
        allowed = accepted(body, refused)
        if not allowed:
            body["status"] = {
                "conditions": [
                    {
                        "type": keys.TOPOLOGY_READY,
                        "status": "False",
                        "reason": "RefusedByAPIServer",
                        "message": "; ".join(
                            f"{r['path']}: {r['rule']}" for r in refused if r["name"] == name
                        ),
                    }
                ]
            }
        elif decision_q.condition is not None:
            body["status"] = topology_ready_status(decision_q.condition)
        cluster_queues[name] = body
        # The InstanceType controller's own decision and status, over the caches once the chain settled:
        # the queue it reads is the one the queue controller wrote.
        typed, read = inputs.type_decision(it, None, writing=body)
        status = inputs.pool_status(
            it, read, typed, flavors=flavor_list, nodes=hardware, facts=facts.get, settings=settings
        )
        instance_types[name] = {**it, "status": status}
    placeholder = {"metadata": {"name": PLAN_NAMESPACE}}
    with_uids = [{**q, "metadata": {**q["metadata"], "uid": f"plan-{n}"}} for n, q in cluster_queues.items()]
    local = localqueues.desired_local_queues(placeholder, with_uids, system_namespace=namespace)
    return PlannedChain(
        node_labels={name: _labels(n.current) for name, n in sorted(nodes.items())},
        profiles={name: assigned.get(name, "") for name in sorted(nodes)},
        topologies=topologies,
        flavors=flavor_bodies,
        instance_types=dict(sorted(instance_types.items())),
        cluster_queues=cluster_queues,
        local_queues={n: str(b["spec"]["clusterQueue"]) for n, b in sorted(local.items())},
        topology_source=source_status,
        notes=notes,
        refused=refused,
    )


def topology_ready_status(condition: queues.Condition) -> dict[str, Any]:
    """A queue's ``status`` carrying the chain's ``TopologyReady`` condition as the plan shows it."""
    return {
        "conditions": [
            {
                "type": keys.TOPOLOGY_READY,
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
            }
        ]
    }
