"""A plan and a live cluster never disagree: for packaged scenarios (two with a rack TopologySource, one
under non-default settings), the chain ``gpustack-worker plan`` prints equals the chain the agent, the
topology and the chain controllers build on a real control plane — flavors (name, ``spec.nodeLabels``,
``topologyName``, capacity label), ClusterQueues (name, resource groups with nominal quotas, stop policy,
admission checks, ``TopologyReady``), InstanceTypes (name, unit resources, phase, the four-view / CPU
view), LocalQueue names, Node profiles and Kueue Topologies.

Each case gets a control plane of its own: the chain reads every Node of the cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.demo import scene as demo_scene
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import PlannedChain, plan_chain
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate.load import packaged_scenario
from tests.cli.plan.test_plan import rack_snapshot, rack_source
from tests.stack import Stack, eventually, module_cluster, running_stack

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from decimal import Decimal

pytestmark = pytest.mark.cluster

TEAM = "team-plan"
#: What a fresh CI machine needs at most to converge (a bound on polling, never a measurement).
CONVERGE_S = 300.0
_VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned")


def _racks() -> tuple[dict[str, Any], dict[str, Any]]:
    """topology-8's rack TopologySource and its snapshot ConfigMap."""
    source = rack_source()
    arm = source["spec"]["configMap"]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": arm["configMapRef"]["name"], "namespace": arm["configMapRef"]["namespace"]},
        "data": {arm["key"]: rack_snapshot()},
    }
    return source, config_map


def _demo_racks() -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's own TopologySource (2 zones x 2 racks) and snapshot ConfigMap."""
    return demo_scene.topology_source(), demo_scene.snapshot_config_map()


@dataclass(frozen=True)
class Case:
    scenario: str
    settings: Mapping[str, str] = field(default_factory=dict)
    #: The TopologySource and its snapshot ConfigMap, applied before the controllers start.
    topology: Callable[[], tuple[dict[str, Any], dict[str, Any]]] | None = None

    @property
    def id(self) -> str:
        extra = "-source" if self.topology is not None else ""
        return self.scenario + extra + "".join(f"-{k}={v}" for k, v in sorted(self.settings.items()))

    def snapshot(self) -> tuple[dict[str, Any] | None, str | None]:
        """The source and the snapshot text, as ``plan --topology-source --snapshot`` reads them."""
        if self.topology is None:
            return None, None
        source, config_map = self.topology()
        return source, str(config_map["data"][source["spec"]["configMap"]["key"]])


CASES = (
    Case("chain-4"),
    Case("mixed-4"),
    Case("families"),
    Case("topology-8", topology=_racks),
    Case("demo", topology=_demo_racks),
    Case(
        "chain-4",
        settings={"instance-type-aware-cpu-manufacturer": "true", "instance-type-mixed-on-node": "false"},
    ),
)


def _q(value: object) -> Decimal | None:
    return parse(value)


