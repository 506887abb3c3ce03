"""``gpustack-worker preflight`` and the start-up preflight on real control planes.

- A bare API server (a control plane of this module's own: no Kueue, no nfd-master, no scheduler, and
  Kueue's, NFD's and our CRDs and our ClusterRoleBindings deleted): the table names every missing piece,
  exit 1; ``controller`` and ``agent`` refuse to start with one line per missing API, no traceback.
- The dev cluster (the session's, put back to its baseline: every check reads every Node, NodeFeature and
  queue, so no other module's objects may be there): with a scenario applied (NodeFeatures nfd-master
  projects, Devices) and our webhook served and registered, every check is ``ok``, exit 0 — Kueue's
  configuration read from the file the dev cluster starts Kueue with, then from a ConfigMap as Kueue's
  Helm chart keeps it; a team's configuration there fails the check until ``kueue-config --merge`` is
  applied to it; a team ClusterQueue counting ``nvidia.com/gpu`` fails with the credits quota that keeps
  its limit, and passes once that quota is added.

Before the chart's install (``installs with the chart``): ``test_preflight_stage_cluster.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kinds, kueue_config, kueue_install, rbac
from gpustack_worker.cli.preflight import preflighting
from gpustack_worker.cli.preflight.command import startup_problems
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit import kueue
from tests.kit.cluster import own, shared_baseline
from tests.kit.webhooks import webhooks_served
from tests.stack import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

_SUFFIX = uuid.uuid4().hex[:6]
_COHORT = Resource(kinds.KUEUE_GROUP, kinds.KUEUE_VERSION, "Cohort", "cohorts", namespaced=False)
KUEUE_NS = kueue_install.KUEUE_NAMESPACE
KUEUE_CM = "kueue-manager-config"


def _cli(
    *argv: str, kubeconfig: Path, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker.cli.main", *argv],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _preflight(kubeconfig: Path, *extra: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    """Run preflight twice (JSON to judge, text to show); its exit code, checks by name and the table."""
    out = _cli("preflight", "-o", "json", *extra, kubeconfig=kubeconfig)
    assert out.stderr == "" or "Traceback" not in out.stderr, out.stderr
    data = json.loads(out.stdout)
    text = _cli("preflight", *extra, kubeconfig=kubeconfig).stdout
    print(text)
    return out.returncode, {c["check"]: c for c in data["checks"]}, text


# --- a bare API server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bare() -> Iterator[DevCluster]:
    """etcd + kube-apiserver only, no CRD ever installed, our ClusterRoleBindings deleted: a control plane
    of the module's own (the session's serves all of them, and its components need them)."""
    why = "a bare API server: no Kueue, nfd-master or scheduler; no CRD; our ClusterRoleBindings gone"
    with own(
        "preflight-bare",
        why=why,
        with_kueue=False,
        with_nfd=False,
        with_scheduler=False,
        with_worker_crds=False,
        with_component_crds=False,
    ) as cluster:
        yield from _stripped(cluster)


def _stripped(cluster: DevCluster) -> Iterator[DevCluster]:
    """``cluster`` with our ClusterRoleBindings deleted; none of the three groups preflight reads served."""
    api = cluster.bootstrap()
    try:
        for component in rbac.COMPONENTS:
            api.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{component.name}")
        for group_version in (
            kinds.CLUSTER_QUEUE.api_version,
            kinds.NODE_FEATURE.api_version,
            kinds.INSTANCE_TYPE.api_version,
        ):
            assert api.request("GET", f"/apis/{group_version}").status_code == 404, group_version
        yield cluster
    finally:
        api.close()


def test_preflight_on_a_bare_api_server_names_every_missing_piece(bare: DevCluster) -> None:
    code, checks, text = _preflight(bare.kubeconfig)
    assert code == 1
    outcomes = {name: c["outcome"] for name, c in checks.items()}
    assert outcomes == {
        "kubernetes": "ok",
        "kubernetes-apis": "ok",
        "kueue-api": "fail",
        "kueue-config": "fail",
        "nfd-api": "fail",
        "nfd-master": "fail",
        "crds": "fail",
        "crd-schemas": "fail",
        "devices-api": "fail",
        "devices": "fail",
        "namespace": "ok",
        "settings": "fail",
        "webhook": "fail",
        "rbac:agent": "fail",
        "rbac:controller": "fail",
        "clusterqueues": "fail",
    }, text
    assert checks["kueue-api"]["detail"] == "kueue.x-k8s.io/v1beta2 not served"
    assert "helm install kueue" in checks["kueue-api"]["fix"]
    assert checks["kueue-config"]["detail"] == f"no Kueue configuration at ConfigMap {KUEUE_NS}/{KUEUE_CM}"
    assert checks["nfd-api"]["detail"] == "nfd.k8s-sigs.io/v1alpha1 not served"
    assert "worker.gpustack.ai/v1alpha1 not served" in checks["crds"]["detail"]
    for name in ("devices", "instancetypes", "modeldeployments", "nodemodelstores", "topologysources"):
        assert f"{name}.worker.gpustack.ai: missing" in checks["crd-schemas"]["detail"]
    assert "gpustack-worker-validating is not registered" in checks["webhook"]["detail"]
    # The ClusterRoleBindings are gone: the cluster-scoped grants are missing (the Roles still bind).
    assert "list nodes" in checks["rbac:agent"]["items"]
    assert "watch clusterqueues.kueue.x-k8s.io" in checks["rbac:controller"]["items"]
    assert not any("leases" in grant for grant in checks["rbac:controller"]["items"])
    # The dev cluster's ServiceAccounts, Roles and ClusterRoles are the chart's: a partial install, so
    # what the chart installs fails rather than "installs with the chart".
    assert "a partial install is judged as installed" in text.splitlines()[0]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("controller", "--webhook-bind="), ["crds", "devices-api", "kueue-api", "nfd-api"]),
        (("agent", "--all-nodes"), ["devices-api", "nfd-api"]),
    ],
)
def test_a_process_refuses_to_start_on_a_bare_api_server(
    bare: DevCluster, command: tuple[str, ...], expected: list[str]
) -> None:
    out = _cli(*command, "--metrics-bind", "127.0.0.1:0", kubeconfig=bare.kubeconfig, timeout=60)
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if not line.startswith("{")]
    assert "Traceback" not in out.stderr
    assert sorted(line.split(": ")[1] for line in lines) == expected, out.stderr
    assert all(line.startswith(f"{command[0]}: ") and " — fix: " in line for line in lines)


# --- the dev cluster ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline (shadows the session fixture): preflight judges
    every Node, NodeFeature, Devices and queue there, so only this module's may be."""
    return shared_baseline()


