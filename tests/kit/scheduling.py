"""How pytest-xdist hands modules to workers: whole modules (``--dist loadfile``), except that every module
with real nodes goes to one worker, one after the other.

A cluster with real kubelets is the machine's (its kube-proxy chains and bridges are global), so only one
runs at a time (gpustack_worker/devcluster/real_nodes.py takes a machine lock). Spread over workers by
``loadfile``, each such module would hold a worker idle while it waits for another's cluster to stop; as
one scope they run back to back on a single worker while the others go on with the rest.
"""

from __future__ import annotations

from typing import Any, Final

from xdist.scheduler import LoadFileScheduling

#: A test module's file name containing this runs real nodes (``DevCluster(kubelets=N)``).
REAL_NODE_MARK: Final = "real_node"
#: The one scope of all of them.
REAL_NODE_SCOPE: Final = "real-node modules"


class ModulesWithRealNodesTogether(LoadFileScheduling):
    """``loadfile``, with every real-node module in one scope."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return REAL_NODE_SCOPE if REAL_NODE_MARK in module.rsplit("/", 1)[-1] else module


def scheduler_for(config: Any, log: Any) -> ModulesWithRealNodesTogether | None:
    """The scheduler for ``--dist loadfile`` (None: xdist's own for any other mode)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return ModulesWithRealNodesTogether(config, log)
