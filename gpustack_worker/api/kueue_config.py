"""The Kueue manager configuration the chain relies on, generated from the manufacturer table.

One place, read by the local control plane and rendered into the chart (reference §1.3, §5.7):

- ``resources.transformations``: per manufacturer, ``<base>`` → ``credits.gpustack.ai/<mfr>`` ×1,600,000
  (a whole card), ``<base>.shared`` → ×160,000 (one ownership share), ``<base>.sliced.units`` → ×1
  multiplied by ``<base>.sliced``, and ``<base>.partitioned.units`` → ×1 for manufacturers with a
  partition kind; ``strategy: Replace`` on all, so Kueue charges only credits;
- ``resources.quotaCheckStrategy: IgnoreUndeclared``, so a queue covering only ``cpu`` or only
  ``credits`` does not reject Workloads for resources it does not declare — which is also why a queue
  without resource groups admits everything and the chain never leaves one unheld;
- the feature gates GPUStack's chart sets (TAS, balanced placement, preferred node affinity, quota check
  strategy, no queue labels on Pods).
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_worker.api import keys
from gpustack_worker.api.manufacturers import MANUFACTURERS

__all__ = ("FEATURE_GATES", "kueue_resources", "transformations")

FEATURE_GATES: Final[dict[str, bool]] = {
    "TopologyAwareScheduling": True,
    "TASBalancedPlacement": True,
    "TASRespectNodeAffinityPreferred": True,
    "QuotaCheckStrategy": True,
    # ClusterQueue names can be longer than a label value allows.
    "AssignQueueLabelsForPods": False,
}


def transformations() -> list[dict[str, Any]]:
    """``resources.transformations`` for every manufacturer, sorted by input resource."""
    out: list[dict[str, Any]] = []
    for mfr in sorted(MANUFACTURERS.values(), key=lambda m: m.name):
        credits = keys.credits_resource(mfr.name)
        base = mfr.resource
        out.append(
            {"input": base, "strategy": "Replace", "outputs": {credits: str(keys.UNITS_PER_ACCELERATOR)}}
        )
        out.append(
            {
                "input": f"{base}{keys.SHARED_SUFFIX}",
                "strategy": "Replace",
                "outputs": {credits: str(keys.UNITS_PER_SHARE)},
            }
        )
        out.append(
            {
                "input": keys.sliced_resource(base, "units"),
                "strategy": "Replace",
                "multiplyBy": keys.sliced_resource(base),
                "outputs": {credits: "1"},
            }
        )
        if mfr.partition_kind:
            out.append(
                {
                    "input": keys.partitioned_resource(base, "units"),
                    "strategy": "Replace",
                    "outputs": {credits: "1"},
                }
            )
    return sorted(out, key=lambda t: str(t["input"]))


def kueue_resources() -> dict[str, Any]:
    """The ``resources`` section of Kueue's ``Configuration``."""
    return {"quotaCheckStrategy": "IgnoreUndeclared", "transformations": transformations()}
