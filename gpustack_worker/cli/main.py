"""``gpustack-worker``: one entry point for the agent, the controller, the simulator and the dev cluster."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

SYSTEM_NAMESPACE = os.environ.get("KUBERNETES_POD_NAMESPACE", "gpustack-system")
SETTINGS_CONFIGMAP = "gpustack-settings"


def _common_api_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG, else in-cluster)"
    )
    p.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)")
    p.add_argument(
        "--settings-configmap",
        default=SETTINGS_CONFIGMAP,
        help="settings ConfigMap name (default: %(default)s)",
    )
    p.add_argument(
        "--metrics-bind", default="127.0.0.1:8080", help="health/metrics address (default: %(default)s)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpustack-worker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("devcluster", help="a local control plane (etcd, kube-apiserver, Kueue, nfd-master)")
    dev_sub = dev.add_subparsers(dest="action", required=True)
    for action, text in (
        ("up", "build if needed, start in the background, wait until ready"),
        ("down", "stop it"),
    ):
        p = dev_sub.add_parser(action, help=text)
        p.add_argument(
            "--dir", required=True, help="state directory (kubeconfig is written to DIR/kubeconfig)"
        )
        if action == "up":
            p.add_argument(
                "--audit-log",
                default=None,
                metavar="FILE",
                help="keep a kube-apiserver audit log of every write in FILE (JSON lines)",
            )
            p.add_argument(
                "--jaeger",
                action="store_true",
                help="also start Jaeger (built on first use) and print its UI/API and OTLP addresses",
            )

    sim = sub.add_parser("simulate", help="simulate what stages 1-2 (NFD, Device Manager) would publish")
    sim_sub = sim.add_subparsers(dest="action", required=True)
    apply = sim_sub.add_parser(
        "apply", help="create/update the Nodes, NodeFeatures and Devices of a scenario"
    )
    apply.add_argument("file", help="scenario YAML file")
    apply.add_argument("--kubeconfig", default=None)

    ctl = sub.add_parser("controller", help="the leader-elected cluster-wide controller")
    _common_api_flags(ctl)
    ctl.add_argument("--identity", default=None, help="leader-election identity (default: hostname_pid)")
    ctl.add_argument(
        "--webhook-bind",
        default=":9443",
        help="admission webhook HTTPS address (default: %(default)s; empty disables)",
    )
    ctl.add_argument(
        "--webhook-cert-dir",
        default="/etc/gpustack-worker/webhook-certs",
        help="directory with the webhook's tls.crt and tls.key (default: %(default)s)",
    )

    agent = sub.add_parser("agent", help="the per-node stage-3 agent (DaemonSet)")
    _common_api_flags(agent)
    agent.add_argument("--all-nodes", action="store_true", help="serve every node from one process")
    agent.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="node to serve (default: $NODE_NAME)"
    )

    cat = sub.add_parser("catalog", help="the InstanceTypeFlavor catalog, computed from the live flavors")
    cat.add_argument("--kubeconfig", default=None)
    cat.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)")
    cat.add_argument("--settings-configmap", default=SETTINGS_CONFIGMAP)
    cat.add_argument("-o", "--output", choices=("text", "json"), default="text")

    from gpustack_worker.cli import plan_cmd

    plan_cmd.add_parser(sub)

    from gpustack_worker.cli import cleanup_cmd, explain_cmd

    explain_cmd.add_parser(sub)
    cleanup_cmd.add_parser(sub)

    demo = sub.add_parser("demo", help="the whole product on a local control plane (docs/demo.md)")
    demo.add_argument("--dir", default=".devcluster", help="state directory (default: %(default)s)")
    demo.add_argument("--scenario", default=None, help="scenario file (default: the packaged demo)")
    demo.add_argument("--keep", action="store_true", help="keep running until Ctrl-C")
    return parser


#: The commands that read the settings (the demo starts processes that do).
_READS_SETTINGS = ("agent", "controller", "demo")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in _READS_SETTINGS:
        from gpustack_worker.cli.settings import environment_problem

        # A malformed GPUSTACK_* seed is one line naming the variable, the value and the rule; exit 2.
        problem = environment_problem()
        if problem is not None:
            print(f"gpustack-worker {args.command}: {problem}", file=sys.stderr)
            return 2
    if args.command == "devcluster":
        from gpustack_worker.cli import devcluster_cmd

        return devcluster_cmd.up(args) if args.action == "up" else devcluster_cmd.down(args)
    if args.command == "simulate":
        from gpustack_worker.cli import simulate_cmd

        return asyncio.run(simulate_cmd.run(args))
    if args.command == "controller":
        from gpustack_worker.cli import controller_cmd

        return asyncio.run(controller_cmd.run(args))
    if args.command == "agent":
        if not args.all_nodes and not args.node_name:
            print("agent: --node-name or $NODE_NAME is required unless --all-nodes", file=sys.stderr)
            return 2
        from gpustack_worker.cli import agent_cmd

        return asyncio.run(agent_cmd.run(args))
    if args.command == "plan":
        from gpustack_worker.cli import plan_cmd

        return plan_cmd.run(args)
    if args.command == "explain":
        from gpustack_worker.cli import explain_cmd

        return asyncio.run(explain_cmd.run(args))
    if args.command == "cleanup":
        from gpustack_worker.cli import cleanup_cmd

        return asyncio.run(cleanup_cmd.run(args))
    if args.command == "catalog":
        from gpustack_worker.cli import catalog_cmd

        return asyncio.run(catalog_cmd.run(args))
    from gpustack_worker.cli import demo_cmd

    return demo_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
