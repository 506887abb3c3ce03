"""The operator stack in one test process, for end-to-end modules that read every Node of a cluster: a
control plane of the module's own, the node agent and the controller process's controllers (topology +
chain, plus any extra) each with its ServiceAccount's client, and the polling helpers they share."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import kinds, rbac
from gpustack_worker.chain.controller import Chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from gpustack_worker.topology.controller import Topology
from tests.kit import cluster as kit_cluster
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.controller import Controller
    from gpustack_worker.runtime.informer import InformerOptions
    from gpustack_worker.simulate.scenario import Scenario

__all__ = ("Stack", "condition", "eventually", "module_cluster", "running_stack", "write_settings")


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any]:
    """The ``status.conditions`` entry of ``type_`` (``{}`` when absent)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return {}


async def write_settings(admin: Client, data: dict[str, str]) -> None:
    """Replace the live settings ConfigMap's data (created when missing); ``{}`` puts every default back."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": DEFAULT_NAMESPACE},
        "data": data,
    }
    if await admin.get(kinds.CONFIG_MAP, DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE) is None:
        await admin.create(kinds.CONFIG_MAP, body, namespace=DEFAULT_NAMESPACE)
    else:
        await admin.replace(kinds.CONFIG_MAP, body)


@contextlib.contextmanager
def module_cluster(name: str, *, audited: bool = False) -> Iterator[DevCluster]:
    """The control plane of a module that reads every Node (the chain builds pools from all of them, so
    other modules' scenarios must not leak into its pools): the session's, put back to its baseline
    first (tests/kit/reset.py) — the isolation of a fresh one without its start-up. It is always
    audited; ``audited`` stays for the callers that say they read the log (read a window:
    ``AuditLog.from_now``). ``name`` labels the module in the output."""
    del audited  # the session's control plane always keeps the audit log
    print(f"[{name}] the session's control plane, reset to its baseline")
    try:
        yield kit_cluster.shared_baseline()
    finally:
        # ... and left at the baseline: the modules on the session's control plane that follow made their
        # own objects beside nothing of this one (an InstanceType left with its finalizer would hold up a
        # later test's CRD deletion).
        kit_cluster.shared_baseline()


@dataclass
class Stack:
    """The running agent and controllers, and the clients they use."""

    admin: Client
    agent: Agent
    chain: Chain
    topology: Topology
    #: The controller ServiceAccount's client (what the controllers write with).
    controller_client: Client
    registry: InformerRegistry
    settings: SettingsSource[WorkerSettings]
    extra: list[Any] = field(default_factory=list)

    @property
    def controllers(self) -> list[Controller]:
        out = [*self.topology.controllers, *self.chain.controllers]
        for part in self.extra:
            out.extend(part.controllers)
        return out

    def idle(self) -> bool:
        """Every controller queue empty (no pending, delayed or in-flight key)."""
        return all(len(c.queue) == 0 and not c.queue.processing for c in self.controllers)


@contextlib.asynccontextmanager
async def running_stack(
    cluster: DevCluster,
    scenario: str | Scenario | None,
    *,
    namespaces: tuple[str, ...] = (),
    extra: Callable[[Client, SettingsSource[WorkerSettings], InformerRegistry], list[Any]] | None = None,
    controller_kubeconfig: Path | None = None,
    informer_options: InformerOptions | None = None,
    agent_node: str | None = None,
) -> AsyncIterator[Stack]:
    """Apply ``scenario`` (a packaged one's name, or the scenario itself; None: nothing), create
    ``namespaces``, and run the agent (all nodes; only ``agent_node`` when given, as the DaemonSet's agent
    runs) and the controllers (topology, chain, and whatever ``extra`` builds over the same
    registry) until the block ends. ``controller_kubeconfig`` replaces the controller ServiceAccount's
    kubeconfig (the same user through another address, e.g. a fault-injecting proxy);
    ``informer_options`` the controllers' reflector tunables (defaults: client-go's)."""
    admin = await Client.connect(str(cluster.kubeconfig))
    if scenario is not None:
        await apply_scenario(admin, packaged_scenario(scenario) if isinstance(scenario, str) else scenario)
    for ns in namespaces:
        await admin.create(
            kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    agent_client = await Client.connect(str(cluster.service_account_kubeconfig(rbac.AGENT.name)))
    ctl_kubeconfig = controller_kubeconfig or cluster.service_account_kubeconfig(rbac.CONTROLLER.name)
    ctl_client = await Client.connect(str(ctl_kubeconfig))
    agent = Agent(
        agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=agent_node
    )
    settings = SettingsSource(ctl_client, model=WorkerSettings, env={})
    manager = Manager(settings=settings)
    registry = manager.add_registry(InformerRegistry(ctl_client, options=informer_options))
    chain = Chain(ctl_client, settings, registry)
    topology = Topology(ctl_client, settings, registry)
    stack = Stack(admin, agent, chain, topology, ctl_client, registry, settings)
    if extra is not None:
        stack.extra = extra(ctl_client, settings, registry)
    for controller in stack.controllers:
        manager.add_controller(controller)
    for part in (chain, topology, *stack.extra):
        part.start_keys()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(agent.run(stop)), asyncio.create_task(manager.run(stop))]
    try:
        yield stack
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
        for client in (agent_client, ctl_client, admin):
            await client.close()
