"""Which Node changes wake which reconciler (:mod:`gpustack_worker.agent.reads`), and the proof that the
keys a reconciler is not woken for are not among its inputs.

The table tests pin :func:`~reads.node_change` and the three ``wakes_*`` on small nodes. The properties
take every node of the packaged scenarios as the agent publishes it (its counting keys and fit labels
already on it), optionally with a bad input that makes the checks hold keys at their published value,
and change the keys a reconciler is said not to read — fit labels, counting keys in ``status.capacity``
and/or ``status.allocatable`` — adding, removing and rewriting them with any value: that reconciler's
desired output and the checks' findings stay what they were. The outputs are computed as
``agent/steps.py`` computes them (``validate.combine`` over the Node's facts and the checked ``Devices``,
``holds=checked.holds()``, ``published=`` the Node's capacity for capacity, its labels for fit, the
worker NodeFeature's labels for the NodeFeature). A last property mixes in keys the reconcilers do read
and checks the predicates are sound: a reconciler not woken computes the same output.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, fit, nodefeature, reads, validate
from gpustack_worker.agent.facts import NodeFacts, devices_facts, node_facts
from gpustack_worker.api import keys, manufacturers
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario, packaged_scenario_names
from tests.kit.properties import examples

from .builders import node

# --- table tests -----------------------------------------------------------------------------------------
NV = "nvidia.com/gpu"
SLICED_UNITS = keys.sliced_resource(NV, "units")
PARTITIONED_PROFILE = keys.partitioned_resource(NV, "mig-1g.10gb")
BARE_SLICED = keys.sliced_resource(NV)
FIT_SLICED = keys.sliced_max_free_units_key("nvidia-a100")
FIT_SHARED = keys.shared_free_cards_key("nvidia-a100")

BASE_LABELS = {
    keys.NFD_CPU_VENDOR: "AMD",
    keys.HOSTNAME: "n1",
    FIT_SLICED: "1600000",
    FIT_SHARED: "2",
}
BASE_ANNOTATIONS = {keys.CPU_NAME_ANNOTATION: "AMD EPYC 7763 64-Core Processor"}
BASE_CAPACITY = {"cpu": "128", NV: "4", BARE_SLICED: "512", SLICED_UNITS: "6400000", PARTITIONED_PROFILE: "7"}


def _base() -> NodeFacts:
    return node("n1", labels=BASE_LABELS, annotations=BASE_ANNOTATIONS, capacity=BASE_CAPACITY)


def _with(
    facts: NodeFacts,
    *,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    capacity: dict[str, str | None] | None = None,
    allocatable: dict[str, str | None] | None = None,
    **identity: str,
) -> NodeFacts:
    """``facts`` with keys set (a value) or removed (None) in the named maps, and name/uid replaced."""

    def edit(current: Any, changes: dict[str, str | None] | None) -> dict[str, str]:
        out = dict(current)
        for key, value in (changes or {}).items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    return dataclasses.replace(
        facts,
        labels=edit(facts.labels, labels),
        annotations=edit(facts.annotations, annotations),
        capacity=edit(facts.capacity, capacity),
        allocatable=edit(facts.allocatable, allocatable),
        **identity,
    )


@dataclass(frozen=True)
class Row:
    id: str
    new: NodeFacts
    #: The NodeChange expected: (identity, labels, annotations, resources).
    change: tuple[bool, set[str], set[str], set[str]]
    #: Which reconcilers wake: (nodefeature, capacity, fit).
    wakes: tuple[bool, bool, bool]
    #: The managed reading differs (NodeChange.managed).
    managed: bool = False
    #: ``node-management-manual``.
    manual: bool = False


#: nfd-master's first projection of the worker NodeFeature onto the base node: its keys, ``managed=true``
#: and the ``feature-labels`` annotation listing them (default namespace stripped, as nfd-master writes it).
PROJECTED = {
    keys.MANAGED: "true",
    keys.general_key("amd"): "true",
    keys.general_key("amd-epyc-7763"): "true",
    keys.count_key(keys.general_key("amd-epyc-7763")): "128",
    keys.RDMA_CAPABLE: "true",
}
FEATURE_LABELS = {keys.NFD_FEATURE_LABELS_ANNOTATION: ",".join(sorted(PROJECTED))}


B = _base()
ROWS = [
    Row("no change", _with(B), (False, set(), set(), set()), (False, False, False)),
    Row(
        "an equal copy",
        node(
            "n1", labels=dict(BASE_LABELS), annotations=dict(BASE_ANNOTATIONS), capacity=dict(BASE_CAPACITY)
        ),
        (False, set(), set(), set()),
        (False, False, False),
    ),
    Row(
        "another uid (recreated)", _with(B, uid="uid-other"), (True, set(), set(), set()), (True, True, True)
    ),
    Row("another name", _with(B, name="n2"), (True, set(), set(), set()), (True, True, True)),
    Row(
        "the CPU name annotation",
        _with(B, annotations={keys.CPU_NAME_ANNOTATION: "Intel(R) Xeon(R)"}),
        (False, set(), {keys.CPU_NAME_ANNOTATION}, set()),
        (True, True, True),
    ),
    Row(
        "any annotation added",
        _with(B, annotations={"example.com/note": "x"}),
        (False, set(), {"example.com/note"}, set()),
        (True, True, True),
    ),
    Row(
        "a fit label changed",
        _with(B, labels={FIT_SLICED: "0"}),
        (False, {FIT_SLICED}, set(), set()),
        (False, False, True),
    ),
    Row(
        "a fit label removed",
        _with(B, labels={FIT_SHARED: None}),
        (False, {FIT_SHARED}, set(), set()),
        (False, False, True),
    ),
    Row(
        "a fit label added",
        _with(B, labels={keys.shared_free_cards_key("nvidia-h100"): "1"}),
        (False, {keys.shared_free_cards_key("nvidia-h100")}, set(), set()),
        (False, False, True),
    ),
    Row(
        "a counting key in capacity only",
        _with(B, capacity={SLICED_UNITS: "3200000"}),
        (False, set(), set(), {SLICED_UNITS}),
        (False, True, False),
    ),
    Row(
        "a counting key in allocatable only",
        _with(B, allocatable={SLICED_UNITS: "3200000"}),
        (False, set(), set(), {SLICED_UNITS}),
        (False, True, False),
    ),
    Row(
        "a per-profile counting key removed from both",
        _with(B, capacity={PARTITIONED_PROFILE: None}, allocatable={PARTITIONED_PROFILE: None}),
        (False, set(), set(), {PARTITIONED_PROFILE}),
        (False, True, False),
    ),
    Row(
        "the bare pool (a presence gate, not a counting key)",
        _with(B, capacity={BARE_SLICED: "0"}),
        (False, set(), set(), {BARE_SLICED}),
        (True, True, True),
    ),
    Row(
        "an unknown suffix of the sliced family (not a counting key)",
        _with(B, capacity={f"{BARE_SLICED}.other": "1"}),
        (False, set(), set(), {f"{BARE_SLICED}.other"}),
        (True, True, True),
    ),
    Row(
        "the CPU capacity",
        _with(B, capacity={"cpu": "64"}),
        (False, set(), set(), {"cpu"}),
        (True, True, True),
    ),
    Row(
        "the CPU vendor label",
        _with(B, labels={keys.NFD_CPU_VENDOR: "Intel"}),
        (False, {keys.NFD_CPU_VENDOR}, set(), set()),
        (True, True, True),
    ),
    Row(
        "a fit label and a counting key",
        _with(B, labels={FIT_SLICED: "0"}, capacity={SLICED_UNITS: "0"}),
        (False, {FIT_SLICED}, set(), {SLICED_UNITS}),
        (False, True, True),
    ),
    Row(
        "a counting key and an admin's managed=true (the agent no longer stamps it)",
        _with(B, labels={keys.MANAGED: "true"}, capacity={SLICED_UNITS: "0"}),
        (False, {keys.MANAGED}, set(), {SLICED_UNITS}),
        (True, True, True),
        managed=True,
    ),
    Row(
        "nfd-master's first projection (the agent already treated the node as managed)",
        _with(B, labels=dict(PROJECTED), annotations=dict(FEATURE_LABELS)),
        (False, set(PROJECTED), set(FEATURE_LABELS), set()),
        (False, False, False),
    ),
    Row(
        "the same projection under node-management-manual (now counted: managed by an admin's stamp)",
        _with(B, labels=dict(PROJECTED), annotations=dict(FEATURE_LABELS)),
        (False, set(PROJECTED), set(FEATURE_LABELS), set()),
        (True, True, True),
        managed=True,
        manual=True,
    ),
    Row(
        "a worker NodeFeature key alone",
        _with(B, labels={keys.RDMA_NUMA: "0_1", keys.CPU_ONLY: "true"}),
        (False, {keys.RDMA_NUMA, keys.CPU_ONLY}, set(), set()),
        (False, False, False),
    ),
    Row(
        "the feature-labels annotation alone, managed listed neither way",
        _with(B, annotations={keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id"}),
        (False, set(), {keys.NFD_FEATURE_LABELS_ANNOTATION}, set()),
        (False, False, False),
    ),
    Row(
        "an admin's managed=false becomes nfd-master's (the agent stamps it again)",
        _with(
            B,
            labels={keys.MANAGED: "false"},
            annotations={keys.NFD_FEATURE_LABELS_ANNOTATION: keys.MANAGED},
        ),
        (False, {keys.MANAGED}, {keys.NFD_FEATURE_LABELS_ANNOTATION}, set()),
        (True, True, True),
        managed=True,
    ),
    Row(
        "a fit label and a bare pool",
        _with(B, labels={FIT_SHARED: "1"}, capacity={BARE_SLICED: "256"}),
        (False, {FIT_SHARED}, set(), {BARE_SLICED}),
        (True, True, True),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_node_change_and_who_wakes(row: Row) -> None:
    change = reads.node_change(B, row.new, manual=row.manual)
    identity, labels, annotations, resources = row.change
    assert change == reads.NodeChange(
        identity, frozenset(labels), frozenset(annotations), frozenset(resources), row.managed
    )
    reverse = reads.node_change(row.new, B, manual=row.manual)
    assert reverse == change, "the change of an update is the change of its reverse"
    woken = (reads.wakes_nodefeature(change), reads.wakes_capacity(change), reads.wakes_fit(change))
    assert woken == row.wakes


def test_the_table_keys_are_classified_as_the_rows_assume() -> None:
    """The rows are about counting keys and fit labels only if the product's classifiers say so."""
    assert capacity.is_counting_key(SLICED_UNITS) and capacity.is_counting_key(PARTITIONED_PROFILE)
    assert not capacity.is_counting_key(BARE_SLICED)
    assert not capacity.is_counting_key(f"{BARE_SLICED}.other")
    assert not capacity.is_counting_key("cpu")
    assert fit.is_fit_label(FIT_SLICED) and fit.is_fit_label(FIT_SHARED)
    assert not fit.is_fit_label(keys.NFD_CPU_VENDOR) and not fit.is_fit_label(keys.MANAGED)


