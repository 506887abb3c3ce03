"""Our RBAC has one source: the committed manifests and chart templates are fresh and say the same thing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_worker.api import kinds, rbac, rbacgen

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "rbac"
CHART = ROOT / "chart" / "templates"
VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})


def test_committed_files_are_fresh(tmp_path: Path) -> None:
    written = rbacgen.write(tmp_path / "m", tmp_path / "c")
    for path in written:
        committed = (MANIFESTS if path.parent.name == "m" else CHART) / path.name
        assert committed.exists(), f"{committed} missing: python -m gpustack_worker.api.rbacgen"
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} is stale: python -m gpustack_worker.api.rbacgen"
        )
    assert rbacgen.check(MANIFESTS, CHART) == []


def test_check_reports_stale_missing_and_unexpected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m, c = tmp_path / "m", tmp_path / "c"
    rbacgen.write(m, c)
    (m / "agent.yaml").write_text((m / "agent.yaml").read_text() + "# edited\n")
    (c / "rbac-controller.yaml").unlink()
    (c / "rbac-retired.yaml").write_text("{}\n")
    (c / "settings.yaml").write_text("{}\n")  # not ours: ignored
    problems = rbacgen.check(m, c)
    assert sorted(p.split(":")[0] for p in problems) == ["missing", "stale", "unexpected"]
    assert rbacgen.main(["--check", "--manifests", str(m), "--chart", str(c)]) == 1
    assert "agent.yaml" in capsys.readouterr().err
    assert rbacgen.main(["--manifests", str(m), "--chart", str(c)]) == 0
    (c / "rbac-retired.yaml").unlink()
    assert rbacgen.main(["--check", "--manifests", str(m), "--chart", str(c)]) == 0


def _chart_as_manifest(text: str) -> list[dict[str, Any]]:
    """The chart template with its two template expressions evaluated as the default values do."""
    labels = "".join(f"\n    {k}: {v}" for k, v in rbacgen.MANIFEST_LABELS.items())
    text = text.replace(f" {rbacgen.CHART_LABELS}", labels)
    text = text.replace(rbacgen.CHART_NAMESPACE, kinds.SYSTEM_NAMESPACE)
    text = text.replace(rbacgen.CHART_FULLNAME, rbac.NAME_PREFIX)
    assert "{{" not in text
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("component", rbac.COMPONENTS, ids=lambda c: c.key)
def test_chart_and_manifests_grant_the_same(component: rbac.Component) -> None:
    manifest = [d for d in yaml.safe_load_all((MANIFESTS / f"{component.key}.yaml").read_text()) if d]
    chart = _chart_as_manifest((CHART / f"rbac-{component.key}.yaml").read_text())
    assert chart == manifest
    kinds_present = [d["kind"] for d in manifest]
    assert kinds_present[0] == "ServiceAccount"
    assert ("ClusterRole" in kinds_present) == bool(component.cluster)
    assert kinds_present.count("Role") == kinds_present.count("RoleBinding") == len(component.namespaced)
    for doc in manifest:
        assert doc["metadata"]["name"] == component.name
        for subject in doc.get("subjects", []):
            assert subject == {
                "kind": "ServiceAccount",
                "name": component.name,
                "namespace": kinds.SYSTEM_NAMESPACE,
            }


@pytest.mark.parametrize(
    ("template", "component"),
    [("agent-daemonset.yaml", rbac.AGENT), ("controller-deployment.yaml", rbac.CONTROLLER)],
)
def test_workloads_run_as_the_generated_service_accounts(template: str, component: rbac.Component) -> None:
    text = (CHART / template).read_text()
    name = rbacgen.CHART_FULLNAME + component.name.removeprefix(rbac.NAME_PREFIX)
    assert re.search(rf"serviceAccountName: {re.escape(name)}\s*$", text, re.MULTILINE)


def test_the_chart_installs_into_its_release_namespace_which_the_readme_names_as_the_manifests() -> None:
    values = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    assert values["systemNamespace"] == ""  # the release's namespace (helm -n)
    readme = (ROOT / "README.md").read_text()
    assert f"helm install gpustack-worker ./chart -n {kinds.SYSTEM_NAMESPACE} --create-namespace" in readme


@pytest.mark.parametrize("component", rbac.COMPONENTS, ids=lambda c: c.key)
def test_rules_are_well_formed(component: rbac.Component) -> None:
    seen: set[tuple[str, str, str]] = set()
    for namespace, rules in [("", component.cluster), *component.namespaced.items()]:
        for rule in rules:
            assert rule.verbs and set(rule.verbs) <= VERBS, rule
            assert len(set(rule.verbs)) == len(rule.verbs), rule
            assert rule.why.strip(), rule
            # A Role grants only namespaced kinds; a ClusterRole may grant a namespaced kind too (then in
            # every namespace: the chain's LocalQueues).
            assert rule.resource.namespaced or namespace == "", f"{rule.resource_path} scope in {namespace!r}"
            key = (namespace, rule.api_group, rule.resource_path)
            assert key not in seen, f"{key} granted by two rules"
            seen.add(key)
    # The allow-list only names verbs that are granted, each with a reason.
    for allowed, reason in {**component.not_exercised, **component.sometimes_exercised}.items():
        assert allowed in component.grants(), allowed
        assert len(reason) > 20, allowed


def test_tenant_roles_aggregate_and_match_the_chart() -> None:
    """The tenant ClusterRoles are the same in the manifests and the chart (labels aside: the chart adds
    its own before the aggregation labels) and carry every aggregation label they declare."""
    manifest = [d for d in yaml.safe_load_all((MANIFESTS / "tenants.yaml").read_text()) if d]
    text = (CHART / "rbac-tenants.yaml").read_text()
    text = text.replace(f"labels:{rbacgen.CHART_LABELS}", "labels:")
    chart = _chart_as_manifest(text)
    assert [(d["metadata"]["name"], d["rules"]) for d in chart] == [
        (d["metadata"]["name"], d["rules"]) for d in manifest
    ]
    for role, doc in zip(rbac.TENANT_ROLES, manifest, strict=True):
        aggregated = {k.rsplit("-", 1)[1] for k in doc["metadata"]["labels"] if "aggregate-to-" in k}
        assert aggregated == set(role.aggregate_to)
        assert doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == role.name
        for rule in doc["rules"]:
            assert set(rule["verbs"]) <= VERBS
