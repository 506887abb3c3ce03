"""helm against a dev cluster, and the values that install the chart onto its real nodes.

The chart is the repository's ``chart/`` (beside the package in a checkout). On a dev cluster the image is
the one built here (:mod:`.image`) and imported into each real node's containerd, so the values name it
with ``pullPolicy: Never`` (no registry is reachable), and both workloads are pinned to the real nodes
(``nodeSelector`` on :data:`.real_nodes.REAL_NODE_LABEL`): a simulated Node has no kubelet, so a Pod
bound there would never start.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

from gpustack_worker.devcluster import build
from gpustack_worker.devcluster.procs import StartupError
from gpustack_worker.devcluster.real_nodes import REAL_NODE_LABEL

__all__ = ("CHART", "RELEASE", "Helm", "chart_dir", "helm_runner", "real_node_values")

#: ``helm ARGS…`` as a function (:func:`helm_runner`).
Helm = Callable[..., subprocess.CompletedProcess[str]]

#: The release name the docs and the tests install as.
RELEASE: Final = "gpustack-worker"
#: The chart, in a checkout of the repository.
CHART: Final = Path(__file__).resolve().parents[2] / "chart"


def chart_dir() -> Path:
    """The chart's directory; an installed package without its checkout has none."""
    if not (CHART / "Chart.yaml").is_file():
        raise StartupError(f"no chart at {CHART}: run from a checkout of the repository")
    return CHART


def helm_runner(kubeconfig: Path, home: Path, log: Callable[[str], None] = print) -> Helm:
    """``helm ARGS…`` against ``kubeconfig``, with helm's own state (cache, config, data) in ``home``."""
    binary = build.ensure_optional("helm", log)
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, check=False)

    return run


def real_node_values(repository: str, tag: str, *, otel_endpoint: str | None = None) -> list[str]:
    """``--set`` arguments for the image built here and both workloads on the real nodes."""
    pin = json.dumps({REAL_NODE_LABEL: "true"})
    values = [
        "--set", f"image.repository={repository}",
        "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "--set-json", f"agent.nodeSelector={pin}",
        "--set-json", f"controller.nodeSelector={pin}",
    ]  # fmt: skip
    if otel_endpoint:
        values += ["--set", f"otel.endpoint={otel_endpoint}"]
    return values
