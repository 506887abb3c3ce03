"""Our webhook configuration has one source: the chart's generated template is fresh, and the chart's
Service, Secret and Deployment agree with api/webhooks.py and the controller's flags."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_worker.api import kinds, rbac, rbacgen, webhookgen, webhooks
from gpustack_worker.cli import main, webhook_serving

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "chart" / "templates"
CRD = ROOT / "manifests" / "crds" / "worker.gpustack.ai_topologysources.yaml"


def test_committed_templates_are_fresh(tmp_path: Path) -> None:
    written = webhookgen.write(tmp_path)
    assert sorted(p.name for p in written) == sorted([webhookgen.VALIDATING_FILE, webhookgen.MUTATING_FILE])
    for path in written:
        committed = CHART / path.name
        assert committed.exists(), f"{committed} missing: python -m gpustack_worker.api.webhookgen"
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} is stale: python -m gpustack_worker.api.webhookgen"
        )
    assert webhookgen.check(CHART) == []


@pytest.mark.parametrize("name", ["webhook-validating.yaml", "webhook-mutating.yaml"])
def test_check_reports_stale_and_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert sorted(webhookgen.check(tmp_path)) == [
        f"missing: {tmp_path / webhookgen.MUTATING_FILE}",
        f"missing: {tmp_path / webhookgen.VALIDATING_FILE}",
    ]
    assert webhookgen.main(["--chart", str(tmp_path)]) == 0
    assert webhookgen.main(["--check", "--chart", str(tmp_path)]) == 0
    path = tmp_path / name
    path.write_text(path.read_text() + "# edited\n")
    assert webhookgen.main(["--check", "--chart", str(tmp_path)]) == 1
    assert f"stale: {path}" in capsys.readouterr().err


def _evaluated(text: str, ca: str) -> dict[str, Any]:
    """The chart template with its template expressions evaluated as the default values do."""
    labels = "".join(f"\n    {k}: {v}" for k, v in rbacgen.MANIFEST_LABELS.items())
    text = text.replace(f" {rbacgen.CHART_LABELS}", labels)
    text = text.replace(rbacgen.CHART_NAMESPACE, kinds.SYSTEM_NAMESPACE)
    text = text.replace(webhookgen.CHART_ANNOTATIONS, "")
    text = text.replace(webhookgen.CHART_CA_LINE, f"    caBundle: {ca}\n")
    text = text.replace(webhookgen.CHART_SERVICE, webhooks.SERVICE_NAME)
    assert "{{" not in text
    (doc,) = [d for d in yaml.safe_load_all(text) if d]
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize(
    ("name", "configuration"),
    [
        ("webhook-validating.yaml", webhooks.validating_configuration),
        ("webhook-mutating.yaml", webhooks.mutating_configuration),
    ],
)
def test_chart_template_is_the_service_form_of_the_configuration(name: str, configuration: Any) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    chart = _evaluated((CHART / name).read_text(), ca)
    expected = configuration(
        webhooks.service_client_config(kinds.SYSTEM_NAMESPACE, ca), labels=rbacgen.MANIFEST_LABELS
    )
    assert chart == expected


def _served_versions() -> list[str]:
    crd = yaml.safe_load(CRD.read_text())
    return [v["name"] for v in crd["spec"]["versions"] if v.get("served")]


def test_the_topologysource_webhook_follows_the_reference() -> None:
    config = webhooks.validating_configuration(webhooks.url_client_config("https://127.0.0.1:1/", b"PEM"))
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "ValidatingWebhookConfiguration"
    assert config["metadata"] == {"name": "gpustack-worker-validating"}
    (hook,) = config["webhooks"]
    assert hook["name"] == "topologysources.worker.gpustack.ai"
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 10
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["rules"] == [
        {
            "apiGroups": ["worker.gpustack.ai"],
            "apiVersions": _served_versions(),
            "operations": ["CREATE", "UPDATE"],
            "resources": ["topologysources"],
            "scope": "Cluster",
        }
    ]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:1/validate-worker-gpustack-ai-v1alpha1-topologysource",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }


def test_the_workload_fit_pin_webhook_follows_the_reference() -> None:
    """Reference §5.3: workloads v1beta2, CREATE+UPDATE, Ignore, 10 s, the entrance matchCondition, a
    configuration named with the ``gpustack-worker`` prefix that sorts before Kueue's."""
    config = webhooks.mutating_configuration(webhooks.url_client_config("https://127.0.0.1:1", b"PEM"))
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"] == {"name": "gpustack-worker-workload-fit"}
    assert config["metadata"]["name"] < "kueue-mutating-webhook-configuration"
    (hook,) = config["webhooks"]
    assert hook == {
        "name": "workload-fit.worker.gpustack.ai",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "url": "https://127.0.0.1:1/mutate-kueue-x-k8s-io-v1beta2-workload-fit",
            "caBundle": base64.b64encode(b"PEM").decode(),
        },
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "matchConditions": [
            {
                "name": "gpustack-entrance-queue",
                "expression": "has(object.spec.queueName) && "
                "object.spec.queueName.startsWith('gpustack-fnv64-')",
            }
        ],
        "reinvocationPolicy": "Never",
        "rules": [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "apiVersions": ["v1beta2"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["workloads"],
                "scope": "Namespaced",
            }
        ],
        "sideEffects": "None",
        "timeoutSeconds": 10,
    }


