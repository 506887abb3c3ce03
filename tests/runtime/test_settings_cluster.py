"""Against a real API server: a rejected settings revision — a malformed value, an unknown key, a
start-up-only key — leaves the last good settings in force and is reported (log, metric, one Warning
Event on the ConfigMap, however often the same content is delivered again)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.api import kinds
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource
from tests.kit import waiting

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
NS = kinds.SYSTEM_NAMESPACE


def invalid_count(name: str) -> float:
    return REGISTRY.get_sample_value("gpustack_settings_invalid_total", {"configmap": f"{NS}/{name}"}) or 0.0


def rejected_gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value("gpustack_settings_rejected", {"configmap": f"{NS}/{name}"})


async def _events(
    client: Client, name: str, needle: str = "", reason: str = "InvalidSettings"
) -> list[dict[str, Any]]:
    events, _ = await client.list(kinds.EVENT, namespace=NS)
    return [
        e
        for e in events
        if e.get("regarding", {}).get("name") == name
        and e.get("reason") == reason
        and needle in e.get("note", "")
    ]


async def _wait_events(
    client: Client, name: str, needle: str, reason: str = "InvalidSettings"
) -> list[dict[str, Any]]:
    """The Events ``_events`` finds, once there is one (the source posts them asynchronously). The kit's
    ``eventually`` by its module: the tests here take the ``eventually`` fixture under that name."""
    return await waiting.eventually(lambda: _events(client, name, needle, reason), within=15, every=0.2)


@contextlib.asynccontextmanager
async def _running_source(client: Client, name: str) -> AsyncIterator[SettingsSource[WorkerSettings]]:
    source = SettingsSource(
        client, model=WorkerSettings, name=name, namespace=NS, env={}, reporting_instance="t"
    )
    task = asyncio.ensure_future(source.run())
    try:
        await asyncio.wait_for(source.wait_synced(), 30)
        yield source
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await source.settle()
        await client.delete(kinds.CONFIG_MAP, name, NS)


async def _create(client: Client, name: str, data: dict[str, str]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": data,
    }
    await client.create(kinds.CONFIG_MAP, body)


async def test_broken_value_keeps_last_good_and_is_reported(devcluster: Any, eventually: Poll) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    name = f"settings-test-{uuid.uuid4().hex[:8]}"
    try:
        async with _running_source(client, name) as source:
            seen: list[bool] = []
            source.subscribe(lambda s: seen.append(s.workload_fit_affinity))
            assert source.current.workload_fit_affinity is True  # no ConfigMap yet: defaults

            await _create(client, name, {"workload-fit-affinity": "false", "fit-label-coalesce-seconds": "4"})
            await eventually(lambda: source.current.fit_label_coalesce_seconds == 4.0)
            assert source.current.workload_fit_affinity is False
            assert seen == [False]

            before = invalid_count(name)
            broken = {"workload-fit-affinity": "true", "fit-label-coalesce-seconds": "lots"}
            await client.patch(kinds.CONFIG_MAP, name, {"data": broken}, namespace=NS)
            await eventually(lambda: source.rejections >= 1)
            # last good settings stay in force, including the valid half of the broken revision
            assert source.current.fit_label_coalesce_seconds == 4.0
            assert source.current.workload_fit_affinity is False
            assert source.last_error is not None and source.last_error.errors == [
                "fit-label-coalesce-seconds='lots' is invalid: expected a number from 0 to 300"
            ]
            assert invalid_count(name) == before + 1
            events = await _wait_events(client, name, "fit-label-coalesce-seconds")
            assert events[0]["type"] == "Warning"

            # fixing the value is picked up again, and confirmed: a Normal Event naming the fixed revision
            # and the rejected one, the rejected gauge back at 0
            assert rejected_gauge(name) == 1
            rejected_rv = events[0]["regarding"]["resourceVersion"]
            fixed = await client.patch(
                kinds.CONFIG_MAP, name, {"data": {"fit-label-coalesce-seconds": "6"}}, namespace=NS
            )
            await eventually(lambda: source.current.fit_label_coalesce_seconds == 6.0)
            assert source.current.workload_fit_affinity is True and source.last_error is None
            assert rejected_gauge(name) == 0
            fixed_rv = fixed["metadata"]["resourceVersion"]
            applied = await _wait_events(
                client, name, f"revision {fixed_rv} applied", reason="SettingsApplied"
            )
            assert [(e["type"], e["action"], e["regarding"]["resourceVersion"]) for e in applied] == [
                ("Normal", "LoadSettings", fixed_rv)
            ]
            assert applied[0]["note"].endswith(f"it replaces the rejected revision {rejected_rv}")
    finally:
        await client.close()


async def test_unknown_and_startup_only_keys_each_yield_one_event(devcluster: Any, eventually: Poll) -> None:
    """A typo and a start-up-only key are rejected like a bad value: the last good snapshot stays, and
    each rejected content gets exactly one Event, even when the informer delivers it again (here: an
    annotation edit, a new resourceVersion with the same data)."""
    client = await Client.connect(str(devcluster.kubeconfig))
    name = f"settings-keys-{uuid.uuid4().hex[:8]}"

    async def touch(n: int) -> None:
        """A new revision with the same data; wait until the source has seen it."""
        patched = await client.patch(
            kinds.CONFIG_MAP, name, {"metadata": {"annotations": {"touch": str(n)}}}, namespace=NS
        )
        rv = patched["metadata"]["resourceVersion"]
        await eventually(
            lambda: (
                (source.informer.store.get(f"{NS}/{name}") or {}).get("metadata", {}).get("resourceVersion")
                == rv
            )
        )
        await source.settle()

    try:
        async with _running_source(client, name) as source:
            await _create(client, name, {"node-management-manual": "true", "log-level": "WARNING"})
            await eventually(lambda: source.current.node_management_manual is True)
            good = source.current
            assert good.log_level == "WARNING"
            before = invalid_count(name)

            await client.patch(
                kinds.CONFIG_MAP, name, {"data": {"node-managment-manual": "false"}}, namespace=NS
            )
            await eventually(lambda: source.rejections == 1)
            typo = await _wait_events(client, name, "node-managment-manual")
            assert typo[0]["note"] == (
                f"revision {typo[0]['regarding']['resourceVersion']} rejected, the settings in force stay: "
                "node-managment-manual='false': "
                "unknown setting, did you mean node-management-manual?"
            )
            await touch(1)
            await touch(2)
            assert len(await _events(client, name, "node-managment-manual")) == 1
            assert source.rejections == 1 and source.current is good

            await client.patch(
                kinds.CONFIG_MAP,
                name,
                {"data": {"node-managment-manual": None, "controller-workers": "8"}},
                namespace=NS,
            )
            await eventually(lambda: source.rejections == 2)
            startup = await _wait_events(client, name, "controller-workers")
            assert startup[0]["note"] == (
                f"revision {startup[0]['regarding']['resourceVersion']} rejected, "
                "the settings in force stay: controller-workers='8': start-up-only setting, "
                "read once when the process starts; set GPUSTACK_CONTROLLER_WORKERS on the workload instead"
            )
            await touch(3)
            assert len(await _events(client, name, "controller-workers")) == 1
            assert len(await _events(client, name)) == 2  # one per rejected content, nothing else
            assert source.current is good and source.current.controller_workers == 2
            assert invalid_count(name) == before + 2

            await client.patch(kinds.CONFIG_MAP, name, {"data": {"controller-workers": None}}, namespace=NS)
            await eventually(lambda: source.last_error is None)
            assert source.current == good
    finally:
        await client.close()
