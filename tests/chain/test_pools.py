"""Golden pools of the four-node mixed cluster under both values of instance-type-aware-cpu-manufacturer:
every InstanceType (name, identity, unit spec, schedule labels) and LocalQueue name."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, pools
from gpustack_worker.chain.nodes import node_hardware
from tests.chain.builders import mixed_cluster

INTEL = "intel-xeon-platinum-8259cl"


def _types(aware: bool) -> dict[str, dict[str, Any]]:
    hw = [h for h in (node_hardware(n) for n in mixed_cluster()) if h is not None]
    out: dict[str, dict[str, Any]] = {}
    for plan in flavors.plan_flavors(hw, mixed_on_node=True):
        body = pools.derived_instance_type(plan, aware=aware)
        out.setdefault(body["metadata"]["name"], body)
    return out


UNAWARE = {
    "gpustack--generic-linux-amd64": ("CPU-only", False, None, "generic", ("1", "2Gi")),
    "gpustack--nvidia-a10g-linux-amd64": ("NVIDIA-A10G", True, "nvidia-a10g", "generic", ("8", "64Gi")),
    "gpustack--nvidia-tesla-t4-linux-amd64": ("Tesla-T4", True, "nvidia-tesla-t4", "generic", ("8", "32Gi")),
}
AWARE = {
    "gpustack--amd-epyc-7r13-linux-amd64": (
        "AMD EPYC 7R13 Processor",
        False,
        None,
        "amd-epyc-7r13",
        ("1", "2Gi"),
    ),
    "gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64": (
        "Tesla-T4",
        True,
        "nvidia-tesla-t4",
        "amd-epyc-7r13",
        ("8", "32Gi"),
    ),
    "gpustack--amd-epyc-7r32-linux-amd64": ("AMD EPYC 7R32", False, None, "amd-epyc-7r32", ("1", "2Gi")),
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64": (
        "NVIDIA-A10G",
        True,
        "nvidia-a10g",
        "amd-epyc-7r32",
        ("8", "64Gi"),
    ),
    f"gpustack--{INTEL}-linux-amd64": (
        "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
        False,
        None,
        INTEL,
        ("1", "2Gi"),
    ),
    f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64": (
        "Tesla-T4",
        True,
        "nvidia-tesla-t4",
        INTEL,
        ("8", "32Gi"),
    ),
}


@pytest.mark.parametrize(
    ("aware", "want"), [(False, UNAWARE), (True, AWARE)], ids=["aware=false", "aware=true"]
)
def test_derived_instance_types(aware: bool, want: dict[str, tuple[Any, ...]]) -> None:
    got = _types(aware)
    assert {
        name: (
            b["spec"]["displayName"],
            b["spec"]["acceleratable"],
            b["spec"].get("acceleratorGroup"),
            b["spec"]["generalGroup"],
            (b["spec"]["unitResources"]["cpu"], b["spec"]["unitResources"]["ram"]),
        )
        for name, b in got.items()
    } == want
    for name, body in got.items():
        assert body["spec"]["localStorage"] == "100Gi"
        labels = body["metadata"]["labels"]
        assert labels[keys.DERIVED_FROM_NODE] == "true"
        assert labels[keys.QUEUE_ENTRANCE] == keys.local_queue_name(name)
        assert len(labels[keys.QUEUE_ENTRANCE]) == 31
        assert labels[keys.ACCELERATABLE] == str(body["spec"]["acceleratable"]).lower()
        general = {k for k in labels if k.startswith(keys.GENERAL_PREFIX)}
        assert general == ({keys.general_key(body["spec"]["generalGroup"])} if aware else set())


def test_local_queue_names_golden() -> None:
    # FNV-1a 64 of the queue name (reference Appendix A.1), computed independently.
    assert {name: keys.local_queue_name(name) for name in UNAWARE} == {
        "gpustack--generic-linux-amd64": "gpustack-fnv64-3b93966fd73eb9ec",
        "gpustack--nvidia-a10g-linux-amd64": "gpustack-fnv64-c4680bb149644f1c",
        "gpustack--nvidia-tesla-t4-linux-amd64": "gpustack-fnv64-6b371caa2da0b799",
    }


# --- issue 16 defect 3: the grouping setting decides; a type of the other grouping selects nothing --------
def _flavor_bodies() -> list[dict[str, Any]]:
    hw = [h for h in (node_hardware(n) for n in mixed_cluster()) if h is not None]
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    return [flavors.flavor_body(p, mixed_on_node=True, aware=False) for p in plans]


def _served(it: dict[str, Any], aware: bool) -> list[str]:
    labels = pools.schedule_labels(pools.identity_of(it), aware=aware)
    return [f["metadata"]["name"] for f in pools.flavors_of(pools.flavor_selector(labels), _flavor_bodies())]


@pytest.mark.parametrize("setting", [False, True], ids=["now-aware=false", "now-aware=true"])
def test_every_flavor_is_served_by_exactly_one_derived_type_whatever_types_are_left(setting: bool) -> None:
    # Types derived under both groupings exist side by side (create-only, never GC'd); under either
    # setting each flavor is in exactly one queue, the leftovers of the other grouping in none.
    left = {**_types(not setting), **_types(setting)}
    owners: dict[str, list[str]] = {}
    for name, it in left.items():
        for flavor in _served(it, setting):
            owners.setdefault(flavor, []).append(name)
    assert {f: len(o) for f, o in owners.items()} == {f["metadata"]["name"]: 1 for f in _flavor_bodies()}
    # The collapsed CPU type's name is also the aware name of the generic gKey's CPU pool: never a leftover.
    leftovers = set(left) - set(_types(setting)) - {"gpustack--generic-linux-amd64"}
    for name, it in left.items():
        other = pools.identity_of(it).other_grouping(aware=setting)
        assert other == (name in leftovers), name
        labels = pools.schedule_labels(pools.identity_of(it), aware=setting)
        assert (labels.get(keys.OTHER_GROUPING) == "true") == other


def _type(name: str, general: str, *, a_key: str = "", derived: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"acceleratable": bool(a_key), "generalGroup": general}
    spec.update({"os": "linux", "arch": "amd64"})
    if a_key:
        spec["acceleratorGroup"] = a_key
    labels = {keys.DERIVED_FROM_NODE: "true"} if derived else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


@pytest.mark.parametrize(
    ("it", "aware", "selector_general", "other"),
    [
        # Awareness on: generic is a gKey; its aware name for a CPU pool is also the collapsed name.
        (_type("gpustack--generic-linux-amd64", "generic"), True, keys.general_key("generic"), False),
        (_type("gpustack--generic-linux-amd64", "generic"), False, None, False),
        (
            _type("gpustack--generic--nvidia-a10g-linux-amd64", "generic", a_key="nvidia-a10g"),
            True,
            keys.general_key("generic"),
            False,
        ),
        # The collapsed accelerated type left from awareness off: the other grouping's.
        (
            _type("gpustack--nvidia-a10g-linux-amd64", "generic", a_key="nvidia-a10g"),
            True,
            keys.general_key("generic"),
            True,
        ),
        (_type("gpustack--amd-linux-amd64", "amd"), False, None, True),
        # An admin's type is served by its identity under the setting, whatever its name.
        (
            _type("my-a10g", "generic", a_key="nvidia-a10g", derived=False),
            True,
            keys.general_key("generic"),
            False,
        ),
        (_type("my-cpus", "amd", derived=False), False, None, False),
    ],
)
def test_schedule_labels_follow_the_setting(
    it: dict[str, Any], aware: bool, selector_general: str | None, other: bool
) -> None:
    labels = pools.schedule_labels(pools.identity_of(it), aware=aware)
    general = [k for k in labels if k.startswith(keys.GENERAL_PREFIX)]
    assert general == ([selector_general] if selector_general else [])
    assert (keys.OTHER_GROUPING in pools.flavor_selector(labels)) == other
    # The pool's member Nodes follow the same CPU rule as its flavor selector.
    selector = pools.flavor_selector(labels)
    generic_member = selector_general in (None, keys.general_key("generic"))
    assert pools.in_scope(selector, "generic") == (not other and generic_member)
