"""The chart proven against the real API server.

``helm`` (built from ``helm.sh/helm/v4`` like the other components, :data:`build.OPTIONAL`) renders
``chart/`` with its default values and with ``chart/values-production.yaml``; every rendered object —
CRDs first — is applied to the session's kube-apiserver as a server-side apply with ``dryRun=All`` and
``fieldValidation=Strict``, so Kubernetes itself validates schemas (unknown or misplaced fields included),
RBAC objects, webhook configurations (CEL matchConditions too) and PodDisruptionBudgets, and persists
nothing. ``helm lint --strict`` passes with both values files. The rendered RBAC equals what
``manifests/rbac`` installs in the dev cluster (the identity the end-to-end tests run under), read back
from the API server; the Kueue configuration ConfigMap carries :mod:`gpustack_worker.api.kueue_config`;
the webhook configurations are :mod:`gpustack_worker.api.webhooks`' with the CA that signed the served
certificate; the settings the chart ships validate against the settings model.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import ssl
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml
from cryptography import x509

from gpustack_worker.api import kinds, kueue_config, rbac, webhooks
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster import build, versions
from gpustack_worker.devcluster.bootstrap import load_yaml_documents
from gpustack_worker.runtime.settings import settings_from

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
RELEASE = "gpustack-worker"
NAMESPACE = kinds.SYSTEM_NAMESPACE
#: values file per case (None: the chart's defaults).
VALUES: dict[str, Path | None] = {"default": None, "production": CHART / "values-production.yaml"}
_RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: Server-side apply, validated and admitted like a real one, persisted nowhere; an unknown field is an error.
_DRY_RUN_APPLY = {
    "dryRun": "All",
    "fieldManager": "gpustack-chart-dry-run",
    "force": "true",
    "fieldValidation": "Strict",
}

Doc = dict[str, Any]


# --- helm ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The built helm binary (a BuildError quotes go's output) and an environment that keeps helm's
    config/cache/data out of the user's home."""
    binary = build.ensure_optional("helm")
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    env.update(
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_DATA_HOME=str(home / "data"),
    )
    yield binary, env


def _helm(helm: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, env = helm
    return subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, check=False, timeout=300
    )


def _values_args(case: str) -> list[str]:
    values = VALUES[case]
    return [] if values is None else ["--values", str(values)]


def _render(helm: tuple[Path, dict[str, str]], case: str) -> list[Doc]:
    proc = _helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        versions.KUBERNETES,
        "--include-crds",
        *_values_args(case),
    )
    assert proc.returncode == 0, f"helm template ({case}) failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def rendered(helm: tuple[Path, dict[str, str]]) -> dict[str, list[Doc]]:
    return {case: _render(helm, case) for case in VALUES}


def _one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def _key(doc: Doc) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


# --- the API server -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(devcluster: DevCluster) -> Iterator[httpx.Client]:
    """An admin client of the session's kube-apiserver (dry-run applies need no less than what helm
    itself would hold: cluster-scoped objects, RBAC, webhook configurations)."""
    assert devcluster.pki is not None
    ctx = ssl.create_default_context(cafile=str(devcluster.pki.ca_cert))
    with httpx.Client(
        base_url=devcluster.server,
        verify=ctx,
        headers={"Authorization": f"Bearer {devcluster.pki.admin_token}"},
        timeout=60.0,
    ) as client:
        yield client


class _Discovery:
    """``(apiVersion, kind)`` → collection path and scope, from the server's own discovery."""

    def __init__(self, api: httpx.Client) -> None:
        self._api = api
        self._cache: dict[str, dict[str, tuple[str, bool]]] = {}

    def path(self, doc: Doc) -> str:
        api_version, kind = doc["apiVersion"], doc["kind"]
        if api_version not in self._cache:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resp = self._api.get(prefix)
            assert resp.status_code == 200, f"discovery {prefix}: HTTP {resp.status_code} {resp.text[:300]}"
            self._cache[api_version] = {
                r["kind"]: (f"{prefix}/{r['name']}", r["namespaced"])
                for r in resp.json()["resources"]
                if "/" not in r["name"]
            }
        served = self._cache[api_version]
        assert kind in served, f"{api_version} {kind} is not served by the API server"
        collection, namespaced = served[kind]
        meta = doc["metadata"]
        if namespaced:
            assert meta.get("namespace"), f"{kind} {meta['name']} is namespaced but rendered without one"
            prefix, plural = collection.rsplit("/", 1)
            return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        assert "namespace" not in meta, f"cluster-scoped {kind} {meta['name']} rendered with a namespace"
        return f"{collection}/{meta['name']}"


def _dry_run_apply(api: httpx.Client, discovery: _Discovery, doc: Doc) -> httpx.Response:
    return api.patch(
        discovery.path(doc),
        params=_DRY_RUN_APPLY,
        content=json.dumps(doc).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )


def _apply_order(docs: list[Doc]) -> list[Doc]:
    """CRDs, then Namespaces, then everything else in rendered order (what helm install does)."""
    rank = {"CustomResourceDefinition": 0, "Namespace": 1}
    return sorted(docs, key=lambda d: rank.get(d["kind"], 2))


