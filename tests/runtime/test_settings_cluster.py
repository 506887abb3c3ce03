"""A broken settings value leaves the last good settings in force and is reported (log, Event, metric)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE


def invalid_count(name: str) -> float:
    return REGISTRY.get_sample_value("gpustack_settings_invalid_total", {"configmap": f"{NS}/{name}"}) or 0.0


async def test_broken_value_keeps_last_good_and_is_reported(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    name = f"settings-test-{uuid.uuid4().hex[:8]}"
    source = SettingsSource(client, name=name, namespace=NS, env={}, reporting_instance="settings-test")
    seen: list[bool] = []
    source.subscribe(lambda s: seen.append(s.workload_fit_affinity))
    task = asyncio.ensure_future(source.run())
    try:
        await asyncio.wait_for(source.wait_synced(), 30)
        assert source.current.workload_fit_affinity is True  # no ConfigMap yet: defaults

        good = {"workload-fit-affinity": "false", "controller-workers": "4"}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS},
            "data": good,
        }
        await client.create(kinds.CONFIG_MAP, body)
        await eventually(lambda: source.current.controller_workers == 4)
        assert source.current.workload_fit_affinity is False
        assert seen == [False]

        before = invalid_count(name)
        broken = {"workload-fit-affinity": "true", "controller-workers": "lots"}
        await client.patch(kinds.CONFIG_MAP, name, {"data": broken}, namespace=NS)
        await eventually(lambda: source.rejections >= 1)
        # last good settings stay in force, including the valid half of the broken revision
        assert source.current.controller_workers == 4
        assert source.current.workload_fit_affinity is False
        assert source.last_error is not None and any(
            e.startswith("controller-workers:") for e in source.last_error.errors
        )
        assert invalid_count(name) == before + 1

        async def reported() -> list[dict[str, Any]]:
            events, _ = await client.list(kinds.EVENT, namespace=NS)
            return [
                e
                for e in events
                if e.get("regarding", {}).get("name") == name and e.get("reason") == "InvalidSettings"
            ]

        async with asyncio.timeout(15):
            while not (events := await reported()):  # noqa: ASYNC110 (polling the API server)
                await asyncio.sleep(0.2)
        assert events[0]["type"] == "Warning" and "controller-workers" in events[0]["note"]

        # fixing the value is picked up again
        await client.patch(kinds.CONFIG_MAP, name, {"data": {"controller-workers": "6"}}, namespace=NS)
        await eventually(lambda: source.current.controller_workers == 6)
        assert source.current.workload_fit_affinity is True and source.last_error is None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.delete(kinds.CONFIG_MAP, name, NS)
        await client.close()
