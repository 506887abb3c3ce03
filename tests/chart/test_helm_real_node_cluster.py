"""The chart installed with helm onto a real kubelet, its Pods running the image built here (issue 31).

A control plane of its own with one real node (``kubelets=1``: kubelet on containerd + runc, a CNI
bridge, kube-controller-manager, kube-proxy) and none of the chart's objects (``--bare``), beside a
simulated fleet (the packaged ``chain-4`` scenario). The product image (gpustack_worker/devcluster/
image.py) is imported into the node's containerd; ``helm install`` runs the chart as a team would, with
the values a local image needs and the workloads pinned to the real node (a simulated Node has no
kubelet: a Pod bound there never starts). The simulated Nodes' agents run as local processes with the
agent's ServiceAccount, as their DaemonSet Pods would.

In order, each step on what the previous left: install → the agent Pod on the real node and two
controller replicas Ready, one holding the Lease → the agent Pod writes its own Node only (the audit log
tells its writes by the Pod its token is bound to) and the controller builds the chain for the whole
fleet → the validating webhook refuses a bad TopologySource through its Service and kube-proxy →
/metrics scraped at the Service's endpoints → the leader Pod killed: the other takes over, and no write
of the old leader follows the new one's first → ``helm upgrade`` with a changed setting and a new image
tag rolls both workloads, an admitted Workload stays admitted and no chain object is written twice →
``helm uninstall`` then ``gpustack-worker cleanup`` leave nothing of ours.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from gpustack_worker.api import keys, kinds, rbac, webhooks
from gpustack_worker.cli.cleanup.command import USER_AGENT as CLEANUP_AGENT
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.devcluster import image
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.devcluster.helm import real_node_values
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.devcluster.real_nodes import NODE_PREFIX
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.load import packaged_scenario
from tests.chart.helm_real import (
    NS,
    RELEASE,
    WITHIN,
    Helm,
    helm_runner,
    holder,
    pods,
    ready,
    tag_image,
)
from tests.kit import kueue
from tests.kit.cluster import own
from tests.kit.ours import ours_left
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
REAL: Final = f"{NODE_PREFIX}0"
SCENARIO: Final = "chain-4"
T4_QUEUE: Final = "gpustack--nvidia-tesla-t4-linux-amd64"
TEAM: Final = "team-helm"
UPGRADE_SUFFIX: Final = "-upgrade"
#: What the chain writes: a second write of one of these in the upgrade is a defect.
CHAIN_RESOURCES: Final = ("resourceflavors", "clusterqueues", "localqueues", "topologies", "admissionchecks")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    logs = tmp_path_factory.mktemp("helm-real-node")
    with own(
        "helm-real-node",
        why="helm install onto a real kubelet: the session's control plane runs no Pod and has our RBAC "
        "installed (helm adopts nothing it did not create)",
        kubelets=1,
        with_worker_rbac=False,
        audit_log=logs / "audit.log",
    ) as started:
        yield started


@pytest.fixture(scope="module")
def product(cluster: DevCluster) -> image.ProductImage:
    """The image built here, imported into the real node, and the same image under the upgrade's tag."""
    built = image.ensure_product_image()
    assert cluster.real_nodes is not None
    cluster.real_nodes.import_image(built.tar)
    tag_image(cluster, built.name, built.name + UPGRADE_SUFFIX)
    return built


