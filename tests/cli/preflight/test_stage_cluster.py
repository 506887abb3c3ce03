"""Preflight in the install order on a real control plane (issue 29 item 4).

A control plane of this module's own (etcd + kube-apiserver: nothing runs that the checks would wait for)
with Kueue's and NFD's APIs served and Kueue's configuration given as the chain needs it, but nothing of
the chart: started without our RBAC (``devcluster up --bare``), our CRDs deleted, and preflight pointed at
a system namespace that does not exist. That is the README's order — preflight before ``helm install`` —
and it passes, what the chart installs listed as ``installs with the chart``. One object of the chart put
back (a half-finished install) and the same checks fail. Last, the chart installed for real with ``helm
install`` (nothing refuses it: no object of the chart pre-existed) and preflight after it: every object
there, every check of what the chart installs passing but the webhook, which needs the controller's pods
(no kubelet runs them here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kinds, kueue_config, rbac
from gpustack_worker.cli.preflight import stage as preflight_stage
from gpustack_worker.devcluster import build
from tests.kit.cluster import own

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

#: A system namespace nothing was made in: the ServiceAccounts of the chart are not there, nor bound.
FRESH_NS = "gpustack-preflight-fresh"
_CHART_CHECKS = {"crds", "crd-schemas", "devices-api", "devices", "namespace", "settings", "webhook"}
_CHART_CHECKS |= {f"rbac:{c.key}" for c in rbac.COMPONENTS}
_LOOKED_FOR = len(preflight_stage.release_objects(namespace=FRESH_NS, settings_configmap="gpustack-settings"))
_CLUSTER_ROLES = [*(c.name for c in rbac.COMPONENTS), rbac.TENANT_VIEW.name, rbac.TENANT_EDIT.name]


def _cli(*argv: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker.cli.main", *argv],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def fresh() -> Iterator[tuple[DevCluster, Path]]:
    """The control plane, and a Kueue configuration file that gives the chain what it needs (its managed
    namespaces leave :data:`FRESH_NS` alone, as ``kueue-config --merge --namespace`` would write). A control
    plane of the module's own: the session's has the chart's RBAC and CRDs, and Helm would refuse to adopt
    them."""
    why = "nothing of the chart installed (no RBAC of ours, our CRDs deleted): helm install runs on it"
    with own(
        "preflight-fresh",
        why=why,
        with_kueue=False,
        with_nfd=False,
        with_scheduler=False,
        with_worker_rbac=False,  # what `devcluster up --bare` starts: none of the chart's RBAC
        with_worker_crds=False,  # nor its CRDs
    ) as cluster:
        yield from _before_the_chart(cluster)


def _before_the_chart(cluster: DevCluster) -> Iterator[tuple[DevCluster, Path]]:
    """``cluster`` (none of our CRDs and RBAC ever installed), and the Kueue configuration file."""
    api = cluster.bootstrap()
    try:
        for name in _CLUSTER_ROLES:
            role = api.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
            assert role.status_code == 404, name
        assert api.request("GET", f"/apis/{kinds.INSTANCE_TYPE.api_version}").status_code == 404
        config = kueue_config.kueue_manager_config()
        config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"].append(FRESH_NS)
        path = cluster.dir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        yield cluster, path
    finally:
        api.close()


def _preflight(fresh: tuple[DevCluster, Path], *extra: str) -> tuple[int, dict[str, Any], str]:
    """Its exit code, the JSON and the text of the same run's arguments."""
    cluster, config = fresh
    argv = ("preflight", "--namespace", FRESH_NS, "--kueue-config", str(config), *extra)
    out = _cli(*argv, "-o", "json", kubeconfig=cluster.kubeconfig)
    assert "Traceback" not in out.stderr, out.stderr
    text = _cli(*argv, kubeconfig=cluster.kubeconfig)
    print(text.stdout)
    assert text.returncode == out.returncode
    return out.returncode, json.loads(out.stdout), text.stdout


def _outcomes(data: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["outcome"] for c in data["checks"]}


