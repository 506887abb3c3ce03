"""How pytest-xdist hands modules to workers: whole modules (``--dist loadfile``), except that every module
with real nodes goes to one worker, one after the other, and first.

A cluster with real kubelets is the machine's (its kube-proxy chains and bridges are global), so only one
runs at a time (gpustack_worker/devcluster/real_nodes.py takes a machine lock). Spread over workers by
``loadfile``, each such module would hold a worker idle while it waits for another's cluster to stop; as
one scope they run back to back on a single worker while the others go on with the rest. That scope is
the run's longest (several minutes of clusters with kubelets), so it is handed out first: queued where
xdist's own order puts it (by number of tests), it could start late and end the run alone.

The rest keeps xdist's order (the modules with most tests first). Handing out the costliest modules first
instead was measured slower on 2 cores (one run each, 4 workers: 10 min 41 s against 9 min 57 s): it runs
the control-plane modules all together at the start and the CPU-bound tables all together at the end,
where xdist's order mixes them.
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

    def _assign_work_unit(self, node: Any) -> None:
        if REAL_NODE_SCOPE in self.workqueue:
            self.workqueue.move_to_end(REAL_NODE_SCOPE, last=False)
        super()._assign_work_unit(node)


def scheduler_for(config: Any, log: Any) -> ModulesWithRealNodesTogether | None:
    """The scheduler for ``--dist loadfile`` (None: xdist's own for any other mode)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return ModulesWithRealNodesTogether(config, log)