@pytest.fixture(scope="module")
def helm(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return helm_runner(cluster, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def api(cluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = cluster.bootstrap()
    yield client
    client.close()


def _values(tag: str, *extra: str) -> list[str]:
    return [*real_node_values(image.REPOSITORY, tag), *extra]


def _cli(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker.cli.main", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
    )


SIMULATED: Final = tuple(n.name for n in packaged_scenario(SCENARIO).nodes)


@pytest.fixture(scope="module")
def installed(cluster: DevCluster, product: image.ProductImage, helm: Helm) -> Iterator[AuditLog]:
    """The simulated fleet applied, the chart installed (``--wait``), the simulated Nodes' agents running
    as local processes with the agent's ServiceAccount the chart made; the audit log from before it all."""
    audit = AuditLog.from_now(_audit_path(cluster))
    scenario = REPO / "gpustack_worker" / "simulate" / "scenarios" / f"{SCENARIO}.yaml"
    applied = _cli(cluster, "simulate", "apply", str(scenario))
    assert applied.returncode == 0, applied.stderr
    done = helm(
        "install",
        RELEASE,
        str(REPO / "chart"),
        "-n",
        NS,
        *_values(product.version),
        "--wait",
        "--timeout",
        "5m",
    )
    assert done.returncode == 0, done.stderr
    kubeconfig = cluster.service_account_kubeconfig(rbac.AGENT.name)
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "gpustack_worker.cli.main", "agent", "--node-name", name,
             "--kubeconfig", str(kubeconfig), "--metrics-bind", f"127.0.0.1:{free_port()}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for name in SIMULATED
    ]  # fmt: skip
    try:
        yield audit
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait()


def _say(line: str) -> None:
    """One line of the transcript (``pytest -s`` shows it; the closing note of issue 31 quotes it)."""
    print(f"[helm on a real node] {line}", flush=True)


def _tally(events: list[Any]) -> str:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.resource_path] = counts.get(event.resource_path, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none"


def _audit_path(cluster: DevCluster) -> Path:
    assert cluster.audit_log is not None
    return cluster.audit_log


def test_install_runs_the_agent_on_the_real_node_and_two_controllers_one_leading(
    installed: AuditLog, product: image.ProductImage, api: ApiBootstrap
) -> None:
    (agent,) = pods(api, "agent")
    assert agent["spec"]["nodeName"] == REAL and ready(agent)
    controllers = pods(api, "controller")
    assert len(controllers) == 2 and all(ready(p) for p in controllers)
    for pod in (agent, *controllers):
        assert pod["spec"]["containers"][0]["image"] == product.name
        assert pod["spec"]["nodeName"] == REAL
    names = {p["metadata"]["name"] for p in controllers}
    leader = eventually_sync(lambda: holder(api) or None, within=WITHIN)
    assert leader.split("_", 1)[0] in names, (leader, names)
    _say(f"helm install: agent {agent['metadata']['name']} on {REAL}, controllers {sorted(names)} Ready")
    _say(f"Lease {LEASE_NAME} held by {leader}")


def _flavor_selects(flavor: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def test_the_agent_pod_writes_its_own_node_only_and_the_chain_covers_the_whole_fleet(
    installed: AuditLog, api: ApiBootstrap
) -> None:
    def chain_built() -> list[dict[str, Any]] | None:
        real = api.get(f"/api/v1/nodes/{REAL}") or {}
        labels = (real.get("metadata") or {}).get("labels") or {}
        flavors = (api.get("/apis/kueue.x-k8s.io/v1beta2/resourceflavors") or {}).get("items", [])
        queue = api.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{T4_QUEUE}") or {}
        active = any(
            c.get("type") == "Active" and c.get("status") == "True"
            for c in (queue.get("status") or {}).get("conditions") or []
        )
        ours = labels.get(keys.MANAGED) == "true" and any(_flavor_selects(f, labels) for f in flavors)
        return flavors if ours and active else None

    flavors = eventually_sync(chain_built, within=WITHIN)
    (agent,) = pods(api, "agent")
    pod = agent["metadata"]["name"]
    writes = [e for e in installed.writes() if e.pod_name == pod]
    assert writes, "the agent Pod wrote nothing through its projected token"
    node_writes = [e for e in writes if e.resource in ("nodes", "nodefeatures", "devices")]
    assert node_writes and all(REAL in e.name for e in node_writes), sorted({e.name for e in node_writes})
    assert not [e for e in writes if any(name in e.name for name in SIMULATED)]
    leader = [e for e in installed.writes() if e.pod_name and e.pod_name != pod]
    _say(f"agent Pod {pod} wrote {len(writes)} times, all its own Node's: {_tally(writes)}")
    _say(f"chain converged for {REAL} and {len(SIMULATED)} simulated Nodes: {len(flavors)} ResourceFlavors")
    _say(f"controller Pods wrote {len(leader)} times since the install: {_tally(leader)}")


def _source(stem: str, config_map_namespace: str) -> dict[str, Any]:
    """A TopologySource whose inventory ConfigMap lives in ``config_map_namespace`` (the webhook refuses
    any but the worker's); it selects no Node."""
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": f"{stem}-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "nodeSelector": {"matchLabels": {"helm-test.gpustack.ai/never": "true"}},
            "levels": ["topology.gpustack.ai/zone"],
            "configMap": {
                "configMapRef": {"namespace": config_map_namespace, "name": "inventory"},
                "key": "snapshot.yaml",
                "maxStaleness": "10m",
            },
        },
    }


def test_the_validating_webhook_answers_through_its_service_and_kube_proxy(
    installed: AuditLog, api: ApiBootstrap
) -> None:
    """A rule only the webhook checks (a ConfigMap outside the worker namespace) is refused, a valid
    source stored: the API server dialled the Service's ClusterIP, kube-proxy took it to a controller."""
    service = api.get(f"/api/v1/namespaces/{NS}/services/{RELEASE}-webhook") or {}
    assert service["spec"]["clusterIP"] not in ("", "None")
    path = kinds.TOPOLOGY_SOURCE.collection_path()
    bad = _source("helm-bad", "default")
    refused = api.request("POST", path, bad)
    assert refused.status_code in (400, 403, 422), refused.text
    message = refused.json()["message"]
    _say(f"bad TopologySource refused through Service {service['spec']['clusterIP']}: {refused.status_code}")
    assert f'admission webhook "{webhooks.TOPOLOGY_SOURCE_WEBHOOK}" denied the request' in message
    assert "must be the worker namespace" in message
    good = _source("helm-good", NS)
    stored = api.request("POST", path, good)
    assert stored.status_code == 201, stored.text
    assert api.request("DELETE", f"{path}/{good['metadata']['name']}").status_code in (200, 202)


def test_metrics_are_scraped_at_the_services_endpoints(installed: AuditLog, api: ApiBootstrap) -> None:
    """As Prometheus does from a ServiceMonitor: the metrics Service's EndpointSlices (written by
    kube-controller-manager) name each Pod's address and the ``metrics`` port."""

    def endpoints() -> list[str] | None:
        selector = f"kubernetes.io/service-name={RELEASE}-metrics"
        slices = api.get(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices?labelSelector={selector}")
        found = []
        for piece in (slices or {}).get("items", []):
            port = next(p["port"] for p in piece.get("ports") or [] if p.get("name") == "metrics")
            found += [f"{a}:{port}" for e in piece.get("endpoints") or [] for a in e.get("addresses") or []]
        return found if len(found) == 3 else None  # the agent and both controllers

    for address in eventually_sync(endpoints, within=WITHIN):
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert "controller_runtime_reconcile_total" in text, address
        _say(f"scraped /metrics at {address} ({len(text.splitlines())} lines)")


def test_killing_the_leader_pod_hands_over_and_no_write_of_it_follows_the_new_leaders(
    installed: AuditLog, api: ApiBootstrap
) -> None:
    old = holder(api).split("_", 1)[0]
    window = AuditLog.from_now(installed.path)
    killed = api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{old}?gracePeriodSeconds=0")
    assert killed.status_code == 200, killed.text

    def taken_over() -> str | None:
        now = holder(api).split("_", 1)[0]
        return now if now and now != old else None

    new = eventually_sync(taken_over, within=WITHIN)
    assert new in {p["metadata"]["name"] for p in pods(api, "controller")}

    # something only a leader writes: a LocalQueue for a new namespace
    namespace = f"team-handover-{uuid.uuid4().hex[:6]}"
    api.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    local_queue = keys.local_queue_name(T4_QUEUE)

    def written_by_the_new_leader() -> list[Any] | None:
        writes = [e for e in window.writes() if e.pod_name in (old, new)]
        made = [
            e
            for e in writes
            if e.resource == "localqueues" and e.namespace == namespace and e.verb != "delete"
        ]
        # the namespace gets one LocalQueue per pool: wait for the T4 pool's, then read who wrote them
        there = api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{local_queue}")
        return writes if there and made and {e.pod_name for e in made} == {new} else None

    writes = eventually_sync(written_by_the_new_leader, within=WITHIN)
    takeover = min(e.received for e in writes if e.pod_name == new and e.resource == "leases")
    late = [e for e in writes if e.pod_name == old and e.resource != "leases" and e.received >= takeover]
    assert late == [], [(e.verb, e.resource, e.name) for e in late]
    after = [e for e in writes if e.received >= takeover]
    _say(f"leader {old} killed; {new} took over; after the takeover {old} wrote 0 times, {new} {len(after)}")
    _say(f"  {new}: {_tally([e for e in after if e.pod_name == new])}")


def _admitted(api: ApiBootstrap, name: str) -> dict[str, Any] | None:
    """The Workload while it holds its quota reservation (a standalone Workload waits there for the
    admission checks that need its Pods)."""
    wl = api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{TEAM}/workloads/{name}") or {}
    conditions = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}
    return wl if conditions.get("QuotaReserved", {}).get("status") == "True" else None


def test_helm_upgrade_rolls_both_workloads_without_evicting_or_writing_the_chain_twice(
    installed: AuditLog, product: image.ProductImage, helm: Helm, api: ApiBootstrap
) -> None:
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}}
    )
    local_queue = keys.local_queue_name(T4_QUEUE)
    eventually_sync(
        lambda: api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{TEAM}/localqueues/{local_queue}"),
        within=WITHIN,
    )
    name = f"before-upgrade-{uuid.uuid4().hex[:6]}"
    body = kueue.workload(name, TEAM, local_queue, kueue.pod_set(kueue.pod_spec(kueue.gpu_container(1))))
    created = api.request("POST", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{TEAM}/workloads", body)
    assert created.status_code == 201, created.text
    before = eventually_sync(lambda: _admitted(api, name), within=WITHIN)
    old_pods = {p["metadata"]["name"] for p in (*pods(api, "agent"), *pods(api, "controller"))}
    window = AuditLog.from_now(installed.path)
    tag = product.version + UPGRADE_SUFFIX
    done = helm(
        "upgrade", RELEASE, str(REPO / "chart"), "-n", NS, *_values(tag),
        "--set-string", "settings.values.workload-fit-affinity=false", "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def rolled() -> list[dict[str, Any]] | None:
        running = [*pods(api, "agent"), *pods(api, "controller")]
        fresh = all(p["metadata"]["name"] not in old_pods and ready(p) for p in running)
        images = {p["spec"]["containers"][0]["image"] for p in running}
        leader = holder(api).split("_", 1)[0] in {p["metadata"]["name"] for p in running}
        return (
            running
            if len(running) == 3 and fresh and images == {f"{image.REPOSITORY}:{tag}"} and leader
            else None
        )

    eventually_sync(rolled, within=WITHIN)
    after = _admitted(api, name)
    assert after is not None, "the Workload lost its admission in the upgrade"
    assert after["status"]["admission"] == before["status"]["admission"]
    conditions = {c["type"] for c in after["status"].get("conditions") or []}
    assert "Evicted" not in conditions and "Preempted" not in conditions
    counts: dict[tuple[str, str, str], int] = {}
    for event in window.writes():
        if event.resource in CHAIN_RESOURCES and not event.subresource and event.code in (200, 201):
            key = (event.resource, event.namespace, event.name)
            counts[key] = counts.get(key, 0) + 1
    assert {k: n for k, n in counts.items() if n > 1} == {}
    _say(f"helm upgrade to {tag} (workload-fit-affinity=false): agent and both controllers replaced, Ready")
    _say(f"  Workload {name} kept its reservation; chain writes in the upgrade: {sum(counts.values())}")
    _say(f"  all writes in the upgrade: {_tally(window.writes())}")


def test_helm_uninstall_then_cleanup_leaves_nothing_of_ours(
    installed: AuditLog, cluster: DevCluster, helm: Helm, api: ApiBootstrap
) -> None:
    # the team's Workload is done (a standalone Workload has no job to end it: cleanup would wait for it)
    workloads = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{TEAM}/workloads"
    for wl in (api.get(workloads) or {}).get("items", []):
        api.request("DELETE", f"{workloads}/{wl['metadata']['name']}")
    eventually_sync(lambda: not (api.get(workloads) or {}).get("items"), within=WITHIN)
    window = AuditLog.from_now(installed.path)
    done = helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m")
    assert done.returncode == 0, done.stderr
    eventually_sync(lambda: not pods(api, "agent") and not pods(api, "controller"), within=WITHIN)

    def cleaned() -> subprocess.CompletedProcess[str] | None:
        # exit 3, nothing written, while the Lease is still held (the last leader's term runs out)
        ran = _cli(cluster, "cleanup")
        assert ran.returncode in (0, 3), f"cleanup exit {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
        return ran if ran.returncode == 0 else None

    eventually_sync(cleaned, within=WITHIN)

    async def left() -> list[str]:
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            return await ours_left(admin)
        finally:
            await admin.close()

    assert asyncio.run(left()) == []
    cleanup = [e for e in window.writes() if e.user_agent.startswith(CLEANUP_AGENT)]
    _say(f"helm uninstall, then cleanup: {len(cleanup)} writes ({_tally(cleanup)}); nothing of ours left")