MAPS = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["1", "2", ""]), max_size=4)


@settings(max_examples=examples(100))
@given(old=st.tuples(MAPS, MAPS, MAPS, MAPS), new=st.tuples(MAPS, MAPS, MAPS, MAPS))
def test_node_change_is_exactly_the_keys_whose_value_differs(
    old: tuple[dict[str, str], ...], new: tuple[dict[str, str], ...]
) -> None:
    def facts(parts: tuple[dict[str, str], ...]) -> NodeFacts:
        return NodeFacts("n", "u", parts[0], parts[1], parts[2], parts[3])

    def differ(a: dict[str, str], b: dict[str, str]) -> set[str]:
        return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}

    change = reads.node_change(facts(old), facts(new), manual=False)
    assert not change.identity and not change.managed
    assert change.labels == differ(old[0], new[0])
    assert change.annotations == differ(old[1], new[1])
    assert change.resources == differ(old[2], new[2]) | differ(old[3], new[3])


# --- the invariance proof over realistic nodes ----------------------------------------------------------
READY_SINCE = "2026-01-01T00:00:00Z"
BASES = tuple(m.resource for m in manufacturers.MANUFACTURERS.values())
SPECS = [(name, spec) for name in packaged_scenario_names() for spec in packaged_scenario(name).nodes]
#: A bad input on top of the published node, so the checks hold keys at their published values.
BAD_INPUTS = ("none", "pool", "cpu", "ledger", "managed-false", "managed-bogus", "managed-true")


