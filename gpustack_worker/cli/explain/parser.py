"""``explain``'s flags: what to explain (a node, a Workload or a ModelDeployment), its name, and the
roles to show. Only names, so the whole command line parses before the explainer loads."""

from __future__ import annotations

from typing import Any, Final

from gpustack_worker.cli.flags import add_kubeconfig_flags
from gpustack_worker.cli.output import add_output_flag

__all__ = ("KINDS", "add_parser")

#: What ``explain`` explains (``md`` and ``wl`` are accepted as short forms).
KINDS: Final = ("node", "workload", "modeldeployment")


def add_parser(sub: Any) -> None:
    """Add ``explain`` to the top-level subcommands."""
    p = sub.add_parser(
        "explain",
        help="why a Node feeds what it feeds, and why a Workload or ModelDeployment waits",
        description=(
            "node NAME: its labels and capacities and who wrote each, the flavor(s) it feeds, their queue, "
            "InstanceType and LocalQueues. workload [NS/]NAME, modeldeployment [NS/]NAME [--role ROLE]: the "
            "queue, flavor, topology request and assignment, every admission check's state and message, "
            "and Kueue's own message verbatim."
        ),
    )
    p.add_argument("kind", choices=(*KINDS, "md", "wl"), help="what to explain")
    p.add_argument("name", help="NAME for a node; NAME (in --namespace) or NS/NAME otherwise")
    p.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="the namespace of a workload or modeldeployment NAME (default: the kubeconfig context's "
        "namespace, else default); ignored for a node, as kubectl ignores it for cluster-scoped objects",
    )
    p.add_argument("--role", action="append", default=[], help="modeldeployment: only this role (repeatable)")
    add_kubeconfig_flags(p)
    add_output_flag(p)
