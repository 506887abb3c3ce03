"""``gpustack-worker demo --keep`` end to end, as a user runs it: a subprocess on its own control plane.

Once it prints how to explore the running cluster, the test reads the same cluster with the admin
kubeconfig and checks the summary against it:

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

import base64
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml

from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli import demo_scene
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually_sync
from tests.stack import condition

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster

#: Until the demo says it is running: a first run builds every component (about 20 min on two cores;
#: a loaded CI machine is slower). Never a measurement.
READY_WITHIN = 60 * 60.0
STOP_WITHIN = 120.0
EXPLORE = "running — explore it"
FOUR_VIEW = re.compile(r"^\d+/\d+ \d+/\d+ \d+/\d+ \d+/\d+$")
PROFILE = keys.topology_profile([*demo_scene.LEVELS, keys.HOSTNAME])


class Demo:
    def __init__(self, directory: Path, proc: subprocess.Popen[bytes], out: Path) -> None:
        self.dir = directory
        self.proc = proc
        self.out = out

    def text(self) -> str:
        return self.out.read_text(errors="replace")


def _children(pid: int) -> list[int]:
    """Every live process whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command (in parentheses, which may hold spaces): state, ppid, ...
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _process(pids: list[int], subcommand: str) -> tuple[int, dict[str, str]]:
    """The child ``python -m gpustack_worker <subcommand>`` and its environment."""
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gpustack_worker" in argv and subcommand.encode() in argv:
            env = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
            return pid, env
    raise AssertionError(f"no gpustack_worker {subcommand} process among {pids}")


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    # Not under pytest's basetemp: pytest prunes old ones, which would delete a running cluster's data.
    directory = Path(tempfile.mkdtemp(prefix="gpustack-demo-"))
    out = directory.parent / f"{directory.name}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    started = time.monotonic()
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpustack_worker", "demo", "--dir", str(directory), "--keep"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )
    running = Demo(directory, proc, out)

    def output_while_alive() -> str:
        if proc.poll() is not None:
            pytest.fail(f"the demo exited ({proc.returncode}) before it was running:\n{running.text()}")
        return running.text()

    try:
        eventually_sync(output_while_alive, lambda text: EXPLORE in text, within=READY_WITHIN, every=1.0)
        print(f"\ndemo running after {time.monotonic() - started:.1f}s\n{running.text()}")
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_WITHIN)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(directory, ignore_errors=True)
        out.unlink(missing_ok=True)