@dataclass(frozen=True)
class World:
    """One node as the agent left it (its outputs published), with a bad input perhaps."""

    node: dict[str, Any]
    devices: validate.DevicesChecked | None
    #: The worker NodeFeature's ``spec.labels`` (``published`` of the NodeFeature reconciler).
    feature_labels: dict[str, str]
    manual: bool
    mixed_on_node: bool


@dataclass(frozen=True)
class Outputs:
    nodefeature: dict[str, Any]
    capacity: dict[str, int]
    fit: dict[str, str]
    findings: tuple[validate.Finding, ...]


def outputs(world: World, facts: NodeFacts) -> Outputs:
    """The three desired outputs and the findings, as ``Steps`` computes them."""
    checked = validate.combine(facts, world.devices)
    holds = checked.holds()
    return Outputs(
        nodefeature=nodefeature.desired(
            checked.node,
            checked.devices,
            manual=world.manual,
            mixed_on_node=world.mixed_on_node,
            holds=holds,
            published=world.feature_labels,
        ),
        capacity=capacity.desired(
            checked.node, checked.devices, manual=world.manual, holds=holds, published=checked.node.capacity
        ),
        fit=fit.desired(
            checked.node, checked.devices, manual=world.manual, holds=holds, published=checked.node.labels
        ),
        findings=checked.findings,
    )


