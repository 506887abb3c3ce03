"""Name and key formats of reference §2.1.2, §3.2, §3.3 and §8.2, built through :mod:`api.keys`."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.api import identity, keys, manufacturers, validation
from gpustack_worker.api.normalize import fnv64a_hex, normalize_name
from tests.kit.properties import examples

DEFAULT_PROFILE = "fnv64-87bf574bea2a4f23"  # reference §2.1.2 (DERIVED)


def test_default_profile_is_the_hostname_only_hierarchy() -> None:
    assert keys.topology_profile([keys.HOSTNAME]) == DEFAULT_PROFILE
    assert keys.topology_profile((keys.HOSTNAME,)) == DEFAULT_PROFILE


def test_profile_joins_levels_with_nul() -> None:
    levels = ["topology.kubernetes.io/region", "topology.kubernetes.io/zone", keys.HOSTNAME]
    assert keys.topology_profile(levels) == "fnv64-" + fnv64a_hex("\x00".join(levels))
    # Order matters: coarsest first is a different hierarchy from the reverse.
    assert keys.topology_profile(levels) != keys.topology_profile(list(reversed(levels)))


@pytest.mark.parametrize(
    "cluster_queue",
    [
        "gpustack--nvidia-a10g-linux-amd64",
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
        "gpustack--generic-linux-amd64",
        "x" * 253,
    ],
    ids=["accelerated", "aware", "cpu", "longest-name"],
)
def test_local_queue_name(cluster_queue: str) -> None:
    name = keys.local_queue_name(cluster_queue)
    assert len(name) == 31
    assert name == "gpustack-fnv64-" + fnv64a_hex(cluster_queue)
    assert name.startswith(keys.LOCAL_QUEUE_PREFIX)


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (keys.general_key("amd"), "general.feature.gpustack.ai/amd"),
        (keys.general_key("amd-epyc-7r32"), "general.feature.gpustack.ai/amd-epyc-7r32"),
        (keys.accelerator_key("nvidia-a10g"), "acceleratable.feature.gpustack.ai/nvidia-a10g"),
        (keys.count_key(keys.general_key("amd-epyc-7r32")), keys.general_key("amd-epyc-7r32") + ".count"),
        (keys.sliced_max_free_units_key("nvidia-a10g"), "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"),
        (keys.shared_free_cards_key("nvidia-a10g"), "shared-free-cards.fit.gpustack.ai/nvidia-a10g"),
        (keys.credits_resource("nvidia"), "credits.gpustack.ai/nvidia"),
        (keys.sliced_resource("nvidia.com/gpu"), "nvidia.com/gpu.sliced"),
        (keys.sliced_resource("nvidia.com/gpu", "units"), "nvidia.com/gpu.sliced.units"),
        (keys.sliced_resource("amd.com/gpu", "memory-mib"), "amd.com/gpu.sliced.memory-mib"),
        (keys.partitioned_resource("nvidia.com/gpu"), "nvidia.com/gpu.partitioned"),
        (
            keys.partitioned_resource("nvidia.com/gpu", "mig-3g.40gb"),
            "nvidia.com/gpu.partitioned.mig-3g.40gb",
        ),
        (keys.worker_nodefeature_name("node-a"), "node-a-gpustack-worker"),
        (keys.device_manager_nodefeature_name("node-a"), "node-a-gpustack-device-manager"),
        (keys.topology_name(DEFAULT_PROFILE), "gpustack-fnv64-87bf574bea2a4f23"),
        (
            keys.cpu_flavor_name("amd-epyc-7r32", "linux", "amd64", 4, DEFAULT_PROFILE),
            "gpustack--amd-epyc-7r32-linux-amd64-4c-fnv64-87bf574bea2a4f23",
        ),
        (
            keys.device_flavor_name("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64", 1, DEFAULT_PROFILE),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-fnv64-87bf574bea2a4f23",
        ),
        (keys.pool_name("linux", "amd64"), "gpustack--generic-linux-amd64"),
        (keys.pool_name("linux", "amd64", "nvidia-a10g"), "gpustack--nvidia-a10g-linux-amd64"),
        (
            keys.pool_name("linux", "amd64", g_key="amd-epyc-7r32", aware=True),
            "gpustack--amd-epyc-7r32-linux-amd64",
        ),
        (
            keys.pool_name("linux", "amd64", "nvidia-a10g", "amd-epyc-7r32", aware=True),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
        ),
    ],
    ids=[
        "general-mfr",
        "general-gkey",
        "acceleratable-akey",
        "count",
        "fit-sliced",
        "fit-shared",
        "credits",
        "sliced-pool",
        "sliced-units",
        "sliced-memory-mib",
        "partitioned-pool",
        "partitioned-profile",
        "worker-nodefeature",
        "dm-nodefeature",
        "kueue-topology",
        "cpu-flavor",
        "device-flavor",
        "pool-generic",
        "pool-unaware-accelerated",
        "pool-aware-cpu",
        "pool-aware-accelerated",
    ],
)
def test_builders(built: str, expected: str) -> None:
    assert built == expected


@pytest.mark.parametrize(
    ("constant", "expected"),
    [
        (keys.UNITS_PER_ACCELERATOR, 1_600_000),
        (keys.UNITS_PER_SHARE, keys.UNITS_PER_ACCELERATOR // keys.SHARES_PER_ACCELERATOR),
        (keys.UNITS_PER_PERCENT, keys.UNITS_PER_ACCELERATOR // 100),
        (keys.SHARES_PER_ACCELERATOR, 10),
    ],
    ids=["M", "share", "percent", "shares-per-card"],
)
def test_unit_constants(constant: int, expected: int) -> None:
    assert constant == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (keys.MANAGED, "gpustack.ai/managed"),
        (keys.TOPOLOGY_PROFILE, "topology.gpustack.ai/profile"),
        (keys.RESOURCE_TYPE, "resource.gpustack.ai/type"),
        (keys.SCHEDULE_QUEUE_ANNOTATION, "schedule.gpustack.ai/queue"),
        (keys.DERIVED_FROM_NODE, "schedule.gpustack.ai/derived-from-node"),
        (keys.FINALIZER_CONTROLLED, "gpustack.ai/controlled"),
        (keys.CPU_NAME_ANNOTATION, "feature.gpustack.ai/cpu-name"),
        (keys.NFD_CPU_VENDOR, "feature.node.kubernetes.io/cpu-model.vendor_id"),
        (keys.RDMA_CAPABLE, "feature.gpustack.ai/rdma.capable"),
    ],
    ids=["managed", "profile", "type", "queue", "derived", "finalizer", "cpu-name", "vendor", "rdma"],
)
def test_catalogue_keys(key: str, expected: str) -> None:
    assert key == expected


def test_cpu_detail_annotations_cover_the_catalogue() -> None:
    suffixes = [k.removeprefix("feature.gpustack.ai/cpu-") for k in keys.CPU_DETAIL_ANNOTATIONS]
    assert suffixes == [
        "family",
        "physical-cores",
        "threads-per-core",
        "logical-cores",
        "stepping",
        "cache-line",
        "hz",
        "boost-freq",
        "cache-l1i",
        "cache-l1d",
        "cache-l2",
        "cache-l3",
    ]


# --- shortened keys (issue 16 defect 4) ------------------------------------------------------------
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"


def _suffixed_keys(feature_key: str) -> list[str]:
    return [
        keys.count_key(feature_key),
        keys.capacity_key(feature_key),
        *(keys.descriptor_key(feature_key, d) for d in ("product", "memory", "cores", "family", "comcap")),
    ]


def test_the_named_product_keeps_every_key_that_fits_and_shortens_capacity() -> None:
    a_key = identity.accelerator_key("nvidia", RTX_PRO)
    assert a_key == "nvidia-rtx-pro-6000-blackwell-max-q-workstation-edition" and len(a_key) == 55
    feature = keys.accelerator_key(a_key)
    # What fits is spelled exactly as the reference spells it (the Device Manager's own keys).
    assert keys.count_key(feature) == f"{feature}.count"
    assert keys.descriptor_key(feature, "product") == f"{feature}.product"  # 63: fits
    # ".capacity" would make a 64-character name part: head, '-', 8 hex of FNV-1a over the aKey, suffix.
    capacity = keys.capacity_key(feature)
    assert capacity == f"{keys.ACCELERATABLE_PREFIX}{a_key[:45]}-{fnv64a_hex(a_key)[:8]}.capacity"
    assert len(capacity.split("/")[1]) == 63
    assert all(validation.is_qualified_name(k) for k in _suffixed_keys(feature))


@pytest.mark.parametrize(
    "feature",
    [
        keys.accelerator_key("nvidia-" + "b" * 56),  # a 63-character aKey
        keys.general_key("amd-" + "x" * 59),  # a 63-character gKey
    ],
    ids=["akey-63", "gkey-63"],
)
def test_a_63_character_key_gets_every_suffix_shortened_with_one_tag(feature: str) -> None:
    stem = feature.split("/")[1]
    assert len(stem) == 63 and validation.is_qualified_name(feature)
    built = _suffixed_keys(feature)
    tag = fnv64a_hex(stem)[:8]
    for key in built:
        name = key.split("/")[1]
        assert validation.is_qualified_name(key), key
        assert len(name) == 63 and f"-{tag}." in name
    assert len(set(built)) == len(built)
    bare = keys.cpu_key_label("x" * 63, "x" * 63)
    assert validation.is_qualified_name(bare) and bare.endswith(keys.BARE_CPU_SUFFIX)


def test_a_long_partition_profile_keeps_its_family_prefix() -> None:
    resource = keys.partitioned_resource("nvidia.com/gpu", "mig-" + "7g.80gb-me." * 8)
    assert resource.startswith("nvidia.com/gpu.partitioned.mig-7g.80gb")
    assert validation.is_qualified_name(resource)


def test_shortening_is_only_for_what_does_not_fit() -> None:
    assert keys.shortened("a" * 63) == "a" * 63
    assert keys.shortened("a" * 57, after=".count") == "a" * 57 + ".count"
    cut = keys.shortened("a" * 58, after=".count")
    assert cut == "a" * 48 + "-" + fnv64a_hex("a" * 58)[:8] + ".count"
    # Separators at the cut are dropped, so the head still ends in a letter or digit.
    assert keys.shortened("ab" + "-" * 60 + "z", after=".count").startswith("ab-")
    with pytest.raises(ValueError, match="no room"):
        keys.shortened("x", before="p" * 60, after=".capacity")


@pytest.mark.parametrize(
    ("a_key", "g_key", "aware", "expected"),
    [
        ("", "generic", False, "gpustack--generic-linux-amd64"),
        ("", "amd-epyc-7r32", False, "gpustack--generic-linux-amd64"),
        ("nvidia-a10g", "generic", False, "gpustack--nvidia-a10g-linux-amd64"),
        ("", "generic", True, "gpustack--generic-linux-amd64"),
        ("", "amd", True, "gpustack--amd-linux-amd64"),
        # Issue 16 defect 3: under awareness ``generic`` is a gKey like any other.
        ("nvidia-a10g", "generic", True, "gpustack--generic--nvidia-a10g-linux-amd64"),
        # Issue 27 class 3: a key with ``_`` is spelled ``-`` plus the key's tag, so ``hygon-k100-ai`` keeps
        # its own name.
        (
            "hygon-k100_ai",
            "amd",
            True,
            f"gpustack--amd--hygon-k100-ai-{fnv64a_hex('hygon-k100_ai')[:8]}-linux-amd64",
        ),
        ("hygon-k100-ai", "amd", True, "gpustack--amd--hygon-k100-ai-linux-amd64"),
    ],
)
def test_pool_name_is_decided_by_the_grouping_not_the_gkey(
    a_key: str, g_key: str, aware: bool, expected: str
) -> None:
    assert keys.pool_name("linux", "amd64", a_key, g_key, aware=aware) == expected


def test_cpu_key_label_pins_a_bare_manufacturer_with_its_own_label() -> None:
    assert keys.cpu_key_label("amd-epyc-7r32", "amd") == keys.general_key("amd-epyc-7r32")
    assert keys.cpu_key_label("amd", "amd") == "general.feature.gpustack.ai/amd.bare"
    assert keys.cpu_key_label("generic", "generic") == "general.feature.gpustack.ai/generic.bare"
    assert keys.cpu_key_label("generic-25-1", "generic") == keys.general_key("generic-25-1")


_NAME_TEXT = st.text(
    st.sampled_from([*"abcXYZ0189 -_.@()/", "é", "ß", "Ⅻ", "🙂", "\t"]), min_size=0, max_size=120
)


@settings(max_examples=examples(300))
@given(
    mfr=st.sampled_from(sorted(manufacturers.MANUFACTURERS)),
    products=st.lists(_NAME_TEXT, min_size=2, max_size=4, unique=True),
    # vendor_id is itself an NFD label value, so at most 63 characters; a gKey can then exceed 63.
    vendor=st.sampled_from(["AMD", "Intel", "HygonGenuine", "", "VendorUnknown", "A" * 63]),
    cpu_name=_NAME_TEXT,
    os=st.sampled_from(["linux", "windows"]),
    cards=st.integers(1, 64),
    cores=st.integers(1, 4096),
)
def test_every_built_key_name_and_value_is_valid_deterministic_and_distinct(
    mfr: str, products: list[str], vendor: str, cpu_name: str, os: str, cards: int, cores: int
) -> None:
    labels = {keys.NFD_CPU_VENDOR: vendor} if vendor else {}
    g_key = identity.general_key(labels, {keys.CPU_NAME_ANNOTATION: cpu_name})
    cpu_mfr = identity.cpu_manufacturer(labels)
    profile = keys.topology_profile([keys.HOSTNAME])
    a_keys = sorted({identity.accelerator_key(mfr, p) for p in products} - {f"{mfr}-"})
    built_by_a_key: dict[str, list[str]] = {}
    for a_key in a_keys:
        feature = keys.accelerator_key(a_key)
        label_keys = [
            feature,
            *_suffixed_keys(feature),
            keys.sliced_max_free_units_key(a_key),
            keys.shared_free_cards_key(a_key),
        ]
        names = [
            keys.device_flavor_name(g_key, a_key, os, "amd64", cards, profile),
            *(keys.pool_name(os, "amd64", a_key, g_key, aware=aware) for aware in (False, True)),
            *(keys.catalog_name(a_key, g_key, aware=aware) for aware in (False, True)),
        ]
        for key in label_keys:
            assert validation.is_qualified_name(key), key
        for name in names:
            assert validation.is_dns1123_subdomain(name), name
            assert validation.is_dns1123_subdomain(keys.local_queue_name(name))
        assert validation.is_label_value(a_key)
        # Deterministic: built twice, the same.
        assert label_keys == [
            feature,
            *_suffixed_keys(keys.accelerator_key(a_key)),
            keys.sliced_max_free_units_key(a_key),
            keys.shared_free_cards_key(a_key),
        ]
        built_by_a_key[a_key] = label_keys + names
    # Distinct identities never share a key or a name (the FNV tag tells shortened heads apart).
    for i, a in enumerate(a_keys):
        for b in a_keys[i + 1 :]:
            assert not set(built_by_a_key[a]) & set(built_by_a_key[b]), (a, b)
    cpu_keys = [
        keys.general_key(g_key),
        keys.general_key(cpu_mfr),
        keys.count_key(keys.general_key(g_key)),
        keys.capacity_key(keys.general_key(g_key)),
        keys.cpu_key_label(g_key, cpu_mfr),
    ]
    assert all(validation.is_qualified_name(k) for k in cpu_keys), cpu_keys
    for name in (
        keys.cpu_flavor_name(g_key, os, "amd64", cores, profile),
        *(keys.pool_name(os, "amd64", "", g_key, aware=aware) for aware in (False, True)),
    ):
        assert validation.is_dns1123_subdomain(name), name


# --- object names from keys (issue 27 class 3) -----------------------------------------------------
def _tag(key: str) -> str:
    return fnv64a_hex(key)[:8]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("nvidia-a10g", "nvidia-a10g"),
        ("nvidia-a100.80gb", "nvidia-a100.80gb"),
        ("fnv64-87bf574bea2a4f23", "fnv64-87bf574bea2a4f23"),
        ("hygon-k100_ai", f"hygon-k100-ai-{_tag('hygon-k100_ai')}"),
        ("Hygon-K100-AI", f"hygon-k100-ai-{_tag('Hygon-K100-AI')}"),
        ("nvidia-", f"nvidia-{_tag('nvidia-')}"),
        ("a--b", f"a-b-{_tag('a--b')}"),
        ("x.-y", f"x-y-{_tag('x.-y')}"),
        ("_", _tag("_")),
        ("", _tag("")),
    ],
    ids=[
        "plain",
        "plain-dot",
        "profile",
        "underscore",
        "case",
        "trailing-dash",
        "double-dash",
        "dot-dash",
        "only-separator",
        "empty",
    ],
)
def test_name_part_keeps_plain_keys_and_tags_every_other(key: str, expected: str) -> None:
    assert keys.name_part(key) == expected


def test_the_issue_twins_get_a_flavor_a_pool_and_a_catalog_entry_each() -> None:
    # "DCU K100_AI" and "DCU K100-AI": two valid aKeys that the old ``_`` → ``-`` gave one name.
    under, dash = (identity.accelerator_key("hygon", p) for p in ("DCU K100_AI", "DCU K100-AI"))
    assert (under, dash) == ("hygon-dcu-k100_ai", "hygon-dcu-k100-ai")
    g_key = "hygon-c86-7285"
    for a_key, spelled in ((dash, dash), (under, f"hygon-dcu-k100-ai-{_tag(under)}")):
        assert keys.device_flavor_name(g_key, a_key, "linux", "amd64", 4, DEFAULT_PROFILE) == (
            f"gpustack--{g_key}--{spelled}-linux-amd64-4d-{DEFAULT_PROFILE}"
        )
        assert keys.pool_name("linux", "amd64", a_key) == f"gpustack--{spelled}-linux-amd64"
        assert keys.pool_name("linux", "amd64", a_key, g_key, aware=True) == (
            f"gpustack--{g_key}--{spelled}-linux-amd64"
        )
        assert keys.catalog_name(a_key, aware=False) == f"gpustack--{spelled}"
    # Labels and notes keep the key as it is (the Device Manager's own spelling).
    assert keys.accelerator_key(under) == "acceleratable.feature.gpustack.ai/hygon-dcu-k100_ai"


# Keys as runs of letters and digits joined by single separators (every key the name normaliser builds
# has that shape; an admin-authored InstanceType's groups may also hold uppercase). Twins share the runs and
# differ only in their separators (``_``/``-``/``.``) and letter case.
_RUN = st.text(st.sampled_from("abcxyz0189"), min_size=1, max_size=12)


@st.composite
def _twin_keys(draw: st.DrawFn, *, lead: str) -> list[str]:
    runs = [lead, *draw(st.lists(_RUN, min_size=1, max_size=6))]
    if draw(st.booleans()):  # stretch to 55-63 characters: long enough that every suffixed key is shortened
        target = draw(st.integers(55, 63))
        while len("-".join(runs)) < target:
            runs.append(draw(_RUN))
    # "|" marks where a separator goes; the cut keeps at most 63 characters and ends in a run.
    template = "|".join(runs)[:63].rstrip("|")
    runs = template.split("|")
    twins = []
    for _ in range(draw(st.integers(2, 4))):
        # Mostly single separators (every normalised key); now and then a run of two, which a vendor_id or
        # an authored type's group may hold and which must not read as the "--" that joins gKey and aKey.
        sep = st.sampled_from([*"-_.-_.-_.", "--", "-.", "_-"])
        seps = draw(st.lists(sep, min_size=len(runs) - 1, max_size=len(runs) - 1))
        upper = draw(st.sets(st.integers(0, len(runs) - 1), max_size=2))
        spelled = [r.upper() if i in upper else r for i, r in enumerate(runs)]
        twins.append(spelled[0] + "".join(s + r for s, r in zip(seps, spelled[1:], strict=True)))
    return sorted(set(twins))


_OS_ARCH = [("linux", "amd64"), ("linux", "arm64"), ("windows", "amd64")]
_LONG_A = "hygon-dcu-k100-ai-with-a-product-name-long-enough-to-be-shortened"[:63]
_CPU = {keys.NFD_CPU_VENDOR: "Hygon"}


def _normalised_without_underscore(key: str) -> bool:
    return "_" not in key and normalize_name(key, "", 0, False) == key


def _distinct(built: dict[tuple[object, ...], str]) -> None:
    """Every identity has its own name: no two keys of ``built`` share a value."""
    owners: dict[str, tuple[object, ...]] = {}
    for ident, name in built.items():
        other = owners.setdefault(name, ident)
        assert other == ident, f"{other} and {ident} are both named {name}"


@settings(max_examples=examples(300))
@given(
    g_keys=_twin_keys(lead="hygon"),
    a_keys=_twin_keys(lead="hygon"),
    count=st.sampled_from([1, 4, 64]),
    levels=st.lists(st.sampled_from([keys.STANDARD_ZONE, keys.PRIVATE_RACK]), max_size=2, unique=True),
)
@example(  # the issue's products: two aKeys that differ only by "_" and "-"
    g_keys=["hygon-c86-7285"],
    a_keys=[identity.accelerator_key("hygon", p) for p in ("DCU K100_AI", "DCU K100-AI")],
    count=4,
    levels=[],
)
@example(  # a gKey pair: CPU names that differ only by "_" and "-" (and ".")
    g_keys=[
        identity.general_key(_CPU, {keys.CPU_NAME_ANNOTATION: n})
        for n in ("Hygon C86_7285 32-core Processor", "Hygon C86-7285", "Hygon C86.7285")
    ],
    a_keys=["hygon-dcu-z100l"],
    count=64,
    levels=[],
)
@example(  # 63-character twins: every suffixed label key and the object names' parts tagged
    g_keys=["hygon-c86-7285"],
    a_keys=[_LONG_A, _LONG_A.replace("-", "_"), _LONG_A.replace("-", ".")],
    count=8,
    levels=[keys.PRIVATE_RACK],
)
@example(  # a gKey holding "--" must not read as the gKey "hygon" joined to the aKey "hygon-x"
    g_keys=["hygon", "hygon--hygon-x"],
    a_keys=["hygon-x"],
    count=1,
    levels=[],
)
def test_distinct_identities_get_distinct_valid_names_from_every_builder(
    g_keys: list[str], a_keys: list[str], count: int, levels: list[str]
) -> None:
    profile = keys.topology_profile([*levels, keys.HOSTNAME])
    cpu_flavors = {
        (g, os, arch): keys.cpu_flavor_name(g, os, arch, count, profile)
        for g in g_keys
        for os, arch in _OS_ARCH
    }
    device_flavors = {
        (g, a, os, arch): keys.device_flavor_name(g, a, os, arch, count, profile)
        for g in g_keys
        for a in a_keys
        for os, arch in _OS_ARCH
    }
    # One namespace per kind: ResourceFlavors; ClusterQueues/InstanceTypes under each grouping; catalog
    # entries under each grouping; the LocalQueues of each grouping's pools.
    _distinct({**cpu_flavors, **device_flavors})
    aware_pools = {
        **{
            (g, os, arch): keys.pool_name(os, arch, g_key=g, aware=True)
            for g in g_keys
            for os, arch in _OS_ARCH
        },
        **{
            (g, a, os, arch): keys.pool_name(os, arch, a, g, aware=True)
            for g in g_keys
            for a in a_keys
            for os, arch in _OS_ARCH
        },
    }
    unaware_pools = {
        **{("generic", os, arch): keys.pool_name(os, arch) for os, arch in _OS_ARCH},
        **{(a, os, arch): keys.pool_name(os, arch, a) for a in a_keys for os, arch in _OS_ARCH},
    }
    aware_catalog = {
        **{(g,): keys.catalog_name(g_key=g, aware=True) for g in g_keys},
        **{(g, a): keys.catalog_name(a, g, aware=True) for g in g_keys for a in a_keys},
    }
    unaware_catalog = {
        ("generic",): keys.catalog_name(aware=False),
        **{(a,): keys.catalog_name(a, aware=False) for a in a_keys},
    }
    for pools in (aware_pools, unaware_pools):
        _distinct(pools)
        _distinct({ident: keys.local_queue_name(name) for ident, name in pools.items()})
    _distinct(aware_catalog)
    _distinct(unaware_catalog)
    names = [
        *cpu_flavors.values(),
        *device_flavors.values(),
        *aware_pools.values(),
        *unaware_pools.values(),
        *aware_catalog.values(),
        *unaware_catalog.values(),
    ]
    for name in names:
        assert validation.is_dns1123_subdomain(name), name
        lq = keys.local_queue_name(name)
        assert validation.is_dns1123_label(lq) and validation.is_label_value(lq), lq
    # A key the name normaliser builds (its own fixed point) without "_" is spelled as it is: existing
    # clusters see no rename.
    for g in g_keys:
        if _normalised_without_underscore(g):
            assert keys.cpu_flavor_name(g, "linux", "amd64", count, profile) == (
                f"gpustack--{g}-linux-amd64-{count}c-{profile}"
            )
    for a in a_keys:
        if _normalised_without_underscore(a):
            assert keys.pool_name("linux", "amd64", a) == f"gpustack--{a}-linux-amd64"
    # Label keys keep the key as it is (shortened when long): distinct and valid too.
    label_keys = {
        (a, kind): key
        for a in a_keys
        for kind, key in enumerate(
            (
                keys.accelerator_key(a),
                *_suffixed_keys(keys.accelerator_key(a)),
                keys.sliced_max_free_units_key(a),
                keys.shared_free_cards_key(a),
            )
        )
    } | {
        (g, kind): key
        for g in g_keys
        for kind, key in enumerate((keys.general_key(g), *_suffixed_keys(keys.general_key(g))), start=100)
    }
    _distinct(label_keys)
    assert all(validation.is_qualified_name(k) for k in label_keys.values())
