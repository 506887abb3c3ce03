"""The pinned component versions of the local control plane, in one place.

Why these (full reasoning in docs/devcluster.md):
- Kubernetes 1.35.4: the newest 1.35 patch the Go module proxy serves; kr8s 0.20.15 supports up to 1.35 and
  warns on 1.36+ (a warning is a test failure here), and Kueue/NFD both run against 1.35.
- etcd 3.6.16: the newest 3.6 patch; Kubernetes 1.34+ ships the etcd 3.6 client.
- Kueue 0.19.2: the newest release the proxy serves (0.19.3/0.20.0 are refused); serves v1beta2 as storage.
- NFD 0.19.0: the newest tag; the release GPUStack's chart deploys.
- Jaeger 1.75.0 (optional, tracing only): the newest release approved here; its ``cmd/jaeger`` is the v2
  all-in-one binary (an OpenTelemetry Collector distribution configured by YAML).
"""

from __future__ import annotations

from typing import Final

KUBERNETES: Final = "v1.35.4"
#: The staging modules (k8s.io/api, client-go, …) that match ``KUBERNETES``.
KUBERNETES_STAGING: Final = "v0.35.4"
ETCD: Final = "v3.6.16"
KUEUE: Final = "v0.19.2"
NFD: Final = "v0.19.0"
#: NFD v0.19.0's own go.mod replaces the staging modules with this release.
NFD_STAGING: Final = "v0.35.3"
#: Optional: built only when tracing is asked for (``devcluster up --jaeger``, the demo, the trace test).
JAEGER: Final = "v1.75.0"
#: Optional: built only when the chart tests need it (tests/chart: `helm template`, `helm lint`); its
#: go.mod asks for go 1.26.0 and brings client-go v0.37.2.
HELM: Final = "v4.3.2"
#: Optional: promtool (``check rules``, ``test rules``) for the chart's alert tests (tests/chart/
#: test_alert_rules.py). Prometheus's Go module numbers release 3.7.1 as v0.307.1 (v3 tags are not Go-module
#: compatible); this one was already in the module cache (jaeger's graph), so a cold build downloads least.
PROMETHEUS: Final = "v0.307.1"
#: The release ``PROMETHEUS`` is (what ``promtool --version`` reports).
PROMETHEUS_RELEASE: Final = "3.7.1"

#: Every staging module of k8s.io/kubernetes 1.32–1.35: the same 31 in each of those releases (1.36 adds
#: ``cri-streaming`` and ``streaming``; the long-gone ``legacy-cloud-providers`` is left out). A replace
#: line for a module outside the build graph is ignored, so listing all of them is safe.
STAGING_MODULES: Final = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)