def _rendered(spec: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    node_obj = render.render_node(spec, READY_SINCE)
    node_obj["metadata"]["uid"] = f"uid-{spec.name}"
    devices = render.render_devices(spec, f"uid-{spec.name}")
    if devices is not None:
        devices["status"] = (render.render_devices_status(spec) or {}).get("status", {})
    return node_obj, devices


def _spoil(node_obj: dict[str, Any], devices: dict[str, Any] | None, bad: str) -> None:
    """Put the bad input ``bad`` into the node or its ``Devices`` (in place; some fit no node)."""
    cap = node_obj["status"]["capacity"]
    labels = node_obj["metadata"]["labels"]
    if bad == "pool":
        pools = [
            k for k in cap for b in BASES if k in (keys.sliced_resource(b), keys.partitioned_resource(b))
        ]
        if pools:
            cap[pools[0]] = "1e1000000"  # neither present nor absent: the family's keys are held
    elif bad == "cpu":
        cap["cpu"] = "1e1000000"  # the CPU count label is held
    elif bad == "ledger" and devices is not None:
        entries = [e for g in devices["status"].get("groups", []) for e in g.get("accelerators", [])]
        if entries:
            entries[0]["remaining"] = -5  # the model's fit labels are held
    elif bad.startswith("managed-"):
        labels[keys.MANAGED] = bad.removeprefix("managed-")


def world_of(spec: Any, bad: str, manual: bool, mixed_on_node: bool) -> World:
    node_obj, devices = _rendered(spec)
    checked_devices = validate.check_devices_inputs(devices_facts(devices)) if devices is not None else None
    # Converged first: the node carries what the agent publishes for it (with a good input).
    good = World(node_obj, checked_devices, {}, manual, mixed_on_node)
    published = outputs(good, node_facts(node_obj))
    counted = {k: str(v) for k, v in published.capacity.items()}
    node_obj["status"]["capacity"].update(counted)
    node_obj["status"]["allocatable"].update(counted)
    node_obj["metadata"]["labels"].update(published.fit)
    feature_labels = dict(published.nodefeature["spec"]["labels"])
    # Then the bad input (in the Devices ledger, the bare pools, the CPU capacity or the managed label).
    spoiled = copy.deepcopy(devices) if devices is not None else None
    _spoil(node_obj, spoiled, bad)
    if spoiled is not None:
        checked_devices = validate.check_devices_inputs(devices_facts(spoiled))
    return World(node_obj, checked_devices, feature_labels, manual, mixed_on_node)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    _scenario, spec = draw(st.sampled_from(SPECS))
    return world_of(spec, draw(st.sampled_from(BAD_INPUTS)), draw(st.booleans()), draw(st.booleans()))


VALUES = st.one_of(
    st.integers(0, 10**12).map(str),
    st.sampled_from(["", "0", "-1", "1e1000000", "1.5", "100m", "abc", "04", "+4"]),
    st.text(max_size=8),
)
A_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=70)
PROFILES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=70)
NEW_COUNTING_KEYS = st.one_of(
    st.builds(keys.sliced_resource, st.sampled_from(BASES), st.sampled_from(keys.SLICED_COUNTING_SUFFIXES)),
    st.builds(keys.partitioned_resource, st.sampled_from(BASES), st.one_of(st.just("units"), PROFILES)),
)
NEW_FIT_LABELS = st.one_of(
    st.builds(keys.sliced_max_free_units_key, A_KEYS), st.builds(keys.shared_free_cards_key, A_KEYS)
)

