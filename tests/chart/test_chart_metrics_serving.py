"""The chart's metrics serving, rendered both ways (``helm template``): plain HTTP by default, exactly as
before; with ``metrics.secure.enabled`` the HTTPS port in every container, Service and ServiceMonitor,
the probes still on the plain port, the RBAC the processes need to review a scrape, the
``<fullname>-metrics-reader`` ClusterRole (bound to ``readerSubjects`` when given), a certificate Secret
mounted or a memory-backed ``/tmp`` for the self-signed one; the rendered arguments parse with the real
command line; the schema refuses bad values."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.cli.main import build_parser
from gpustack_worker.devcluster import build

if TYPE_CHECKING:
    from collections.abc import Iterator

CHART = Path(__file__).resolve().parents[2] / "chart"
RELEASE = "gpustack-worker"
Doc = dict[str, Any]

#: What a process needs to review a scrape (controller-runtime's filters.WithAuthenticationAndAuthorization).
REVIEW_RULES: list[Doc] = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]
READER_RULES: list[Doc] = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
SECURE = ["metrics.secure.enabled=true", "metrics.serviceMonitor.enabled=true"]


def helm_in(home: Path) -> tuple[Path, dict[str, str]]:
    """The built helm binary and an environment keeping its config/cache/data under ``home``."""
    binary = build.ensure_optional("helm")
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return binary, env


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield helm_in(tmp_path_factory.mktemp("helm-home"))


def run_helm(helm: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, env = helm
    return subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, check=False, timeout=300
    )


def render(helm: tuple[Path, dict[str, str]], *sets: str) -> list[Doc]:
    args = [a for s in sets for a in ("--set", s)]
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", "gpustack-system", *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0]


def containers(docs: list[Doc]) -> dict[str, Doc]:
    out = {}
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            c = d["spec"]["template"]["spec"]["containers"][0]
            out[c["name"]] = c
    assert set(out) == {"controller", "agent"}
    return out


def pod_specs(docs: list[Doc]) -> dict[str, Doc]:
    return {
        d["spec"]["template"]["spec"]["containers"][0]["name"]: d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
    }


def test_default_is_plain_http_on_the_metrics_port(helm: tuple[Path, dict[str, str]]) -> None:
    docs = render(helm, "metrics.serviceMonitor.enabled=true")
    for c in containers(docs).values():
        assert not [a for a in c["args"] if a.startswith("--metrics-secure-bind")]
        assert [p["name"] for p in c["ports"] if "metrics" in p["name"]] == ["metrics"]
        args = build_parser().parse_args(c["args"])
        assert args.metrics_secure_bind == ""
    service = one(docs, "Service", f"{RELEASE}-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    endpoint = one(docs, "ServiceMonitor", f"{RELEASE}-metrics")["spec"]["endpoints"]
    assert [(e["port"], e["scheme"]) for e in endpoint] == [("metrics", "http")]
    assert not [
        d
        for d in docs
        if "metrics-auth" in d["metadata"]["name"] or "metrics-reader" in d["metadata"]["name"]
    ]


def test_secure_serves_https_with_a_self_signed_certificate_and_keeps_the_probes_plain(
    helm: tuple[Path, dict[str, str]],
) -> None:
    docs = render(helm, *SECURE)
    specs = pod_specs(docs)
    for name, c in containers(docs).items():
        args = build_parser().parse_args(c["args"])
        assert args.metrics_secure_bind == "0.0.0.0:8443"
        assert args.metrics_cert_dir == ""  # self-signed
        assert args.metrics_bind == "0.0.0.0:8080"  # still the probes' port
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["https-metrics"] == 8443
        assert ports["metrics"] == 8080
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        # the root filesystem is read-only: the self-signed pair goes to a memory-backed /tmp
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "metrics-self-signed", "mountPath": "/tmp"} in c["volumeMounts"]
        volumes = {v["name"]: v for v in specs[name]["volumes"]}
        assert volumes["metrics-self-signed"]["emptyDir"]["medium"] == "Memory"
    service = one(docs, "Service", f"{RELEASE}-metrics")
    assert service["spec"]["ports"] == [
        {"name": "https-metrics", "port": 8443, "targetPort": "https-metrics", "protocol": "TCP"}
    ]
    endpoints = one(docs, "ServiceMonitor", f"{RELEASE}-metrics")["spec"]["endpoints"]
    assert endpoints == [
        {
            "port": "https-metrics",
            "path": "/metrics",
            "scheme": "https",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
            "interval": "30s",
            "scrapeTimeout": "10s",
        }
    ]
    assert one(docs, "ClusterRole", f"{RELEASE}-metrics-auth")["rules"] == REVIEW_RULES
    binding = one(docs, "ClusterRoleBinding", f"{RELEASE}-metrics-auth")
    assert binding["roleRef"]["name"] == f"{RELEASE}-metrics-auth"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-{c}", "namespace": "gpustack-system"}
        for c in ("controller", "agent")
    ]
    assert one(docs, "ClusterRole", f"{RELEASE}-metrics-reader")["rules"] == READER_RULES
    assert not [
        d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("-reader")
    ]


def test_secure_with_a_certificate_secret_and_reader_subjects(helm: tuple[Path, dict[str, str]]) -> None:
    docs = render(
        helm,
        *SECURE,
        "metrics.secure.certSecret=metrics-tls",
        "metrics.secure.port=9443",
        "webhook.port=9444",
        "metrics.secure.readerSubjects[0].kind=ServiceAccount",
        "metrics.secure.readerSubjects[0].name=prometheus-k8s",
        "metrics.secure.readerSubjects[0].namespace=monitoring",
        "metrics.secure.readerSubjects[1].kind=Group",
        "metrics.secure.readerSubjects[1].name=sre",
    )
    specs = pod_specs(docs)
    for name, c in containers(docs).items():
        args = build_parser().parse_args(c["args"])
        assert args.metrics_secure_bind == "0.0.0.0:9443"
        assert args.metrics_cert_dir == "/etc/gpustack-worker/metrics-certs"
        mount = {"name": "metrics-certs", "mountPath": "/etc/gpustack-worker/metrics-certs", "readOnly": True}
        assert mount in c["volumeMounts"]
        volumes = {v["name"]: v for v in specs[name]["volumes"]}
        assert volumes["metrics-certs"] == {"name": "metrics-certs", "secret": {"secretName": "metrics-tls"}}
        assert "metrics-self-signed" not in volumes
    reader = one(docs, "ClusterRoleBinding", f"{RELEASE}-metrics-reader")
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": f"{RELEASE}-metrics-reader",
    }
    assert reader["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"},
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "metrics.secure.port=0",
        "metrics.secure.enabled=yes",
        "metrics.secure.certSecret=Not_A_Name",
        "metrics.secure.readerSubjects[0].kind=Pod",
        "metrics.secure.nope=1",
    ],
)
def test_the_schema_refuses_bad_values(helm: tuple[Path, dict[str, str]], bad: str) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", bad)
    assert proc.returncode != 0
    assert "metrics" in proc.stderr


def test_lint_strict_passes_in_both_modes(helm: tuple[Path, dict[str, str]]) -> None:
    for sets in ([], SECURE, [*SECURE, "metrics.secure.certSecret=metrics-tls"]):
        args = [a for s in sets for a in ("--set", s)]
        proc = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
