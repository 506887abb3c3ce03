"""``gpustack-worker cleanup`` end to end on the real control plane (etcd, kube-apiserver, Kueue, nfd-master).

The chain-4 fleet converges with the node agent and the controllers (topology + chain) running as their
ServiceAccounts; a Workload holds a reservation on the T4 queue; an admin adds what cleanup must leave
alone: a label of their own on a Node, the profile label co-owned on another Node, a ClusterQueue and a
ResourceFlavor named like ours (``gpustack--…`` with ``resource.gpustack.ai/type=nodes``) but carrying no
owner label. Then the controllers stop and the real CLI runs in a subprocess:

1. with a Lease held by a controller it refuses (exit 3) and writes nothing;
2. ``--dry-run`` (text and JSON) lists the plan and writes nothing — the kube-apiserver audit log holds no
   write by the command's User-Agent;
3. with a Workload holding quota past ``--timeout`` it sets ``HoldAndDrain``, names the Workload, exits 1
   and touches nothing further (a standalone Workload has no job integration: the test releases it as one
   would once Kueue evicted it);
4. ``cleanup`` drains the reserving queue, deletes and releases; afterwards no object with our owner labels
   or field managers remains, our Node labels and counting keys are gone (nfd-master drops the labels it
   projected from our NodeFeatures), the admin's label, the co-owned label, ClusterQueue and look-alike
   flavor survive, and no InstanceType hangs on our finalizer.

The control plane is the session's, put back to its baseline first (tests/kit/reset.py): cleanup acts
on every object of ours in the cluster and the test checks that none is left, so no other module's may
be there; and none of the baseline's carries our evidence, so cleanup removes only what this module made.
The audit log is read from the test's start. Nothing is timed.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import capacity
from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.cleanup import cleaning
from gpustack_worker.cli.cleanup.command import REFUSED, USER_AGENT
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.prune import OWNER_LABEL
from tests import stack as support
from tests.chain.controller_procs import no_leader_lease
from tests.kit import kueue
from tests.kit.cluster import shared_baseline
from tests.kit.ours import ours_left
from tests.stack import condition, running_stack
from tests.topology.cluster_helpers import release_as_owner, workload

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

TEAM = "team-cleanup"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
ADMIN_NODE = "t4-a"
SHARED_NODE = "t4-b"
ADMIN_LABEL = "example.com/rack"
ADMIN_QUEUE = "admin-queue"
LOOKALIKE_FLAVOR = "gpustack--lookalike-linux-amd64-1c"
ADMIN_MANAGER = "admin-tool"
#: A fresh CI machine is slower than a warm one: poll up to three minutes (never a measurement).
eventually = functools.partial(support.eventually, within=180.0)


@pytest.fixture(scope="module")
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline (shadows the session fixture): cleanup removes
    every operator object in it, and the test checks that none is left."""
    return shared_baseline()


async def _cli(kubeconfig: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpustack_worker",
        "cleanup",
        *args,
        "--kubeconfig",
        kubeconfig,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


async def _converged(admin: Client) -> bool:
    cq = await admin.get(kinds.CLUSTER_QUEUE, T4)
    t4 = await admin.get(kinds.NODE, ADMIN_NODE)
    lq = await admin.get(kinds.LOCAL_QUEUE, keys.local_queue_name(T4), TEAM)
    it = await admin.get(kinds.INSTANCE_TYPE, T4)
    return (
        condition(cq, keys.TOPOLOGY_READY).get("status") == "True"
        and condition(cq, "Active").get("status") == "True"
        and lq is not None
        and keys.FINALIZER_CONTROLLED in ((it or {}).get("metadata") or {}).get("finalizers", ())
        and keys.TOPOLOGY_PROFILE in _labels(t4)
        and keys.sliced_max_free_units_key("nvidia-tesla-t4") in _labels(t4)
        and keys.MANAGED in _labels(t4)
    )


async def _admin_objects(admin: Client) -> None:
    await admin.patch(
        kinds.NODE, ADMIN_NODE, {"metadata": {"labels": {ADMIN_LABEL: "r1"}}}, field_manager=ADMIN_MANAGER
    )
    shared = _labels(await admin.get(kinds.NODE, SHARED_NODE))[keys.TOPOLOGY_PROFILE]
    await admin.apply(
        kinds.NODE,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": SHARED_NODE, "labels": {keys.TOPOLOGY_PROFILE: shared}},
        },
        field_manager=ADMIN_MANAGER,
    )
    await admin.create(
        kinds.CLUSTER_QUEUE, kueue.cluster_queue(ADMIN_QUEUE, kueue.queue_spec()), field_manager=ADMIN_MANAGER
    )
    lookalike = kueue.resource_flavor(
        LOOKALIKE_FLAVOR, {"nodeLabels": {ADMIN_LABEL: "r1"}}, labels={keys.RESOURCE_TYPE: keys.TYPE_NODES}
    )
    await admin.create(kinds.RESOURCE_FLAVOR, lookalike, field_manager=ADMIN_MANAGER)


def _lease(holder: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": kinds.LEASE.api_version,
        "kind": "Lease",
        "metadata": {"name": cleaning.LEASE_NAME, "namespace": kinds.SYSTEM_NAMESPACE},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        },
    }