#: One edit: (where, key, value; None removes the key).
Edit = tuple[str, str, str | None]


def _edits(draw: st.DrawFn, key: st.SearchStrategy[str], where: st.SearchStrategy[str]) -> list[Edit]:
    return draw(st.lists(st.tuples(where, key, st.one_of(st.none(), VALUES)), min_size=1, max_size=6))


def counting_edits(draw: st.DrawFn, world: World) -> list[Edit]:
    """Counting keys added, removed or rewritten in capacity, allocatable or both (the node's own and new
    ones)."""
    present = sorted(k for k in world.node["status"]["capacity"] if capacity.is_counting_key(k))
    key = st.one_of(NEW_COUNTING_KEYS, st.sampled_from(present)) if present else NEW_COUNTING_KEYS
    return _edits(draw, key, st.sampled_from(["capacity", "allocatable", "both"]))


def fit_edits(draw: st.DrawFn, world: World) -> list[Edit]:
    """Fit labels added, removed or rewritten (the node's own and new ones)."""
    present = sorted(k for k in world.node["metadata"]["labels"] if fit.is_fit_label(k))
    key = st.one_of(NEW_FIT_LABELS, st.sampled_from(present)) if present else NEW_FIT_LABELS
    return _edits(draw, key, st.just("labels"))


PUBLISHED_KEYS = st.one_of(
    st.sampled_from([keys.CPU_ONLY, keys.RDMA_CAPABLE, keys.RDMA_DISTANCE, keys.RDMA_NUMA]),
    st.builds(keys.general_key, A_KEYS),
    st.builds(lambda g: keys.count_key(keys.general_key(g)), A_KEYS),
)


def published_edits(draw: st.DrawFn, world: World) -> list[Edit]:
    """The worker NodeFeature's keys (other than ``managed``) added, removed or rewritten on the Node, as
    nfd-master's projection or anyone's edit leaves them (the node's own and new ones)."""
    present = sorted(k for k in world.node["metadata"]["labels"] if nodefeature.is_published_label(k))
    present += sorted(k for k in world.feature_labels if k != keys.MANAGED)
    key = st.one_of(PUBLISHED_KEYS, st.sampled_from(present)) if present else PUBLISHED_KEYS
    return _edits(draw, key, st.just("labels"))


