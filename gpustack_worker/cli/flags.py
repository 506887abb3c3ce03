"""The flags every command that talks to an API server shares, the flags of the two processes, and the
defaults they point at.

Kept apart from the entry point (:mod:`.main`) so that a command's own parser can add them without
importing the module that imports every command, and importing nothing heavy: the whole command line is
built and parsed before any command's code loads (:mod:`gpustack_worker.runtime.defaults`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP

if TYPE_CHECKING:
    import argparse

__all__ = ("SYSTEM_NAMESPACE", "add_kubeconfig_flags", "add_process_flags")

#: The namespace our objects live in: the Pod's own in a cluster (the downward API sets the variable),
#: else the chart's default.
SYSTEM_NAMESPACE: Final = os.environ.get("KUBERNETES_POD_NAMESPACE", "gpustack-system")


def add_kubeconfig_flags(p: argparse.ArgumentParser) -> None:
    """``--kubeconfig``, ``--context`` and ``--request-timeout`` (:mod:`.request_timeout`), for every command
    that talks to an API server (:meth:`gpustack_worker.runtime.client.Client.connect` resolves them)."""
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, a ':'-separated list merged as kubectl merges it, "
        "else ~/.kube/config, else the in-cluster service account)",
    )
    p.add_argument(
        "--context", default=None, help="the kubeconfig context to use (default: its current-context)"
    )
    from gpustack_worker.cli.request_timeout import add_request_timeout_flag

    add_request_timeout_flag(p)


def add_process_flags(p: argparse.ArgumentParser) -> None:
    """The flags ``controller`` and ``agent`` share: the API server, the system namespace, the settings
    ConfigMap, and where health and metrics are served (:mod:`.metrics_serving` serves the secure port)."""
    add_kubeconfig_flags(p)
    p.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)")
    p.add_argument(
        "--settings-configmap",
        default=DEFAULT_CONFIGMAP,
        help="settings ConfigMap name (default: %(default)s)",
    )
    p.add_argument(
        "--metrics-bind", default="127.0.0.1:8080", help="health/metrics address (default: %(default)s)"
    )
    p.add_argument(
        "--metrics-secure-bind",
        default="",
        metavar="ADDR",
        help="serve /metrics over HTTPS here instead (e.g. :8443), each scrape authenticated (TokenReview)"
        " and authorised (SubjectAccessReview: get /metrics); --metrics-bind keeps /healthz and /readyz"
        " (default: off, /metrics in plain HTTP on --metrics-bind)",
    )
    p.add_argument(
        "--metrics-cert-dir",
        default="",
        metavar="DIR",
        help="tls.crt and tls.key for --metrics-secure-bind (default: a self-signed certificate made at"
        " start)",
    )
