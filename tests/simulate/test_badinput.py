"""``simulate apply`` under malformed input: exit 2, one clear message per problem, nothing written.

Most cases run the real command (``simulate_cmd.run``) against a file, with ``Client.connect``
replaced by a recorder: an invalid scenario must be refused before any connection is opened, which is
the strongest form of "nothing written". A few representative cases run against the real dev
cluster and check that no object of the file exists afterwards; the last one makes the cluster refuse a
write part-way (a ValidatingAdmissionPolicy) and checks the report of what was written.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.simulate import command as simulate_cmd
from gpustack_worker.runtime.client import ApiError, Client
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.simulate import load
from gpustack_worker.simulate.scenario import MAX_CARDS, MAX_SHOWN_PROBLEMS
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

_CPU = {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 64}


def _node(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu": dict(_CPU), "memory": "64Gi", **extra}


def _gpu(**extra: Any) -> dict[str, Any]:
    return {
        "manufacturer": "nvidia",
        "product": "NVIDIA A100-SXM4-80GB",
        "memoryMiB": 81920,
        "count": 2,
        **extra,
    }


def _doc(*nodes: dict[str, Any]) -> bytes:
    return yaml.safe_dump({"nodes": list(nodes)}, sort_keys=False).encode()


def _bomb(levels: int = 9, width: int = 10) -> bytes:
    """The classic "billion laughs": each level lists the previous one ``width`` times."""
    lines = ['- &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"- &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return ("nodes:\n" + "\n".join("  " + line for line in lines) + "\n").encode()


# (id, file content, lines the error output must contain)
CASES: list[tuple[str, bytes, list[str]]] = [
    (
        "node-name-too-long-for-hostname-label",
        _doc(_node("before"), _node("n" * 100)),
        [
            "nodes[1] (name=" + "n" * 63 + "…).name: Node label kubernetes.io/hostname value",
            "must be no more than 63 characters (is 100)",
        ],
    ),
    (
        "node-name-not-dns",
        _doc(_node("GPU_A")),
        ["nodes[0] (name=GPU_A).name: 'GPU_A' is not a DNS subdomain (a Node name): must be lowercase"],
    ),
    (
        "label-value-64-chars",
        _doc(_node("cpu", labels={"topology.gpustack.ai/rack": "r" * 64})),
        ["nodes[0] (name=cpu).labels.topology.gpustack.ai/rack: 'rrrr", "must be no more than 63 characters"],
    ),
    (
        "label-value-not-ascii",
        _doc(_node("cpu", labels={"topology.gpustack.ai/rack": "régal"})),
        ["nodes[0] (name=cpu).labels.topology.gpustack.ai/rack: 'régal' is not a valid label value"],
    ),
    (
        "label-key-name-part-64",
        _doc(_node("cpu", labels={"topology.gpustack.ai/" + "k" * 64: "v"})),
        ["not a valid label key: name part must be no more than 63 characters (is 64)"],
    ),
    (
        "label-key-two-slashes",
        _doc(_node("cpu", labels={"a/b/c": "v"})),
        ["nodes[0] (name=cpu).labels.a/b/c: not a valid label key: must be a name with an optional"],
    ),
    (
        "label-key-prefix-not-dns",
        _doc(_node("cpu", labels={"Topology_GPUStack/rack": "v"})),
        ["labels.Topology_GPUStack/rack: not a valid label key: prefix part must be lowercase"],
    ),
    (
        "cpu-family-too-long-for-a-label",
        _doc(_node("cpu", cpu={**_CPU, "family": 10**70})),
        ["nodes[0] (name=cpu).cpu.family: Node label feature.node.kubernetes.io/cpu-model.family value"],
    ),
    (
        "pods-past-int64-milli",
        _doc(_node("cpu", pods=10**16)),
        [
            "nodes[0] (name=cpu).pods: Node status.capacity[pods] '10000000000000000', "
            "status.allocatable[pods] '10000000000000000': must be at most 9223372036854775"
        ],
    ),
    (
        "card-memory-past-the-devices-schema",
        _doc(_node("gpu", accelerators=[_gpu(memoryMiB=10**16)])),
        [
            "nodes[0] (name=gpu).accelerators[0].memoryMiB: Devices gpu spec.groups[0].memory: "
            "Input should be less than or equal to 4194304"
        ],
    ),
    (
        "card-memory-past-int64",
        _doc(_node("gpu", accelerators=[_gpu(memoryMiB=2**64)])),
        [
            "nodes[0] (name=gpu).accelerators[0].memoryMiB: Devices gpu spec.groups[0].memory: "
            "must fit in a 64-bit integer"
        ],
    ),
    (
        "nic-name-past-the-devices-schema",
        _doc(_node("gpu", accelerators=[_gpu()], rdma=[{"name": "i" * 100, "linkLayer": "Ethernet"}])),
        [
            "nodes[0] (name=gpu).rdma[0].name: Devices gpu spec.interfaces[0].name: "
            "String should have at most 64 characters"
        ],
    ),
    (
        "too-many-allocations",
        _doc(
            _node(
                "gpu", accelerators=[_gpu(allocations=[{"card": 0, "mode": "exclusive"}] * (MAX_CARDS + 1))]
            )
        ),
        [
            f"nodes[0] (name=gpu).accelerators[0].allocations: must have at most {MAX_CARDS} allocations "
            f"(has {MAX_CARDS + 1})"
        ],
    ),
    (
        "not-utf8",
        b"nodes:\n  - name: caf\xe9\n",
        ["not UTF-8 text: byte e9 at offset 20 (line 2, column 14) is invalid continuation byte"],
    ),
    ("not-yaml", b"nodes:\n  - name: a\n   bad: [\n", ["not valid YAML: line 3, column 4:"]),
    ("top-level-list", b"- name: a\n", ["expected a mapping with a top-level 'nodes:' list, got a list"]),
    ("top-level-scalar", b"just text\n", ["got a single str value"]),
    ("empty-file", b"", ["the file is empty: expected a mapping with a top-level 'nodes:' list"]),
    ("two-documents", b"nodes: []\n---\nnodes: []\n", ["expected a single document in the stream"]),
    ("python-tag", b"nodes: !!python/object/apply:os.system [ls]\n", ["could not determine a constructor"]),
    ("unknown-top-level-key", _doc(_node("cpu"))[:-1] + b"\nhosts: []\n", ["hosts: unknown key"]),
    (
        "alias-bomb",
        _bomb(),
        ["not accepted YAML: with its aliases expanded the document has", "more than the 1000000"],
    ),
    (
        "recursive-alias",
        b"nodes: &x [*x]\n",
        ["not accepted YAML: line 1, column 8: the node anchored here contains an alias of itself"],
    ),
    (
        "duplicate-key",
        b"nodes:\n- name: a\n  cpu: {vendor: AMD, model: m, cores: 1}\n  memory: 1Gi\n  memory: 2Gi\n",
        ["not accepted YAML: line 5, column 3: duplicate key 'memory' (first at line 4, column 3)"],
    ),
]


class _ConnectRecorder:
    """Stands in for ``Client.connect``: an invalid scenario must never get this far."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Client:
        self.calls += 1
        raise AssertionError("simulate apply connected to a cluster for an invalid scenario")