def edited(node_obj: dict[str, Any], edits: list[Edit]) -> dict[str, Any]:
    """A copy of ``node_obj`` with ``edits`` made."""
    out = copy.deepcopy(node_obj)
    maps = {
        "labels": [out["metadata"]["labels"]],
        "annotations": [out["metadata"]["annotations"]],
        "capacity": [out["status"]["capacity"]],
        "allocatable": [out["status"]["allocatable"]],
        "both": [out["status"]["capacity"], out["status"]["allocatable"]],
    }
    for where, key, value in edits:
        for target in maps[where]:
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return out


def _before_after(world: World, edits: list[Edit]) -> tuple[reads.NodeChange, Outputs, Outputs]:
    before, after = node_facts(world.node), node_facts(edited(world.node, edits))
    change = reads.node_change(before, after, manual=world.manual)
    return change, outputs(world, before), outputs(world, after)


@st.composite
def counting_and_fit_edits(draw: st.DrawFn) -> tuple[World, list[Edit]]:
    world = draw(worlds())
    picks = draw(st.sampled_from(["counting", "fit", "both"]))
    edits: list[Edit] = []
    if picks in ("counting", "both"):
        edits += counting_edits(draw, world)
    if picks in ("fit", "both"):
        edits += fit_edits(draw, world)
    return world, draw(st.permutations(edits))


@st.composite
def only_fit_edits(draw: st.DrawFn) -> tuple[World, list[Edit]]:
    world = draw(worlds())
    return world, fit_edits(draw, world)


@st.composite
def only_counting_edits(draw: st.DrawFn) -> tuple[World, list[Edit]]:
    world = draw(worlds())
    return world, counting_edits(draw, world)


@st.composite
def only_published_edits(draw: st.DrawFn) -> tuple[World, list[Edit]]:
    world = draw(worlds())
    return world, published_edits(draw, world)


def _classified(edits: list[Edit]) -> None:
    """The generated keys are counting keys / fit labels by the product's own classifiers."""
    for where, key, _value in edits:
        assert fit.is_fit_label(key) if where == "labels" else capacity.is_counting_key(key), key


@settings(max_examples=examples(60))
@given(case=counting_and_fit_edits())
def test_counting_keys_and_fit_labels_do_not_change_the_nodefeature_nor_the_findings(
    case: tuple[World, list[Edit]],
) -> None:
    world, edits = case
    _classified(edits)
    change, before, after = _before_after(world, edits)
    assert not reads.wakes_nodefeature(change)
    assert after.nodefeature == before.nodefeature
    assert after.findings == before.findings


@settings(max_examples=examples(60))
@given(case=only_fit_edits())
def test_fit_labels_do_not_change_the_counting_keys(case: tuple[World, list[Edit]]) -> None:
    world, edits = case
    _classified(edits)
    change, before, after = _before_after(world, edits)
    assert not reads.wakes_capacity(change)
    assert after.capacity == before.capacity
    assert after.findings == before.findings


@settings(max_examples=examples(60))
@given(case=only_counting_edits())
def test_counting_keys_do_not_change_the_fit_labels(case: tuple[World, list[Edit]]) -> None:
    world, edits = case
    _classified(edits)
    change, before, after = _before_after(world, edits)
    assert not reads.wakes_fit(change)
    assert after.fit == before.fit
    assert after.findings == before.findings


@settings(max_examples=examples(60))
@given(case=only_published_edits())
def test_the_worker_nodefeature_keys_on_the_node_change_no_output_nor_finding(
    case: tuple[World, list[Edit]],
) -> None:
    world, edits = case
    for _where, key, _value in edits:
        assert nodefeature.is_published_label(key), key
    change, before, after = _before_after(world, edits)
    assert not (reads.wakes_nodefeature(change) or reads.wakes_capacity(change) or reads.wakes_fit(change))
    assert after == before


