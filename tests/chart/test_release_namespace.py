"""The chart puts the whole release in its namespace (``helm install -n NS``), as every chart does.

Every namespaced object, every ServiceAccount a binding names, the webhooks' Service, the ServiceMonitor's
namespace selector and both processes' ``--namespace`` follow ``-n``; ``systemNamespace`` overrides all of
them at once — but the agent's Role for Events in ``default``, where the API server keeps Events about
cluster-scoped objects (Nodes, Devices). Rendered with the optional parts on (secure metrics,
ServiceMonitor, PrometheusRule; two controller replicas bring the PodDisruptionBudget), so no template is
left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import rbac
from tests.chart.test_chart_metrics_serving import CHART, RELEASE, helm_in, run_helm

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

Doc = dict[str, Any]
#: Kinds without a namespace.
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "Namespace",
}
EVERYTHING_ON = [
    "metrics.secure.enabled=true",
    "metrics.secure.readerSubjects[0].kind=ServiceAccount",
    "metrics.secure.readerSubjects[0].name=scraper",
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield helm_in(tmp_path_factory.mktemp("helm-home"))


def _render(helm: tuple[Path, dict[str, str]], *args: str) -> list[Doc]:
    sets = [a for s in EVERYTHING_ON for a in ("--set", s)]
    proc = run_helm(helm, "template", RELEASE, str(CHART), *sets, *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _namespaces(docs: list[Doc]) -> dict[str, set[str]]:
    """Where each namespace the release names comes from → the namespaces found there."""
    found: dict[str, set[str]] = {}

    def add(where: str, ns: str | None) -> None:
        found.setdefault(where, set()).add(str(ns))

    for d in docs:
        kind, meta = d["kind"], d["metadata"]
        if kind in ("Role", "RoleBinding") and meta.get("namespace") == rbac.EVENTS_NAMESPACE:
            add(f"{kind} for Events", meta["namespace"])
        elif kind not in CLUSTER_SCOPED:
            add(f"{kind}.metadata", meta.get("namespace"))
        for subject in d.get("subjects") or ():
            if subject.get("kind") == "ServiceAccount" and subject["name"] != "scraper":
                add(f"{kind}.subjects", subject.get("namespace"))
        for hook in d.get("webhooks") or ():
            add(f"{kind}.service", hook["clientConfig"]["service"]["namespace"])
        if kind == "ServiceMonitor":
            for ns in d["spec"]["namespaceSelector"]["matchNames"]:
                add("ServiceMonitor.namespaceSelector", ns)
        if kind in ("Deployment", "DaemonSet"):
            for arg in d["spec"]["template"]["spec"]["containers"][0].get("args") or ():
                if arg.startswith("--namespace="):
                    add(f"{kind}.args", arg.removeprefix("--namespace="))
    return found


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--namespace", "team-gpu"), "team-gpu"),
        (("--namespace", "gpustack-system"), "gpustack-system"),
        (("--namespace", "team-gpu", "--set", "systemNamespace=elsewhere"), "elsewhere"),
    ],
    ids=["release-namespace", "the-documented-one", "systemNamespace-overrides"],
)
def test_every_namespace_the_release_names_is_its_own(
    helm: tuple[Path, dict[str, str]], args: tuple[str, ...], expected: str
) -> None:
    found = _namespaces(_render(helm, *args))
    # every source is present (a template that stopped naming one would shrink the check silently)
    assert {"Deployment.args", "DaemonSet.args", "ServiceMonitor.namespaceSelector"} <= set(found)
    assert any(w.endswith(".service") for w in found) and any(w.endswith(".subjects") for w in found)
    assert found.pop("Role for Events") == found.pop("RoleBinding for Events") == {rbac.EVENTS_NAMESPACE}
    assert {w: ns for w, ns in found.items() if ns != {expected}} == {}