# --- tests --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(VALUES))
def test_every_rendered_object_is_accepted_by_the_api_server(
    rendered: dict[str, list[Doc]], api: httpx.Client, case: str
) -> None:
    docs = rendered[case]
    kinds_rendered = {d["kind"] for d in docs}
    expected = {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Service",
        "Deployment",
        "DaemonSet",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
    }
    assert kinds_rendered == expected, f"rendered kinds changed: {sorted(kinds_rendered ^ expected)}"
    discovery = _Discovery(api)
    refused: list[str] = []
    for doc in _apply_order(docs):
        resp = _dry_run_apply(api, discovery, doc)
        kind, ns, name = _key(doc)
        if resp.status_code not in (200, 201):
            refused.append(f"{kind} {ns}/{name}: HTTP {resp.status_code}: {resp.text[:600]}")
            continue
        answered = resp.json()
        # the server processed the object (defaults filled, same identity), it did not just echo it
        assert (answered["kind"], answered["metadata"]["name"]) == (kind, name)
        assert answered["metadata"].get("uid"), f"{kind} {name}: no uid in the dry-run answer"
        warnings = resp.headers.get("Warning")
        assert not warnings, f"{kind} {ns}/{name}: the API server warned: {warnings}"
    assert not refused, "the API server refused rendered objects:\n" + "\n".join(refused)
    # and the CRDs the chart ships are the ones the dev cluster (and so every end-to-end test) installs
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == sorted(p.name for p in (REPO / "manifests" / "crds").glob("*.yaml"))
    for name in chart_crds:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "manifests" / "crds" / name).read_bytes(), name
    assert sum(d["kind"] == "CustomResourceDefinition" for d in docs) == len(chart_crds)


def test_the_dry_run_refuses_what_kubernetes_would(rendered: dict[str, list[Doc]], api: httpx.Client) -> None:
    """The same path refuses a broken object: an unknown field, an invalid CEL matchCondition, an
    invalid RBAC verb list — so an accepted render means something."""
    docs = rendered["default"]
    discovery = _Discovery(api)
    deployment = copy.deepcopy(_one(docs, "Deployment", "gpustack-worker-controller"))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    mutating = copy.deepcopy(_one(docs, "MutatingWebhookConfiguration", webhooks.MUTATING_CONFIGURATION))
    mutating["webhooks"][0]["matchConditions"][0]["expression"] = "object.spec.queueName.startsWith("
    role = copy.deepcopy(_one(docs, "ClusterRole", rbac.CONTROLLER.name))
    role["rules"][0]["verbs"] = []
    # an undeclared field fails server-side apply's typed conversion (the server answers 500 for that)
    expected = {
        "Deployment": (500, "imagePullPolicyy: field not declared in schema"),
        "MutatingWebhookConfiguration": (422, "matchConditions[0].expression: Invalid value"),
        "ClusterRole": (422, "verbs must contain at least one value"),
    }
    for broken in (deployment, mutating, role):
        resp = _dry_run_apply(api, discovery, broken)
        code, message = expected[broken["kind"]]
        assert (resp.status_code, message in resp.json()["message"]) == (code, True), resp.text[:600]


@pytest.mark.parametrize("case", list(VALUES))
def test_helm_lint_strict_passes(helm: tuple[Path, dict[str, str]], case: str) -> None:
    proc = _helm(
        helm,
        "lint",
        str(CHART),
        "--strict",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        versions.KUBERNETES,
        *_values_args(case),
    )
    assert proc.returncode == 0, f"helm lint --strict ({case}) failed:\n{proc.stdout}\n{proc.stderr}"
    assert "0 chart(s) failed" in proc.stdout, proc.stdout


def _rbac_view(doc: Doc) -> Doc:
    """What an RBAC object grants and to whom (labels are the chart's own and not compared)."""
    return {k: doc[k] for k in ("rules", "roleRef", "subjects") if k in doc}


@pytest.mark.parametrize("case", list(VALUES))
def test_rendered_rbac_is_exactly_what_the_end_to_end_tests_run_under(
    rendered: dict[str, list[Doc]], api: httpx.Client, case: str
) -> None:
    chart = {_key(d): _rbac_view(d) for d in rendered[case] if d["kind"] in _RBAC_KINDS}
    installed = load_yaml_documents(sorted((REPO / "manifests" / "rbac").glob("*.yaml")))
    manifests = {_key(d): _rbac_view(d) for d in installed}
    assert set(chart) == set(manifests)
    assert chart == manifests
    # the identities the end-to-end tests take (DevCluster.service_account_kubeconfig) are the chart's
    accounts = {name for kind, ns, name in chart if kind == "ServiceAccount" and ns == NAMESPACE}
    assert accounts == {c.name for c in rbac.COMPONENTS}
    # and the dev cluster holds exactly these grants (read back from the API server)
    discovery = _Discovery(api)
    for key, view in chart.items():
        doc = {"apiVersion": "v1" if key[0] == "ServiceAccount" else "rbac.authorization.k8s.io/v1"}
        doc |= {"kind": key[0], "metadata": {"name": key[2]} | ({"namespace": key[1]} if key[1] else {})}
        resp = api.get(discovery.path(doc))
        assert resp.status_code == 200, f"{key} not installed in the dev cluster: HTTP {resp.status_code}"
        assert _rbac_view(resp.json()) == view, f"{key} differs in the dev cluster"