@pytest.fixture
def no_connect(monkeypatch: pytest.MonkeyPatch) -> _ConnectRecorder:
    recorder = _ConnectRecorder()
    monkeypatch.setattr(Client, "connect", recorder)
    return recorder


async def _run(path: Path | str, kubeconfig: str = "/nonexistent") -> int:
    return await simulate_cmd.run(argparse.Namespace(file=str(path), kubeconfig=kubeconfig))


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_invalid_file_exits_2_with_a_clear_message_and_connects_nowhere(
    content: bytes,
    expected: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_connect: _ConnectRecorder,
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)
    assert await _run(path) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"{path}: invalid scenario:\n"), err
    for fragment in expected:
        assert fragment in err, err
    assert "Traceback" not in err
    assert len(err.splitlines()) <= MAX_SHOWN_PROBLEMS + 2
    assert no_connect.calls == 0


async def test_a_product_whose_keys_just_fit_is_accepted() -> None:
    # aKey nvidia-<48 chars> is 55 characters: "<aKey>.product", the longest key, is exactly 63.
    scenario = load.parse_text(_doc(_node("gpu", accelerators=[_gpu(product="p" * 48)])).decode())
    assert scenario.nodes[0].accelerators[0].product == "p" * 48


async def test_many_problems_show_the_first_50_and_count_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_connect: _ConnectRecorder
) -> None:
    nodes = [
        {"name": f"n{i}", "cpu": {"vendor": "AMD", "model": "m", "cores": 0}, "memory": "x"}
        for i in range(200)
    ]
    path = tmp_path / "many.yaml"
    path.write_bytes(_doc(*nodes))
    assert await _run(path) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"{path}: invalid scenario:"
    assert lines[1].startswith("  nodes[0] (name=n0).cpu.cores: must be ≥ 1")
    assert len(lines) == 1 + MAX_SHOWN_PROBLEMS + 1
    assert lines[-1] == f"  … and {2 * 200 - MAX_SHOWN_PROBLEMS} more problems"
    assert no_connect.calls == 0


