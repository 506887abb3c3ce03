"""``values-production.yaml`` installed with helm onto real kubelets (issue 31).

Production's values ask what a production cluster has, so the test gives it that, as an admin would:
two real nodes (the controllers' required anti-affinity puts one replica per host), both labelled
``node-role.kubernetes.io/control-plane`` (the controllers' nodeSelector; untainted, since production's
agent does not tolerate the control-plane taint and each host is also a GPU node here),
``node-role.kubernetes.io/gpu`` (the agent's nodeSelector) and ``gpustack.ai/managed=true`` (manual node
management); the Prometheus
Operator's ServiceMonitor and PrometheusRule CRDs (the subset the chart uses, tests/chart/operator_crds.py).
The image values name the image built here (production pins a registry digest) — nothing else of the file
changes. Shown: the release installs, the agent runs on each GPU node, the two controllers run on the
two hosts with one on the Lease, the ServiceMonitor and PrometheusRule exist, and uninstall removes the
workloads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from gpustack_worker.devcluster import image
from gpustack_worker.devcluster.real_nodes import NODE_PREFIX
from tests.chart.helm_real import NS, RELEASE, WITHIN, Helm, helm_runner, holder, pods, ready
from tests.chart.operator_crds import OPERATOR_CRDS
from tests.kit.cluster import own
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "chart"
NODES: Final = (f"{NODE_PREFIX}0", f"{NODE_PREFIX}1")
#: What an admin labels (the production values select on them).
ADMIN_LABELS: Final = {
    "node-role.kubernetes.io/gpu": "",
    "gpustack.ai/managed": "true",
    "node-role.kubernetes.io/control-plane": "",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with own(
        "helm-production",
        why="values-production.yaml on real kubelets: two hosts for the controllers' anti-affinity, and no "
        "chart objects installed beforehand (helm adopts nothing it did not create)",
        kubelets=len(NODES),
        with_worker_rbac=False,
    ) as started:
        yield started


@pytest.fixture(scope="module")
def api(cluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = cluster.bootstrap()
    yield client
    client.close()


@pytest.fixture(scope="module")
def prepared(cluster: DevCluster, api: ApiBootstrap) -> image.ProductImage:
    """The image on both nodes, the nodes labelled as an admin would, and the Prometheus Operator's CRDs."""
    built = image.ensure_product_image()
    assert cluster.real_nodes is not None
    cluster.real_nodes.import_image(built.tar)
    for name in NODES:
        patched = api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": ADMIN_LABELS}})
        assert patched.status_code == 200, patched.text
    api.install_crds(OPERATOR_CRDS)
    return built


def _production_values(built: image.ProductImage) -> list[str]:
    return [
        "-f",
        str(CHART / "values-production.yaml"),
        "--set",
        f"image.repository={image.REPOSITORY}",
        "--set",
        f"image.tag={built.version}",
        "--set",
        "image.digest=",
        "--set",
        "image.pullPolicy=Never",
    ]


def test_production_values_install_onto_real_nodes(
    cluster: DevCluster, prepared: image.ProductImage, api: ApiBootstrap, tmp_path: Path
) -> None:
    helm: Helm = helm_runner(cluster, tmp_path / "helm-home")
    done = helm(
        "install", RELEASE, str(CHART), "-n", NS, "--create-namespace",
        *_production_values(prepared), "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    agents = pods(api, "agent")
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(NODES)
    controllers = pods(api, "controller")
    assert sorted(p["spec"]["nodeName"] for p in controllers) == sorted(NODES)  # one per host
    for pod in (*agents, *controllers):
        assert ready(pod) and pod["spec"]["containers"][0]["image"] == prepared.name
    names = {p["metadata"]["name"] for p in controllers}
    leader = eventually_sync(lambda: holder(api).split("_", 1)[0] or None, within=WITHIN)
    assert leader in names
    for plural in ("servicemonitors", "prometheusrules"):
        listed = api.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/{plural}") or {}
        assert [o["metadata"]["name"] for o in listed.get("items", [])], plural
    environment = {
        e["name"]: e.get("value") for e in controllers[0]["spec"]["containers"][0].get("env") or []
    }
    assert environment.get("GPUSTACK_LEADER_LEASE_SECONDS") == "30", json.dumps(environment)

    removed = helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m")
    assert removed.returncode == 0, removed.stderr
    eventually_sync(lambda: not pods(api, "agent") and not pods(api, "controller"), within=WITHIN)
