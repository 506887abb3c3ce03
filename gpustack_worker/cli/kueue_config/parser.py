"""``kueue-config``'s flags: print, ``--merge`` into a team's configuration (accepting conflicts one by one),
or ``--revert`` a recorded merge. Only names, so the whole command line parses before the merge loads."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import kinds

__all__ = ("add_parser",)


def add_parser(sub: Any) -> None:
    """Add ``kueue-config`` to the top-level subcommands."""
    p = sub.add_parser(
        "kueue-config",
        help="Kueue's configuration for the chain, or merged into an existing one (--merge FILE)",
        description=(
            "Print the Kueue configuration the chain needs; with --merge FILE, lay the keys the chain "
            "needs over an existing Kueue configuration (or the ConfigMap holding it), keeping everything "
            "else: conflicts with the team's values are refused unless accepted one by one (--accept), the "
            "changes are summarised on stderr, the result printed on stdout and what it replaced recorded "
            "(the ConfigMap's annotation, or --record FILE). --revert FILE undoes a recorded merge."
        ),
    )
    p.add_argument("--merge", default=None, metavar="FILE", help="the existing configuration ('-': stdin)")
    p.add_argument(
        "--accept",
        action="append",
        default=[],
        metavar="KIND:NAME",
        help=(
            "accept one conflict, e.g. transformation:nvidia.com/gpu, gate:TopologyAwareScheduling, "
            "integration:pod, setting:resources.quotaCheckStrategy (repeat, or comma-separate)"
        ),
    )
    p.add_argument(
        "--record",
        default=None,
        metavar="FILE",
        help="for a bare Configuration: where the merge records what it replaced (read back by --revert)",
    )
    p.add_argument("--no-record", action="store_true", help="merge a bare Configuration without a record")
    p.add_argument(
        "--revert", default=None, metavar="FILE", help="undo a recorded merge of FILE ('-': stdin); print it"
    )
    p.add_argument(
        "--feature-gates",
        default=None,
        metavar="VALUE",
        help="the value of Kueue's --feature-gates flag, when its Deployment sets one",
    )
    p.add_argument(
        "--namespace",
        default=kinds.SYSTEM_NAMESPACE,
        help="the worker's system namespace (default: %(default)s)",
    )
    p.add_argument(
        "--check", action="store_true", help="print nothing and exit 0 when nothing would change, else exit 1"
    )
