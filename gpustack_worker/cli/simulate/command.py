"""``gpustack-worker simulate apply FILE``: publish a scenario's stage 1-2 objects to a cluster.

``FILE`` is a scenario path; when no such file exists, the name of a packaged example (``mixed-4``)
is accepted too, so a demo needs no checkout.

Nodes are written ``simulate-apply-concurrency`` at once (environment seed
``GPUSTACK_SIMULATE_APPLY_CONCURRENCY``, default 8; see
:class:`~gpustack_worker.simulate.settings.SimulateSettings`).

Exit codes: ``0`` done; ``2`` the scenario cannot be read or is invalid, or the settings environment
is malformed — every problem is listed (at most 50 lines) and nothing has been written, not even a
connection opened; ``1`` the cluster
could not be reached or refused a write part-way — the failed write is named and every write that
succeeded before it is listed (they stay; a re-run converges). Errors go to stderr, one line each, no
traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_worker.cli.request_timeout import request_timeout_of
from gpustack_worker.runtime.client import TRANSPORT_ERRORS, Client
from gpustack_worker.runtime.settings import SettingsError, settings_from
from gpustack_worker.simulate.apply import ApplyFailed, apply_scenario
from gpustack_worker.simulate.load import load_scenario, packaged_scenario, packaged_scenario_names
from gpustack_worker.simulate.scenario import Scenario, ScenarioError
from gpustack_worker.simulate.settings import SimulateSettings

if TYPE_CHECKING:
    import argparse

__all__ = ("USER_AGENT", "run")

#: Every request of ``simulate`` carries this User-Agent.
USER_AGENT = "gpustack-worker-simulate"


class _Unreadable(Exception):
    """The scenario file cannot be read at all (missing, a directory, no permission)."""


def _load(file: str) -> Scenario:
    path = Path(file)
    if not path.exists() and path.suffix == "" and "/" not in file:
        names = packaged_scenario_names()
        if file not in names:
            raise _Unreadable(f"{file}: no such file, nor a packaged scenario ({', '.join(names)})")
        return packaged_scenario(file)
    try:
        return load_scenario(path)
    except OSError as exc:
        raise _Unreadable(f"{file}: cannot read: {exc.strerror or exc}") from None


def _failed(exc: ApplyFailed, scenario: Scenario) -> None:
    report = exc.report
    print(f"simulate apply: {exc.step} failed: {exc.cause}", file=sys.stderr)
    if report.writes:
        print("written before the failure (left in place; a re-run converges):", file=sys.stderr)
        for line in report.writes:
            print(f"  {line}", file=sys.stderr)
    else:
        print("nothing was written before the failure", file=sys.stderr)
    done = set(report.done_nodes)
    pending = [node.name for node in scenario.nodes if node.name not in done]
    print(f"nodes not (fully) applied: {', '.join(pending)}", file=sys.stderr)


async def run(args: argparse.Namespace) -> int:
    """Load, validate and apply ``args.file`` using ``args.kubeconfig``."""
    try:
        scenario = _load(args.file)
    except (ScenarioError, _Unreadable) as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        settings = settings_from(SimulateSettings, None)
    except SettingsError as exc:
        print(f"simulate apply: invalid settings in the environment: {exc}", file=sys.stderr)
        return 2
    try:
        client = await Client.connect(
            args.kubeconfig,
            context=getattr(args, "context", None),
            timeout_s=request_timeout_of(args),
            user_agent=USER_AGENT,
        )
    except (OSError, ValueError, TypeError, KeyError, *TRANSPORT_ERRORS) as exc:
        # kr8s reports an unusable kubeconfig with whatever its parser raised (TypeError on a file
        # that is not YAML mapping, ValueError without credentials): name the input instead.
        where = args.kubeconfig or "$KUBECONFIG / in-cluster config"
        print(f"simulate apply: cannot connect using {where}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        report = await apply_scenario(client, scenario, concurrency=settings.simulate_apply_concurrency)
    except ApplyFailed as exc:
        _failed(exc, scenario)
        return 1
    finally:
        await client.close()
    print(
        f"simulated {len(scenario.nodes)} nodes: created {len(report.created)}, "
        f"applied {len(report.applied)}, deleted {len(report.deleted)}"
    )
    for key in report.created:
        print(f"  created {key}")
    for key in report.deleted:
        print(f"  deleted {key}")
    return 0
