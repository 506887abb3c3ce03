from __future__ import annotations

import pytest

from gpustack_worker.agent import nodefeature
from gpustack_worker.api import keys
from gpustack_worker.api.normalize import fnv64a_hex

from .builders import card, devices, group, node_of

G = keys.GENERAL_PREFIX


def cpu_node(
    vendor: str | None,
    cpu_name: str | None,
    *,
    family: str | None = None,
    model: str | None = None,
    cpu: str = "4",
    extra: dict[str, str] | None = None,
) -> dict[str, dict[str, str]]:
    labels: dict[str, str] = dict(extra or {})
    if vendor is not None:
        labels[keys.NFD_CPU_VENDOR] = vendor
    if family is not None:
        labels[keys.NFD_CPU_FAMILY] = family
    if model is not None:
        labels[keys.NFD_CPU_ID] = model
    annotations = {keys.CPU_NAME_ANNOTATION: cpu_name} if cpu_name is not None else {}
    return {"labels": labels, "annotations": annotations, "capacity": {"cpu": cpu}}


# gKey examples of reference §3.3: (vendor_id, cpu-name, family, id) -> the three CPU keys.
@pytest.mark.parametrize(
    ("inputs", "cpu_mfr", "g_key"),
    [
        pytest.param(cpu_node("AMD", "AMD EPYC 7R32"), "amd", "amd-epyc-7r32", id="amd-epyc-7r32"),
        pytest.param(
            cpu_node("AMD", "AMD EPYC 7R13 Processor"), "amd", "amd-epyc-7r13", id="trailing-processor"
        ),
        pytest.param(
            cpu_node("Intel", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"),
            "intel",
            "intel-xeon-platinum-8259cl",
            id="intel-trademarks-and-clock",
        ),
        pytest.param(
            cpu_node("AMD", "AMD EPYC 7763 64-Core Processor"), "amd", "amd-epyc-7763", id="n-core-suffix"
        ),
        pytest.param(
            cpu_node("AMD", None, family="25", model="1"), "amd", "amd-25-1", id="family-id-fallback"
        ),
        pytest.param(
            cpu_node("AMD", "@unreported", family="25", model="1"),
            "amd",
            "amd-25-1",
            id="at-means-unreported",
        ),
        pytest.param(cpu_node(None, None), "generic", "generic", id="nothing-known"),
        pytest.param(
            cpu_node("Intel", "11th Gen Intel(R) Core(TM) i7-1185G7 @ 3.00GHz"),
            "intel",
            "intel-core-i7-1185g7",
            id="gen-prefix-derived",
        ),
    ],
)
def test_cpu_keys(inputs: dict[str, dict[str, str]], cpu_mfr: str, g_key: str) -> None:
    labels = nodefeature.desired_labels(node_of(inputs), None, manual=True, mixed_on_node=True)
    # A bare-manufacturer gKey also gets the label only its Nodes carry (issue 16 defect 3).
    bare = {f"{G}{g_key}.bare": "true"} if g_key == cpu_mfr else {}
    assert labels == {G + cpu_mfr: "true", G + g_key: "true", f"{G}{g_key}.count": "4", **bare}


@pytest.mark.parametrize(
    ("cpu", "count"),
    [
        pytest.param("64", "64", id="whole"),
        pytest.param("3500m", "4", id="rounded-up"),
        pytest.param("", None, id="unknown-capacity-no-count"),
    ],
)
def test_cpu_count_rounds_up(cpu: str, count: str | None) -> None:
    labels = nodefeature.desired_labels(
        node_of(cpu_node("AMD", "AMD EPYC 7R32", cpu=cpu)), None, manual=True, mixed_on_node=True
    )
    assert labels.get(f"{G}amd-epyc-7r32.count") == count


def test_count_key_of_a_63_char_gkey_is_shortened() -> None:
    # A 63-char gKey is itself valid; "<gKey>.count" would not be, so its name part is shortened by the
    # one rule in api/keys (the chain pins the same key): head, FNV tag, suffix kept (issue 16 defect 4).
    long_name = "AMD " + "X" * 80
    labels = nodefeature.desired_labels(
        node_of(cpu_node("AMD", long_name)), None, manual=True, mixed_on_node=True
    )
    g_key = "amd-" + "x" * 59
    count = keys.count_key(keys.general_key(g_key))
    assert count == f"{G}{g_key[:48]}-{fnv64a_hex(g_key)[:8]}.count"  # 48 + 1 + 8 + 6 = 63
    assert labels == {G + "amd": "true", G + g_key: "true", count: "4"}


A10G = keys.accelerator_key("nvidia-a10g")
NVIDIA = group("a10g", "nvidia", 23028, [card("GPU-1", logical=128, overcommit=True)], name="NVIDIA A10G")


@pytest.mark.parametrize(
    ("manual", "mixed", "extra_labels", "devs", "managed", "cpu_only"),
    [
        pytest.param(False, True, {}, None, True, False, id="auto-stamp-mixing-on"),
        pytest.param(False, False, {}, None, True, True, id="cpu-only-node-mixing-off"),
        pytest.param(
            False, False, {keys.ACCELERATABLE: "true"}, None, True, False, id="dm-label-means-accelerated"
        ),
        # Issue 16 defect 5: a card in Devices is a detected accelerator even with the Device Manager's
        # labels gone — no cpu-only, and the chain (which counts by this label) leaves the node out.
        pytest.param(False, False, {}, devices([NVIDIA]), True, False, id="devices-cards-without-dm-labels"),
        pytest.param(
            False,
            False,
            {A10G: "true", A10G + ".count": "1"},
            None,
            True,
            False,
            id="dm-model-labels-mean-accelerated",
        ),
        pytest.param(
            False,
            False,
            {keys.accelerator_key("nvidia"): "true"},
            None,
            True,
            False,
            id="dm-manufacturer-label-means-accelerated",
        ),
        pytest.param(
            False,
            False,
            {A10G + ".product": "true"},
            None,
            True,
            True,
            id="a-descriptor-is-not-an-accelerator",
        ),
        pytest.param(
            False, False, {keys.ACCELERATABLE: "false"}, devices([]), True, True, id="empty-devices-cpu-only"
        ),
        pytest.param(True, True, {}, None, False, False, id="manual-no-stamp"),
        pytest.param(
            True, True, {keys.MANAGED: "true"}, None, False, False, id="manual-admin-label-not-restamped"
        ),
        pytest.param(
            False, True, {keys.MANAGED: "false"}, None, False, False, id="admin-false-not-stamped-over"
        ),
    ],
)
def test_managed_and_cpu_only(
    manual: bool, mixed: bool, extra_labels: dict[str, str], devs: object, managed: bool, cpu_only: bool
) -> None:
    n = node_of(cpu_node("AMD", "AMD EPYC 7R32", extra=extra_labels))
    labels = nodefeature.desired_labels(n, devs, manual=manual, mixed_on_node=mixed)  # type: ignore[arg-type]
    assert (labels.get(keys.MANAGED) == "true") is managed
    assert (labels.get(keys.CPU_ONLY) == "true") is cpu_only


def test_rdma_labels_come_from_devices_interfaces() -> None:
    devs = devices(
        [NVIDIA],
        interfaces=[{"name": "ib0", "rdma": True, "state": "Active", "numaAffinity": "0", "distance": "PIX"}],
    )
    labels = nodefeature.desired_labels(
        node_of(cpu_node("AMD", "AMD EPYC 7R32")), devs, manual=True, mixed_on_node=True
    )
    assert {k: labels[k] for k in (keys.RDMA_CAPABLE, keys.RDMA_NUMA, keys.RDMA_DISTANCE)} == {
        keys.RDMA_CAPABLE: "true",
        keys.RDMA_NUMA: "0",
        keys.RDMA_DISTANCE: "PIX",
    }


def test_nodefeature_object() -> None:
    n = node_of(cpu_node("AMD", "AMD EPYC 7R32"), "gpu-7")
    obj = nodefeature.desired(n, None, manual=False, mixed_on_node=True, namespace="gpustack-system")
    assert obj["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert obj["kind"] == "NodeFeature"
    assert obj["metadata"]["name"] == "gpu-7-gpustack-worker"
    assert obj["metadata"]["namespace"] == "gpustack-system"
    assert obj["metadata"]["labels"] == {
        "nfd.node.kubernetes.io/node-name": "gpu-7",
        "app.kubernetes.io/part-of": "gpustack-operator-worker",
    }
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-7", "uid": "uid-gpu-7"}
    ]
    assert obj["spec"]["labels"][keys.MANAGED] == "true"
