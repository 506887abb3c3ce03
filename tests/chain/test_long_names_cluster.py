"""Long identities on the real control plane (issue 16 defects 3 and 4).

A fleet with the 55-character product ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"), a CPU
name long enough to make a 63-character gKey, and a bare-manufacturer gKey next to named siblings of the
same manufacturer goes through ``simulate apply``, the agent and the controllers: every flavor the plan
prints is accepted by the API server (it exists, with the shortened ``.capacity`` / ``.count`` keys),
every pool's queue is ``TopologyReady=True`` and the live chain equals ``plan``'s on the same scenario
(the comparison of tests/cli/plan/test_plan_cluster.py). And ``plan``'s own validation agrees with the API
server's: every object it prints for a sample scenario passes a server-side dry-run apply (Kueue's
webhooks included), and an object it refuses is refused by the server too."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import identity, keys, kinds, validation
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.runtime.client import ApiError, Client
from gpustack_worker.simulate.load import packaged_scenario, parse_scenario
from tests.cli.plan.test_plan_cluster import (
    CONVERGE_S,
    TEAM,
    Case,
    _converged,
    _idle,
    _prepare,
    live_view,
    plan_view,
)
from tests.stack import eventually, module_cluster, running_stack, write_settings

pytestmark = pytest.mark.cluster

RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
LONG_CPU = "AMD Ryzen Threadripper PRO 7995WX 96-Cores with a very long marketing name indeed v2 ultra"


def _gpu(product: str, count: int) -> dict[str, Any]:
    return {"manufacturer": "nvidia", "product": product, "memoryMiB": 98304, "cores": 24064, "count": count}


def _node(name: str, model: str, *gpus: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "cpu": {"vendor": "AMD", "model": model, "cores": 8}}
    node["memory"] = "64Gi"
    if gpus:
        node["accelerators"] = list(gpus)
    return node


FLEET = {
    "nodes": [
        _node("rtx-long", LONG_CPU, _gpu(RTX_PRO, 2)),
        _node("rtx-epyc", "AMD EPYC 7R32", _gpu(RTX_PRO, 2)),
        _node("a10g-bare", "@unreported", _gpu("NVIDIA A10G", 1)),
        _node("a10g-epyc", "AMD EPYC 7R32", _gpu("NVIDIA A10G", 1)),
        _node("cpu-long", LONG_CPU),
    ]
}
CASES = (
    Case("long-names"),
    Case(
        "long-names",
        settings={"instance-type-aware-cpu-manufacturer": "true", "instance-type-mixed-on-node": "false"},
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_long_identities_build_the_planned_chain(case: Case) -> None:
    scenario = parse_scenario(FLEET)
    settings = parse_sets([f"{k}={v}" for k, v in case.settings.items()])
    plan = plan_chain(scenario, settings, checks_active=False)
    assert plan.refused == []
    expected = plan_view(plan)
    a_key = identity.accelerator_key("nvidia", RTX_PRO)
    capacity = keys.capacity_key(keys.accelerator_key(a_key))
    assert any(capacity in f["capacity"] for f in expected["flavors"].values())
    assert all(q["topologyReady"] == ("True", "Ready") for q in expected["queues"].values())
    nodes = [n.name for n in scenario.nodes]
    with module_cluster("long-names") as cluster:
        await _prepare(str(cluster.kubeconfig), case)
        async with running_stack(cluster, scenario, namespaces=(TEAM,)) as stack:
            await _converged(stack, nodes, expected)
            await eventually(lambda: _idle(stack), within=CONVERGE_S)
            live = await live_view(stack.admin, nodes)
            assert live == expected
            assert all(q["topologyReady"] == ("True", "Ready") for q in live["queues"].values())


async def _dry_run(admin: Client, body: dict[str, Any]) -> str | None:
    """None when the server accepts ``body`` (server-side dry-run apply), else its message."""
    resource = {
        "ResourceFlavor": kinds.RESOURCE_FLAVOR,
        "ClusterQueue": kinds.CLUSTER_QUEUE,
        "InstanceType": kinds.INSTANCE_TYPE,
        "Topology": kinds.TOPOLOGY,
    }[body["kind"]]
    sent = {k: v for k, v in body.items() if k != "status"}
    try:
        await admin.apply(resource, sent, field_manager="plan-dry-run", dry_run=True)
    except ApiError as exc:
        return str(exc)
    return None


#: What the server answers for each deliberately refused object (apimachinery, Kueue's CRD schema, Kueue's
#: ClusterQueue webhook).
_SERVER_SAYS = {
    "refused-key": "name part must be no more than 63",
    "refused-nine": "must have at most 8 items",
    "refused-quota": "quantities must match",
}


async def test_plans_validation_agrees_with_the_api_server() -> None:
    plans = [
        plan_chain(packaged_scenario("chain-4"), parse_sets([])),
        plan_chain(parse_scenario(FLEET), parse_sets(["instance-type-aware-cpu-manufacturer=true"])),
    ]
    with module_cluster("plan-dry-run") as cluster:
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            for plan in plans:
                assert plan.refused == []
                objects = [
                    *plan.topologies.values(),
                    *plan.flavors.values(),
                    *plan.instance_types.values(),
                    *plan.cluster_queues.values(),
                ]
                for body in objects:
                    assert await _dry_run(admin, body) is None, body["metadata"]["name"]
            # What plan refuses, the server refuses: the unshortened key of the named product, nine
            # nodeLabels (Kueue's MaxProperties=8), a quota that is no quantity.
            flavor = next(iter(plans[1].flavors.values()))
            a_key = identity.accelerator_key("nvidia", RTX_PRO)
            long_label = {**flavor["metadata"]["labels"], f"{keys.accelerator_key(a_key)}.capacity": "2"}
            nine = {**flavor["spec"]["nodeLabels"], **{f"example.com/k{i}": "v" for i in range(9)}}
            queue = next(iter(plans[0].cluster_queues.values()))
            group = queue["spec"]["resourceGroups"][0]
            bad_quota = [
                {**f, "resources": [{**f["resources"][0], "nominalQuota": "1x"}]} for f in group["flavors"]
            ]
            refused = [
                {**flavor, "metadata": {**flavor["metadata"], "name": "refused-key", "labels": long_label}},
                {
                    **flavor,
                    "metadata": {**flavor["metadata"], "name": "refused-nine"},
                    "spec": {**flavor["spec"], "nodeLabels": nine},
                },
                {
                    **queue,
                    "metadata": {**queue["metadata"], "name": "refused-quota"},
                    "spec": {**queue["spec"], "resourceGroups": [{**group, "flavors": bad_quota}]},
                },
            ]
            for body in refused:
                assert validation.object_problems(body), body["metadata"]["name"]
                message = await _dry_run(admin, body)
                assert message is not None, body["metadata"]["name"]
                assert _SERVER_SAYS[body["metadata"]["name"]] in message
        finally:
            await admin.close()


# --- defect 3 live: a generic gKey and a flip of the grouping -------------------------------------------
GENERIC_FLEET = {
    "nodes": [
        {
            **_node("gen-gpu", "@unreported", _gpu("NVIDIA A10G", 1)),
            "cpu": {"vendor": "VendorUnknown", "model": "@unreported", "cores": 8},
        },
        _node("epyc-gpu", "AMD EPYC 7R32", _gpu("NVIDIA A10G", 1)),
        _node("bare-gpu", "@unreported", _gpu("NVIDIA A10G", 1)),
        _node("epyc-cpu", "AMD EPYC 7R32"),
    ]
}
COLLAPSED_A10G = "gpustack--nvidia-a10g-linux-amd64"
AWARE_QUEUES = {
    "gpustack--generic--nvidia-a10g-linux-amd64",
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
    "gpustack--amd--nvidia-a10g-linux-amd64",
    "gpustack--amd-epyc-7r32-linux-amd64",
}


async def _chain_state(admin: Client) -> tuple[dict[str, list[str]], dict[str, tuple[Any, ...]], set[str]]:
    """flavor → the queues whose resource groups hold it; queue → (TopologyReady status, other-grouping
    label); the live operator flavors."""
    by_type = keys.RESOURCE_TYPE + "={}"
    flavors, _ = await admin.list(kinds.RESOURCE_FLAVOR, label_selector=by_type.format(keys.TYPE_NODES))
    queues, _ = await admin.list(kinds.CLUSTER_QUEUE, label_selector=by_type.format(keys.TYPE_INSTANCE_TYPES))
    owners: dict[str, list[str]] = {}
    states = {}
    for q in queues:
        name = q["metadata"]["name"]
        for group in (q.get("spec") or {}).get("resourceGroups") or ():
            for f in group.get("flavors") or ():
                owners.setdefault(f["name"], []).append(name)
        conditions = (q.get("status") or {}).get("conditions") or ()
        ready = next((c for c in conditions if c["type"] == keys.TOPOLOGY_READY), {})
        states[name] = (ready.get("status"), (q["metadata"].get("labels") or {}).get(keys.OTHER_GROUPING))
    return owners, states, {f["metadata"]["name"] for f in flavors}


async def test_one_flavor_one_queue_across_a_flip_of_the_grouping() -> None:
    scenario = parse_scenario(GENERIC_FLEET)
    with module_cluster("grouping-flip") as cluster:
        async with running_stack(cluster, scenario, namespaces=(TEAM,)) as stack:
            admin = stack.admin

            async def one_owner_each(queues: set[str], leftovers: set[str]) -> bool:
                owners, states, flavors = await _chain_state(admin)
                return (
                    bool(flavors)
                    and all(len(owners.get(f, [])) == 1 for f in flavors)
                    and queues <= {n for n, (ready, _) in states.items() if ready == "True"}
                    and all(states.get(n, (None, None))[1] == "true" for n in leftovers)
                )

            await eventually(
                lambda: one_owner_each({COLLAPSED_A10G, "gpustack--generic-linux-amd64"}, set()),
                within=CONVERGE_S,
            )
            await write_settings(admin, {"instance-type-aware-cpu-manufacturer": "true"})
            # The collapsed accelerated type stays (create-only) but is the other grouping's: it selects
            # nothing, and each flavor is in exactly one of the aware queues, all TopologyReady.
            await eventually(lambda: one_owner_each(AWARE_QUEUES, {COLLAPSED_A10G}), within=CONVERGE_S)
            owners, _, _ = await _chain_state(admin)
            assert COLLAPSED_A10G not in {q for qs in owners.values() for q in qs}
