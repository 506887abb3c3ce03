"""Golden pools of the four-node mixed cluster under both values of instance-type-aware-cpu-manufacturer:
every InstanceType (name, identity, unit spec, schedule labels) and LocalQueue name; the one scope rule
(the name is the identity) over any set of InstanceTypes, authored or derived (issue 27 class 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, pools, queues
from gpustack_worker.chain.nodes import node_hardware
from tests.chain.builders import mixed_cluster, node
from tests.kit.properties import examples

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.chain.nodes import NodeHardware

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
        other = pools.identity_of(it).out_of_scope(aware=setting)
        assert other == (name in leftovers), name
        labels = pools.schedule_labels(pools.identity_of(it), aware=setting)
        assert (labels.get(keys.OTHER_GROUPING) == "true") == other


def _type(
    name: str, general: str, *, a_key: str = "", derived: bool = True, acceleratable: bool | None = None
) -> dict[str, Any]:
    accelerated = bool(a_key) if acceleratable is None else acceleratable
    spec: dict[str, Any] = {"acceleratable": accelerated, "generalGroup": general}
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
        # Issue 27 class 2: the name is the identity, whoever authored the type. An admin's type of the
        # setting-correct name is served; one of the other grouping's name, or a custom name, is not.
        (_type("gpustack--amd-linux-amd64", "amd", derived=False), True, keys.general_key("amd"), False),
        (_type("gpustack--amd-linux-amd64", "amd", derived=False), False, None, True),
        (
            _type("gpustack--nvidia-a10g-linux-amd64", "generic", a_key="nvidia-a10g", derived=False),
            False,
            None,
            False,
        ),
        (
            _type("gpustack--nvidia-a10g-linux-amd64", "generic", a_key="nvidia-a10g", derived=False),
            True,
            keys.general_key("generic"),
            True,
        ),
        (
            _type("my-a10g", "generic", a_key="nvidia-a10g", derived=False),
            True,
            keys.general_key("generic"),
            True,
        ),
        (_type("my-a10g", "generic", a_key="nvidia-a10g", derived=False), False, None, True),
        (_type("my-cpus", "amd", derived=False), False, None, True),
        # A custom name even with the derived label (copied by hand) serves nothing.
        (_type("my-cpus", "amd"), True, keys.general_key("amd"), True),
        # Acceleratable without an acceleratorGroup names no pool (the CRD refuses it; never a crash).
        (_type("gpustack--generic-linux-amd64", "generic", acceleratable=True), False, None, True),
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


# --- issue 27 class 2: the name is the identity, for every InstanceType, authored or derived ---------------
H100 = ("nvidia", "NVIDIA H100 80GB HBM3", 81559)
A10G = ("nvidia", "NVIDIA A10G", 23028)
#: CPU families (NFD vendor, CPU name, the bare gKey when the name reduces to the manufacturer): named AMD and
#: Intel, bare ``amd`` next to its named sibling, bare and named ``generic`` (a vendor NFD does not know).
CPU_FAMILIES = {
    "amd-epyc-7763": ("AMD", "AMD EPYC 7763 64-Core Processor", None),
    "intel-xeon-platinum-8480": ("Intel", "Intel(R) Xeon(R) Platinum 8480+", None),
    "amd": ("AMD", "", "amd"),
    "generic": ("VendorUnknown", "", "generic"),
    "generic-some": ("VendorUnknown", "Some CPU", None),
}
DEVICE_SETS: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "cpu": (),
    "h100x8": ((*H100[:2], 8, H100[2]),),
    "h100x4": ((*H100[:2], 4, H100[2]),),
    "a10gx1": ((*A10G[:2], 1, A10G[2]),),
    "h100x8+a10gx1": ((*H100[:2], 8, H100[2]), (*A10G[:2], 1, A10G[2])),
}
ISSUE_AMD_H100 = "gpustack--amd-epyc-7763--nvidia-h100-80gb-hbm3-linux-amd64"
ISSUE_COLLAPSED_H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
H100_KEY = "nvidia-h100-80gb-hbm3"


def _fleet_node(name: str, cpu: str, devices: str) -> dict[str, Any]:
    vendor, cpu_name, bare = CPU_FAMILIES[cpu]
    body = node(name, vendor=vendor, cpu_name=cpu_name, cores=8, devices=DEVICE_SETS[devices])
    if bare is not None:  # what the agent publishes for a bare-manufacturer gKey (docs/chain.md)
        body["metadata"]["labels"][keys.cpu_key_label(bare, bare)] = "true"
    return body


def _hardware(fleet: list[tuple[str, str]]) -> list[NodeHardware]:
    hw = [node_hardware(_fleet_node(f"n{i}", cpu, dev)) for i, (cpu, dev) in enumerate(fleet)]
    assert all(h is not None for h in hw)
    return [h for h in hw if h is not None]


#: ``(kind, a, b, c, d)`` recipes for InstanceTypes (drawn, then built against the fleet):
#: ``("derived", plan index, grouping, keeps the derived label, _)`` — a type the chain authored under that
#: grouping, or an admin's copy of it; ``("custom", generalGroup, acceleratorGroup, acceleratable, naming)``
#: with naming ``collapsed`` / ``aware`` (the name a grouping gives that identity), or a custom name.
Recipe = tuple[str, Any, Any, Any, Any]
GENERAL_GROUPS = (*CPU_FAMILIES, "intel", "")  # "" → the webhook's default, generic
NAMINGS = ("collapsed", "aware", "my-h100", "gpustack--h100", ISSUE_AMD_H100)


def _recipes() -> st.SearchStrategy[list[Recipe]]:
    derived = st.tuples(st.just("derived"), st.integers(0, 63), st.booleans(), st.booleans(), st.just(None))
    custom = st.tuples(
        st.just("custom"),
        st.sampled_from(GENERAL_GROUPS),
        st.sampled_from((H100_KEY, "nvidia-a10g", "")),
        st.booleans(),
        st.sampled_from(NAMINGS),
    )
    return st.lists(st.one_of(derived, custom), max_size=12)


def _custom(general: str, a_key: str, accelerated: bool, naming: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"acceleratable": accelerated, "os": "linux", "arch": "amd64"}
    if general:
        spec["generalGroup"] = general
    if a_key:
        spec["acceleratorGroup"] = a_key
    identity = pools.identity_of({"spec": spec})
    name = {
        "collapsed": identity.name_under(aware=False),
        "aware": identity.name_under(aware=True),
    }.get(naming, naming)
    return {"metadata": {"name": name, "labels": {}}, "spec": spec}


def _instance_types(plans: list[flavors.FlavorPlan], recipes: list[Recipe]) -> dict[str, dict[str, Any]]:
    """The InstanceTypes the recipes make, by name: a name is one object (the first to claim it wins)."""
    out: dict[str, dict[str, Any]] = {}
    for kind, a, b, c, d in recipes:
        if kind == "derived":
            if not plans:
                continue
            body = pools.derived_instance_type(plans[a % len(plans)], aware=b)
            if not c:  # an admin's copy of the derived type: the same name and spec, no derived label
                del body["metadata"]["labels"][keys.DERIVED_FROM_NODE]
        else:
            body = _custom(a, b, c, d)
        out.setdefault(body["metadata"]["name"], body)
    return out


def _serves(it: Mapping[str, Any], pool: pools.PoolIdentity, *, aware: bool) -> bool:
    """``it`` is the setting-correct type of ``pool``: its name and its spec identity (the CPU part only
    under awareness)."""
    mine = pools.identity_of(it)
    same = (mine.acceleratable, mine.accelerator_group, mine.os, mine.arch) == (
        pool.acceleratable,
        pool.accelerator_group,
        pool.os,
        pool.arch,
    )
    return same and (not aware or mine.general_group == pool.general_group)


def _check_one_queue_per_flavor(
    fleet: list[tuple[str, str]], recipes: list[Recipe], mixed: bool, aware: bool
) -> None:
    hw = _hardware(fleet)
    plans = flavors.plan_flavors(hw, mixed_on_node=mixed)
    bodies = [flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in plans]
    types = _instance_types(plans, recipes)
    owners: dict[str, list[str]] = {}
    members: dict[tuple[str, str], list[str]] = {}
    for name, it in types.items():
        identity = pools.identity_of(it)
        selector = pools.flavor_selector(pools.schedule_labels(identity, aware=aware))
        for flavor in pools.flavors_of(selector, bodies):
            owners.setdefault(flavor["metadata"]["name"], []).append(name)
        family = identity.accelerator_group if identity.acceleratable else "cpu"
        for member in queues.pool_nodes(identity, hw, mixed_on_node=mixed, selector=selector):
            members.setdefault((member, family), []).append(name)
        if identity.out_of_scope(aware=aware):
            assert keys.OTHER_GROUPING in selector, name
            reason = pools.scope_reason(identity)
            assert name in reason
            if identity.accelerator_group or not identity.acceleratable:
                assert identity.name_under(aware=aware) in reason  # names what this grouping expects
    assert {f: o for f, o in owners.items() if len(o) > 1} == {}  # no flavor promised to two queues
    assert {m: o for m, o in members.items() if len(o) > 1} == {}  # no Node counted by two queues
    for plan in plans:
        pool = pools.pool_of(plan, aware=aware)
        it = types.get(pool.name)
        if it is not None and _serves(it, pool, aware=aware):
            assert owners.get(plan.name) == [pool.name], plan.name


ISSUE_FLEET = [("amd-epyc-7763", "h100x8"), ("intel-xeon-platinum-8480", "h100x8")]
#: The issue's exact example: under aware=true the admin authors the AMD-named H100 type (no derived label),
#: the chain derives the Intel one; after the flip the chain derives the collapsed H100 type.
ISSUE_TYPES: list[Recipe] = [
    ("custom", "amd-epyc-7763", H100_KEY, True, ISSUE_AMD_H100),
    ("derived", 2, True, True, None),  # plan 2: the Intel H100 flavor (plans sort by name)
    ("derived", 0, False, True, None),
]


@pytest.mark.parametrize("aware", [False, True], ids=["aware=false", "aware=true"])
def test_the_issue_example_promises_each_h100_flavor_once(aware: bool) -> None:
    plans = flavors.plan_flavors(_hardware(ISSUE_FLEET), mixed_on_node=True)
    bodies = [flavors.flavor_body(p, mixed_on_node=True, aware=aware) for p in plans]
    types = _instance_types(plans, ISSUE_TYPES)
    assert types[ISSUE_AMD_H100]["metadata"]["labels"] == {}
    served = {
        name: [
            f["metadata"]["name"]
            for f in pools.flavors_of(
                pools.flavor_selector(pools.schedule_labels(pools.identity_of(it), aware=aware)), bodies
            )
        ]
        for name, it in types.items()
    }
    h100 = sorted(p.name for p in plans if p.device is not None)
    amd = [n for n in h100 if "amd-epyc-7763" in n]
    intel = [n for n in h100 if "intel" in n]
    assert len(amd) == len(intel) == 1
    intel_type = f"gpustack--intel-xeon-platinum-8480--{H100_KEY}-linux-amd64"
    if aware:
        assert served == {ISSUE_AMD_H100: amd, intel_type: intel, ISSUE_COLLAPSED_H100: []}
    else:
        assert served == {ISSUE_AMD_H100: [], intel_type: [], ISSUE_COLLAPSED_H100: h100}
        reason = pools.scope_reason(pools.identity_of(types[ISSUE_AMD_H100]))
        assert ISSUE_COLLAPSED_H100 in reason and "false" in reason
    _check_one_queue_per_flavor(ISSUE_FLEET, ISSUE_TYPES, True, aware)


@settings(max_examples=examples(400))
@example(fleet=ISSUE_FLEET, recipes=ISSUE_TYPES, mixed=True, aware=False)
@example(  # an acceleratable type without a group under the collapsed CPU pool's name
    fleet=[("amd", "a10gx1"), ("amd-epyc-7763", "cpu")],
    recipes=[("custom", "generic", "", True, "collapsed"), ("derived", 0, False, True, None)],
    mixed=True,
    aware=False,
)
@example(  # bare amd next to its named sibling, an admin's bare-amd type named for the aware grouping
    fleet=[("amd", "h100x8"), ("amd-epyc-7763", "h100x8")],
    recipes=[("custom", "amd", H100_KEY, True, "aware"), ("derived", 1, True, False, None)],
    mixed=True,
    aware=True,
)
@given(
    fleet=st.lists(
        st.tuples(st.sampled_from(tuple(CPU_FAMILIES)), st.sampled_from(tuple(DEVICE_SETS))),
        min_size=1,
        max_size=6,
    ),
    recipes=_recipes(),
    mixed=st.booleans(),
    aware=st.booleans(),
)
def test_every_flavor_is_promised_to_at_most_one_queue_whatever_types_exist(
    fleet: list[tuple[str, str]], recipes: list[Recipe], mixed: bool, aware: bool
) -> None:
    # Authored and derived types of both groupings, custom names, generalGroup generic / named / bare
    # vendor / defaulted: every flavor is in at most one queue's selection and every Node in at most one
    # pool per family — and in exactly that of the setting-correct type of its pool when one exists.
    _check_one_queue_per_flavor(fleet, recipes, mixed, aware)
