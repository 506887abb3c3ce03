"""Hypothesis strategies for whole fleets: scenarios (:mod:`gpustack_worker.simulate.scenario`) as
``gpustack-worker plan`` and ``simulate apply`` consume them, with the settings that change how a fleet is
grouped.

What a drawn fleet covers (issue 16, "What to show"):

- every manufacturer of :mod:`gpustack_worker.api.manufacturers`, with real product names (the 55-character
  "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"), names that normalise to 63 characters or more,
  unicode and punctuation;
- CPU names long, odd or reduced to nothing by normalisation; CPU vendors known, unknown (``VendorUnknown``)
  and odd, with or without NFD's family and id;
- CPU-only nodes, accelerated nodes and nodes with two accelerator models;
- unhealthy cards, models whose ledger is not published yet, partitioned (MIG) cards and allocations of
  every mode (exclusive, shared, sliced, partitioned);
- the admin's ``gpustack.ai/managed`` label absent, ``true``, ``false`` and not valid (``yes``, ``True``,
  ``1``, empty), under both values of ``node-management-manual``, ``instance-type-aware-cpu-manufacturer``
  and ``instance-type-mixed-on-node``;
- sometimes a rack TopologySource (configMap snapshot) over the nodes labelled ``example.com/rack=r1``,
  so a fleet has several topology profiles;
- with ``fleets(families=True)``, one of the rare families (:data:`FAMILIES`, drawn by ``sampled_from`` so
  each is reached every run, not by luck — issue 27): ``_``/``-``/case twins of a product or a CPU name,
  a bare-vendor CPU node next to a named sibling of the same vendor with the same accelerator and count,
  a node with exactly one sliceable card, a CPU-only node whose CPU name is past the 64-rune display
  limit (multi-byte runes too);
- with :func:`extra_types`, admin-authored InstanceTypes of both groupings and derived types of the other
  grouping (left by a setting flip), and with :func:`existing_queues`, queues that already exist with
  Kueue reporting reservations on some of their flavors;
- with :func:`damaged_fleets`, Nodes that stage 1-2 left incomplete: no os/arch, no hostname (so no
  profile), no CPU vendor (with or without family and id), no CPU name, the Device Manager's labels gone
  while ``Devices`` remains.

Every drawn scenario passes the scenario's shape (pydantic) by construction, and its cross-field rules
except the ones about the length of what it renders — the names that normalise past the key budget are drawn
on purpose (:data:`LONG_PRODUCTS`), and whether every object is then valid is an invariant to test, not a
filter. The strategies are reused by any test that wants whole fleets.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pytest
import yaml
from hypothesis import strategies as st

from gpustack_worker.api import identity, keys, kinds, manufacturers
from gpustack_worker.chain import pools
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.simulate import render
from gpustack_worker.simulate.scenario import Scenario

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from gpustack_worker.chain.flavors import FlavorPlan
    from gpustack_worker.cli.settings import WorkerSettings
    from gpustack_worker.simulate.scenario import NodeSpec

__all__ = (
    "CPUS",
    "FAMILIES",
    "LONG_CPU",
    "LONG_PRODUCTS",
    "MANAGED_VALUES",
    "PRODUCTS",
    "Damage",
    "DamagedFleet",
    "Fleet",
    "Racks",
    "damaged_fleets",
    "damages",
    "existing_queues",
    "extra_types",
    "fleets",
    "grouping",
    "node_specs",
    "racks",
    "rendering_damaged",
    "scenarios",
)

M: Final = keys.UNITS_PER_ACCELERATOR
#: The real product name of issue 16: 55 characters, its aKey 55 too.
RTX_PRO_6000: Final = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
#: Real products per manufacturer, as the vendors' SMIs print them.
PRODUCTS: Final[dict[str, tuple[str, ...]]] = {
    "nvidia": (
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "Tesla T4",
        "NVIDIA A10G",
        "NVIDIA GeForce RTX 4090",
        RTX_PRO_6000,
    ),
    "amd": ("AMD Instinct MI300X", "Radeon RX 7900 XTX"),
    "ascend": ("Ascend910B3", "Ascend 310P3"),
    "cambricon": ("MLU370-X8", "MLU590"),
    "hygon": ("DCU K100_AI", "Z100L"),
    "iluvatar": ("Iluvatar BI-V150", "MR-V100"),
    "metax": ("MetaX C500", "MXC550"),
    "mthreads": ("MTT S4000", "MTT S80"),
    "thead": ("PPU-ZW810E", "T-Head PPU"),
}
#: Product names that normalise to the key budget (63) or past it.
LONG_PRODUCTS: Final = (
    "Extremely Long Accelerator Product Name For Testing The Key Shortening Rules Of The Worker",
    "X" * 80,
    "Model 1234567890 1234567890 1234567890 1234567890 1234567890 12345",
)
#: Odd product names: unicode, punctuation, separators only between words, one character.
ODD_PRODUCTS: Final = (
    "Über-GPU ™ Ωmega (rev. a1)",
    "GPU/Accel:v2;b\\c",
    "  spaced   out  ",
    "a.b.c-d_e",
    "7",
    "模型 卡 X1",
)
#: A CPU whose name normalises past the key budget (its gKey is 63 characters before any suffix).
LONG_CPU: Final = (
    "AMD",
    "AMD Ryzen Threadripper PRO 7995WX 96-Cores with a very long marketing name indeed, v2",
)
#: (NFD vendor_id, CPU name annotation): known, unknown, odd, long, unicode, normalised to nothing.
CPUS: Final = (
    ("AMD", "AMD EPYC 7763 64-Core Processor"),
    ("Intel", "Intel(R) Xeon(R) Platinum 8480+"),
    ("Intel", "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz"),
    ("HygonGenuine", "Hygon C86 7285 32-core Processor"),
    ("ARM", "Neoverse-N1"),
    ("VendorUnknown", "Some Unknown CPU"),
    ("VendorUnknown", "(R)"),
    ("Intel", "@ 2.30GHz"),
    LONG_CPU,
    ("Zhaoxin", "ZHAOXIN KaiXian KX-U6780A@2.7GHz ™ ünïcødé"),
    ("AMD", "---"),
)
#: ``gpustack.ai/managed`` as an admin may leave it (None: absent); "true" weighted so manual fleets
#: still manage some nodes.
MANAGED_VALUES: Final = (None, None, "true", "true", "false", "yes", "True", "1", "")
#: NVIDIA-style MIG profiles (and T-Head's joined spelling), for 80 GiB cards split 7 / 8 ways.
_MIG_PROFILES: Final = {
    "nvidia": (
        {"name": "1g.10gb", "memoryMiB": 9856, "computeSlices": 1, "memorySlices": 1},
        {"name": "3g.40gb", "memoryMiB": 40192, "computeSlices": 3, "memorySlices": 4},
    ),
    "thead": (
        {"name": "1g12gb", "memoryMiB": 9856, "computeSlices": 1, "memorySlices": 1},
        {"name": "4g48gb", "memoryMiB": 40192, "computeSlices": 3, "memorySlices": 4},
    ),
}
_PARTITION_MEMORY_MIB: Final = 81920


def _a_key(manufacturer: str, product: str) -> str:
    return identity.accelerator_key(manufacturer, product)


@st.composite
def products(draw: st.DrawFn, manufacturer: str, *, long_names: bool = True) -> str:
    """A product name of ``manufacturer``: mostly real, sometimes odd or (``long_names``) too long."""
    pools = [st.sampled_from(PRODUCTS[manufacturer]), st.sampled_from(ODD_PRODUCTS)]
    if long_names:
        pools.append(st.sampled_from(LONG_PRODUCTS))
    weights = st.sampled_from((0, 0, 0, 1, 2) if long_names else (0, 0, 0, 1))
    return draw(pools[min(draw(weights), len(pools) - 1)])


@st.composite
def _allocations(
    draw: st.DrawFn, mfr: manufacturers.Manufacturer, count: int, parted: frozenset[int], profile: str
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for pos in range(count):
        if pos in parted:
            if draw(st.booleans()):
                out.append({"card": pos, "mode": "partitioned", "profiles": {profile: 1}})
            continue
        modes = ["none", "exclusive", "shared"] + (["sliced"] if mfr.logical_slices else [])
        mode = draw(st.sampled_from(modes))
        if mode == "exclusive":
            out.append({"card": pos, "mode": "exclusive"})
        elif mode == "shared":
            out.append({"card": pos, "mode": "shared", "shares": draw(st.integers(1, 10))})
        elif mode == "sliced":
            units = draw(st.sampled_from((1, M // 4, M // 2, M - 1, M)))
            out.append({"card": pos, "mode": "sliced", "units": units, "slices": 1})
    return out


@st.composite
def accelerators(draw: st.DrawFn, manufacturer: str, product: str, *, ledgers: bool = True) -> dict[str, Any]:
    """One accelerator entry (``count`` cards of one model) with its health, partitioning and ledger."""
    mfr = manufacturers.MANUFACTURERS[manufacturer]
    count = draw(st.integers(1, 8))
    entry: dict[str, Any] = {
        "manufacturer": manufacturer,
        "product": product,
        "memoryMiB": draw(st.sampled_from((16384, 24576, 65536, _PARTITION_MEMORY_MIB, 97887))),
        "count": count,
    }
    if draw(st.booleans()):
        entry["driverVersion"] = draw(st.sampled_from(("580.159.03", "6.2.4", "24.1.rc2")))
    if draw(st.booleans()):
        entry["family"] = draw(st.sampled_from(("Ampere", "Hopper", "Blackwell", "CDNA3")))
    unhealthy = draw(st.lists(st.integers(0, count - 1), unique=True, max_size=count))
    if draw(st.integers(0, 3)) == 0:
        entry["unhealthy"] = sorted(unhealthy)
    parted: frozenset[int] = frozenset()
    profile = ""
    if mfr.partition_kind and draw(st.integers(0, 2)) == 0:
        entry["memoryMiB"] = _PARTITION_MEMORY_MIB
        cards = draw(st.lists(st.integers(0, count - 1), unique=True, min_size=1, max_size=count))
        parted = frozenset(cards)
        offered = _MIG_PROFILES[manufacturer]
        entry["partitioning"] = {
            "kind": mfr.partition_kind,
            "cards": sorted(cards),
            "profiles": list(offered),
        }
        profile = str(draw(st.sampled_from(offered))["name"])
    published = not ledgers or draw(st.integers(0, 5)) > 0
    if not published:
        entry["ledgerPublished"] = False
    elif ledgers:
        entry["allocations"] = draw(_allocations(mfr, count, parted, profile))
    return entry


@st.composite
def node_specs(
    draw: st.DrawFn, name: str, *, long_names: bool = True, ledgers: bool = True
) -> dict[str, Any]:
    """One scenario node (as the YAML mapping): CPU-only, one model or two models."""
    vendor, cpu_name = draw(st.sampled_from(CPUS))
    cores = draw(st.sampled_from((1, 4, 8, 64)))
    cpu: dict[str, Any] = {"vendor": vendor, "model": cpu_name, "cores": cores}
    if draw(st.booleans()):
        cpu["family"] = draw(st.sampled_from((6, 25, 0)))
        cpu["id"] = draw(st.sampled_from((143, 1, 0)))
    node: dict[str, Any] = {
        "name": name,
        "arch": draw(st.sampled_from(("amd64", "amd64", "arm64"))),
        "cpu": cpu,
        "memory": "64Gi",
    }
    if draw(st.integers(0, 9)) == 9:
        node["os"] = "windows"
    labels: dict[str, str] = {}
    managed = draw(st.sampled_from(MANAGED_VALUES))
    if managed is not None:
        labels[keys.MANAGED] = managed
    if draw(st.booleans()):
        labels[RACK_LABEL] = draw(st.sampled_from(("r1", "r2")))
    if labels:
        node["labels"] = labels
    models = draw(
        st.lists(
            st.sampled_from(sorted(manufacturers.MANUFACTURERS)).flatmap(
                lambda m: st.tuples(st.just(m), products(m, long_names=long_names))
            ),
            max_size=2,
            unique_by=lambda t: _a_key(*t),
        ).filter(lambda ms: all(_a_key(m, p) != f"{m}-" for m, p in ms))
    )
    if models:
        node["accelerators"] = [draw(accelerators(m, p, ledgers=ledgers)) for m, p in models]
    return node


# --- the rare families (issue 27) ------------------------------------------------------------------------
#: Product names that differ only by ``_`` / ``-`` / case, per manufacturer: two identities or one, and
#: never one flavor declaring another's capacity.
PRODUCT_TWINS: Final = (
    ("hygon", ("DCU K100_AI", "DCU K100-AI")),
    ("nvidia", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100_SXM4_80GB")),
    ("nvidia", ("Tesla T4", "TESLA T4")),
    ("amd", ("AMD Instinct MI300X", "AMD INSTINCT MI300X", "AMD Instinct_MI300X")),
)
#: CPU names that differ only by ``_`` / ``-`` / case (same vendor).
CPU_TWINS: Final = (
    ("AMD", ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763 64_Core Processor")),
    ("Intel", ("Intel(R) Xeon(R) Platinum 8480+", "INTEL(R) XEON(R) PLATINUM 8480+")),
    ("HygonGenuine", ("Hygon C86 7285 32-core Processor", "Hygon C86_7285 32-core Processor")),
)
#: (vendor, a name that normalises to nothing → the bare-vendor gKey, a named sibling of that vendor).
BARE_SIBLINGS: Final = (
    ("AMD", "---", "AMD EPYC 7763 64-Core Processor"),
    ("Intel", "(R)", "Intel(R) Xeon(R) Platinum 8480+"),
    ("VendorUnknown", "(R)", "Some Unknown CPU"),
)
#: CPU names past the 64-rune display limit: ASCII, two-byte and three-byte runes.
DISPLAY_CPUS: Final = (
    ("AMD", "AMD EPYC " + "x" * 55),  # 64 runes: kept whole
    ("AMD", "AMD EPYC " + "x" * 56),  # 65: cut to 64
    ("Intel", "Intel(R) Xeon(R) Ünïcødé Ωmega " + "é" * 40),
    ("Zhaoxin", "ZHAOXIN KaiXian " + "模" * 60),
)


def _cpu(vendor: str, model: str, cores: int) -> dict[str, Any]:
    return {"vendor": vendor, "model": model, "cores": cores}


def _family_node(name: str, cpu: dict[str, Any], *accelerators: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "cpu": cpu, "memory": "64Gi"}
    if accelerators:
        node["accelerators"] = list(accelerators)
    return node


def _same_model(manufacturer: str, product: str, count: int) -> dict[str, Any]:
    return {"manufacturer": manufacturer, "product": product, "memoryMiB": 65536, "count": count}


@st.composite
def product_twins(draw: st.DrawFn, first: int) -> list[dict[str, Any]]:
    """Two or three nodes, each with one of a product's ``_``/``-``/case twins, same count, same CPU."""
    manufacturer, names = draw(st.sampled_from(PRODUCT_TWINS))
    count = draw(st.sampled_from((1, 2, 8)))
    cpu = _cpu("AMD", "AMD EPYC 7763 64-Core Processor", 8)
    return [
        _family_node(f"n{first + i}", cpu, _same_model(manufacturer, product, count))
        for i, product in enumerate(names)
    ]


