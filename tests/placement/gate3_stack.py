"""The agent and the controllers with Gate 3's check kept at hand, for end-to-end modules that read its
verdicts and its own view of the cluster (``running.check``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from gpustack_worker.placement.node_devices import NodeDevicesCheck
from tests.stack import running_stack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from tests.stack import Stack


class Running:
    """The running stack, its admin client and the Gate 3 check it runs."""

    def __init__(self, stack: Stack, check: NodeDevicesCheck) -> None:
        self.stack = stack
        self.admin: Client = stack.admin
        self.check = check


@contextlib.asynccontextmanager
async def running_with_gate3(cluster: DevCluster, scenario: str, team: str) -> AsyncIterator[Running]:
    """``running_stack`` over ``scenario`` with one namespace ``team``, and its Gate 3 check exposed."""
    built: list[NodeDevicesCheck] = []

    def gate3(client: Client, settings: Any, registry: InformerRegistry) -> list[Any]:
        built.append(NodeDevicesCheck(client, registry, settings))
        return list(built)

    async with running_stack(cluster, scenario, namespaces=(team,), extra=gate3) as stack:
        yield Running(stack, built[0])
