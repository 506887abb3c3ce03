"""``simulate apply`` against a real API server: the 4-node scenario, read back, then re-applied."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.simulate import command as simulate_cmd
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.cluster

SCENARIO = packaged_scenario("mixed-4")


@pytest.fixture
async def client(devcluster: Any) -> AsyncIterator[Client]:
    c = await Client.connect(str(devcluster.kubeconfig))
    try:
        yield c
    finally:
        await c.close()


def _nf_name(node: str) -> str:
    return keys.device_manager_nodefeature_name(node)


async def _versions(client: Client) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in SCENARIO.nodes:
        found: list[tuple[str, dict[str, Any] | None]] = [
            (f"Node/{node.name}", await client.get(kinds.NODE, node.name)),
            (f"Devices/{node.name}", await client.get(kinds.DEVICES, node.name)),
            (
                f"NodeFeature/{node.name}",
                await client.get(
                    kinds.NODE_FEATURE,
                    keys.device_manager_nodefeature_name(node.name),
                    kinds.SYSTEM_NAMESPACE,
                ),
            ),
        ]
        out.update({key: obj["metadata"]["resourceVersion"] for key, obj in found if obj is not None})
    return out


async def _projected(client: Client) -> bool:
    """Every DM NodeFeature label is on its Node: nfd-master's projection, its last write to these objects.

    nfd-master patches a Node's extended resources first, then its labels together with the annotation
    naming them, and writes again only when a NodeFeature changes (it compares before it patches); the
    simulator writes the other two kinds. So once the labels are in, the resource versions are final."""
    for spec in SCENARIO.nodes:
        node = await client.get(kinds.NODE, spec.name)
        assert node is not None
        feature = render.render_node_feature(spec, "")
        wanted = feature["spec"]["labels"] if feature else {}
        if any(node["metadata"]["labels"].get(k) != v for k, v in wanted.items()):
            return False
    return True


async def test_simulate_apply_mixed_4_then_reapply_changes_nothing(devcluster: Any, client: Client) -> None:
    args = argparse.Namespace(file="mixed-4", kubeconfig=str(devcluster.kubeconfig))
    assert await simulate_cmd.run(args) == 0

    for spec in SCENARIO.nodes:
        node = await client.get(kinds.NODE, spec.name)
        assert node is not None
        labels = node["metadata"]["labels"]
        for key, value in render.node_labels(spec).items():
            assert labels[key] == value, key
        assert node["metadata"]["annotations"][keys.CPU_NAME_ANNOTATION] == spec.cpu.model
        assert not (node.get("spec") or {}).get("taints")
        status = node["status"]
        ready = {c["type"]: c["status"] for c in status["conditions"]}
        assert ready["Ready"] == "True"
        for pool, count in render.device_plugin_resources(spec).items():
            assert status["capacity"][pool] == status["allocatable"][pool] == str(count)
        assert status["allocatable"]["pods"] == "110"
        assert status["capacity"]["cpu"] == str(spec.cpu.cores)

        feature = await client.get(
            kinds.NODE_FEATURE, keys.device_manager_nodefeature_name(spec.name), kinds.SYSTEM_NAMESPACE
        )
        devices = await client.get(kinds.DEVICES, spec.name)
        if not spec.accelerators:
            assert feature is None and devices is None
            continue
        want_feature = render.render_node_feature(spec, node["metadata"]["uid"])
        want_devices = render.render_devices(spec, node["metadata"]["uid"])
        want_ledger = render.render_devices_status(spec)
        assert want_feature and want_devices and want_ledger
        assert feature is not None and devices is not None
        assert feature["spec"]["labels"] == want_feature["spec"]["labels"]
        assert feature["metadata"]["labels"][keys.NFD_NODE_NAME] == spec.name
        assert feature["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        assert devices["spec"] == want_devices["spec"]
        assert devices["status"] == want_ledger["status"]
        for key, value in want_devices["metadata"]["labels"].items():
            assert devices["metadata"]["labels"][key] == value

    a100 = await client.get(kinds.DEVICES, "gpu-a100")
    assert a100 is not None
    card4 = a100["status"]["groups"][0]["accelerators"][4]
    assert {p["name"]: p["count"] for p in card4["remainingProfiles"]}["7g.80gb"] == 0

    # nfd-master merges the DM NodeFeature labels into the Nodes on its own schedule; wait for that
    # (it is stage 2 reaching the Node) so the comparison below sees only the simulator's writes.
    await eventually(lambda: _projected(client), within=60)
    before = await _versions(client)
    assert len(before) == 4 + 3 + 3  # four Nodes; NodeFeature and Devices for the three accelerated ones
    assert await simulate_cmd.run(args) == 0
    assert await _versions(client) == before


async def test_invalid_file_is_rejected_before_any_write(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "nodes:\n  - {name: gpu-b, cpu: {vendor: AMD, model: m, cores: 1}, memory: 1Gi, gpus: 1}\n"
    )
    assert await simulate_cmd.run(argparse.Namespace(file=str(path), kubeconfig="/nonexistent")) == 2
    assert "nodes[0] (name=gpu-b).gpus: unknown key" in capsys.readouterr().err


async def test_reapply_leaves_the_agents_counting_keys_alone(devcluster: Any, client: Client) -> None:
    args = argparse.Namespace(file="mixed-4", kubeconfig=str(devcluster.kubeconfig))
    assert await simulate_cmd.run(args) == 0
    units = keys.sliced_resource("hygon.com/dcu", "units")
    patch = {"status": {"capacity": {units: "6400000"}, "allocatable": {units: "6400000"}}}
    await client.patch(kinds.NODE, "gpu-hygon", patch, subresource="status", field_manager="gpustack-agent")
    assert await simulate_cmd.run(args) == 0
    node = await client.get(kinds.NODE, "gpu-hygon")
    assert node is not None
    assert node["status"]["capacity"][units] == "6400k"  # the API server canonicalises quantities
    assert node["status"]["capacity"]["hygon.com/dcu.sliced"] == "16"
