"""The verbs each role holds are the verbs the code uses — read from the API server's audit log.

The agent (``--all-nodes`` and single-node scope) and the controller run as real processes, each
authenticated with a token of its ServiceAccount (bound to ``manifests/rbac``, generated from
:mod:`gpustack_worker.api.rbac`), against the simulated ``mixed-4`` scenario (applied with
``gpustack-worker simulate apply``) plus one more node. The control plane is the session's, put back to
its baseline (tests/kit/reset.py) and with no controller Lease left by another module: every first-time
write (a create) happens here whatever other tests did. The audit log is read from the test's start.
The test then drives the paths that write rarely: a rejected settings revision (a Warning Event from
each process), bad Devices input (a Warning Event about a cluster-scoped object), a deleted Node (its
NodeFeature is removed).

Then, from the audit log (which records every request of the ``gpustack-system`` ServiceAccounts):
(a) no request was refused (403) and every (namespace, apiGroup, resource, verb) used is granted;
(b) every granted verb was used, or is in the component's commented ``not_exercised`` allow-list —
an excess permission fails, and so does an allow-list entry for a verb the run did use.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kinds, rbac
from gpustack_worker.cli.agent_cmd import USER_AGENT as AGENT_UA
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.cli.controller_cmd import USER_AGENT as CONTROLLER_UA
from gpustack_worker.cli.simulate.command import USER_AGENT as SIMULATE_UA
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import Client, user_agent_of
from gpustack_worker.simulate.load import packaged_scenario
from tests.chain.controller_procs import no_leader_lease
from tests.kit.cluster import shared_baseline
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NS = kinds.SYSTEM_NAMESPACE
Key = tuple[str, str, str, str]  # (namespace or "" , apiGroup, resource[/subresource], verb)


def _deployment(name: str, namespace: str, instance_type: str) -> dict[str, Any]:
    """A one-role ModelDeployment asking one card of ``instance_type``."""
    template = {"spec": {"containers": [{"name": "e", "image": "registry.invalid/e"}]}}
    role = {
        "name": "server",
        "instanceType": instance_type,
        "resources": {"accelerator": "1"},
        "template": template,
    }
    return {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"roles": [role]},
    }


def _username(component: rbac.Component) -> str:
    return f"system:serviceaccount:{NS}:{component.name}"


def _concrete(key: Key) -> Key:
    namespace, group, resource, verb = key
    return (NS if namespace == rbac.SYSTEM else namespace, group, resource, verb)


def _granted(component: rbac.Component) -> set[Key]:
    return {_concrete(k) for k in component.grants()}


def _allowed_unused(component: rbac.Component) -> set[Key]:
    return {_concrete(k) for k in (*component.not_exercised, *component.sometimes_exercised)}


def _never_used(component: rbac.Component) -> set[Key]:
    """Grants the run must not use (an allow-listed "not exercised" verb that is used is a stale entry)."""
    return {_concrete(k) for k in component.not_exercised}


def _covered(used: set[Key], granted: set[Key]) -> set[Key]:
    """Used keys as the grants name them: a ClusterRole grant of a namespaced kind covers its requests in
    every namespace (the chain's LocalQueues)."""
    return {
        ("", g, r, v) if ns and ("", g, r, v) in granted and (ns, g, r, v) not in granted else (ns, g, r, v)
        for ns, g, r, v in used
    }


def _used(events: Iterable[AuditEvent]) -> set[Key]:
    """What the requests used; a server-side apply that created its object (201) used ``create`` too."""
    out: set[Key] = set()
    for e in events:
        if not e.resource:  # discovery, /version: not RBAC-scoped resources
            continue
        out.add((e.namespace, e.api_group, e.resource_path, e.verb))
        if e.verb == "patch" and e.code == 201:
            out.add((e.namespace, e.api_group, e.resource_path, "create"))
    return out


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _cli(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpustack_worker.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
        )


def _fresh_node_scenario(name: str, path: Path) -> Path:
    """mixed-4's gpu-hygon under a new name: a node no earlier test converged."""
    (hygon,) = [n for n in packaged_scenario("mixed-4").nodes if n.name == "gpu-hygon"]
    node = hygon.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    node["name"] = name
    node["labels"] = {**node.get("labels", {}), "test.gpustack.ai/rbac": "fresh"}
    path.write_text(yaml.safe_dump({"nodes": [node]}))
    return path


@pytest.fixture(scope="module")
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline (shadows the session fixture): none of another
    module's objects, so each object the processes write is written here for the first time."""
    return shared_baseline()


async def test_roles_grant_exactly_what_the_processes_use(devcluster: DevCluster, tmp_path: Path) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    run = uuid.uuid4().hex[:8]
    fresh = f"rbac-{run}"
    settings_cm = f"rbac-settings-{run}"
    identity = f"rbac-{run}"
    logs = tmp_path / "processes.log"
    admin = await Client.connect(str(devcluster.kubeconfig))
    # The controller's first election creates the Lease (a verb its role grants and the run must use).
    await no_leader_lease(admin)
    agent_kc = str(devcluster.service_account_kubeconfig(rbac.AGENT.name))
    controller_kc = str(devcluster.service_account_kubeconfig(rbac.CONTROLLER.name))
    start = datetime.datetime.now(datetime.UTC)

    # The scenario, through the CLI as a user would (admin credentials).
    for scenario in ("mixed-4", str(_fresh_node_scenario(fresh, tmp_path / "fresh.yaml"))):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gpustack_worker.cli.main", "simulate", "apply", scenario,
             "--kubeconfig", str(devcluster.kubeconfig)],
            capture_output=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
    assert audit.writes(SIMULATE_UA, start), "simulate sends its User-Agent"
    await admin.create(
        kinds.CONFIG_MAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": settings_cm, "namespace": NS}},
    )

    ports = {"all": free_port(), "one": free_port(), "ctl": free_port()}
    common = ("--namespace", NS, "--settings-configmap", settings_cm)
    procs = {
        "all": _cli("agent", "--all-nodes", "--kubeconfig", agent_kc, *common,
                    "--metrics-bind", f"127.0.0.1:{ports['all']}", log=logs),
        "one": _cli("agent", "--node-name", fresh, "--kubeconfig", agent_kc, *common,
                    "--metrics-bind", f"127.0.0.1:{ports['one']}", log=logs),
        "ctl": _cli("controller", "--identity", identity, "--kubeconfig", controller_kc, *common,
                    "--metrics-bind", f"127.0.0.1:{ports['ctl']}", log=logs),
    }  # fmt: skip
    agent_user, controller_user = _username(rbac.AGENT), _username(rbac.CONTROLLER)

    def used(user: str) -> set[Key]:
        return _used(audit.events(username=user, since=start))

    try:
        # 1. all three ready; the fresh node's worker NodeFeature created by server-side apply.
        async def all_ready() -> bool:
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited {proc.returncode}: {logs.read_text()[-3000:]}"
            return all([await asyncio.to_thread(_ready, p) for p in ports.values()])

        await eventually(all_ready, within=90, every=0.2)

        # The controller writes (Events included) only while it leads: wait until the Lease names it.
        async def leading() -> bool:
            lease = await admin.get(kinds.LEASE, LEASE_NAME, NS)
            return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == identity

        await eventually(leading, within=90, every=0.2)
        created = (NS, kinds.NODE_FEATURE.group, kinds.NODE_FEATURE.plural, "create")
        await eventually(lambda: created in used(agent_user), within=60, every=0.05)

        # 2. a rejected settings revision: each process posts a Warning Event on the ConfigMap.
        await admin.patch(kinds.CONFIG_MAP, settings_cm, {"data": {"no-such-setting": "1"}}, namespace=NS)
        event_in_ns = (NS, kinds.EVENT.group, kinds.EVENT.plural, "create")
        await eventually(
            lambda: event_in_ns in used(agent_user) and event_in_ns in used(controller_user),
            within=60,
            every=0.05,
        )

        # 3. bad input (one card listed in two groups): a Warning Event about a cluster-scoped object,
        # which the API server keeps in ``default``.
        devices = await admin.get(kinds.DEVICES, fresh)
        assert devices is not None
        group = devices["spec"]["groups"][0]
        twin = {**group, "id": f"{group['id']}-twin", "name": f"{group['name']}-twin"}
        await admin.patch(
            kinds.DEVICES, fresh, [{"op": "add", "path": "/spec/groups/-", "value": twin}], patch_type="json"
        )
        event_default = (rbac.EVENTS_NAMESPACE, kinds.EVENT.group, kinds.EVENT.plural, "create")
        await eventually(lambda: event_default in used(agent_user), within=60, every=0.05)

        # 4. the Node goes: the agent deletes its worker NodeFeature (no GC runs here).
        await admin.delete(kinds.NODE, fresh)
        deleted = (NS, kinds.NODE_FEATURE.group, kinds.NODE_FEATURE.plural, "delete")
        await eventually(lambda: deleted in used(agent_user), within=60, every=0.05)

        # 5. a writing TopologySource over the scenario's nodes: its NodeFeatures, finalizer and status;
        # deleting it removes them again (the controller's topology verbs).
        snapshot = yaml.safe_dump(
            {
                "apiVersion": "topology.gpustack.ai/v1alpha1",
                "revision": run,
                "nodes": {"cpu-a": {"topology.gpustack.ai/zone": "zone-a"}},
            }
        )
        await admin.create(
            kinds.CONFIG_MAP,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"rbac-inventory-{run}", "namespace": NS},
                "data": {"snapshot.yaml": snapshot},
            },
        )
        source = f"rbac-{run}"
        await admin.create(
            kinds.TOPOLOGY_SOURCE,
            {
                "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
                "kind": kinds.TOPOLOGY_SOURCE.kind,
                "metadata": {"name": source},
                "spec": {
                    "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "cpu-a"}},
                    "levels": ["topology.gpustack.ai/zone"],
                    "configMap": {
                        "configMapRef": {"namespace": NS, "name": f"rbac-inventory-{run}"},
                        "key": "snapshot.yaml",
                        "maxStaleness": "10m",
                    },
                },
            },
        )
        nf_created = (NS, kinds.NODE_FEATURE.group, kinds.NODE_FEATURE.plural, "create")
        status = ("", kinds.TOPOLOGY_SOURCE.group, f"{kinds.TOPOLOGY_SOURCE.plural}/status", "patch")
        await eventually(
            lambda: nf_created in used(controller_user) and status in used(controller_user),
            within=90,
            every=0.05,
        )
        await admin.delete(kinds.TOPOLOGY_SOURCE, source)
        nf_deleted = (NS, kinds.NODE_FEATURE.group, kinds.NODE_FEATURE.plural, "delete")
        await eventually(lambda: nf_deleted in used(controller_user), within=90, every=0.05)
        await admin.delete(kinds.CONFIG_MAP, f"rbac-inventory-{run}", NS)

        # 6. a ModelDeployment: its role Pods (Kueue gates and groups them into a Workload), the joint
        # check's and Gate 3's verdicts on that Workload, the deployment's status.
        team = f"rbac-md-{run}"
        await admin.create(
            kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}
        )
        # A second one names an InstanceType that does not exist: its Warning Event is posted in the
        # team's namespace through the cluster-wide grant, whatever the first one's timing was.
        for name, instance_type in (
            ("rbac", "gpustack--nvidia-a100-sxm4-80gb-linux-amd64"),
            ("rbac-unknown-type", f"no-such-type-{run}"),
        ):
            await admin.create(kinds.MODEL_DEPLOYMENT, _deployment(name, team, instance_type))
        verdicts = ("", kinds.WORKLOAD.group, f"{kinds.WORKLOAD.plural}/status", "patch")
        pods = ("", kinds.POD.group, kinds.POD.plural, "create")
        md_status = ("", kinds.MODEL_DEPLOYMENT.group, f"{kinds.MODEL_DEPLOYMENT.plural}/status", "patch")
        warned = ("", kinds.EVENT.group, kinds.EVENT.plural, "create")
        # (namespaced uses of these cluster-wide grants count as the grants)
        await eventually(
            lambda: (
                {verdicts, pods, md_status, warned}
                <= _covered(used(controller_user), _granted(rbac.CONTROLLER))
            ),
            within=120,
            every=0.05,
        )

        # 7. everything the roles grant and the run can reach, reached.
        for component, user in ((rbac.AGENT, agent_user), (rbac.CONTROLLER, controller_user)):
            want = _granted(component) - _allowed_unused(component)
            with contextlib.suppress(AssertionError):  # asserted below with the difference spelled out
                await eventually(
                    lambda want=want, user=user, c=component: want <= _covered(used(user), _granted(c)),
                    within=60,
                    every=0.05,
                )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in procs.items():
            try:
                codes[name] = await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        await admin.delete(kinds.DEVICES, fresh)
        await admin.delete(kinds.NODE, fresh)
        await admin.delete(kinds.NODE_FEATURE, f"{fresh}-gpustack-device-manager", NS)
        await admin.delete(kinds.CONFIG_MAP, settings_cm, NS)
        await admin.close()
    assert codes == {"all": 0, "one": 0, "ctl": 0}, logs.read_text()[-3000:]

    for component, user in ((rbac.AGENT, agent_user), (rbac.CONTROLLER, controller_user)):
        events = audit.events(username=user, since=start)
        assert events, f"no request of {user} recorded"
        refused = sorted({(e.verb, e.namespace, e.resource_path) for e in events if e.code == 403})
        assert refused == [], f"{component.key}: refused (missing permission): {refused}"
        granted = _granted(component)
        used_keys = _covered(_used(events), granted)
        assert used_keys - granted == set(), f"{component.key}: used but not granted"
        excess = granted - used_keys - _allowed_unused(component)
        assert excess == set(), (
            f"{component.key}: granted but never used — drop it from api/rbac.py or list it in "
            f"not_exercised with the reason: {sorted(excess)}"
        )
        stale = _never_used(component) & used_keys
        assert stale == set(), f"{component.key}: allow-listed as unexercised but used: {sorted(stale)}"

    # Each process named itself on every request.
    agents = {e.user_agent for e in audit.events(username=agent_user, since=start)}
    assert agents == {user_agent_of(f"{AGENT_UA}/all-nodes"), user_agent_of(f"{AGENT_UA}/{fresh}")}
    controllers = {e.user_agent for e in audit.events(username=controller_user, since=start)}
    assert controllers == {user_agent_of(f"{CONTROLLER_UA}/{identity}")}