def test_every_key_the_worker_nodefeature_publishes_is_classified_as_its_own() -> None:
    """The predicates skip exactly these keys: a key the NodeFeature gains later must be classified too
    (else its projection would wake every reconciler, or — if read — be skipped wrongly: see above)."""
    published = {
        key
        for _n, spec in SPECS
        for mixed in (False, True)
        for key in world_of(spec, "none", manual=False, mixed_on_node=mixed).feature_labels
    }
    assert keys.MANAGED in published and keys.CPU_ONLY in published and keys.RDMA_CAPABLE in published
    assert {k for k in published if not nodefeature.is_published_label(k)} == {keys.MANAGED}


@settings(max_examples=examples(60))
@given(world=worlds())
def test_nfd_masters_projection_of_the_nodefeature_wakes_nobody(world: World) -> None:
    """The worker NodeFeature's labels projected onto a node that did not carry them yet (nor
    ``managed``): the agent already stamped and counted the node, so nothing it computes changes. Under
    node-management-manual the NodeFeature carries no ``managed`` and the projection adds none."""
    start = copy.deepcopy(world.node)
    start["metadata"]["labels"].pop(keys.MANAGED, None)
    start["metadata"]["annotations"].pop(keys.NFD_FEATURE_LABELS_ANNOTATION, None)
    for key in world.feature_labels:
        start["metadata"]["labels"].pop(key, None)
    unprojected = dataclasses.replace(world, node=start)
    edits: list[Edit] = [("labels", k, v) for k, v in world.feature_labels.items()]
    edits.append(("annotations", keys.NFD_FEATURE_LABELS_ANNOTATION, ",".join(sorted(world.feature_labels))))
    change, before, after = _before_after(unprojected, edits)
    assert change.labels, "the projection changed the node"
    assert not (reads.wakes_nodefeature(change) or reads.wakes_capacity(change) or reads.wakes_fit(change))
    assert after == before


#: Keys the reconcilers do read, and values that matter for them (any other value too).
READ_LABELS = st.tuples(
    st.just("labels"),
    st.sampled_from(
        [keys.NFD_CPU_VENDOR, keys.NFD_CPU_FAMILY, keys.NFD_CPU_ID, keys.MANAGED, keys.ACCELERATABLE]
    ),
    st.one_of(st.none(), st.sampled_from(["true", "false", "Intel", "VendorUnknown", "6", "143"]), VALUES),
)
READ_ANNOTATIONS = st.tuples(
    st.just("annotations"),
    st.sampled_from([keys.CPU_NAME_ANNOTATION, keys.NFD_FEATURE_LABELS_ANNOTATION]),
    st.one_of(
        st.none(),
        st.sampled_from(["Intel(R) Xeon(R) Gold 6348", keys.MANAGED, f"{keys.MANAGED},{keys.RDMA_CAPABLE}"]),
        VALUES,
    ),
)


def read_capacity(world: World) -> st.SearchStrategy[Edit]:
    """``cpu`` or a bare pool (mostly one the node has), with a good, absent or unreadable value."""
    pools = [p for b in BASES for p in (keys.sliced_resource(b), keys.partitioned_resource(b))]
    present = [p for p in pools if p in world.node["status"]["capacity"]]
    key = st.one_of(st.sampled_from(["cpu", *present]), st.sampled_from(pools))
    value = st.one_of(st.none(), st.sampled_from(["0", "8", "64", "1e1000000", "-1"]), VALUES)
    return st.tuples(st.just("capacity"), key, value)


@st.composite
def any_edits(draw: st.DrawFn) -> tuple[World, list[Edit]]:
    """A change of one key that is read, mixed with changes of counting keys and fit labels."""
    world = draw(worlds())
    edits: list[Edit] = [draw(st.one_of(READ_LABELS, READ_ANNOTATIONS, read_capacity(world)))]
    if draw(st.booleans()):
        edits += counting_edits(draw, world)
    if draw(st.booleans()):
        edits += published_edits(draw, world)
    if draw(st.booleans()):
        edits += fit_edits(draw, world)
    return world, draw(st.permutations(edits))