async def test_a_file_over_the_size_cap_is_refused_unread(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_connect: _ConnectRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(load, "MAX_FILE_BYTES", 1024)
    path = tmp_path / "big.yaml"
    path.write_bytes(_doc(*(_node(f"n{i}") for i in range(40))))
    assert await _run(path) == 2
    assert "the file is larger than 1024 bytes, the most a scenario may be" in capsys.readouterr().err
    assert no_connect.calls == 0


async def test_too_many_written_values_are_refused_before_composing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_connect: _ConnectRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(load, "MAX_YAML_NODES", 1000)
    path = tmp_path / "zeros.yaml"
    path.write_bytes(b"nodes: [" + b"0, " * 2000 + b"0]\n")
    assert await _run(path) == 2
    assert "not accepted YAML: the document has more than the 1000 values a scenario may have" in (
        capsys.readouterr().err
    )
    assert no_connect.calls == 0


async def test_too_many_nodes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_connect: _ConnectRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(load, "MAX_NODES", 3)
    path = tmp_path / "four.yaml"
    path.write_bytes(_doc(*(_node(f"n{i}") for i in range(4))))
    assert await _run(path) == 2
    assert "nodes: must have at most 3 nodes (has 4)" in capsys.readouterr().err
    assert no_connect.calls == 0


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "no-such-scenario",
            "no-such-scenario: no such file, nor a packaged scenario "
            f"({', '.join(load.packaged_scenario_names())})",
        ),
        ("./missing.yaml", "./missing.yaml: cannot read: No such file or directory"),
    ],
)
async def test_unreadable_file(
    target: str, message: str, capsys: pytest.CaptureFixture[str], no_connect: _ConnectRecorder
) -> None:
    assert await _run(target) == 2
    assert capsys.readouterr().err.strip() == message
    assert no_connect.calls == 0


async def test_a_directory_is_not_a_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_connect: _ConnectRecorder
) -> None:
    assert await _run(tmp_path) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path}: cannot read: Is a directory"
    assert no_connect.calls == 0


async def test_an_unusable_kubeconfig_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.yaml"
    path.write_bytes(_doc(_node("cpu")))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not: [a, kubeconfig]\n")
    assert await _run(path, str(kubeconfig)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simulate apply: cannot connect using {kubeconfig}: "), err
    assert len(err.splitlines()) == 1


# --- against the real API server -------------------------------------------------------------------


@pytest.fixture
async def client(devcluster: Any) -> AsyncIterator[Client]:
    c = await Client.connect(str(devcluster.kubeconfig))
    try:
        yield c
    finally:
        await c.close()


async def _objects_of(client: Client, names: list[str]) -> list[str]:
    """Which Node / NodeFeature / Devices of these node names exist."""
    found: list[str] = []
    for name in names:
        if await client.get(kinds.NODE, name) is not None:
            found.append(f"Node/{name}")
        if await client.get(kinds.DEVICES, name) is not None:
            found.append(f"Devices/{name}")
        nf = keys.device_manager_nodefeature_name(name)
        if await client.get(kinds.NODE_FEATURE, nf, kinds.SYSTEM_NAMESPACE) is not None:
            found.append(f"NodeFeature/{nf}")
    return found


CLUSTER_CASES = {
    "node-name-too-long": (_doc(_node("bi-first", accelerators=[_gpu()]), _node("n" * 100)), ["bi-first"]),
    "not-utf8": (
        b"nodes:\n  - {name: bi-latin1, cpu: {vendor: AMD, model: caf\xe9, cores: 1}, memory: 1Gi}\n",
        ["bi-latin1"],
    ),
    "alias-bomb": (
        b"nodes:\n  - &n {name: bi-bomb, cpu: {vendor: AMD, model: m, cores: 1}, memory: 1Gi}\n"
        + _bomb()[7:],
        ["bi-bomb"],
    ),
}


@pytest.mark.cluster
@pytest.mark.parametrize("case", list(CLUSTER_CASES))
async def test_invalid_file_writes_nothing_to_a_real_cluster(
    case: str, devcluster: Any, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, names = CLUSTER_CASES[case]
    nodes_before, _ = await client.list(kinds.NODE)
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)
    assert await _run(path, str(devcluster.kubeconfig)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: invalid scenario:\n"), err
    assert await _objects_of(client, names) == []
    nodes_after, _ = await client.list(kinds.NODE)
    assert sorted(n["metadata"]["name"] for n in nodes_after) == sorted(
        n["metadata"]["name"] for n in nodes_before
    )


_POLICY = Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False
)
_BINDING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    False,
)
_DENIED = "bi-denied"


