"""``gpustack-worker demo --kubelet --keep`` end to end: the demo with the product installed by helm onto a
real node (issue 31), a subprocess on its own control plane with one kubelet standing in for ``t4-4``.

The summary is checked against the cluster exactly as for the demo of local processes (tests/cli/
demo_run.py: every pool, flavor and queue; ``chat`` admitted and bound, ``disagg`` waiting with its
reasons). Then what only the install shows:

- ``t4-4`` is a kubelet's Node, dressed by the simulator as the scenario's T4 machine (its ``Devices``
  ledger, the device plugins' pools) and counted by the agent DaemonSet's Pod running on it: no local
  agent serves it, every other demo node has its own local agent as the chart's agent ServiceAccount;
- two controller Pods are Ready there and the Lease holder the summary names is one of them;
- Ctrl-C stops everything the demo started, the kubelet and containerd included.

Timings are printed, never asserted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.demo import scene as demo_scene
from gpustack_worker.cli.demo.command import stage3_done
from gpustack_worker.cli.demo.install import REAL_NODE
from gpustack_worker.devcluster.helm import RELEASE
from gpustack_worker.devcluster.real_nodes import REAL_NODE_LABEL
from gpustack_worker.simulate.apply import reported_by_kubelet
from gpustack_worker.simulate.load import packaged_scenario
from tests.chart.helm_real import ready
from tests.cli.demo.demo_run import (
    Demo,
    admin_client,
    argv_of,
    check_ctrl_c_stops_everything,
    check_deployments,
    check_pools_flavors_and_queues,
    child_pids,
    running_demo,
    who,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    with running_demo("--kubelet") as running:
        yield running


async def test_pools_flavors_and_queues_as_the_cluster_has_them(demo: Demo) -> None:
    await check_pools_flavors_and_queues(demo)


async def test_one_deployment_admitted_the_two_role_one_waits_with_kueues_reason(demo: Demo) -> None:
    await check_deployments(demo)


def _release_pods(pods: list[dict[str, Any]], component: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == RELEASE
        and (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == component
    ]


async def test_the_real_node_is_counted_by_the_agent_pod_on_it(demo: Demo) -> None:
    admin = await admin_client(demo)
    try:
        node = await admin.get(kinds.NODE, REAL_NODE)
        devices = await admin.get(kinds.DEVICES, REAL_NODE)
        pods, _ = await admin.list(kinds.POD, namespace=kinds.SYSTEM_NAMESPACE)
    finally:
        await admin.close()
    assert node is not None and devices is not None
    assert node["metadata"]["labels"].get(REAL_NODE_LABEL) == "true"
    assert reported_by_kubelet(node), [e.get("manager") for e in node["metadata"]["managedFields"]]
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.35.")
    # the simulator's T4 pool beside what the kubelet reports, and the agent's counts and labels on top
    assert node["status"]["capacity"].get("nvidia.com/gpu") == "2", node["status"]["capacity"]
    assert stage3_done(node), node["metadata"]["labels"]
    agents = _release_pods(pods, "agent")
    assert [(p["spec"]["nodeName"], ready(p)) for p in agents] == [(REAL_NODE, True)]
    served = {
        arg.split("=", 1)[1]
        for pid in child_pids(demo.proc.pid)
        for arg in argv_of(pid)
        if arg.startswith("--node-name=")
    }
    others = {n.name for n in packaged_scenario(demo_scene.DEMO_SCENARIO).nodes} - {REAL_NODE}
    assert served == others  # every simulated node has its local agent, the real one has none
    kubeconfig = demo.dir / "kubeconfigs" / f"{kinds.SYSTEM_NAMESPACE}.{rbac.AGENT.name}.kubeconfig"
    assert who(kubeconfig) == f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{rbac.AGENT.name}"
    kubelet_version = node["status"]["nodeInfo"]["kubeletVersion"]
    print(f"\n{REAL_NODE}: kubelet {kubelet_version}, counted by agent Pod {agents[0]['metadata']['name']}")


async def test_two_controller_pods_on_the_real_node_one_named_leader(demo: Demo) -> None:
    admin = await admin_client(demo)
    try:
        pods, _ = await admin.list(kinds.POD, namespace=kinds.SYSTEM_NAMESPACE)
    finally:
        await admin.close()
    controllers = _release_pods(pods, "controller")
    assert len(controllers) == 2 and all(ready(p) for p in controllers), controllers
    assert {p["spec"]["nodeName"] for p in controllers} == {REAL_NODE}
    text = demo.text()
    assert f"real node: {REAL_NODE} (helm release {RELEASE}" in text
    line = next(x for x in text.splitlines() if x.startswith("controller leader: "))
    leader = line.removeprefix("controller leader: ").split("_", 1)[0]
    assert leader in {p["metadata"]["name"] for p in controllers}, (line, controllers)


def test_ctrl_c_stops_everything_the_kubelet_included(demo: Demo) -> None:
    started = child_pids(demo.proc.pid)
    assert any(Path(arg).name == "kubelet" for pid in started for arg in argv_of(pid)[:1])
    check_ctrl_c_stops_everything(demo)