def _section(text: str, title: str) -> list[str]:
    """The lines of the summary section whose title starts with ``title`` (header row included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    return [line for line in lines[start + 1 : end] if line.strip()]


def _row(lines: list[str], first: str) -> list[str]:
    """The cells of the row whose first cell is ``first`` (split on runs of two or more spaces)."""
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n" + "\n".join(lines))


def _who(kubeconfig: Path) -> str:
    """The user the API server authenticates ``kubeconfig`` as (a SelfSubjectReview)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    with httpx.Client(
        base_url=cluster["server"], verify=context, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        resp = http.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    resp.raise_for_status()
    return str(resp.json()["status"]["userInfo"]["username"])


async def _admin(demo: Demo) -> Client:
    return await Client.connect(str(demo.dir / "kubeconfig"))


async def test_pools_flavors_and_queues_as_the_cluster_has_them(demo: Demo) -> None:
    text = demo.text()
    admin = await _admin(demo)
    try:
        instance_types, _ = await admin.list(kinds.INSTANCE_TYPE)
        flavors, _ = await admin.list(
            kinds.RESOURCE_FLAVOR, label_selector=f"{keys.RESOURCE_TYPE}={keys.TYPE_NODES}"
        )
        queues, _ = await admin.list(
            kinds.CLUSTER_QUEUE, label_selector=f"{keys.RESOURCE_TYPE}={keys.TYPE_INSTANCE_TYPES}"
        )
    finally:
        await admin.close()

    # every pool of the scenario, accelerated ones with their four-view
    pools = _section(text, "Pools")
    assert len(pools) == 1 + len(instance_types)
    for it in instance_types:
        row = _row(pools, it["metadata"]["name"])
        summary = (it.get("status") or {}).get("acceleratorSummary")
        if it["spec"].get("acceleratable"):
            assert FOUR_VIEW.match(row[2]), row
            assert row[2] == summary, row
        assert row[1] == (it.get("status") or {}).get("phase") == "Active", row
    products = {
        a.product
        for node in packaged_scenario(demo_scene.DEMO_SCENARIO).nodes
        for a in node.accelerators or ()
    }
    accelerated = [r for r in pools[1:] if FOUR_VIEW.match(re.split(r"\s{2,}", r.strip())[2])]
    assert len(accelerated) == len(products) == 4
    for word in ("h100", "a100", "910b2", "t4"):
        assert any(word in r.split()[0].split("-") for r in accelerated), (word, accelerated)
    arches = {node.arch or "amd64" for node in packaged_scenario(demo_scene.DEMO_SCENARIO).nodes}
    for arch in arches:  # the CPU pools: every node also feeds one
        _row(pools, f"gpustack--generic-linux-{arch}")

    # every flavor under the TopologySource's profile, on that profile's Kueue Topology
    block = _section(text, "Flavors per topology profile")
    assert block[0] == (
        f"profile {PROFILE}: region > zone > rack > hostname (Kueue Topology {keys.topology_name(PROFILE)})"
    )
    assert not any(line.startswith(("profile ", "no topology")) for line in block[1:]), block
    assert len(block) == 2 + len(flavors)
    for flavor in flavors:
        assert flavor["spec"].get("topologyName") == keys.topology_name(PROFILE), flavor["metadata"]["name"]
        _row(block, flavor["metadata"]["name"])

    # every queue, Active and TopologyReady
    rows = _section(text, "Queues")
    assert len(rows) == 1 + len(queues) == 1 + len(instance_types)
    for queue in queues:
        row = _row(rows, queue["metadata"]["name"])
        assert row[1:4] == ["None", "True", "True Ready"], row
        assert condition(queue, keys.TOPOLOGY_READY).get("status") == "True"
        assert keys.JOINT_CHECK.removeprefix("gpustack-") in row[-1]

    # the topology itself
    (source,) = _section(text, "Topology")[1:]
    assert re.split(r"\s{2,}", source)[:6] == [
        demo_scene.SOURCE_NAME,
        "region > zone > rack",
        "ConfigMap",
        "inventory-1",
        "12",
        "True Observed",
    ]


async def test_one_deployment_admitted_the_two_role_one_waits_with_kueues_reason(demo: Demo) -> None:
    text = demo.text()
    admin = await _admin(demo)
    try:
        workloads, _ = await admin.list(kinds.WORKLOAD, namespace=demo_scene.NAMESPACE)
    finally:
        await admin.close()
    rows = _section(text, "Workloads")
    by_role = {}
    for wl in workloads:
        cells = _row(rows, wl["metadata"]["name"])
        by_role[cells[1]] = (wl, cells)
    assert set(by_role) == {"chat/server", "disagg/prefill", "disagg/decode"}

    _, chat = by_role["chat/server"]
    assert chat[2] == "Admitted" and chat[3].endswith("x2 (bound)"), chat

    prefill_wl, prefill = by_role["disagg/prefill"]
    kueue_says = condition(prefill_wl, "QuotaReserved")
    assert kueue_says.get("status") == "False" and kueue_says.get("message")
    assert prefill[2:] == ["Pending", "-", kueue_says["message"]], prefill

    decode_wl, decode = by_role["disagg/decode"]
    assert decode[2] == "Reserved" and decode[3].endswith("x2 (reserved)"), decode
    assert decode[4].startswith(f"{keys.JOINT_CHECK} Pending: 1 of 2"), decode
    assert condition(decode_wl, "Admitted").get("status") != "True"

    deployments = _section(text, "ModelDeployments")
    assert _row(deployments, "demo/chat")[3] == "1/1"
    roles = {re.split(r"\s{2,}", r.strip())[1]: re.split(r"\s{2,}", r.strip()) for r in deployments[1:]}
    assert roles["prefill"][3] == "0/1"
    assert roles["prefill"][4] == f"role prefill replica 0: {kueue_says['message']}"
    assert roles["decode"][3] == "0/1" and "1 of 2" in roles["decode"][4]


def test_agent_and_controller_run_as_their_service_accounts_and_keep_says_how_to_explore(demo: Demo) -> None:
    children = _children(demo.proc.pid)
    for subcommand, account in (("agent", rbac.AGENT.name), ("controller", rbac.CONTROLLER.name)):
        _, env = _process(children, subcommand)
        expected = demo.dir / "kubeconfigs" / f"{kinds.SYSTEM_NAMESPACE}.{account}.kubeconfig"
        assert Path(env["KUBECONFIG"]).resolve() == expected.resolve(), (subcommand, env["KUBECONFIG"])
        assert _who(expected) == f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{account}"
    text = demo.text()
    assert "controller leader: demo" in text
    explore = text.split(EXPLORE, 1)[1]
    for command in demo_scene.explore_commands(str(demo.dir / "kubeconfig")):
        assert command in explore


def test_ctrl_c_stops_everything(demo: Demo) -> None:
    children = _children(demo.proc.pid)
    assert children
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(STOP_WITHIN) == 0, demo.text()[-3000:]

    def still_alive() -> list[int]:
        return [pid for pid in children if _alive(pid)]

    eventually_sync(still_alive, lambda alive: not alive, within=STOP_WITHIN, every=0.5)
