"""``gpustack-worker``: one entry point for the agent, the controller, the simulator and the dev cluster.

It behaves as kubectl's neighbours do: ``--version``; ``--kubeconfig`` and ``--context`` chosen as kubectl
chooses them; ``-o text|json|yaml`` wherever objects are printed (:mod:`.output`); a failure is one line on
stderr, ``gpustack-worker: error: <server>: <cause>``, and exit code 1 (:mod:`.errors`; ``--debug`` or
``GPUSTACK_DEBUG=1`` re-raises it with its traceback); output cut short by a closed pipe
(``gpustack-worker catalog | head -1``) ends the command quietly with 141 (128 + SIGPIPE, what a shell
reports for kubectl there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from gpustack_worker.cli.flags import SYSTEM_NAMESPACE, add_kubeconfig_flags, add_process_flags
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: The environment form of ``--debug``: a traceback instead of the one-line error.
DEBUG_ENV = "GPUSTACK_DEBUG"
#: The exit code of a command whose output pipe was closed (128 + SIGPIPE, as a shell reports kubectl's).
BROKEN_PIPE_EXIT = 141


def build_parser() -> argparse.ArgumentParser:
    from gpustack_worker.cli.output import add_output_flag
    from gpustack_worker.runtime.version import VERSION

    parser = argparse.ArgumentParser(
        prog="gpustack-worker",
        description=__doc__.split("\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpustack-worker {VERSION}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"on failure, the traceback instead of the one-line error (also: {DEBUG_ENV}=1)",
    )
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
            p.add_argument(
                "--kubelets",
                type=int,
                default=0,
                metavar="N",
                help="also run N real nodes (kubelet on containerd + runc, a CNI bridge; built and fetched "
                "on first use), kube-controller-manager and kube-proxy, beside the simulated Nodes",
            )
            p.add_argument(
                "--real-node-names",
                default="",
                metavar="A,B",
                help="the names the first kubelets register as (default devcluster-node-<i>): a scenario "
                "naming them makes `simulate apply` dress them as its machines, ledger included",
            )
            p.add_argument(
                "--bare",
                action="store_true",
                help="none of the chart's objects (our ServiceAccounts and RBAC are otherwise installed so "
                "the processes can run as them): helm install ./chart works on it as on a team's cluster",
            )

    sim = sub.add_parser("simulate", help="simulate what stages 1-2 (NFD, Device Manager) would publish")
    sim_sub = sim.add_subparsers(dest="action", required=True)
    apply = sim_sub.add_parser(
        "apply", help="create/update the Nodes, NodeFeatures and Devices of a scenario"
    )
    apply.add_argument("file", help="scenario YAML file")
    add_kubeconfig_flags(apply)

    ctl = sub.add_parser("controller", help="the leader-elected cluster-wide controller")
    add_process_flags(ctl)
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
    add_process_flags(agent)
    agent.add_argument("--all-nodes", action="store_true", help="serve every node from one process")
    agent.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="node to serve (default: $NODE_NAME)"
    )

    cat = sub.add_parser("catalog", help="the InstanceTypeFlavor catalog, computed from the live flavors")
    add_kubeconfig_flags(cat)
    cat.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="system namespace (default: %(default)s)")
    cat.add_argument(
        "--settings-configmap",
        default=DEFAULT_CONFIGMAP,
        help="settings ConfigMap (in --namespace) whose instance-type-aware-cpu-manufacturer groups the "
        "catalog (default: %(default)s)",
    )
    add_output_flag(cat)

    from gpustack_worker.cli.cleanup import parser as cleanup_parser
    from gpustack_worker.cli.explain import parser as explain_parser
    from gpustack_worker.cli.kueue_config import parser as kueue_config_parser
    from gpustack_worker.cli.plan import parser as plan_parser
    from gpustack_worker.cli.preflight import parser as preflight_parser

    plan_parser.add_parser(sub)
    explain_parser.add_parser(sub)
    cleanup_parser.add_parser(sub)
    preflight_parser.add_parser(sub)
    kueue_config_parser.add_parser(sub)

    demo = sub.add_parser("demo", help="the whole product on a local control plane (docs/demo.md)")
    demo.add_argument("--dir", default=".devcluster", help="state directory (default: %(default)s)")
    demo.add_argument("--scenario", default=None, help="scenario file (default: the packaged demo)")
    demo.add_argument("--keep", action="store_true", help="keep running until Ctrl-C")
    demo.add_argument(
        "--kubelet",
        action="store_true",
        help="install the product with helm onto a real node (a kubelet on containerd, as root) "
        "instead of running it as local processes",
    )
    return parser


#: The commands that read the settings (the demo starts processes that do).
_READS_SETTINGS = ("agent", "controller", "demo")


def debugging(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> bool:
    """``--debug``, or ``GPUSTACK_DEBUG`` set to 1/true/yes/on."""
    value = (os.environ if env is None else env).get(DEBUG_ENV, "")
    return bool(getattr(args, "debug", False)) or value.strip().lower() in ("1", "true", "yes", "on")


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is left does not fail again on
    the closed pipe (the recipe of Python's ``signal`` documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # no real stdout (a test's capture): nothing is flushed to a pipe at exit
    finally:
        os.close(devnull)


#: The commands that configure logging themselves (the two processes, from their boot settings).
_CONFIGURES_LOGGING = frozenset({"controller", "agent"})


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command, and turn every failure into one line on stderr and exit code 1
    (:func:`gpustack_worker.cli.errors.error_line`); a closed output pipe exits quietly."""
    args = build_parser().parse_args(argv)
    if args.command not in _CONFIGURES_LOGGING:
        from gpustack_worker.runtime.telemetry import configure_logging

        # A command's standard output is its result (``-o json`` is parsed): the library's log lines
        # (a proxy in use, a stock connection pool) go to stderr, and only warnings unless --debug.
        configure_logging("DEBUG" if debugging(args) else "WARNING")
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from gpustack_worker.cli.errors import error_line, root_cause

        if isinstance(root_cause(exc), BrokenPipeError):
            _quiet_stdout()
            return BROKEN_PIPE_EXIT
        if debugging(args):
            raise
        print(error_line(exc), file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command in _READS_SETTINGS:
        from gpustack_worker.cli.settings import environment_problem

        # A malformed GPUSTACK_* seed is one line naming the variable, the value and the rule; exit 2.
        problem = environment_problem()
        if problem is not None:
            print(f"gpustack-worker {args.command}: {problem}", file=sys.stderr)
            return 2
    if args.command == "devcluster":
        from gpustack_worker.cli.devcluster import command as devcluster_cmd

        return devcluster_cmd.up(args) if args.action == "up" else devcluster_cmd.down(args)
    if args.command == "simulate":
        from gpustack_worker.cli.simulate import command as simulate_cmd

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
        from gpustack_worker.cli.plan import command as plan_cmd

        return plan_cmd.run(args)
    if args.command == "explain":
        from gpustack_worker.cli.explain import command as explain_cmd

        return asyncio.run(explain_cmd.run(args))
    if args.command == "cleanup":
        from gpustack_worker.cli.cleanup import command as cleanup_cmd

        return asyncio.run(cleanup_cmd.run(args))
    if args.command == "preflight":
        from gpustack_worker.cli.preflight import command as preflight_cmd

        return asyncio.run(preflight_cmd.run(args))
    if args.command == "kueue-config":
        from gpustack_worker.cli.kueue_config import command as kueue_config_cmd

        return kueue_config_cmd.run(args)
    if args.command == "catalog":
        from gpustack_worker.cli.catalog import command as catalog_cmd

        return asyncio.run(catalog_cmd.run(args))
    from gpustack_worker.cli.demo import command as demo_cmd

    return demo_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