async def _deny_devices_named(client: Client, prefix: str) -> None:
    """A CEL admission policy (no webhook server needed) refusing Devices named ``<prefix>…``."""
    policy = {
        "apiVersion": _POLICY.api_version,
        "kind": _POLICY.kind,
        "metadata": {"name": "bi-deny-devices"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [kinds.DEVICES.group],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [kinds.DEVICES.plural],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!object.metadata.name.startsWith('{prefix}')",
                    "message": "denied by the bad-input test's admission policy",
                }
            ],
        },
    }
    binding = {
        "apiVersion": _BINDING.api_version,
        "kind": _BINDING.kind,
        "metadata": {"name": "bi-deny-devices"},
        "spec": {"policyName": "bi-deny-devices", "validationActions": ["Deny"]},
    }
    await client.create(_POLICY, policy)
    await client.create(_BINDING, binding)
    probe = {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": kinds.DEVICES.kind,
        "metadata": {"name": f"{prefix}-x"},
    }

    async def denied() -> str:
        """The API server's refusal of a probe Device ("" while it still admits one: it picks a new
        policy up from its informer, so the first probes may pass and are deleted again)."""
        try:
            await client.create(kinds.DEVICES, probe)
        except ApiError as exc:
            return str(exc) if "denied by the bad-input test" in str(exc) else ""
        await client.delete(kinds.DEVICES, f"{prefix}-x")
        return ""

    await eventually(denied, within=60, every=0.5)


@pytest.mark.cluster
async def test_a_write_refused_mid_way_names_what_was_written(
    devcluster: Any, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _deny_devices_named(client, _DENIED)
    # Written concurrently (default 8 at once), so the node after the refused one is written too: the
    # report lists every accepted write node by node in file order, and names what is incomplete.
    names = ["bi-written", _DENIED, "bi-after"]
    try:
        path = tmp_path / "scenario.yaml"
        path.write_bytes(_doc(*(_node(name, accelerators=[_gpu()]) for name in names)))
        assert await _run(path, str(devcluster.kubeconfig)) == 1
        out, err = capsys.readouterr()
        assert out == ""
        lines = err.splitlines()
        assert lines[0].startswith(f"simulate apply: server-side apply of Devices/{_DENIED} failed: 422"), err
        assert "denied by the bad-input test's admission policy" in lines[0]
        assert lines[1] == "written before the failure (left in place; a re-run converges):"
        assert lines[2:] == [
            "  created Node/bi-written",
            "  applied Node/bi-written",
            "  applied NodeFeature/bi-written-gpustack-device-manager",
            "  applied Devices/bi-written",
            "  applied Devices/bi-written/status",
            f"  created Node/{_DENIED}",
            f"  applied Node/{_DENIED}",
            f"  applied NodeFeature/{_DENIED}-gpustack-device-manager",
            "  created Node/bi-after",
            "  applied Node/bi-after",
            "  applied NodeFeature/bi-after-gpustack-device-manager",
            "  applied Devices/bi-after",
            "  applied Devices/bi-after/status",
            f"nodes not (fully) applied: {_DENIED}",
        ]
        # What the report says is what the cluster holds.
        assert sorted(await _objects_of(client, names)) == sorted(
            [
                "Node/bi-written",
                "Devices/bi-written",
                "NodeFeature/bi-written-gpustack-device-manager",
                f"Node/{_DENIED}",
                f"NodeFeature/{_DENIED}-gpustack-device-manager",
                "Node/bi-after",
                "Devices/bi-after",
                "NodeFeature/bi-after-gpustack-device-manager",
            ]
        )
    finally:
        await client.delete(_BINDING, "bi-deny-devices")
        await client.delete(_POLICY, "bi-deny-devices")
        for name in names:  # no garbage collector in the dev cluster: delete the owned objects too
            await client.delete(kinds.DEVICES, name)
            nf = keys.device_manager_nodefeature_name(name)
            await client.delete(kinds.NODE_FEATURE, nf, kinds.SYSTEM_NAMESPACE)
            await client.delete(kinds.NODE, name)
