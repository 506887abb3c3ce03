"""``gpustack-worker plan --from-cluster`` on a real control plane, run as a subprocess under a
ServiceAccount bound to a ClusterRole of only ``get``/``list``/``watch`` on what it reads:

(a) a fleet applied with the simulator (topology-8 with its rack TopologySource and snapshot ConfigMap),
    no controller run: every chain object is a ``create``, and they are the scenario plan's objects
    (``kubectl apply --dry-run=server`` accepts the ``-o yaml`` List); each managed Node is a label
    ``change``;
(b) once the agent and the controllers converged (and are stopped), nothing to change, on the chain
    objects and on the Nodes' labels — the plan composes the controllers' own pure functions, so it
    agrees with what they wrote to the field;
(c) after an admin edits a flavor's label and a queue's nominal quota, exactly those two fields;
(d) kube-apiserver's audit log holds reads and not one write by that ServiceAccount."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import localqueues
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.cli.plan.test_plan_cluster import (
    CONVERGE_S,
    TEAM,
    Case,
    _converged,
    _idle,
    _prepare,
    _racks,
    plan_view,
)
from tests.stack import eventually, module_cluster, running_stack

pytestmark = pytest.mark.cluster

SCENARIO = "topology-8"
READER = "gpustack-plan-reader"
READER_USER = f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{READER}"
CLUSTER_ROLE = Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
#: Everything the plan reads.
READ: tuple[Resource, ...] = (
    kinds.NODE,
    kinds.NAMESPACE,
    kinds.CONFIG_MAP,
    kinds.NODE_FEATURE,
    kinds.DEVICES,
    kinds.TOPOLOGY_SOURCE,
    kinds.INSTANCE_TYPE,
    kinds.RESOURCE_FLAVOR,
    kinds.CLUSTER_QUEUE,
    kinds.LOCAL_QUEUE,
    kinds.ADMISSION_CHECK,
    kinds.TOPOLOGY,
)


async def _read_only_account(admin: Client) -> None:
    """A ClusterRole of get/list/watch on exactly what the plan reads, bound to the READER account."""
    groups: dict[str, set[str]] = {}
    for r in READ:
        groups.setdefault(r.group, set()).add(r.plural)
    rules = [
        {"apiGroups": [g], "resources": sorted(plurals), "verbs": ["get", "list", "watch"]}
        for g, plurals in sorted(groups.items())
    ]
    await admin.create(
        CLUSTER_ROLE,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": READER},
            "rules": rules,
        },
    )
    await admin.create(
        CLUSTER_ROLE_BINDING,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": READER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": kinds.SYSTEM_NAMESPACE}],
        },
    )


async def _run(*argv: str, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode == 0, f"{argv}: {err.decode()}"
    return out.decode()


async def _kubectl_reads_the_yaml(reader: str, admin: str) -> list[str]:
    """``plan --from-cluster -o yaml`` fed to ``kubectl apply --dry-run=server``: the names it would
    apply (the API server validates each object, and Kueue's webhooks run, without storing anything)."""
    doc = await _run(
        sys.executable, "-m", "gpustack_worker", "plan", "--from-cluster",
        "--kubeconfig", reader, "-o", "yaml",
    )  # fmt: skip
    out = await _run(
        "kubectl", "--kubeconfig", admin, "apply", "--dry-run=server", "-o", "name", "-f", "-",
        stdin=doc.encode(),
    )  # fmt: skip
    return out.split()


async def _plan(kubeconfig: str, *extra: str) -> tuple[dict[str, Any], str]:
    """``plan --from-cluster -o json`` and ``-o text`` as a subprocess (the command a person runs)."""
    outputs = []
    for output in ("json", "text"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpustack_worker", "plan", "--from-cluster",
            "--kubeconfig", kubeconfig, "-o", output, *extra,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        outputs.append(out.decode())
    print(outputs[1])  # the sample a person reads, in the test's output
    return json.loads(outputs[0]), outputs[1]


def _by_action(report: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for c in report["changes"]:
        where = f"{c['namespace']}/{c['name']}" if c.get("namespace") else c["name"]
        out.setdefault(c["action"], []).append((c["kind"], where))
    return out


async def test_plan_from_cluster_creates_then_nothing_then_the_admins_edit_read_only() -> None:
    case = Case(SCENARIO, topology=_racks)
    source, snapshot = case.snapshot()
    plan = plan_chain(
        packaged_scenario(SCENARIO),
        parse_sets([]),
        topology_source=source,
        snapshot=snapshot,
        checks_active=False,  # the in-process stack runs no placement controller
    )
    nodes = [n.name for n in packaged_scenario(SCENARIO).nodes]
    with module_cluster("plan-from-cluster", audited=True) as cluster:
        assert cluster.audit_log is not None
        # The plan's ServiceAccount's requests, from before the first of them.
        audit = AuditLog.from_now(cluster.audit_log)
        await _prepare(str(cluster.kubeconfig), case)
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            await apply_scenario(admin, packaged_scenario(SCENARIO))
            await _read_only_account(admin)
        finally:
            await admin.close()
        reader = str(cluster.service_account_kubeconfig(READER))

        # (a) applied, no controller run: every chain object is to be created.
        report, _text = await _plan(reader)
        actions = _by_action(report)
        assert set(actions) == {"create", "change"}, report
        created = actions["create"]
        # the only changes: the labels agent, nfd-master and the topology controller put on each Node
        relabelled = {n for k, n in actions["change"] if k == "Node"}
        # (every managed Node; the agent publishes facts for an unmanaged one too, nfd-master's own Node)
        assert {n for n, p in plan.profiles.items() if p} <= relabelled, actions["change"]
        for kind, names in (
            ("Topology", plan.topologies),
            ("ResourceFlavor", plan.flavors),
            ("InstanceType", plan.instance_types),
            ("ClusterQueue", plan.cluster_queues),
        ):
            assert sorted(n for k, n in created if k == kind) == sorted(names), kind
        by_namespace: dict[str, set[str]] = {}
        for k, where in created:
            if k == "LocalQueue":
                ns, _, name = where.partition("/")
                by_namespace.setdefault(ns, set()).add(name)
        assert "default" in by_namespace
        for ns, names in by_namespace.items():  # every non-system namespace gets the same
            assert not localqueues.is_system_namespace(ns, kinds.SYSTEM_NAMESPACE), ns
            assert names == set(plan.local_queues), ns
        assert sorted(n for k, n in created if k == "AdmissionCheck") == sorted(
            (keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK)
        )
        assert report["summary"]["unchanged"] == 0
        applied = await _kubectl_reads_the_yaml(reader, str(cluster.kubeconfig))
        assert len(applied) == len(created), applied  # Node labels are comments: nfd-master writes them

        # (b) the controllers converge; stopped, the plan has nothing to change.
        async with running_stack(cluster, SCENARIO, namespaces=(TEAM,)) as stack:
            await _converged(stack, nodes, plan_view(plan))
            await eventually(lambda: _idle(stack), within=CONVERGE_S)
            admin = stack.admin
            flavor = sorted(plan.flavors)[0]
            queue_name = sorted(plan.cluster_queues)[0]
        report, text = await _plan(reader)
        assert report["changes"] == [], text
        assert report["summary"]["unchanged"] > 0
        assert "no changes" in text

        # (c) an admin edits a flavor label and a queue's quota: exactly those fields.
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            await admin.patch(
                kinds.RESOURCE_FLAVOR, flavor, {"metadata": {"labels": {keys.RESOURCE_TYPE: "edited"}}}
            )
            queue = await admin.get(kinds.CLUSTER_QUEUE, queue_name)
            assert queue is not None
            groups = queue["spec"]["resourceGroups"]
            was = groups[0]["flavors"][0]["resources"][0]["nominalQuota"]
            groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = "999"
            await admin.patch(kinds.CLUSTER_QUEUE, queue_name, {"spec": {"resourceGroups": groups}})
        finally:
            await admin.close()
        report, text = await _plan(reader)
        assert [(c["action"], c["kind"], c["name"]) for c in report["changes"]] == [
            ("change", "ResourceFlavor", flavor),
            ("change", "ClusterQueue", queue_name),
        ], text
        assert report["changes"][0]["fields"] == [
            {"path": f"metadata.labels[{keys.RESOURCE_TYPE}]", "live": "edited", "desired": keys.TYPE_NODES}
        ]
        assert report["changes"][1]["fields"] == [
            {
                "path": "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
                "live": "999",
                "desired": was,
            }
        ]
        assert "nominalQuota" in text

        # (d) the plan's ServiceAccount read, and never wrote.
        events = audit.events(username=READER_USER)
        assert events, "the audit log has no request of the plan's ServiceAccount"
        assert {e.verb for e in events} <= {"get", "list"}, sorted({e.verb for e in events})
        assert audit.writes(username=READER_USER) == []
        # 404: the settings ConfigMap, absent (the defaults apply)
        assert {e.code for e in events} <= {200, 404}, sorted({(e.code, e.request_uri) for e in events})
