"""Our webhook configuration has one source: the chart's generated template is fresh, and the chart's
Service, Secret and Deployment agree with api/webhooks.py and the controller's flags."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpustack_worker.api import kinds, rbacgen, webhookgen, webhooks
from gpustack_worker.cli import main, webhook_serving

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "chart" / "templates"
CRD = ROOT / "manifests" / "crds" / "worker.gpustack.ai_topologysources.yaml"


def test_committed_template_is_fresh(tmp_path: Path) -> None:
    (written,) = webhookgen.write(tmp_path)
    committed = CHART / written.name
    assert committed.exists(), f"{committed} missing: python -m gpustack_worker.api.webhookgen"
    assert written.read_bytes() == committed.read_bytes(), (
        f"{committed} is stale: python -m gpustack_worker.api.webhookgen"
    )
    assert webhookgen.check(CHART) == []


def test_check_reports_stale_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert webhookgen.check(tmp_path) == [f"missing: {tmp_path / webhookgen.VALIDATING_FILE}"]
    assert webhookgen.main(["--chart", str(tmp_path)]) == 0
    assert webhookgen.main(["--check", "--chart", str(tmp_path)]) == 0
    path = tmp_path / webhookgen.VALIDATING_FILE
    path.write_text(path.read_text() + "# edited\n")
    assert webhookgen.main(["--check", "--chart", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().err


def _evaluated(text: str, ca: str) -> dict[str, Any]:
    """The chart template with its template expressions evaluated as the default values do."""
    labels = "".join(f"\n    {k}: {v}" for k, v in rbacgen.MANIFEST_LABELS.items())
    text = text.replace(f" {rbacgen.CHART_LABELS}", labels)
    text = text.replace(rbacgen.CHART_NAMESPACE, kinds.SYSTEM_NAMESPACE)
    text = text.replace(webhookgen.CHART_CA_BUNDLE, ca)
    assert "{{" not in text
    (doc,) = [d for d in yaml.safe_load_all(text) if d]
    assert isinstance(doc, dict)
    return doc


def test_chart_template_is_the_service_form_of_the_configuration() -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    chart = _evaluated((CHART / webhookgen.VALIDATING_FILE).read_text(), ca)
    expected = webhooks.validating_configuration(
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
    assert svc["metadata"]["name"] == webhooks.SERVICE_NAME
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
    assert secret["metadata"]["name"] == webhooks.CERT_SECRET
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    helper = (CHART / "_webhook.tpl").read_text()
    assert f'"{webhooks.CERT_SECRET}"' in helper  # the lookup that keeps it across upgrades
    assert f'$svc := "{webhooks.SERVICE_NAME}"' in helper  # the serving certificate's names
    assert "genCA" in helper
    assert "genSignedCert" in helper

    (deploy,) = _docs("controller-deployment.yaml")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "webhook-certs", "secret": {"secretName": webhooks.CERT_SECRET}} in pod["volumes"]
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
