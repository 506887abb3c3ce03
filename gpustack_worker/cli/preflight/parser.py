"""``preflight``'s flags: where Kueue and its configuration are, the settings ConfigMap, and the install
stage to judge. Only names, so the whole command line parses before the checks load."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import kinds
from gpustack_worker.api.kueue_install import CONFIG_KEY, KUEUE_CONFIGMAP, KUEUE_DEPLOYMENT
from gpustack_worker.cli.flags import add_kubeconfig_flags
from gpustack_worker.cli.output import add_output_flag
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP

__all__ = ("add_parser",)


def add_parser(sub: Any) -> None:
    """Add ``preflight`` to the top-level subcommands."""
    p = sub.add_parser(
        "preflight",
        help="check the cluster has what the worker needs (Kubernetes, Kueue, NFD, CRDs, webhook, RBAC)",
        description=(
            "A table of checks, each with its result and how to fix it: the Kubernetes version; Kueue's "
            "APIs and configuration; NFD's NodeFeature API and a running nfd-master; our CRDs at this "
            "build's schema; the Devices API; the webhook reachable from the API server; the "
            "ServiceAccounts' RBAC; the system namespace and the settings ConfigMap; and existing "
            "ClusterQueues and Cohorts whose GPU quota our transformations would stop counting (a failure, "
            "with the credits quota that keeps the limit). Before the chart is installed — no object of "
            "the chart exists, or --before-install — what the chart installs is reported as 'installs "
            "with the chart' and passes; after it (any of its objects exists, or --after-install) it "
            "fails. Exit 0 when nothing fails, 1 otherwise."
        ),
    )
    add_kubeconfig_flags(p)
    p.add_argument(
        "--namespace", default=kinds.SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)"
    )
    p.add_argument(
        "--kueue-config",
        default=None,
        metavar="FILE",
        help="Kueue's configuration file (or a ConfigMap holding it), when Kueue does not read a ConfigMap",
    )
    p.add_argument(
        "--kueue-configmap",
        default=KUEUE_CONFIGMAP,
        metavar="NAMESPACE/NAME",
        help=f"the ConfigMap Kueue reads (key {CONFIG_KEY}; default: %(default)s)",
    )
    p.add_argument(
        "--kueue-deployment",
        default=KUEUE_DEPLOYMENT,
        metavar="NAMESPACE/NAME",
        help="Kueue's Deployment, read for a --feature-gates flag (default: %(default)s)",
    )
    p.add_argument(
        "--settings-configmap",
        default=DEFAULT_CONFIGMAP,
        metavar="NAME",
        help="the settings ConfigMap in the system namespace (the chart's settings.configMapName; "
        "default: %(default)s)",
    )
    stage = p.add_mutually_exclusive_group()
    stage.add_argument(
        "--before-install",
        dest="stage",
        action="store_const",
        const="before-install",
        help="judge the cluster as before the chart's install: what the chart installs passes as "
        "'installs with the chart' (default: automatic, before exactly when none of the chart's objects "
        "exists)",
    )
    stage.add_argument(
        "--after-install",
        dest="stage",
        action="store_const",
        const="after-install",
        help="judge the cluster as after the chart's install: what it should have installed fails",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every item a long row summarises (missing grants, queue quotas); -o json always does",
    )
    add_output_flag(p)