@pytest.fixture(scope="module")
async def ready(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """The dev cluster with a scenario's Nodes, NodeFeatures and Devices, nfd-master's projection seen,
    and our webhook served on 127.0.0.1 and registered (unregistered again afterwards)."""
    admin = await Client.connect(str(devcluster.kubeconfig))
    await apply_scenario(admin, packaged_scenario("chain-4"))

    async def projected() -> bool:
        features, _ = await admin.list(kinds.NODE_FEATURE)
        nodes, _ = await admin.list(kinds.NODE)
        return preflighting.nfd_master(features, nodes).outcome is preflighting.Outcome.OK

    await eventually(projected)
    # The chart creates the settings ConfigMap; the dev cluster has one only once a test wrote settings.
    made_settings = await admin.get(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, kinds.SYSTEM_NAMESPACE) is None
    if made_settings:
        empty = {"metadata": {"name": DEFAULT_CONFIGMAP, "namespace": kinds.SYSTEM_NAMESPACE}, "data": {}}
        await admin.create(
            kinds.CONFIG_MAP,
            {"apiVersion": "v1", "kind": "ConfigMap", **empty},
            namespace=kinds.SYSTEM_NAMESPACE,
        )
    try:
        async with webhooks_served(devcluster, tmp_path_factory.mktemp("preflight-webhook-certs")):
            yield admin
    finally:
        if made_settings:
            await admin.delete(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, kinds.SYSTEM_NAMESPACE)
        await admin.close()


async def _preflight_async(kubeconfig: Path, *extra: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    # In a thread: the API server calls the webhook served on this event loop meanwhile.
    return await asyncio.to_thread(_preflight, kubeconfig, *extra)


async def test_preflight_on_the_dev_cluster_is_all_green(devcluster: DevCluster, ready: Client) -> None:
    code, checks, text = await _preflight_async(
        devcluster.kubeconfig, "--kueue-config", str(devcluster.dir / "kueue-config.yaml")
    )
    assert {name: c["outcome"] for name, c in checks.items() if c["outcome"] != "ok"} == {}, text
    assert code == 0
    assert "projected onto Node" in checks["nfd-master"]["detail"]
    assert checks["webhook"]["detail"].startswith("the API server calls topologysources.worker.gpustack.ai")


async def test_the_start_up_checks_pass_as_each_service_account(
    devcluster: DevCluster, ready: Client
) -> None:
    for component in rbac.COMPONENTS:
        client = await Client.connect(str(devcluster.service_account_kubeconfig(component.name)))
        try:
            assert await startup_problems(client, component, prefix=component.key) == []
        finally:
            await client.close()


def _config_map(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KUEUE_CM, "namespace": KUEUE_NS},
        "data": {"controller_manager_config.yaml": text},
    }


async def test_kueue_configuration_from_its_configmap_and_merged_into_a_teams(
    devcluster: DevCluster, ready: Client
) -> None:
    admin = ready
    running = (devcluster.dir / "kueue-config.yaml").read_text()
    await admin.create(kinds.CONFIG_MAP, _config_map(running), namespace=KUEUE_NS)
    try:
        code, checks, text = await _preflight_async(devcluster.kubeconfig)
        assert checks["kueue-config"]["outcome"] == "ok", text
        assert checks["kueue-config"]["detail"].startswith(f"ConfigMap {KUEUE_NS}/{KUEUE_CM} key ")

        team = {
            "apiVersion": kueue_config.CONFIG_API_VERSION,
            "kind": "Configuration",
            "namespace": KUEUE_NS,
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
            "waitForPodsReady": {"timeout": "10m"},
        }
        await admin.replace(kinds.CONFIG_MAP, _config_map(yaml.safe_dump(team)))
        code, checks, text = await _preflight_async(devcluster.kubeconfig)
        assert code == 1
        assert checks["kueue-config"]["outcome"] == "fail"
        assert "integrations.frameworks" in checks["kueue-config"]["detail"]
        assert "kueue-config --merge" in checks["kueue-config"]["fix"]

        # The admin's path: read the ConfigMap, merge, put it back.
        current = await admin.get(kinds.CONFIG_MAP, KUEUE_CM, KUEUE_NS)
        merged = await asyncio.to_thread(
            _cli,
            "kueue-config",
            "--merge",
            "-",
            kubeconfig=devcluster.kubeconfig,
            stdin=yaml.safe_dump(current),
        )
        assert merged.returncode == 0, merged.stderr
        assert "integrations.frameworks" in merged.stderr
        doc = yaml.safe_load(merged.stdout)
        inner = yaml.safe_load(doc["data"]["controller_manager_config.yaml"])
        assert inner["waitForPodsReady"] == {"timeout": "10m"}
        assert inner["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset", "pod"]
        await admin.replace(kinds.CONFIG_MAP, _config_map(doc["data"]["controller_manager_config.yaml"]))
        code, checks, text = await _preflight_async(devcluster.kubeconfig)
        assert checks["kueue-config"]["outcome"] == "ok", text
    finally:
        await admin.delete(kinds.CONFIG_MAP, KUEUE_CM, KUEUE_NS)


def _team_queue(name: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """A team's ClusterQueue with quota in ``nvidia.com/gpu`` (and ``extra`` resources) in one flavor."""
    quotas = {"cpu": "64", "nvidia.com/gpu": "8", **(extra or {})}
    group = kueue.resource_group(f"team-flavor-{_SUFFIX}", quotas)
    never = {"matchLabels": {"preflight-test.gpustack.ai/never": "true"}}
    return kueue.cluster_queue(name, kueue.queue_spec(group, namespaceSelector=never))


async def test_a_team_clusterqueue_whose_gpu_limit_would_stop_counting_fails_with_the_quota_to_add(
    devcluster: DevCluster, ready: Client
) -> None:
    """Issue 29 item 5: under the chain's configuration (IgnoreUndeclared, nvidia.com/gpu rewritten into
    credits) the team's 8 GPUs would no longer limit it. Kueue itself accepts both queues (its webhooks
    validate them); the one with the credits quota the fix names passes."""
    name = f"team-gpu-{_SUFFIX}"
    kept = f"team-gpu-credits-{_SUFFIX}"
    await ready.create(kinds.CLUSTER_QUEUE, _team_queue(name))
    try:
        code, checks, text = await _preflight_async(
            devcluster.kubeconfig, "--kueue-config", str(devcluster.dir / "kueue-config.yaml")
        )
        found = checks[f"clusterqueue:{name}"]
        assert found["outcome"] == "fail", text
        assert found["detail"] == (
            f"flavor team-flavor-{_SUFFIX}: nvidia.com/gpu=8 no longer counts: Workloads ask "
            "credits.gpustack.ai/nvidia instead, which this queue does not declare, so it admits them "
            "without a GPU limit"
        )
        assert found["fix"].startswith(
            "add {name: credits.gpustack.ai/nvidia, nominalQuota: 12800000} (8 cards) to flavor "
            f"team-flavor-{_SUFFIX} "
        )
        assert code == 1

        # A Cohort's quota is quota too: its members would borrow GPUs from it without a limit.
        cohort = {
            "apiVersion": kinds.CLUSTER_QUEUE.api_version,
            "kind": "Cohort",
            "metadata": {"name": f"team-cohort-{_SUFFIX}"},
            "spec": {"resourceGroups": _team_queue(name)["spec"]["resourceGroups"]},
        }
        await ready.create(_COHORT, cohort)
        try:
            code, checks, text = await _preflight_async(
                devcluster.kubeconfig, "--kueue-config", str(devcluster.dir / "kueue-config.yaml")
            )
            found = checks[f"cohort:team-cohort-{_SUFFIX}"]
            assert found["outcome"] == "fail", text
            assert "nominalQuota: 12800000" in found["fix"]
        finally:
            await ready.delete(_COHORT, f"team-cohort-{_SUFFIX}")

        # The fix, applied: a queue declaring that quota keeps its limit in credits.
        await ready.create(
            kinds.CLUSTER_QUEUE,
            _team_queue(kept, {"credits.gpustack.ai/nvidia": "12800000"}),
        )
        try:
            code, checks, text = await _preflight_async(
                devcluster.kubeconfig, "--kueue-config", str(devcluster.dir / "kueue-config.yaml")
            )
            assert checks[f"clusterqueue:{kept}"]["outcome"] == "ok", text
            assert checks[f"clusterqueue:{name}"]["outcome"] == "fail", text
        finally:
            await ready.delete(kinds.CLUSTER_QUEUE, kept)
    finally:
        await ready.delete(kinds.CLUSTER_QUEUE, name)