def test_before_the_install_what_the_chart_installs_passes(fresh: tuple[DevCluster, Path]) -> None:
    code, data, text = _preflight(fresh)
    outcomes = _outcomes(data)
    assert {c for c, o in outcomes.items() if o == "installs with the chart"} == _CHART_CHECKS, text
    assert {c: o for c, o in outcomes.items() if c not in _CHART_CHECKS} == {
        "kubernetes": "ok",
        "kubernetes-apis": "ok",
        "kueue-api": "ok",
        "kueue-config": "ok",
        "nfd-api": "ok",
        "nfd-master": "warn",  # no NodeFeature yet: the agent publishes them once installed
        "clusterqueues": "ok",
    }, text
    assert code == 0
    assert data["stage"]["stage"] == "before-install" and data["stage"]["present"] == []
    lines = text.splitlines()
    assert lines[0].startswith("install stage: before-install (automatic: none of the chart's ")
    assert f"helm install gpustack-worker ./chart -n {FRESH_NS} --create-namespace" in lines[-1]
    # the long RBAC row is a summary; the full list is in the JSON
    controller = next(c for c in data["checks"] if c["check"] == "rbac:controller")
    assert len(controller["items"]) == len(rbac.CONTROLLER.grants())
    row = next(line for line in lines if line.startswith("rbac:controller"))
    assert "; first: " in row and len(row) < 350, row


def test_forced_after_the_install_the_same_checks_fail(fresh: tuple[DevCluster, Path]) -> None:
    code, data, text = _preflight(fresh, "--after-install")
    outcomes = _outcomes(data)
    assert {c for c, o in outcomes.items() if o == "fail"} == _CHART_CHECKS, text
    assert code == 1
    assert data["stage"] == {
        "stage": "after-install",
        "forced": True,
        "present": [],
        "lookedFor": _LOOKED_FOR,
    }


def test_a_partial_install_is_judged_as_installed(fresh: tuple[DevCluster, Path]) -> None:
    cluster, _ = fresh
    api = cluster.bootstrap()
    role = next(
        d
        for d in yaml.safe_load_all(
            (Path(__file__).resolve().parents[3] / "manifests/rbac/controller.yaml").read_text()
        )
        if d and d["kind"] == "ClusterRole"
    )
    created = api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    assert created.status_code == 201, created.text
    try:
        code, data, text = _preflight(fresh)
        assert data["stage"] == {
            "stage": "after-install",
            "forced": False,
            "present": [f"ClusterRole {rbac.CONTROLLER.name}"],
            "lookedFor": _LOOKED_FOR,
        }
        assert code == 1
        assert {c for c, o in _outcomes(data).items() if o == "fail"} == _CHART_CHECKS, text
        assert "a partial install is judged as installed" in text.splitlines()[0]
        # forcing "before" is the operator's call, and says what it overrides
        code, data, text = _preflight(fresh, "--before-install")
        assert code == 0, text
        assert text.splitlines()[0].startswith(
            "install stage: before-install (--before-install; 1 of the chart's"
        )
    finally:
        api.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{rbac.CONTROLLER.name}")
        api.close()


def test_helm_install_in_the_readmes_order_then_preflight_after_it(fresh: tuple[DevCluster, Path]) -> None:
    """The README's order to the end: preflight passed before (above), ``helm install`` itself, preflight."""
    cluster, _ = fresh
    binary = build.ensure_optional("helm")
    home = cluster.dir / "helm-home"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    chart = Path(__file__).resolve().parents[3] / "chart"
    installed = subprocess.run(
        [str(binary), "install", "gpustack-worker", str(chart), "-n", FRESH_NS, "--create-namespace"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert "STATUS: deployed" in installed.stdout

    code, data, text = _preflight(fresh)
    assert data["stage"]["stage"] == "after-install" and len(data["stage"]["present"]) == _LOOKED_FOR, text
    outcomes = _outcomes(data)
    # everything the chart installs is there and right, but the webhook: its Service has no pods here
    assert {c: outcomes[c] for c in _CHART_CHECKS - {"devices", "webhook"}} == dict.fromkeys(
        _CHART_CHECKS - {"devices", "webhook"}, "ok"
    ), text
    assert outcomes["devices"] == "warn", text  # no Device Manager publishes ledgers here
    assert outcomes["webhook"] == "fail", text
    assert code == 1