async def test_cleanup_dry_run_then_cleanup(devcluster: DevCluster) -> None:
    kubeconfig = str(devcluster.kubeconfig)
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    async with running_stack(devcluster, "chain-4", namespaces=(TEAM,)) as stack:
        admin = stack.admin
        await eventually(lambda: _converged(admin))
        await _admin_objects(admin)
        await admin.create(kinds.WORKLOAD, workload("holder", TEAM, T4, gpus=1), TEAM)

        async def reserving() -> bool:
            status = ((await admin.get(kinds.CLUSTER_QUEUE, T4)) or {}).get("status") or {}
            return int(status.get("reservingWorkloads") or 0) > 0

        await eventually(reserving)
    # the agent and the controllers have stopped: nothing re-creates what cleanup deletes
    admin = await Client.connect(kubeconfig)
    try:
        # 1. a controller holding the Lease: refused, nothing written (the Lease this test makes, not
        # one another module's controller left)
        await no_leader_lease(admin)
        await admin.create(
            kinds.LEASE,
            _lease("controller-0_1"),
            kinds.SYSTEM_NAMESPACE,
            field_manager="gpustack-worker-controller",
        )
        since = datetime.datetime.now(datetime.UTC)
        code, out, err = await _cli(kubeconfig)
        assert code == REFUSED, (out, err)
        assert "holds its Lease" in err and "controller-0_1" in err
        lease = await admin.get(kinds.LEASE, cleaning.LEASE_NAME, kinds.SYSTEM_NAMESPACE)
        assert lease is not None
        lease["spec"]["holderIdentity"] = ""  # released, as a controller stopping gracefully leaves it
        await admin.replace(kinds.LEASE, lease)

        # 2. --dry-run lists and writes nothing
        code, text, err = await _cli(kubeconfig, "--dry-run")
        print(f"\n$ gpustack-worker cleanup --dry-run\n{text}")
        assert code == 0, err
        code, out, err = await _cli(kubeconfig, "--dry-run", "-o", "json")
        assert code == 0, err
        doc = json.loads(out)
        by_step: dict[str, set[str]] = {}
        for action in doc["actions"]:
            by_step.setdefault(action["step"], set()).add(f"{action['kind']}/{action['name']}")
        assert f"ClusterQueue/{T4}" in by_step["drain"]
        assert f"ClusterQueue/{T4}" in by_step["queues"]
        assert f"ClusterQueue/{ADMIN_QUEUE}" not in by_step["queues"]
        assert f"InstanceType/{T4}" in by_step["instance_types"]
        assert f"Node/{ADMIN_NODE}" in by_step["fields"]
        steps = [a["step"] for a in doc["actions"]]
        assert steps == sorted(steps, key=[s.name.lower() for s in cleaning.Step].index)
        assert {
            "kind": "ResourceFlavor",
            "name": LOOKALIKE_FLAVOR,
            "namespace": "",
            "reason": f"no owner label {OWNER_LABEL}",
        } in doc["leftAlone"]
        # the audit log records every user's writes (reads only of the system ServiceAccounts)
        assert audit.writes(user_agent_prefix=USER_AGENT, since=since) == []

        # 3. the drain waits for Kueue; a Workload still holding quota when the wait ends is named, and
        # nothing after the drain is touched
        code, out, err = await _cli(kubeconfig, "--timeout", "5")
        print(f"\n$ gpustack-worker cleanup --timeout 5\n{out}{err}")
        assert code == 1, (out, err)
        assert f"still holding quota: Workload {TEAM}/holder in ClusterQueue {T4}" in out
        queue = await admin.get(kinds.CLUSTER_QUEUE, T4)
        assert queue is not None and not queue["metadata"].get("deletionTimestamp")
        assert queue["spec"]["stopPolicy"] == cleaning.HOLD_AND_DRAIN

        async def evicted() -> dict[str, Any] | None:
            wl = await admin.get(kinds.WORKLOAD, "holder", TEAM)
            return wl if condition(wl, "Evicted").get("status") == "True" else None

        # a standalone Workload has no job integration to stop it: release it as one would
        await release_as_owner(admin, await eventually(evicted))

        # 4. cleanup
        code, out, err = await _cli(kubeconfig, "--timeout", "120")
        print(f"\n$ gpustack-worker cleanup\n{out}{err}")
        assert code == 0, (out, err)
        drains = [
            e
            for e in audit.writes(USER_AGENT, since)
            if (e.resource_path, e.verb) == ("clusterqueues", "patch")
        ]
        assert len(drains) == 1  # the one drain, seen through the same filter the dry run wrote nothing by
        assert await ours_left(admin) == []
        assert await admin.get(kinds.LEASE, cleaning.LEASE_NAME, kinds.SYSTEM_NAMESPACE) is None

        wl = await admin.get(kinds.WORKLOAD, "holder", TEAM)
        assert condition(wl, "QuotaReserved").get("status") != "True"

        async def projected_gone() -> bool:
            labels = _labels(await admin.get(kinds.NODE, ADMIN_NODE))
            return keys.MANAGED not in labels

        await eventually(projected_gone)
        node = await admin.get(kinds.NODE, ADMIN_NODE)
        assert node is not None
        labels = _labels(node)
        assert labels[ADMIN_LABEL] == "r1"
        assert keys.TOPOLOGY_PROFILE not in labels
        assert keys.sliced_max_free_units_key("nvidia-tesla-t4") not in labels
        status = node.get("status") or {}
        for field in ("capacity", "allocatable"):
            assert not [k for k in status.get(field) or {} if capacity.is_counting_key(k)], status.get(field)
        shared = await admin.get(kinds.NODE, SHARED_NODE)
        assert keys.TOPOLOGY_PROFILE in _labels(shared)
        assert await admin.get(kinds.CLUSTER_QUEUE, ADMIN_QUEUE) is not None
        assert await admin.get(kinds.RESOURCE_FLAVOR, LOOKALIKE_FLAVOR) is not None
        assert (await admin.list(kinds.INSTANCE_TYPE))[0] == []

        # a second run finds nothing of ours left
        code, out, err = await _cli(kubeconfig, "--dry-run", "-o", "json")
        assert code == 0, err
        assert json.loads(out)["actions"] == []
    finally:
        await admin.close()