@pytest.mark.parametrize("case", list(VALUES))
def test_kueue_configuration_ships_with_the_transformations(
    rendered: dict[str, list[Doc]], case: str
) -> None:
    cm = _one(rendered[case], "ConfigMap", "gpustack-kueue-manager-config")
    assert cm["metadata"]["namespace"] == NAMESPACE
    config = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    assert config == kueue_config.chart_manager_config()
    resources = config["resources"]
    assert resources["transformations"] == kueue_config.transformations()
    assert resources["transformations"], "no transformations"
    credits_outputs = {k for t in resources["transformations"] for k in t["outputs"]}
    assert credits_outputs and all(k.startswith("credits.gpustack.ai/") for k in credits_outputs)
    assert config["featureGates"]["TopologyAwareScheduling"] is True


@pytest.mark.parametrize("case", list(VALUES))
def test_webhooks_are_the_api_modules_and_trust_the_serving_certificate(
    rendered: dict[str, list[Doc]], case: str
) -> None:
    docs = rendered[case]
    secret = _one(docs, "Secret", webhooks.CERT_SECRET)
    ca_b64 = secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_b64))
    served = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    served.verify_directly_issued_by(ca)
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{webhooks.SERVICE_NAME}.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)
    client_config = webhooks.service_client_config(NAMESPACE, ca_b64)
    expected = {
        "ValidatingWebhookConfiguration": webhooks.validating_configuration(client_config),
        "MutatingWebhookConfiguration": webhooks.mutating_configuration(client_config),
    }
    for kind, want in expected.items():
        got = copy.deepcopy(_one(docs, kind, want["metadata"]["name"]))
        got["metadata"].pop("labels")
        assert got == want, kind
    service = _one(docs, "Service", webhooks.SERVICE_NAME)
    port = {"name": webhooks.PORT_NAME, "port": webhooks.SERVICE_PORT, "targetPort": webhooks.PORT_NAME}
    assert service["spec"]["ports"] == [port | {"protocol": "TCP"}]


def _container(docs: list[Doc], kind: str, name: str) -> Doc:
    containers: list[Doc] = _one(docs, kind, name)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize("case", list(VALUES))
def test_shipped_settings_validate(rendered: dict[str, list[Doc]], case: str) -> None:
    """The settings ConfigMap holds only live keys and the GPUSTACK_* env only valid start-up values: a
    process started from this chart accepts both (a rejected revision would be a Warning Event)."""
    docs = rendered[case]
    data = _one(docs, "ConfigMap", "gpustack-settings")["data"]
    for kind, name in (("Deployment", "gpustack-worker-controller"), ("DaemonSet", "gpustack-worker-agent")):
        env = {
            e["name"]: e["value"]
            for e in _container(docs, kind, name).get("env", [])
            if e["name"].startswith("GPUSTACK_")
        }
        settings_from(WorkerSettings, data, env)


def test_production_values_are_what_they_say(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["production"]
    values = yaml.safe_load(VALUES["production"].read_text())  # type: ignore[union-attr]
    image = f"{values['image']['repository']}@{values['image']['digest']}"
    controller = _one(docs, "Deployment", "gpustack-worker-controller")
    agent = _one(docs, "DaemonSet", "gpustack-worker-agent")
    assert controller["spec"]["replicas"] == 2
    for workload in (controller, agent):
        pod = workload["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == image
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert agent["spec"]["template"]["spec"]["nodeSelector"] == values["agent"]["nodeSelector"]
    assert agent["spec"]["template"]["spec"]["tolerations"] == values["agent"]["tolerations"]
    assert controller["spec"]["template"]["spec"]["affinity"] == values["controller"]["affinity"]
    for kind, name in (("Deployment", "gpustack-worker-controller"), ("DaemonSet", "gpustack-worker-agent")):
        env = {e["name"]: e.get("value") for e in _container(docs, kind, name)["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == values["otel"]["endpoint"]
        assert {k: v for k, v in env.items() if k.startswith("GPUSTACK_")} == values["settings"]["env"]
    settings = _one(docs, "ConfigMap", "gpustack-settings")["data"]
    assert settings == values["settings"]["values"]
    pdb = _one(docs, "PodDisruptionBudget", "gpustack-worker-controller")
    assert pdb["spec"]["selector"]["matchLabels"] == {
        k: v for k, v in controller["spec"]["template"]["metadata"]["labels"].items()
    }
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    default_image = _container(rendered["default"], "Deployment", "gpustack-worker-controller")["image"]
    assert default_image == f"ghcr.io/gpustack/gpustack-worker:{app_version}"