def test_the_validating_configuration_has_no_mutating_fields() -> None:
    config = webhooks.validating_configuration(webhooks.url_client_config("https://127.0.0.1:1", b"PEM"))
    for hook in config["webhooks"]:
        assert "reinvocationPolicy" not in hook
        assert "matchConditions" not in hook


def _docs(name: str) -> list[dict[str, Any]]:
    """A hand-written template's YAML with each ``{{ ... }}`` replaced by a placeholder scalar."""
    text = (CHART / name).read_text()
    text = re.sub(r"\{\{-? *include \"gpustack-worker\.(labels|selector)\" \. \| nindent \d+ *\}\}", "", text)
    text = re.sub(r"^[ \t]*\{\{-?[^}]*\}\}[ \t]*\n", "", text, flags=re.MULTILINE)
    text = re.sub(r"\{\{[^}]*\}\}", "TEMPLATED", text)
    return [d for d in yaml.safe_load_all(text) if d]


def test_service_fronts_the_controller_webhook_port() -> None:
    (svc,) = _docs("webhook-service.yaml")
    assert svc["kind"] == "Service"
    # named <fullname>-webhook: SERVICE_NAME for the default full name (tests/chart renders it)
    template = (CHART / "webhook-service.yaml").read_text()
    assert 'name: {{ include "gpustack-worker.webhookServiceName" . }}' in template
    helpers = (CHART / "_helpers.tpl").read_text()
    assert f'printf "%s{webhooks.SERVICE_NAME.removeprefix(rbac.NAME_PREFIX)}"' in helpers
    assert svc["spec"]["selector"] == {"app.kubernetes.io/component": "controller"}
    assert svc["spec"]["ports"] == [
        {
            "name": webhooks.PORT_NAME,
            "port": webhooks.SERVICE_PORT,
            "targetPort": webhooks.PORT_NAME,
            "protocol": "TCP",
        }
    ]


def test_certificate_secret_is_mounted_where_the_controller_reads_it() -> None:
    (secret,) = _docs("webhook-certs.yaml")
    assert secret["kind"] == "Secret"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    helpers = (CHART / "_helpers.tpl").read_text()
    # <fullname>-webhook-certs: CERT_SECRET for the default full name (tests/chart renders it)
    assert f'printf "%s{webhooks.CERT_SECRET.removeprefix(rbac.NAME_PREFIX)}"' in helpers
    helper = (CHART / "_webhook.tpl").read_text()
    assert 'lookup "v1" "Secret" $ns (include "gpustack-worker.webhookSecretName" .)' in helper  # kept
    assert '$svc := include "gpustack-worker.webhookServiceName" .' in helper  # the certificate's names
    assert "genCA" in helper
    assert "genSignedCert" in helper

    (deploy,) = _docs("controller-deployment.yaml")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "webhook-certs", "secret": {"secretName": "TEMPLATED"}} in pod["volumes"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "webhook-certs"]
    assert mount["readOnly"] is True
    assert f"--webhook-cert-dir={mount['mountPath']}" in container["args"]
    assert mount["mountPath"] == webhook_serving.DEFAULT_CERT_DIR
    assert "--webhook-bind=:TEMPLATED" in container["args"]
    assert {"name": webhooks.PORT_NAME, "containerPort": "TEMPLATED"} in container["ports"]
    values = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    assert values["webhook"]["port"] == webhooks.CONTAINER_PORT


def test_controller_flags_default_to_the_chart_layout() -> None:
    args = main.build_parser().parse_args(["controller"])
    assert args.webhook_bind == webhook_serving.DEFAULT_BIND == f":{webhooks.CONTAINER_PORT}"
    assert args.webhook_cert_dir == webhook_serving.DEFAULT_CERT_DIR
    assert main.build_parser().parse_args(["controller", "--webhook-bind="]).webhook_bind == ""
