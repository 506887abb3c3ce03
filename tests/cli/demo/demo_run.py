"""Running ``gpustack-worker demo --keep`` as a user does, and checking its summary against the cluster:
what tests/cli/demo/test_demo_cluster.py (local processes) and tests/cli/demo/test_demo_real_node_cluster.py
(``--kubelet``: helm onto a real node) share."""

from __future__ import annotations

import base64
import contextlib
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
from typing import TYPE_CHECKING, Final

import httpx
import pytest
import yaml

from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.demo import scene as demo_scene
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually_sync
from tests.stack import condition

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Until the demo says it is running: a first run builds every component (about 20 min on two cores;
#: a loaded CI machine is slower). Never a measurement.
READY_WITHIN: Final = 60 * 60.0
STOP_WITHIN: Final = 120.0
EXPLORE: Final = "running — explore it"
FOUR_VIEW: Final = re.compile(r"^\d+/\d+ \d+/\d+ \d+/\d+ \d+/\d+$")
PROFILE: Final = keys.topology_profile([*demo_scene.LEVELS, keys.HOSTNAME])


class Demo:
    def __init__(self, directory: Path, proc: subprocess.Popen[bytes], out: Path) -> None:
        self.dir = directory
        self.proc = proc
        self.out = out

    def text(self) -> str:
        return self.out.read_text(errors="replace")


@contextlib.contextmanager
def running_demo(*args: str) -> Iterator[Demo]:
    """``gpustack-worker demo --keep ARGS…`` until it says how to explore it; Ctrl-C on the way out."""
    # Not under pytest's basetemp: pytest prunes old ones, which would delete a running cluster's data.
    directory = Path(tempfile.mkdtemp(prefix="gpustack-demo-"))
    out = directory.parent / f"{directory.name}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    started = time.monotonic()
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpustack_worker", "demo", "--dir", str(directory), "--keep", *args],
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


def child_pids(pid: int) -> list[int]:
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


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def argv_of(pid: int) -> list[str]:
    """The command line of process ``pid`` (empty once it is gone)."""
    try:
        return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def process(pids: list[int], subcommand: str) -> tuple[int, dict[str, str]]:
    """The child ``python -m gpustack_worker <subcommand>`` and its environment."""
    for pid in pids:
        argv = argv_of(pid)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if "gpustack_worker" in argv and subcommand in argv:
            env = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
            return pid, env
    raise AssertionError(f"no gpustack_worker {subcommand} process among {pids}")


def section(text: str, title: str) -> list[str]:
    """The lines of the summary section whose title starts with ``title`` (header row included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    return [line for line in lines[start + 1 : end] if line.strip()]


def row_cells(lines: list[str], first: str) -> list[str]:
    """The cells of the row whose first cell is ``first`` (split on runs of two or more spaces)."""
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n" + "\n".join(lines))


def who(kubeconfig: Path) -> str:
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


async def admin_client(demo: Demo) -> Client:
    return await Client.connect(str(demo.dir / "kubeconfig"))


async def check_pools_flavors_and_queues(demo: Demo) -> None:
    """Every pool, flavor and queue of the summary as the cluster has them; the topology as built."""
    text = demo.text()
    admin = await admin_client(demo)
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
    pools = section(text, "Pools")
    assert len(pools) == 1 + len(instance_types)
    for it in instance_types:
        row = row_cells(pools, it["metadata"]["name"])
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
        row_cells(pools, f"gpustack--generic-linux-{arch}")

    # every flavor under the TopologySource's profile, on that profile's Kueue Topology
    block = section(text, "Flavors per topology profile")
    assert block[0] == (
        f"profile {PROFILE}: region > zone > rack > hostname (Kueue Topology {keys.topology_name(PROFILE)})"
    )
    assert not any(line.startswith(("profile ", "no topology")) for line in block[1:]), block
    assert len(block) == 2 + len(flavors)
    for flavor in flavors:
        assert flavor["spec"].get("topologyName") == keys.topology_name(PROFILE), flavor["metadata"]["name"]
        row_cells(block, flavor["metadata"]["name"])

    # every queue, Active and TopologyReady
    rows = section(text, "Queues")
    assert len(rows) == 1 + len(queues) == 1 + len(instance_types)
    for queue in queues:
        row = row_cells(rows, queue["metadata"]["name"])
        assert row[1:4] == ["None", "True", "True Ready"], row
        assert condition(queue, keys.TOPOLOGY_READY).get("status") == "True"
        assert keys.JOINT_CHECK.removeprefix("gpustack-") in row[-1]

    # the topology itself
    (source,) = section(text, "Topology")[1:]
    assert re.split(r"\s{2,}", source)[:6] == [
        demo_scene.SOURCE_NAME,
        "region > zone > rack",
        "ConfigMap",
        "inventory-1",
        "12",
        "True Observed",
    ]


async def check_deployments(demo: Demo) -> None:
    """``chat`` admitted and bound; ``disagg`` waits: prefill with Kueue's reason, decode held 1 of 2."""
    text = demo.text()
    admin = await admin_client(demo)
    try:
        workloads, _ = await admin.list(kinds.WORKLOAD, namespace=demo_scene.NAMESPACE)
    finally:
        await admin.close()
    rows = section(text, "Workloads")
    by_role = {}
    for wl in workloads:
        cells = row_cells(rows, wl["metadata"]["name"])
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

    deployments = section(text, "ModelDeployments")
    assert row_cells(deployments, "demo/chat")[3] == "1/1"
    roles = {re.split(r"\s{2,}", r.strip())[1]: re.split(r"\s{2,}", r.strip()) for r in deployments[1:]}
    assert roles["prefill"][3] == "0/1"
    assert roles["prefill"][4] == f"role prefill replica 0: {kueue_says['message']}"
    assert roles["decode"][3] == "0/1" and "1 of 2" in roles["decode"][4]


def check_ctrl_c_stops_everything(demo: Demo) -> None:
    """SIGINT: the demo exits 0 and every process it started is gone."""
    started = child_pids(demo.proc.pid)
    assert started
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(STOP_WITHIN) == 0, demo.text()[-3000:]

    def still_alive() -> list[int]:
        return [pid for pid in started if alive(pid)]

    eventually_sync(still_alive, lambda alive: not alive, within=STOP_WITHIN, every=0.5)
