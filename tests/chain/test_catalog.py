"""The InstanceTypeFlavor catalog view over the flavors of the four-node mixed cluster."""

from __future__ import annotations

from gpustack_worker.chain import flavors
from gpustack_worker.chain.catalog import catalog
from gpustack_worker.chain.nodes import node_hardware
from tests.chain.builders import mixed_cluster


def _flavors(aware: bool) -> list[dict[str, object]]:
    hw = [h for h in (node_hardware(n) for n in mixed_cluster()) if h is not None]
    return list(flavors.desired_flavors(hw, mixed_on_node=True, aware=aware).values())


def test_unaware_catalog_collapses_cpus() -> None:
    entries = catalog(_flavors(False), aware=False)
    assert [e["name"] for e in entries] == [
        "gpustack--generic",
        "gpustack--nvidia-a10g",
        "gpustack--nvidia-tesla-t4",
    ]
    generic, a10g, _ = entries
    assert generic["spec"] == {
        "acceleratable": False,
        "manufacturer": "generic",
        "sliceable": False,
        "generalGroup": "generic",
    }
    assert a10g["spec"] == {
        "acceleratorGroup": "nvidia-a10g",
        "acceleratable": True,
        "manufacturer": "nvidia",
        "product": "NVIDIA-A10G",
        "memory": "23028Mi",
        "sliceable": True,
    }


def test_aware_catalog_splits_per_cpu() -> None:
    names = [e["name"] for e in catalog(_flavors(True), aware=True)]
    assert names == [
        "gpustack--amd-epyc-7r13",
        "gpustack--amd-epyc-7r13--nvidia-tesla-t4",
        "gpustack--amd-epyc-7r32",
        "gpustack--amd-epyc-7r32--nvidia-a10g",
        "gpustack--intel-xeon-platinum-8259cl",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4",
    ]


def test_deleting_and_foreign_flavors_are_not_listed() -> None:
    items = _flavors(False)
    deleting = [{**f, "metadata": {**f["metadata"], "deletionTimestamp": "x"}} for f in items]  # type: ignore[dict-item]
    assert catalog(deleting, aware=False) == []
    assert catalog([{"metadata": {"name": "someone-elses", "labels": {}}}], aware=False) == []