@st.composite
def cpu_twins(draw: st.DrawFn, first: int) -> list[dict[str, Any]]:
    """Two nodes whose CPU names are twins, same cores, CPU-only or with the same accelerator."""
    vendor, names = draw(st.sampled_from(CPU_TWINS))
    cores = draw(st.sampled_from((8, 64)))
    accelerated = draw(st.booleans())
    acc = (_same_model("nvidia", "Tesla T4", 2),) if accelerated else ()
    return [_family_node(f"n{first + i}", _cpu(vendor, n, cores), *acc) for i, n in enumerate(names)]


@st.composite
def bare_siblings(draw: st.DrawFn, first: int) -> list[dict[str, Any]]:
    """A bare-vendor CPU node (no CPU name, family or id: gKey = the vendor) next to a named sibling of
    that vendor with the same cores, the same accelerator model and the same card count."""
    vendor, bare, named = draw(st.sampled_from(BARE_SIBLINGS))
    cores = draw(st.sampled_from((8, 64)))
    manufacturer = draw(st.sampled_from(sorted(PRODUCTS)))
    acc = _same_model(manufacturer, PRODUCTS[manufacturer][0], draw(st.sampled_from((1, 2))))
    nodes = [
        _family_node(f"n{first}", _cpu(vendor, bare, cores), acc),
        _family_node(f"n{first + 1}", _cpu(vendor, named, cores), acc),
    ]
    if draw(st.booleans()):  # and a CPU-only pair of the same vendor and cores
        nodes += [
            _family_node(f"n{first + 2}", _cpu(vendor, bare, cores)),
            _family_node(f"n{first + 3}", _cpu(vendor, named, cores)),
        ]
    return nodes


