"""``plan``'s flags: a scenario (or ``--from-cluster``), the settings to plan under, a TopologySource to
preview, and the output format. Only names, so the whole command line parses before the planner loads."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import kinds
from gpustack_worker.cli.flags import add_kubeconfig_flags
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP

__all__ = ("add_parser",)


def add_parser(sub: Any) -> None:
    """Add ``plan`` to the top-level subcommands."""
    plan = sub.add_parser(
        "plan",
        help="the chain a scenario yields under given settings with no cluster, or (--from-cluster) what "
        "the controllers would create, change and delete on a live cluster, read-only",
    )
    plan.add_argument(
        "scenario", nargs="?", default=None, help="scenario file, or a packaged scenario's name (mixed-4)"
    )
    plan.add_argument(
        "--from-cluster",
        action="store_true",
        help="plan against the live cluster (only reads: list/get)",
    )
    add_kubeconfig_flags(plan)  # --from-cluster only
    plan.add_argument(
        "--namespace",
        default=kinds.SYSTEM_NAMESPACE,
        help="--from-cluster: the worker's system namespace (default: %(default)s)",
    )
    plan.add_argument(
        "--settings-configmap",
        default=DEFAULT_CONFIGMAP,
        help="--from-cluster: the settings ConfigMap (default: %(default)s)",
    )
    plan.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a setting (a settings ConfigMap key)"
    )
    plan.add_argument(
        "--topology-source",
        default=None,
        metavar="FILE",
        help="a TopologySource (YAML); with --from-cluster: preview applying it (new, or a change of the "
        "live source of that name) to the live pools",
    )
    plan.add_argument(
        "--snapshot",
        default=None,
        metavar="FILE",
        help="the snapshot that source serves (--from-cluster, configMap arm: default the live ConfigMap's)",
    )
    plan.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), default="text", help="the output format"
    )
