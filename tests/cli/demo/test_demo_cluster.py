"""``gpustack-worker demo --keep`` end to end, as a user runs it: a subprocess on its own control plane.

Once it prints how to explore the running cluster, the test reads the same cluster with the admin
kubeconfig and checks the summary against it (the checks are tests/cli/demo/demo_run.py's):

- every pool of the scenario (H100, A100, Ascend 910B2, T4, and the CPU pools) has a row, an accelerated
  one with its four-view (exclusive/shared/sliced/partitioned), equal to the InstanceType's own summary;
- every flavor is under the one profile the TopologySource gives (region > zone > rack > hostname), and
  its live flavor points at that profile's Kueue Topology;
- every queue is in the table, Active and ``TopologyReady``;
- ``chat`` is admitted and bound; ``disagg``'s prefill is pending with Kueue's message verbatim, and its
  decode is reserved but held by the joint check's ``1 of 2``;
- the agent and the controller run with their ServiceAccounts' kubeconfigs;

then sends Ctrl-C (SIGINT) and checks the demo stops everything it started and exits 0. Timings are
printed, never asserted; every wait is generous (a first run builds the components).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.demo import scene as demo_scene
from tests.cli.demo.demo_run import (
    EXPLORE,
    Demo,
    check_ctrl_c_stops_everything,
    check_deployments,
    check_pools_flavors_and_queues,
    child_pids,
    process,
    running_demo,
    who,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    with running_demo() as running:
        yield running


async def test_pools_flavors_and_queues_as_the_cluster_has_them(demo: Demo) -> None:
    await check_pools_flavors_and_queues(demo)


async def test_one_deployment_admitted_the_two_role_one_waits_with_kueues_reason(demo: Demo) -> None:
    await check_deployments(demo)


def test_agent_and_controller_run_as_their_service_accounts_and_keep_says_how_to_explore(demo: Demo) -> None:
    children = child_pids(demo.proc.pid)
    for subcommand, account in (("agent", rbac.AGENT.name), ("controller", rbac.CONTROLLER.name)):
        _, env = process(children, subcommand)
        expected = demo.dir / "kubeconfigs" / f"{kinds.SYSTEM_NAMESPACE}.{account}.kubeconfig"
        assert Path(env["KUBECONFIG"]).resolve() == expected.resolve(), (subcommand, env["KUBECONFIG"])
        assert who(expected) == f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{account}"
    text = demo.text()
    assert "controller leader: demo" in text
    explore = text.split(EXPLORE, 1)[1]
    for command in demo_scene.explore_commands(str(demo.dir / "kubeconfig")):
        assert command in explore


def test_ctrl_c_stops_everything(demo: Demo) -> None:
    check_ctrl_c_stops_everything(demo)
