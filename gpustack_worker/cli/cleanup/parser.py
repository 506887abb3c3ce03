"""``cleanup``'s flags: a dry run, force past the Lease, the wait of each step, and whether to revert
``kueue-config --merge`` too. Only names, so the whole command line parses before the cleanup loads."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api.kueue_install import KUEUE_CONFIGMAP
from gpustack_worker.cli.flags import SYSTEM_NAMESPACE, add_kubeconfig_flags
from gpustack_worker.cli.output import add_output_flag

__all__ = ("add_parser",)


def add_parser(sub: Any) -> None:
    """Add ``cleanup`` to the top-level subcommands."""
    p = sub.add_parser(
        "cleanup",
        help="uninstall: remove everything the operator owns (found by owner labels and field managers)",
        description=(
            "Drain the queues with reservations, then delete ClusterQueues, ResourceFlavors, Topologies, "
            "AdmissionChecks, LocalQueues and NodeFeatures the operator owns, release its labels and "
            "counting keys on Nodes, delete the InstanceTypes it authored and release its finalizers. "
            "Refuses while the controller holds its Lease."
        ),
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be done; write nothing")
    p.add_argument("--force", action="store_true", help="run even though the controller holds its Lease")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds each step may wait for the API server / Kueue (default: %(default)s)",
    )
    add_kubeconfig_flags(p)
    p.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)")
    p.add_argument(
        "--kueue-config",
        action="store_true",
        help="also revert what kueue-config --merge changed in Kueue's ConfigMap (its record annotation)",
    )
    p.add_argument(
        "--kueue-configmap",
        default=KUEUE_CONFIGMAP,
        metavar="NAMESPACE/NAME",
        help="Kueue's configuration ConfigMap (default: %(default)s)",
    )
    add_output_flag(p)