@st.composite
def one_sliceable_card(draw: st.DrawFn, first: int) -> list[dict[str, Any]]:
    """A node with exactly one card, of a manufacturer that slices, free or holding one slice."""
    manufacturer = draw(
        st.sampled_from(sorted(n for n, m in manufacturers.MANUFACTURERS.items() if m.logical_slices))
    )
    acc = _same_model(manufacturer, PRODUCTS[manufacturer][0], 1)
    if draw(st.booleans()):
        acc["allocations"] = [
            {"card": 0, "mode": "sliced", "units": draw(st.sampled_from((1, M // 2, M))), "slices": 1}
        ]
    return [_family_node(f"n{first}", _cpu("AMD", "AMD EPYC 7763 64-Core Processor", 8), acc)]


@st.composite
def long_display_cpu(draw: st.DrawFn, first: int) -> list[dict[str, Any]]:
    """A CPU-only node whose CPU name is at or past the 64-rune display limit."""
    vendor, model = draw(st.sampled_from(DISPLAY_CPUS))
    return [_family_node(f"n{first}", _cpu(vendor, model, 8))]


#: Every rare family, by name: ``sampled_from`` over these reaches each in every run.
FAMILIES: Final = {
    "product-twins": product_twins,
    "cpu-twins": cpu_twins,
    "bare-siblings": bare_siblings,
    "one-sliceable-card": one_sliceable_card,
    "long-display-cpu": long_display_cpu,
}


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    min_nodes: int = 1,
    max_nodes: int = 8,
    long_names: bool = True,
    ledgers: bool = True,
    families: bool = False,
) -> Scenario:
    """A whole fleet as a validated :class:`Scenario` (nodes ``n0``, ``n1``, … so names never clash); with
    ``families``, fewer random nodes and one rare family (:data:`FAMILIES`) next to them."""
    size = draw(st.integers(0 if families else min_nodes, max_nodes // 2 if families else max_nodes))
    nodes = [draw(node_specs(f"n{i}", long_names=long_names, ledgers=ledgers)) for i in range(size)]
    if families:
        family = FAMILIES[draw(st.sampled_from(sorted(FAMILIES)))]
        nodes += draw(family(len(nodes)))
    return Scenario.model_validate({"nodes": nodes})


@dataclass(frozen=True, slots=True)
class Grouping:
    """The settings that change how a fleet is grouped (reference §4.2)."""

    aware: bool
    mixed: bool
    manual: bool

    def as_data(self) -> dict[str, str]:
        """The settings ConfigMap's data (what ``--set`` and the live ConfigMap take)."""
        return {
            "instance-type-aware-cpu-manufacturer": str(self.aware).lower(),
            "instance-type-mixed-on-node": str(self.mixed).lower(),
            "node-management-manual": str(self.manual).lower(),
        }

    def settings(self) -> WorkerSettings:
        return parse_sets([f"{k}={v}" for k, v in self.as_data().items()])


def grouping() -> st.SearchStrategy[Grouping]:
    """Both values of every grouping setting."""
    return st.builds(Grouping, aware=st.booleans(), mixed=st.booleans(), manual=st.booleans())


#: The rack TopologySource's levels, coarsest first (the hostname level is added by the profiles).
RACK_LEVELS: Final = (keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK)
#: The admin label the rack TopologySource selects by (drawn on some nodes by :func:`node_specs`).
RACK_LABEL: Final = "example.com/rack"
#: Where the source's snapshot ConfigMap lives.
SNAPSHOT_CONFIG_MAP: Final = {"namespace": kinds.SYSTEM_NAMESPACE, "name": "fleet-inventory"}
SNAPSHOT_KEY: Final = "snapshot.yaml"


@dataclass(frozen=True, slots=True)
class Racks:
    """A configMap TopologySource selecting the nodes labelled ``example.com/rack=r1``, and its snapshot
    placing each of them in a region, zone and rack (the other nodes keep the hostname-only profile)."""

    #: Node name → (region, zone, rack).
    placement: dict[str, tuple[str, str, str]]

    def source(self) -> dict[str, Any]:
        return {
            "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
            "kind": kinds.TOPOLOGY_SOURCE.kind,
            "metadata": {"name": "fleet-racks"},
            "spec": {
                "nodeSelector": {"matchLabels": {RACK_LABEL: "r1"}},
                "levels": list(RACK_LEVELS),
                "configMap": {
                    "configMapRef": dict(SNAPSHOT_CONFIG_MAP),
                    "key": SNAPSHOT_KEY,
                    "maxStaleness": "10m",
                },
            },
        }

    def snapshot(self) -> str:
        nodes = {name: dict(zip(RACK_LEVELS, where, strict=True)) for name, where in self.placement.items()}
        body = {"apiVersion": keys.SNAPSHOT_API_VERSION, "revision": "fleet-1", "nodes": nodes}
        return str(yaml.safe_dump(body))

    def config_map(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": dict(SNAPSHOT_CONFIG_MAP),
            "data": {SNAPSHOT_KEY: self.snapshot()},
        }


@st.composite
def racks(draw: st.DrawFn, scenario: Scenario) -> Racks | None:
    """Sometimes a rack TopologySource over the fleet's ``r1`` nodes (None: no source)."""
    selected = [n.name for n in scenario.nodes if n.labels.get(RACK_LABEL) == "r1"]
    if not selected or not draw(st.booleans()):
        return None
    placement = {}
    for name in selected:
        zone = draw(st.sampled_from(("zone-a", "zone-b")))
        # a rack value sits under one zone only (the snapshot's one-parent-chain rule)
        placement[name] = ("region-1", zone, f"{zone}-rack-{draw(st.integers(1, 2))}")
    return Racks(placement)


@dataclass(frozen=True, slots=True)
class Fleet:
    """A scenario, the grouping settings it is planned under, and maybe a rack TopologySource."""

    scenario: Scenario
    grouping: Grouping
    racks: Racks | None = None


@st.composite
def fleets(
    draw: st.DrawFn,
    *,
    min_nodes: int = 1,
    max_nodes: int = 8,
    long_names: bool = True,
    ledgers: bool = True,
    families: bool = False,
) -> Fleet:
    """A scenario with its grouping settings and, sometimes, a rack TopologySource (with ``families``,
    one rare family of nodes in every fleet)."""
    scenario = draw(
        scenarios(
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            long_names=long_names,
            ledgers=ledgers,
            families=families,
        )
    )
    return Fleet(scenario, draw(grouping()), draw(racks(scenario)))


# --- Nodes NFD or the Device Manager left incomplete ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Damage:
    """What stage 1-2 left off one Node (the scenario format always writes these, so a damaged fleet is
    rendered by the simulator and then has them removed — see :func:`rendering_damaged`)."""

    #: ``kubernetes.io/os`` / ``kubernetes.io/arch`` missing on the Node (the Devices object keeps its own).
    no_os: bool = False
    no_arch: bool = False
    #: ``kubernetes.io/hostname`` missing (the hostname-level of every profile).
    no_hostname: bool = False
    #: NFD's ``cpu-model.vendor_id`` missing (an unknown CPU), with or without its family and id.
    no_vendor: bool = False
    no_family_id: bool = False
    #: The ``feature.gpustack.ai/cpu-name`` annotation missing.
    no_cpu_name: bool = False
    #: The Device Manager's NodeFeature missing while the ``Devices`` object stays.
    no_device_manager: bool = False

    def node(self, body: dict[str, Any]) -> dict[str, Any]:
        """The rendered Node with this damage."""
        meta = dict(body["metadata"])
        labels = dict(meta.get("labels") or {})
        drop = {
            keys.OS: self.no_os,
            keys.ARCH: self.no_arch,
            keys.HOSTNAME: self.no_hostname,
            keys.NFD_CPU_VENDOR: self.no_vendor,
            keys.NFD_CPU_FAMILY: self.no_family_id,
            keys.NFD_CPU_ID: self.no_family_id,
        }
        meta["labels"] = {k: v for k, v in labels.items() if not drop.get(k, False)}
        if self.no_cpu_name:
            meta["annotations"] = {
                k: v for k, v in (meta.get("annotations") or {}).items() if k != keys.CPU_NAME_ANNOTATION
            }
        return {**body, "metadata": meta}


def damages() -> st.SearchStrategy[Damage]:
    """Mostly a whole Node, sometimes one or more pieces missing."""
    rare = st.integers(0, 5).map(lambda n: n == 5)
    return st.builds(
        Damage,
        no_os=rare,
        no_arch=rare,
        no_hostname=rare,
        no_vendor=rare,
        no_family_id=rare,
        no_cpu_name=rare,
        no_device_manager=rare,
    )


@dataclass(frozen=True, slots=True)
class DamagedFleet:
    """A fleet and what stage 1-2 left off some of its Nodes (Node name → damage)."""

    fleet: Fleet
    damage: dict[str, Damage]


@st.composite
def damaged_fleets(draw: st.DrawFn, *, max_nodes: int = 6) -> DamagedFleet:
    """A fleet with a damage drawn for every Node."""
    fleet = draw(fleets(max_nodes=max_nodes, long_names=False))
    return DamagedFleet(fleet, {n.name: draw(damages()) for n in fleet.scenario.nodes})


@contextlib.contextmanager
def rendering_damaged(damage: dict[str, Damage]) -> Iterator[None]:
    """While open, the simulator's renderer (what ``plan`` and the tests render stages 1-2 with) leaves
    each Node's damage off: its real output, with the pieces removed. ``plan`` takes a scenario only, and a
    scenario always writes these pieces, so this is the one way to plan a partially labelled fleet."""
    real_node, real_feature = render.render_node, render.render_node_feature

    def node(spec: NodeSpec, ready_since: str) -> dict[str, Any]:
        body = real_node(spec, ready_since)
        return damage[spec.name].node(body) if spec.name in damage else body

    def feature(spec: NodeSpec, node_uid: str) -> dict[str, Any] | None:
        hurt = damage.get(spec.name)
        return None if hurt is not None and hurt.no_device_manager else real_feature(spec, node_uid)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "render_node", node)
        patch.setattr(render, "render_node_feature", feature)
        yield


# --- InstanceTypes besides the derived ones, and queues Kueue already reports on (issue 27) ---------------
#: What else an InstanceType can be: authored by an admin under either grouping (no derived label), or
#: derived under the other grouping and left by a flip of ``instance-type-aware-cpu-manufacturer``.
EXTRA_TYPE_KINDS: Final = ("authored-aware", "authored-collapsed", "derived-other-grouping")


@st.composite
def extra_types(draw: st.DrawFn, plans: list[FlavorPlan], *, aware: bool) -> list[dict[str, Any]]:
    """InstanceTypes for some of the fleet's pools that the chain did not derive under ``aware``: every
    kind of :data:`EXTRA_TYPE_KINDS` is drawn by ``sampled_from`` (so each is reached every run)."""
    if not plans:
        return []
    out = []
    for plan in draw(st.lists(st.sampled_from(plans), min_size=1, max_size=4)):
        kind = draw(st.sampled_from(EXTRA_TYPE_KINDS))
        if kind == "derived-other-grouping":
            out.append(pools.derived_instance_type(plan, aware=not aware))
            continue
        body = pools.derived_instance_type(plan, aware=kind == "authored-aware")
        labels = body["metadata"]["labels"]
        for key in (keys.DERIVED_FROM_NODE, keys.OTHER_GROUPING, keys.QUEUE_ENTRANCE):
            labels.pop(key, None)
        out.append(body)
    return out


def queue_with_usage(queue: Mapping[str, Any], reserved: Iterable[str]) -> dict[str, Any]:
    """``queue`` as Kueue reports it for its current generation: active, every flavor of its groups
    listed in ``flavorsReservation`` / ``flavorsUsage``, the ``reserved`` ones with one Workload's quota."""
    reserved = set(reserved)
    listed = [
        (str(f["name"]), [str(r["name"]) for r in f.get("resources") or ()])
        for g in (queue.get("spec") or {}).get("resourceGroups") or ()
        for f in g.get("flavors") or ()
    ]
    usage = [
        {
            "name": name,
            "resources": [{"name": r, "total": "1" if name in reserved else "0"} for r in resources],
        }
        for name, resources in listed
    ]
    count = len(reserved & {name for name, _ in listed})
    status = {
        "conditions": [
            {"type": "Active", "status": "True", "reason": "Ready", "message": "", "observedGeneration": 1}
        ],
        "reservingWorkloads": count,
        "admittedWorkloads": count,
        "flavorsReservation": usage,
        "flavorsUsage": usage,
    }
    return {**queue, "metadata": {**queue["metadata"], "generation": 1}, "status": status}


@st.composite
def existing_queues(draw: st.DrawFn, queues: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each queue of ``queues`` as Kueue reports it, with reservations on a drawn subset of its flavors
    (none, some or all)."""
    out = {}
    for name, queue in sorted(queues.items()):
        flavors = sorted(
            str(f["name"])
            for g in (queue.get("spec") or {}).get("resourceGroups") or ()
            for f in g.get("flavors") or ()
        )
        reserved = draw(st.sets(st.sampled_from(flavors))) if flavors else set()
        out[name] = queue_with_usage(queue, reserved)
    return out
