"""The start-up line ``caches synced`` counts the informers that synced (issue 29 item 8): those added to
the Manager directly, every registry's — the controllers take theirs from registries, so a count of the
direct ones alone said ``0`` after 18 had listed — and the settings source's."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import pytest

from gpustack_worker.runtime import manager as manager_module
from gpustack_worker.runtime import registry as registry_module
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.kit.waiting import eventually
from tests.runtime.test_manager_supervision import NODE, LogRecorder, StandInInformer, informer

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client


class _StandInSettings:
    """What the Manager uses of a SettingsSource: its informer, run and wait_synced."""

    def __init__(self) -> None:
        self.informer = StandInInformer(None, CONFIG_MAP, namespace="gpustack-system")

    async def run(self) -> None:
        await self.informer.run()

    async def wait_synced(self) -> None:
        await self.informer.wait_synced()


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> LogRecorder:
    recorder = LogRecorder()
    monkeypatch.setattr(manager_module, "_log", recorder)
    return recorder


def _synced_counts(log: LogRecorder) -> list[Any]:
    return [fields["informers"] for _, event, fields in log.lines if event == "caches synced"]


@pytest.mark.parametrize(("direct", "registered", "settings"), [(0, 18, True), (2, 3, False), (1, 0, True)])
async def test_caches_synced_counts_every_informer_waited_for(
    direct: int, registered: int, settings: bool, log: LogRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "Informer", StandInInformer)
    registry = InformerRegistry(cast("Client", None))
    for i in range(registered):
        registry.informer(NODE if i % 2 else CONFIG_MAP, label_selector=f"n={i}")
    source = _StandInSettings() if settings else None
    manager = Manager(settings=cast("Any", source))
    for i in range(direct):
        manager.add_informer(informer(CONFIG_MAP, namespace=f"ns-{i}"))
    manager.add_registry(registry)
    stop = asyncio.Event()
    run = asyncio.ensure_future(manager.run(stop))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    stop.set()
    assert await asyncio.wait_for(run, 10) == 0
    assert _synced_counts(log) == [direct + registered + (1 if settings else 0)]
