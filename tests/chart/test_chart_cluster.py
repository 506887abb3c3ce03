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

The options that are off by default are rendered and dry-run too (``OPTIONS``): cert-manager (a minimal
copy of its Certificate/Issuer CRDs is installed for the run, as are the Prometheus Operator's
ServiceMonitor/PrometheusRule for the production values, which enable both), an existing webhook Secret,
``nameOverride``/``fullnameOverride``. (The alerts themselves: test_alert_rules_cluster.py, with promtool.)
Each workload's Pod, built from its template, is created (dry run) in a namespace that enforces Pod
Security ``restricted``, and the workloads themselves raise no PodSecurity warning there.
"""

from __future__ import annotations

import base64
import copy
import inspect
import json
import os
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import pytest
import yaml
from cryptography import x509

from gpustack_worker.api import kinds, kueue_config, rbac, webhooks
from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster import build, versions
from gpustack_worker.devcluster.bootstrap import ApiBootstrap, load_yaml_documents
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.settings import settings_from
from tests.chart.operator_crds import OPERATOR_CRDS

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
#: A CA for the existing-Secret case (any base64 PEM: the dry run does not call the webhook).
_EXISTING_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
#: The options off by default, as ``--set`` arguments per case (rendered, linted and dry-run like VALUES).
OPTIONS: dict[str, list[str]] = {
    "cert-manager": [
        "webhook.certManager.enabled=true",
        "nameOverride=gpu-worker",
        "metrics.serviceMonitor.enabled=true",
    ],
    "cert-manager-issuer": [
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
        "webhook.certManager.issuerRef.name=internal-ca",
        "webhook.certManager.issuerRef.group=cert-manager.io",
    ],
    "existing-secret": [
        "webhook.existingSecret=platform-webhook-tls",
        f"webhook.caBundle={_EXISTING_CA}",
        "fullnameOverride=gw",
        "metrics.prometheusRule.enabled=true",
    ],
}
CASES: Final = [*VALUES, *OPTIONS]
#: Kinds every render has.
_BASE_KINDS: Final = frozenset(
    {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
        "DaemonSet",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
    }
)
#: What each case adds to them.
_CASE_KINDS: Final = {
    "default": {"Secret"},
    "production": {"Secret", "ServiceMonitor", "PrometheusRule"},
    "cert-manager": {"Certificate", "Issuer", "ServiceMonitor"},
    "cert-manager-issuer": {"Certificate"},
    "existing-secret": {"PrometheusRule"},
}
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
    if case in OPTIONS:
        return [arg for value in OPTIONS[case] for arg in ("--set", value)]
    values = VALUES[case]
    return [] if values is None else ["--values", str(values)]


def _template(helm: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    return _helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        versions.KUBERNETES,
        "--include-crds",
        *args,
    )


def _render(helm: tuple[Path, dict[str, str]], case: str) -> list[Doc]:
    proc = _template(helm, *_values_args(case))
    assert proc.returncode == 0, f"helm template ({case}) failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def rendered(helm: tuple[Path, dict[str, str]]) -> dict[str, list[Doc]]:
    return {case: _render(helm, case) for case in CASES}


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


@pytest.fixture(scope="module")
def operator_crds(devcluster: DevCluster, api: httpx.Client) -> Iterator[list[str]]:
    """The Prometheus Operator's and cert-manager's CRDs (the subset above) installed for this module."""
    assert devcluster.pki is not None
    boot = ApiBootstrap(devcluster.server, devcluster.pki.ca_cert, devcluster.pki.admin_token)
    try:
        names = boot.install_crds(OPERATOR_CRDS)
    finally:
        boot.close()
    yield names
    for name in names:
        api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")


# --- tests --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_is_accepted_by_the_api_server(
    rendered: dict[str, list[Doc]], api: httpx.Client, operator_crds: list[str], case: str
) -> None:
    docs = rendered[case]
    kinds_rendered = {d["kind"] for d in docs}
    expected = _BASE_KINDS | _CASE_KINDS[case]
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


@pytest.mark.parametrize("case", CASES)
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


def _notes(helm: tuple[Path, dict[str, str]], case: str) -> str:
    """NOTES.txt as ``helm install`` prints it (a client-side dry run: nothing is sent to a cluster;
    ``helm install`` has no ``--kube-version``, so helm's own default version is the one checked against
    the chart's ``kubeVersion``)."""
    proc = _helm(
        helm,
        "install",
        RELEASE,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        *_values_args(case),
    )
    assert proc.returncode == 0, f"helm install --dry-run=client ({case}) failed:\n{proc.stderr}"
    assert "NOTES:" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize("case", ["default", "cert-manager", "existing-secret"])
def test_notes_point_to_the_safe_path_into_a_cluster(helm: tuple[Path, dict[str, str]], case: str) -> None:
    """What helm prints after an install names the merge of the Kueue configuration (never its
    replacement), preflight, what is onboarded by default and the cleanup; and the objects it tells the
    admin to check are the rendered ones."""
    notes = _notes(helm, case)
    for wanted in (
        "gpustack-worker kueue-config --merge",
        "gpustack-worker preflight",
        "gpustack-worker cleanup",
        "node-management-manual",
        "local-queue-namespace-selector",
        f"get lease {LEASE_NAME}",
        f"-n {NAMESPACE}",
        "do not\nreplace Kueue's own configuration",
    ):
        assert wanted in notes, f"NOTES.txt ({case}) lacks {wanted!r}:\n{notes}"
    assert "docs/devcluster.md" not in notes
    assert ("cert-manager has issued" in notes) == (case == "cert-manager"), notes
    (deployment,) = [d for d in _render(helm, case) if d["kind"] == "Deployment"]
    assert f"controller Deployment {deployment['metadata']['name']}:" in notes


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


# --- the options --------------------------------------------------------------------------------------
def _by_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def _workloads(docs: list[Doc]) -> dict[str, Doc]:
    """component → its Deployment / DaemonSet."""
    return {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
    }


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("case", CASES)
def test_services_and_the_service_monitor_select_the_pods(rendered: dict[str, list[Doc]], case: str) -> None:
    docs = rendered[case]
    workloads = _workloads(docs)
    assert set(workloads) == {"agent", "controller"}
    pod_labels = {c: w["spec"]["template"]["metadata"]["labels"] for c, w in workloads.items()}
    for workload in workloads.values():
        assert _matches(
            workload["spec"]["selector"]["matchLabels"], workload["spec"]["template"]["metadata"]["labels"]
        )
    services = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in _by_kind(docs, "Service")}
    metrics_svc, webhook_svc = services["metrics"], services["controller"]
    # the metrics Service: every pod of both workloads, by the port's name, not-ready pods too
    assert all(_matches(metrics_svc["spec"]["selector"], labels) for labels in pod_labels.values())
    assert metrics_svc["spec"]["publishNotReadyAddresses"] is True
    assert metrics_svc["spec"]["ports"][0]["targetPort"] == "metrics"
    for workload in workloads.values():
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert "metrics" in {p["name"] for p in container["ports"]}
    # the webhook Service: the controller only
    assert _matches(webhook_svc["spec"]["selector"], pod_labels["controller"])
    assert not _matches(webhook_svc["spec"]["selector"], pod_labels["agent"])
    for monitor in _by_kind(docs, "ServiceMonitor"):
        assert _matches(monitor["spec"]["selector"]["matchLabels"], metrics_svc["metadata"]["labels"])
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
        assert monitor["spec"]["podTargetLabels"] == ["app.kubernetes.io/component"]


