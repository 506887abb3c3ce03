"""``gpustack-worker simulate apply FILE``: publish a scenario's stage 1-2 objects to a cluster.

``FILE`` is a scenario path; when no such file exists, the name of a packaged example (``mixed-4``)
is accepted too, so a demo needs no checkout. Exit codes: 0 done, 2 invalid scenario, 1 API error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_worker.runtime.client import ApiError, Client
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import load_scenario, packaged_scenario
from gpustack_worker.simulate.scenario import Scenario, ScenarioError

if TYPE_CHECKING:
    import argparse

__all__ = ("run",)


def _load(file: str) -> Scenario:
    path = Path(file)
    if not path.exists() and path.suffix == "" and "/" not in file:
        return packaged_scenario(file)
    return load_scenario(path)


async def run(args: argparse.Namespace) -> int:
    """Load, validate and apply ``args.file`` using ``args.kubeconfig``."""
    try:
        scenario = _load(args.file)
    except (ScenarioError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    client = await Client.connect(args.kubeconfig)
    try:
        report = await apply_scenario(client, scenario)
    except ApiError as exc:
        print(f"simulate apply: {exc}", file=sys.stderr)
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