@settings(max_examples=examples(100))
@given(case=any_edits())
def test_a_reconciler_not_woken_would_compute_the_same_output(case: tuple[World, list[Edit]]) -> None:
    """Soundness of the predicates for any mix of changes, read keys included."""
    world, edits = case
    change, before, after = _before_after(world, edits)
    if not reads.wakes_nodefeature(change):
        assert after.nodefeature == before.nodefeature
    if not reads.wakes_capacity(change):
        assert after.capacity == before.capacity
    if not reads.wakes_fit(change):
        assert after.fit == before.fit
    if after.findings != before.findings:  # every reconciler reports the findings: all must run
        assert reads.wakes_nodefeature(change) and reads.wakes_capacity(change) and reads.wakes_fit(change)


# --- the harness does see what is read ------------------------------------------------------------------
def _a100() -> World:
    spec = next(s for name, s in SPECS if name == "mixed-4" and s.name == "gpu-a100")
    return world_of(spec, "none", manual=False, mixed_on_node=False)


def test_the_worlds_publish_counting_keys_and_fit_labels() -> None:
    """The properties are not vacuous: the scenario nodes carry counting keys and fit labels, and the
    outputs computed over them are not empty."""
    worlds_ = [world_of(spec, "none", manual=False, mixed_on_node=False) for _n, spec in SPECS]
    counted = [w for w in worlds_ if any(capacity.is_counting_key(k) for k in w.node["status"]["capacity"])]
    labelled = [w for w in worlds_ if any(fit.is_fit_label(k) for k in w.node["metadata"]["labels"])]
    assert len(counted) > len(SPECS) // 2 and len(labelled) > len(SPECS) // 2
    for world in counted:
        out = outputs(world, node_facts(world.node))
        assert out.capacity == {
            k: int(v) for k, v in world.node["status"]["capacity"].items() if capacity.is_counting_key(k)
        }, "converged: the node carries exactly the counting keys it should"


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        pytest.param(("labels", keys.NFD_CPU_VENDOR, "Intel"), {"nodefeature"}, id="CPU vendor label"),
        pytest.param(("capacity", "cpu", "64"), {"nodefeature"}, id="CPU capacity"),
        pytest.param(
            ("annotations", keys.CPU_NAME_ANNOTATION, "Intel(R) Xeon(R) Gold 6348"),
            {"nodefeature"},
            id="CPU name",
        ),
        pytest.param(("capacity", keys.partitioned_resource(NV), "0"), {"capacity"}, id="bare pool gone"),
        pytest.param(
            ("capacity", keys.partitioned_resource(NV), "1e1000000"), {"findings"}, id="bare pool bad"
        ),
        pytest.param(
            ("labels", keys.MANAGED, "false"), {"nodefeature", "capacity", "fit"}, id="managed false"
        ),
    ],
)
def test_a_key_that_is_read_wakes_the_reconciler_and_changes_its_output(
    edit: Edit, changes: set[str]
) -> None:
    """The mutation check of the properties above: a change of a key a reconciler reads does change what
    it computes, and the predicates wake it. A predicate that ignored the key (as it ignores counting keys
    and fit labels) would not, and the soundness comparison would catch it."""
    world = _a100()
    change, before, after = _before_after(world, [edit])
    differs = {
        name
        for name in ("nodefeature", "capacity", "fit", "findings")
        if getattr(after, name) != getattr(before, name)
    }
    assert changes <= differs
    predicates = {
        "nodefeature": reads.wakes_nodefeature,
        "capacity": reads.wakes_capacity,
        "fit": reads.wakes_fit,
    }
    assert all(wakes(change) for wakes in predicates.values())
    _where, key, _value = edit
    ignored = dataclasses.replace(
        change,
        labels=change.labels - {key},
        annotations=change.annotations - {key},
        resources=change.resources - {key},
        managed=change.managed and key not in (keys.MANAGED, keys.NFD_FEATURE_LABELS_ANNOTATION),
    )
    for name in differs:
        for wakes in predicates.values() if name == "findings" else (predicates[name],):
            assert not wakes(ignored), "the key is the only change: ignoring it would not wake the reconciler"