def _webhook_configurations(docs: list[Doc]) -> list[Doc]:
    return [
        d for d in docs if d["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    ]


def _mounted_secret(docs: list[Doc]) -> str:
    controller = _workloads(docs)["controller"]
    (volume,) = [v for v in controller["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook-certs"]
    return str(volume["secret"]["secretName"])


@pytest.mark.parametrize("case", ["cert-manager", "cert-manager-issuer"])
def test_cert_manager_issues_the_mounted_certificate_and_injects_its_ca(
    rendered: dict[str, list[Doc]], case: str
) -> None:
    docs = rendered[case]
    assert not _by_kind(docs, "Secret"), "no generated Secret: cert-manager writes it"
    (certificate,) = _by_kind(docs, "Certificate")
    assert certificate["spec"]["secretName"] == _mounted_secret(docs)
    (service,) = [s for s in _by_kind(docs, "Service") if s["spec"]["ports"][0]["name"] == "webhook"]
    host = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert host in certificate["spec"]["dnsNames"]
    injected = f"{NAMESPACE}/{certificate['metadata']['name']}"
    for config in _webhook_configurations(docs):
        assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": injected}
        for hook in config["webhooks"]:
            assert "caBundle" not in hook["clientConfig"], "cert-manager's CA injector owns the caBundle"
            assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    issuers = _by_kind(docs, "Issuer")
    if case == "cert-manager":
        (issuer,) = issuers
        assert issuer["spec"] == {"selfSigned": {}}
        assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    else:
        assert not issuers
        assert certificate["spec"]["issuerRef"] == {
            "kind": "ClusterIssuer",
            "name": "internal-ca",
            "group": "cert-manager.io",
        }


def test_an_existing_secret_is_mounted_and_its_ca_trusted(
    rendered: dict[str, list[Doc]], helm: tuple[Path, dict[str, str]]
) -> None:
    docs = rendered["existing-secret"]
    assert not _by_kind(docs, "Secret") and not _by_kind(docs, "Certificate")
    assert _mounted_secret(docs) == "platform-webhook-tls"
    for config in _webhook_configurations(docs):
        assert "annotations" not in config["metadata"]
        assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {_EXISTING_CA}
    # without a caBundle there is nothing to trust offline (helm template reads no cluster): a clear error
    proc = _template(helm, "--set", "webhook.existingSecret=platform-webhook-tls")
    assert proc.returncode != 0
    assert "webhook.existingSecret platform-webhook-tls: no ca.crt found" in proc.stderr
    proc = _template(helm, "--set", "webhook.existingSecret=x", "--set", "webhook.certManager.enabled=true")
    assert proc.returncode != 0
    assert "webhook.certManager.enabled and webhook.existingSecret are exclusive" in proc.stderr


#: Objects whose names do not follow the full name: the CRDs, the webhook configurations (the mutating one
#: must sort before Kueue's) and the ConfigMaps named by values or by Kueue's documentation.
_FIXED_NAMES: Final = frozenset(
    {
        webhooks.VALIDATING_CONFIGURATION,
        webhooks.MUTATING_CONFIGURATION,
        "gpustack-settings",
        "gpustack-kueue-manager-config",
    }
)


@pytest.mark.parametrize(
    ("case", "prefix", "name"),
    [
        ("existing-secret", "gw", "gpustack-worker"),
        ("cert-manager", "gpustack-worker-gpu-worker", "gpu-worker"),
    ],
)
def test_names_follow_name_and_fullname_overrides(
    rendered: dict[str, list[Doc]], case: str, prefix: str, name: str
) -> None:
    """fullnameOverride prefixes every object's name and every reference to one (RBAC subjects, the
    service accounts, the Services the webhooks call, the mounted Secret); nameOverride is the
    ``app.kubernetes.io/name`` label of every object and selector and, as Helm's convention, the full
    name is ``<release>-<name>`` when the release name does not contain it (gpustack-worker-gpu-worker)."""
    docs = rendered[case]
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition" or doc["metadata"]["name"] in _FIXED_NAMES:
            continue
        assert doc["metadata"]["name"] == prefix or doc["metadata"]["name"].startswith(f"{prefix}-"), _key(
            doc
        )
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == name, _key(doc)
        for subject in doc.get("subjects", []):
            assert subject["name"].startswith(f"{prefix}-")
        if "roleRef" in doc:
            assert doc["roleRef"]["name"] == doc["metadata"]["name"]
    accounts = {d["metadata"]["name"] for d in _by_kind(docs, "ServiceAccount")}
    for component, workload in _workloads(docs).items():
        assert workload["spec"]["template"]["spec"]["serviceAccountName"] == f"{prefix}-{component}"
        assert f"{prefix}-{component}" in accounts
        assert workload["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == name
    for config in _webhook_configurations(docs):
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == f"{prefix}-webhook"
    tenants = {d["metadata"]["name"] for d in _by_kind(docs, "ClusterRole")}
    assert {f"{prefix}-view", f"{prefix}-edit"} <= tenants


@pytest.mark.parametrize("case", CASES)
def test_workload_shape(rendered: dict[str, list[Doc]], case: str) -> None:
    """OTEL_SERVICE_NAME names each workload; the grace period outlasts the stop (the Manager's drain,
    then the wait for cancelled reconciles); the pods run on Linux nodes with RuntimeDefault seccomp."""
    drain = inspect.signature(Manager.__init__).parameters["shutdown_timeout"].default
    for component, workload in _workloads(rendered[case]).items():
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OTEL_SERVICE_NAME"] == f"{workload['metadata']['name']}"
        assert env["OTEL_SERVICE_NAME"].endswith(f"-{component}")
        assert pod["terminationGracePeriodSeconds"] > 2 * drain
        assert pod["nodeSelector"]["kubernetes.io/os"] == "linux"
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "controller.replicas=two"], "at '/controller/replicas': got string, want integer"),
        (["--set", "metrics.serviceMonitor.enabled=yes"], "at '/metrics/serviceMonitor/enabled'"),
        (["--set", "agnet.nodeSelector.x=y"], "additional properties 'agnet' not allowed"),
        (["--set", "agent.terminationGracePeriodSeconds=30"], "at '/agent/terminationGracePeriodSeconds'"),
        (["--set", "image.digest=latest"], "at '/image/digest'"),
    ],
    ids=["wrong-type", "string-for-bool", "unknown-key", "grace-shorter-than-drain", "malformed-digest"],
)
def test_values_schema_refuses_wrong_values(
    helm: tuple[Path, dict[str, str]], args: list[str], message: str
) -> None:
    proc = _template(helm, *args)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


