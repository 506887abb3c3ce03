"""``gpustack-worker explain`` end to end: the real control plane (etcd, kube-apiserver, kube-scheduler,
Kueue, nfd-master), the node agent, the topology, chain and placement controllers (``Placement``: the
ModelDeployment controller, the joint check, Gate 3), on the ``placement-racks`` scenario with a ConfigMap
TopologySource placing the four L4 nodes into two racks.

1. ``explain node rack-node-2`` (the real CLI in a subprocess, and ``-o json``): every label with who
   wrote it — ``gpustack.ai/managed`` projected by nfd-master from the worker NodeFeature the node agent
   wrote, the rack from the TopologySource's NodeFeature, the profile from the topology controller, the
   fit labels and counting capacities from the agent — and the chain it feeds: the L4 flavor, its
   ClusterQueue, InstanceType and the team's LocalQueue.
2. A two-role ModelDeployment that waits (one L4 of every rack taken by a foreign Workload: decode fits a
   rack and reserves, prefill needs a whole rack): ``explain modeldeployment`` shows the joint check's
   ``1 of 2`` on decode and Kueue's own ``QuotaReserved`` message on prefill, verbatim; ``explain
   workload`` the same for one group; ``NAME -n NS`` and a kubeconfig context's namespace find it as
   ``NS/NAME`` does; missing objects exit 1, a malformed or contradictory reference exits 2.

The outputs are printed (docs/troubleshooting.md shows a run's). Nothing is timed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.controller import Placement
from gpustack_worker.topology import managers as topology_managers
from tests import stack as support
from tests.placement.racks import L4, PROFILE, RACKS, apply_racks, blocker, check_entry
from tests.stack import condition, module_cluster, running_stack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from tests.stack import Stack

pytestmark = pytest.mark.cluster

TEAM = "team-explain"
NODE = "rack-node-2"
RACK = keys.PRIVATE_RACK
#: A fresh CI machine is slower than a warm one: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)


@pytest.fixture(scope="module")
def devcluster() -> Iterator[DevCluster]:
    with module_cluster("explain") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def running(devcluster: DevCluster) -> AsyncIterator[tuple[Stack, str]]:
    def extra(client: Any, settings: Any, registry: Any) -> list[Any]:
        return [Placement(client, settings, registry)]

    async with running_stack(devcluster, "placement-racks", namespaces=(TEAM,), extra=extra) as stack:
        await apply_racks(stack.admin, TEAM, eventually)
        yield stack, str(devcluster.kubeconfig)


async def _cli(kubeconfig: str, *args: str) -> tuple[int, str, str]:
    """``gpustack-worker explain ARGS`` in a subprocess (the event loop keeps running the controllers)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpustack_worker",
        "explain",
        *args,
        "--kubeconfig",
        kubeconfig,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _with_context_namespace(kubeconfig: str, namespace: str) -> str:
    """A copy of ``kubeconfig`` whose current context names ``namespace`` (as ``kubectl config
    set-context --current --namespace`` leaves it)."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    current = doc["current-context"]
    for entry in doc["contexts"]:
        if entry["name"] == current:
            entry["context"]["namespace"] = namespace
    path = Path(tempfile.mkdtemp(prefix="explain-ns-")) / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _by_key(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {line["key"]: line for line in doc["labels"]}


def _managers(writers: list[dict[str, Any]]) -> list[str]:
    return [w["manager"] for w in writers]


async def test_explain_node(running: tuple[Stack, str]) -> None:
    stack, kubeconfig = running

    async def fit_labelled() -> bool:  # the agent's last writes on the node are in
        labels = ((await stack.admin.get(kinds.NODE, NODE)) or {}).get("metadata", {}).get("labels") or {}
        return keys.sliced_max_free_units_key("nvidia-l4") in labels

    await eventually(fit_labelled)
    code, text, err = await _cli(kubeconfig, "node", NODE)
    print(f"\n$ gpustack-worker explain node {NODE}\n{text}")
    assert code == 0, err
    code, out, err = await _cli(kubeconfig, "node", NODE, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    labels = _by_key(doc)

    managed = labels[keys.MANAGED]
    assert managed["projected"] and _managers(managed["writers"]) == ["nfd-master"]
    (carrier,) = managed["carriers"]
    assert carrier["nodefeature"] == f"{kinds.SYSTEM_NAMESPACE}/{keys.worker_nodefeature_name(NODE)}"
    assert _managers(carrier["writers"]) == [nodefeature.FIELD_MANAGER]
    (carrier,) = labels[RACK]["carriers"]
    assert carrier["value"] == "rack-1"
    assert _managers(carrier["writers"]) == [topology_managers.SOURCE]
    assert _managers(labels[keys.TOPOLOGY_PROFILE]["writers"]) == [topology_managers.NODE_TOPOLOGY]
    assert _managers(labels[keys.sliced_max_free_units_key("nvidia-l4")]["writers"]) == [fit.FIELD_MANAGER]
    caps = {c["resource"]: c for c in doc["capacities"]}
    assert _managers(caps["nvidia.com/gpu.sliced.units"]["writers"]) == [capacity.FIELD_MANAGER]

    (l4,) = [f for f in doc["flavors"] if f["queues"] and f["queues"][0]["name"] == L4]
    assert l4["topology_name"] == keys.topology_name(PROFILE)
    (queue,) = l4["queues"]
    assert queue["topology_ready"]["status"] == "True"
    assert set(queue["admission_checks"]) == {keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK}
    (itype,) = l4["instance_types"]
    assert itype["exists"] and itype["entrance"] == keys.local_queue_name(L4)
    assert f"{TEAM}/{keys.local_queue_name(L4)}" in l4["local_queues"]

    assert f"Feeds ResourceFlavor {l4['name']}" in text
    assert f"NodeFeature {kinds.SYSTEM_NAMESPACE}/{keys.worker_nodefeature_name(NODE)}" in text
    assert f"InstanceType {L4}: phase Active" in text

    code, out, err = await _cli(kubeconfig, "node", "no-such-node")
    assert code == 1 and "does not exist" in out


def _role(name: str, kind: str, size: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "size": size,
        "instanceType": L4,
        "resources": {"accelerator": "1"},
        "topology": {"requiredLevel": RACK},
        "template": {"spec": {"containers": [{"name": "engine", "image": "registry.invalid/engine:1"}]}},
    }


async def test_explain_waiting_two_role_deployment(running: tuple[Stack, str]) -> None:
    stack, kubeconfig = running
    admin = stack.admin
    for rack in RACKS:
        await admin.create(kinds.WORKLOAD, blocker(rack, TEAM), namespace=TEAM)

    async def blockers_admitted() -> bool:
        wls = [await admin.get(kinds.WORKLOAD, f"blocker-{rack}", TEAM) for rack in RACKS]
        return all(condition(wl, "Admitted").get("status") == "True" for wl in wls)

    await eventually(blockers_admitted)
    body = {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": "disagg", "namespace": TEAM},
        "spec": {"roles": [_role("prefill", "Prefill", 4), _role("decode", "Decode", 2)]},
    }
    md = await admin.create(kinds.MODEL_DEPLOYMENT, body, namespace=TEAM)

    async def groups() -> dict[str, str] | None:
        pods, _ = await admin.list(
            kinds.POD, namespace=TEAM, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={md['metadata']['uid']}"
        )
        out = {
            p["metadata"]["labels"][keys.MODEL_DEPLOYMENT_ROLE]: p["metadata"]["labels"][keys.POD_GROUP_NAME]
            for p in pods
        }
        return out if len(pods) == 6 and len(out) == 2 else None

    group = await eventually(groups)

    async def waiting() -> bool:
        prefill = await admin.get(kinds.WORKLOAD, group["prefill"], TEAM)
        decode = await admin.get(kinds.WORKLOAD, group["decode"], TEAM)
        reserved = condition(prefill, "QuotaReserved")
        return (
            reserved.get("status") == "False"
            and bool(reserved.get("message"))
            and condition(decode, "QuotaReserved").get("status") == "True"
            and check_entry(decode, keys.JOINT_CHECK).get("state") == "Pending"
        )

    await eventually(waiting)

    async def kueue_message() -> str:
        prefill = await admin.get(kinds.WORKLOAD, group["prefill"], TEAM)
        return str(condition(prefill, "QuotaReserved").get("message"))

    before = await kueue_message()
    code, text, err = await _cli(kubeconfig, "modeldeployment", f"{TEAM}/disagg")
    after = await kueue_message()
    print(f"\n$ gpustack-worker explain modeldeployment {TEAM}/disagg\n{text}")
    assert code == 0, err
    assert before in text or after in text  # Kueue's own message, verbatim
    assert f"{keys.JOINT_CHECK}: Pending: 1 of 2 groups reserved; waiting: {L4}" in text
    assert f"replica 0: pod group {group['prefill']} (4 of 4 Pods)" in text
    assert f"podSet decode: 2 Pods, topology request: required {RACK}" in text

    code, out, err = await _cli(
        kubeconfig, "modeldeployment", f"{TEAM}/disagg", "--role", "decode", "-o", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    (decode,) = doc["roles"]
    (replica,) = decode["replica_views"]
    wl = replica["workload"]
    assert wl["name"] == group["decode"] and "1 of 2" in wl["verdict"]
    (ps,) = wl["podsets"]
    (domain,) = ps["domains"]  # decode holds one rack: both Pods on one node of it
    assert domain["pods"] == 2 and domain["requested_level_value"] in RACKS

    code, text, err = await _cli(kubeconfig, "workload", f"{TEAM}/{group['prefill']}")
    print(f"\n$ gpustack-worker explain workload {TEAM}/{group['prefill']}\n{text}")
    assert code == 0, err
    assert "Kueue's message (verbatim):" in text
    assert (await kueue_message()) in text or before in text

    # -n as kubectl's: NAME in -n, else in the kubeconfig context's namespace (none here: default)
    code, text, err = await _cli(kubeconfig, "md", "disagg", "-n", TEAM, "--role", "decode")
    assert code == 0, err
    assert text.startswith(f"ModelDeployment {TEAM}/disagg\n") and f"pod group {group['decode']}" in text
    code, out, _ = await _cli(kubeconfig, "md", "disagg")
    assert code == 1 and out.startswith("ModelDeployment default/disagg: does not exist")
    in_team = _with_context_namespace(kubeconfig, TEAM)
    code, text, err = await _cli(in_team, "md", "disagg", "--role", "decode")
    assert code == 0, err
    assert text.startswith(f"ModelDeployment {TEAM}/disagg\n") and f"pod group {group['decode']}" in text
    code, text, err = await _cli(in_team, "wl", group["prefill"], "--namespace", TEAM)
    assert code == 0 and text.startswith(f"Workload {TEAM}/{group['prefill']}\n"), err
    code, _, err = await _cli(kubeconfig, "md", f"{TEAM}/disagg", "-n", "default")
    assert code == 2 and "-n names default" in err
    code, _, err = await _cli(kubeconfig, "workload", "a/b/c")
    assert code == 2 and "NS/NAME" in err
    code, out, _ = await _cli(kubeconfig, "modeldeployment", f"{TEAM}/ghost")
    assert code == 1 and "does not exist" in out