def _flavor_view(flavors: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out = {}
    for f in flavors:
        labels = f["metadata"].get("labels") or {}
        out[f["metadata"]["name"]] = {
            "nodeLabels": dict(f["spec"].get("nodeLabels") or {}),
            "topologyName": f["spec"].get("topologyName"),
            "capacity": {k: v for k, v in labels.items() if k.endswith(".capacity")},
        }
    return out


def _queue_view(queues: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out = {}
    for q in queues:
        spec = q.get("spec") or {}
        ready: Mapping[str, Any] = next(
            (
                c
                for c in (q.get("status") or {}).get("conditions") or ()
                if c.get("type") == keys.TOPOLOGY_READY
            ),
            {},
        )
        out[q["metadata"]["name"]] = {
            "stopPolicy": spec.get("stopPolicy"),
            "resourceGroups": [
                {
                    "coveredResources": list(g.get("coveredResources") or ()),
                    "flavors": [
                        (f["name"], [(r["name"], _q(r["nominalQuota"])) for r in f.get("resources") or ()])
                        for f in g.get("flavors") or ()
                    ],
                }
                for g in spec.get("resourceGroups") or ()
            ],
            "admissionChecks": [
                c["name"] for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ()
            ],
            "topologyReady": (ready.get("status"), ready.get("reason")),
        }
    return out


def _type_view(types: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out = {}
    for t in types:
        status = t.get("status") or {}
        out[t["metadata"]["name"]] = {
            "unitResources": dict(t["spec"].get("unitResources") or {}),
            "localStorage": t["spec"].get("localStorage"),
            "phase": status.get("phase"),
            "entrance": status.get("entrance"),
            **{v: status.get(v) for v in (*_VIEWS, "acceleratorSummary", "cpu", "detail")},
        }
    return out


def plan_view(plan: PlannedChain) -> dict[str, Any]:
    return {
        "flavors": _flavor_view(plan.flavors.values()),
        "queues": _queue_view(plan.cluster_queues.values()),
        "types": _type_view(plan.instance_types.values()),
        "localQueues": dict(plan.local_queues),
        "profiles": {n: p for n, p in plan.profiles.items() if p},
        "topologies": sorted(plan.topologies),
    }


async def live_view(admin: Client, nodes: Iterable[str]) -> dict[str, Any]:
    by_type = keys.RESOURCE_TYPE + "={}"
    flavors, _ = await admin.list(kinds.RESOURCE_FLAVOR, label_selector=by_type.format(keys.TYPE_NODES))
    queues, _ = await admin.list(kinds.CLUSTER_QUEUE, label_selector=by_type.format(keys.TYPE_INSTANCE_TYPES))
    types, _ = await admin.list(kinds.INSTANCE_TYPE)
    local, _ = await admin.list(kinds.LOCAL_QUEUE, namespace=TEAM)
    topologies, _ = await admin.list(kinds.TOPOLOGY, label_selector=by_type.format(keys.TYPE_TOPOLOGY))
    profiles = {}
    for name in nodes:
        node = await admin.get(kinds.NODE, name)
        profile = ((node or {}).get("metadata", {}).get("labels") or {}).get(keys.TOPOLOGY_PROFILE)
        if profile:
            profiles[name] = profile
    return {
        "flavors": _flavor_view(flavors),
        "queues": _queue_view(queues),
        "types": _type_view(types),
        "localQueues": {q["metadata"]["name"]: q["spec"]["clusterQueue"] for q in local},
        "profiles": profiles,
        "topologies": sorted(t["metadata"]["name"] for t in topologies),
    }


async def _prepare(kubeconfig: str, case: Case) -> None:
    """The settings ConfigMap and the rack TopologySource (with its snapshot ConfigMap), before any
    controller runs."""
    admin = await Client.connect(kubeconfig)
    try:
        if case.settings:
            await admin.create(
                kinds.CONFIG_MAP,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": DEFAULT_NAMESPACE},
                    "data": dict(case.settings),
                },
            )
        if case.topology is not None:
            source, config_map = case.topology()
            await admin.create(kinds.CONFIG_MAP, config_map)
            await admin.create(kinds.TOPOLOGY_SOURCE, source)
    finally:
        await admin.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_plan_equals_the_live_chain(case: Case) -> None:
    settings = parse_sets([f"{k}={v}" for k, v in case.settings.items()])
    source, snapshot = case.snapshot()
    plan = plan_chain(
        packaged_scenario(case.scenario),
        settings,
        topology_source=source,
        snapshot=snapshot,
        # The in-process stack runs no placement controller: no check is marked Active.
        checks_active=False,
    )
    expected = plan_view(plan)
    assert expected["flavors"] and expected["queues"] and expected["localQueues"]
    nodes = [n.name for n in packaged_scenario(case.scenario).nodes]
    with module_cluster(f"plan-{case.scenario}") as cluster:
        await _prepare(str(cluster.kubeconfig), case)
        async with running_stack(cluster, case.scenario, namespaces=(TEAM,)) as stack:
            await _converged(stack, nodes, expected)
            # Converged means it stays so: once every controller is idle again, still the plan.
            await eventually(lambda: _idle(stack), within=CONVERGE_S)
            assert await live_view(stack.admin, nodes) == expected


async def _idle(stack: Stack) -> bool:
    return stack.idle()


async def _converged(stack: Stack, nodes: list[str], expected: dict[str, Any]) -> None:
    last: dict[str, Any] = {}

    async def same() -> bool:
        nonlocal last
        if not stack.idle():
            return False
        last = await live_view(stack.admin, nodes)
        return last == expected

    try:
        await eventually(same, within=CONVERGE_S, every=1.0)
    except AssertionError:
        assert last == expected  # pytest shows the difference
        raise
