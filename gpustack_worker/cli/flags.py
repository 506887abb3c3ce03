"""The flags every command that talks to an API server shares, and the defaults they point at.

Kept apart from the entry point (:mod:`.main`) so that a command's own module can add them without
importing the module that imports every command.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import argparse

__all__ = ("SETTINGS_CONFIGMAP", "SYSTEM_NAMESPACE", "add_kubeconfig_flags")

#: The namespace our objects live in: the Pod's own in a cluster (the downward API sets the variable),
#: else the chart's default.
SYSTEM_NAMESPACE: Final = os.environ.get("KUBERNETES_POD_NAMESPACE", "gpustack-system")
#: The settings ConfigMap's name (docs/settings.md).
SETTINGS_CONFIGMAP: Final = "gpustack-settings"


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