# --- Pod Security ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def restricted_namespace(api: httpx.Client) -> Iterator[str]:
    """A namespace that enforces (and warns and audits) Pod Security ``restricted``, with the chart's
    ServiceAccounts (a Pod's account must exist to be admitted); deleted afterwards."""
    name = f"chart-restricted-{uuid.uuid4().hex[:8]}"
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    labels |= {
        f"pod-security.kubernetes.io/{mode}-version": "latest" for mode in ("enforce", "warn", "audit")
    }
    resp = api.post(
        "/api/v1/namespaces",
        json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    assert resp.status_code == 201, resp.text[:300]
    try:
        yield name
    finally:
        api.delete(f"/api/v1/namespaces/{name}")


def _pod_from(workload: Doc, namespace: str) -> Doc:
    template = copy.deepcopy(workload["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload['metadata']['name']}-probe",
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


def _ensure_account(api: httpx.Client, namespace: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    resp = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json=body)
    assert resp.status_code in (201, 409), resp.text[:300]


@pytest.mark.parametrize("case", CASES)
def test_workloads_pass_pod_security_restricted(
    rendered: dict[str, list[Doc]], api: httpx.Client, restricted_namespace: str, case: str
) -> None:
    """Each workload's Pod is admitted (dry run) where ``restricted`` is enforced, and the Deployment /
    DaemonSet raise no PodSecurity warning there. The agent mounts nothing from its node and needs no
    privilege, so both pass; a copy of the same Pod on the host network is refused, so the check is live."""
    ns = restricted_namespace
    discovery = _Discovery(api)
    for workload in _workloads(rendered[case]).values():
        pod = _pod_from(workload, ns)
        _ensure_account(api, ns, pod["spec"]["serviceAccountName"])
        resp = api.post(
            f"/api/v1/namespaces/{ns}/pods", params={"dryRun": "All", "fieldValidation": "Strict"}, json=pod
        )
        assert resp.status_code == 201, (
            f"{pod['metadata']['name']}: HTTP {resp.status_code}: {resp.text[:600]}"
        )
        assert not resp.headers.get("Warning"), resp.headers.get("Warning")
        moved = copy.deepcopy(workload)
        moved["metadata"]["namespace"] = ns
        resp = _dry_run_apply(api, discovery, moved)
        assert resp.status_code in (200, 201), resp.text[:600]
        assert not resp.headers.get("Warning"), f"{workload['kind']}: {resp.headers.get('Warning')}"
    # the same Pod on the host's network (what a node agent might be tempted to use) is refused
    host_network = _pod_from(_workloads(rendered[case])["agent"], ns)
    host_network["spec"]["hostNetwork"] = True
    resp = api.post(f"/api/v1/namespaces/{ns}/pods", params={"dryRun": "All"}, json=host_network)
    assert resp.status_code == 403 and "violates PodSecurity" in resp.text, resp.text[:600]


def test_tenant_roles_carry_the_labels_the_user_facing_roles_aggregate(api: httpx.Client) -> None:
    """The tenant ClusterRoles (manifests/rbac/tenants.yaml = the chart's rbac-tenants.yaml, installed in the
    dev cluster) match the ``clusterRoleSelectors`` of the API server's own ``view``/``edit``/``admin``: the
    aggregation controller (kube-controller-manager's, not run by the dev cluster) copies their rules there,
    so a RoleBinding to ``edit`` lets a tenant manage ModelDeployments and ``view`` read them."""
    plural = kinds.MODEL_DEPLOYMENT.plural
    tenant = {}
    for role in rbac.TENANT_ROLES:
        resp = api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role.name}")
        assert resp.status_code == 200, f"{role.name} not installed: {resp.text[:300]}"
        tenant[role.name] = resp.json()
    granted: dict[str, set[str]] = {}
    for user_role in ("view", "edit", "admin"):
        resp = api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{user_role}")
        assert resp.status_code == 200, resp.text[:300]
        selectors = resp.json()["aggregationRule"]["clusterRoleSelectors"]
        granted[user_role] = {
            verb
            for doc in tenant.values()
            if any(_matches(sel.get("matchLabels", {}), doc["metadata"]["labels"]) for sel in selectors)
            for rule in doc["rules"]
            if rule["resources"] == [plural]
            for verb in rule["verbs"]
        }
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    assert granted == {
        "view": {"get", "list", "watch"},
        "edit": {"get", "list", "watch"} | writes,
        "admin": {"get", "list", "watch"} | writes,
    }
