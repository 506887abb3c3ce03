"""A TopologySource that could never become a Kueue Topology is refused, everywhere (issue 27, class 4).

The worker appends ``kubernetes.io/hostname`` to every source's levels and Kueue v0.19.2's Topology holds
at most 16 levels, each ``nodeLabel`` at most 316 characters; so a source declares at most 15 levels of
at most 316 characters (docs/topology.md, "Level limits"). Checked here, pure:

- the rule (``spec_check``), the pydantic model and the generated CRD schema agree: 15 accepted, 16
  refused naming the limit; a 316-character key accepted, a 317-character one (a valid label key) refused;
- the admission webhook refuses 16 with the limit in its message, and still lets an UPDATE that leaves a
  stored 16-level spec alone through (the object stays deletable);
- the reconciler reports a stored 16-level source ``LevelLimitExceeded`` whatever its arm and history —
  never ``Stale`` (a Stale source stays in effect) — and owns nothing;
- the profile assigner never uses such a source, even while its status still says ``Ready=True``;
- the property: a source is accepted exactly when the Topology its fully-populated Nodes get is one
  Kueue's API server accepts (both mutations of the limit, 16 and 14, fail it);
- the create path never sends a Topology Kueue would refuse, and sends one refused with a 422 once;
- ``plan`` (scenario and ``--from-cluster``) refuses it naming the limit; 15 levels plan a 16-level Topology.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from typing import Any, cast

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpustack_worker.api import crdgen, keys, kinds, validation
from gpustack_worker.api.crds.topology_source import TopologySource, TopologySourceSpec
from gpustack_worker.cli.main import main
from gpustack_worker.cli.plan.cluster_plan import desired_chain
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import PlanError, plan_chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.simulate.load import packaged_scenario
from gpustack_worker.topology import levels as lv
from gpustack_worker.topology import profiles, sources
from gpustack_worker.topology.admission import review
from gpustack_worker.topology.controller import Topology
from gpustack_worker.topology.spec_check import format_errors, level_limit_errors, spec_errors
from tests.cli.plan.test_cluster_plan import applied_fleet
from tests.kit.properties import examples

NS = kinds.SYSTEM_NAMESPACE
NOW = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
#: The message every refusal carries: the limit, and why it is 15.
LIMIT = "must list at most 15 levels"
WHY = "kubernetes.io/hostname is always appended as the finest level and a Kueue Topology holds at most 16"


def deep(n: int, prefix: str = "topology.gpustack.ai/l") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


#: A 253-character DNS subdomain: the longest label-key prefix.
PREFIX_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
KEY_316 = f"{PREFIX_253}/{'k' * 62}"
KEY_317 = f"{PREFIX_253}/{'k' * 63}"  # a valid label key; Kueue's nodeLabel holds 316

NODE_LABELS_ARM: dict[str, Any] = {"nodeLabels": {}}
CONFIG_MAP_ARM: dict[str, Any] = {
    "configMap": {
        "configMapRef": {"namespace": NS, "name": "inventory"},
        "key": "snapshot.yaml",
        "maxStaleness": "10m",
    }
}
WEBHOOK_ARM: dict[str, Any] = {
    "webhook": {
        "url": "https://inventory.gpustack-system.svc/snapshot",
        "pollInterval": "1m",
        "timeout": "10s",
        "maxStaleness": "5m",
        "bearerTokenSecretRef": {"namespace": NS, "name": "inventory-token"},
    }
}


def spec(levels: list[str], arm: dict[str, Any] = NODE_LABELS_ARM, **more: Any) -> dict[str, Any]:
    return {"nodeSelector": {}, "levels": levels, **copy.deepcopy(arm), **more}


def source(
    levels: list[str], arm: dict[str, Any] = NODE_LABELS_ARM, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": "deep", "uid": "uid-deep", "generation": 3, "resourceVersion": "7"},
        "spec": spec(levels, arm),
    }
    if status is not None:
        obj["status"] = status
    return obj


def ready_status(revision: str = "r-1", seconds_ago: float = 60.0) -> dict[str, Any]:
    """What a release before the limit wrote for a source that applied a snapshot ``seconds_ago``."""
    at = (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "lastSuccessfulRevision": revision,
        "lastSuccessfulRefreshTime": at,
        "conditions": [
            {"type": t, "status": "True", "reason": "Observed", "message": "", "lastTransitionTime": at}
            for t in ("Ready", "Valid")
        ],
    }


# --- the rule, the model and the schema agree ---------------------------------------------------------


@pytest.mark.parametrize(
    "levels",
    [deep(1), deep(15), [*deep(14), KEY_316], [KEY_316]],
    ids=["1", "15", "15-with-a-316-char-key", "316-char-key"],
)
def test_levels_a_kueue_topology_can_hold_are_accepted(levels: list[str]) -> None:
    assert spec_errors(spec(levels), namespace=NS) == []
    assert level_limit_errors(spec(levels)) == []
    TopologySourceSpec.model_validate(spec(levels))


@pytest.mark.parametrize(
    ("levels", "path", "fragment"),
    [
        (deep(16), "spec.levels", f"{LIMIT} (lists 16): {WHY}"),
        (deep(17), "spec.levels", f"{LIMIT} (lists 17): {WHY}"),
        (deep(64), "spec.levels", f"{LIMIT} (lists 64): {WHY}"),
        (
            [KEY_317],
            "spec.levels[0]",
            "is 317 characters: a Kueue Topology level's nodeLabel holds at most 316",
        ),
        (
            [*deep(3), KEY_317],
            "spec.levels[3]",
            "is 317 characters: a Kueue Topology level's nodeLabel holds at most 316",
        ),
    ],
    ids=["16", "17", "64", "317-char-key", "317-char-key-last"],
)
def test_levels_no_kueue_topology_can_hold_are_refused_naming_the_limit(
    levels: list[str], path: str, fragment: str
) -> None:
    errors = spec_errors(spec(levels), namespace=NS)
    assert [(e.path, fragment in e.message) for e in errors] == [(path, True)], format_errors(errors)
    assert level_limit_errors(spec(levels)) == errors
    with pytest.raises(ValidationError):  # the model (the CRD schema's source) refuses it too
        TopologySourceSpec.model_validate(spec(levels))


def test_the_generated_crd_schema_holds_the_same_limit() -> None:
    crd = crdgen.crd_for(TopologySource)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    levels = schema["properties"]["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"], levels["items"]["maxLength"]) == (1, 15, 316)
    assert "at most 15" in levels["description"] and "at most 16 levels" in levels["description"]


def test_other_level_errors_are_not_limit_errors() -> None:
    """``level_limit_errors`` is only the limits: a repeat, the hostname, a bad key are other reasons."""
    for levels in (["a.io/x", "a.io/x"], ["a.io/x", keys.HOSTNAME], ["-bad"], [f"{'p' * 254}/x"]):
        assert spec_errors(spec(levels), namespace=NS), levels
        assert level_limit_errors(spec(levels)) == [], levels


# --- admission -----------------------------------------------------------------------------------------


def _review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "req-1",
        "operation": operation,
        "resource": {"group": kinds.TOPOLOGY_SOURCE.group, "resource": kinds.TOPOLOGY_SOURCE.plural},
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    response: dict[str, Any] = review({"request": request}, namespace=NS)["response"]
    return response


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_admission_refuses_16_levels_naming_the_limit_and_admits_15(operation: str) -> None:
    old = source(deep(2))
    assert _review(operation, source(deep(15)), old)["allowed"] is True
    denied = _review(operation, source(deep(16)), old)
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 403
    message = denied["status"]["message"]
    assert message.startswith(f"TopologySource deep is invalid: spec.levels: {LIMIT}")
    assert WHY in message
    causes = denied["status"]["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.levels"]


def test_a_stored_16_level_source_stays_editable_outside_its_spec_and_is_refused_on_a_spec_change() -> None:
    stored = source(deep(16))
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"team": "infra"}
    assert _review("UPDATE", relabelled, stored)["allowed"] is True  # e.g. the finalizer removed
    reselected = copy.deepcopy(stored)
    reselected["spec"]["nodeSelector"] = {"matchLabels": {"pool": "a"}}
    assert _review("UPDATE", reselected, stored)["allowed"] is False
    fixed = copy.deepcopy(stored)
    fixed["spec"]["levels"] = deep(15)
    assert _review("UPDATE", fixed, stored)["allowed"] is True


# --- the reconciler ------------------------------------------------------------------------------------


def _decide(
    src: dict[str, Any],
    read: sources.Fetched | sources.ReadFailed | None = None,
    owned: dict[str, dict[str, Any]] | None = None,
) -> sources.SourceDecision:
    return sources.decide(
        sources.SourceInputs(
            source=src,
            namespace=NS,
            selected={"worker-a": {keys.HOSTNAME: "worker-a"}},
            read=read,
            owned=owned or {},
            conflicts={},
            now=NOW,
        )
    )


def _snapshot(levels: list[str]) -> sources.Fetched:
    doc = {
        "apiVersion": keys.SNAPSHOT_API_VERSION,
        "revision": "r-2",
        "nodes": {"worker-a": {k: f"v{i}" for i, k in enumerate(levels)}},
    }
    return sources.Fetched(json.dumps(doc))


def _conditions(decision: sources.SourceDecision) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in decision.conditions}


OWNED = {"gpustack-topology-0123456789abcdef": {"metadata": {"name": "gpustack-topology-0123456789abcdef"}}}


@pytest.mark.parametrize(
    ("arm", "status", "read", "conflict"),
    [
        (NODE_LABELS_ARM, None, None, ("False", "ReadOnly")),
        (NODE_LABELS_ARM, ready_status(), None, ("False", "ReadOnly")),
        (CONFIG_MAP_ARM, None, _snapshot(deep(16)), ("False", "NoConflict")),
        # Applied a minute ago by a release before the limit: any other failure would be Stale (in effect).
        (CONFIG_MAP_ARM, ready_status(), _snapshot(deep(16)), ("False", "NoConflict")),
        (
            CONFIG_MAP_ARM,
            ready_status(),
            sources.ReadFailed("SnapshotKeyMissing", "no key"),
            ("False", "NoConflict"),
        ),
        (WEBHOOK_ARM, ready_status(seconds_ago=10), _snapshot(deep(16)), ("False", "NoConflict")),
    ],
    ids=[
        "nodeLabels",
        "nodeLabels-was-ready",
        "configMap-never-applied",
        "configMap-applied-a-minute-ago",
        "configMap-applied-then-unreadable",
        "webhook-applied-10s-ago",
    ],
)
def test_a_stored_16_level_source_is_not_ready_naming_the_limit_and_owns_nothing(
    arm: dict[str, Any],
    status: dict[str, Any] | None,
    read: sources.Fetched | sources.ReadFailed | None,
    conflict: tuple[str, str],
) -> None:
    decision = _decide(source(deep(16), arm, status), read, OWNED)
    assert _conditions(decision) == {
        "Ready": ("False", sources.LEVEL_LIMIT_EXCEEDED),
        "Valid": ("False", sources.LEVEL_LIMIT_EXCEEDED),
        "OwnershipConflict": conflict,
    }
    ready = next(c for c in decision.conditions if c.type == "Ready")
    assert ready.message.startswith(f"spec.levels: {LIMIT} (lists 16)")
    assert WHY in ready.message
    assert decision.apply == {}
    assert decision.delete == sorted(OWNED)  # what it published before goes: it describes no Node now
    assert decision.requeue_after is None  # nothing but a spec change can cure it
    assert sources.lapsed_state(_with_conditions(decision)) is None  # neither Stale nor Expired
    assert profiles.source_input(_with_conditions(decision)) == profiles.OUT_OF_EFFECT


def _with_conditions(decision: sources.SourceDecision) -> dict[str, Any]:
    src = source(deep(16))
    src["status"] = {
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason} for c in decision.conditions]
    }
    return src


def test_the_limit_is_named_first_when_the_spec_has_other_problems_too() -> None:
    bad = source([*deep(15), "a.io/x"], CONFIG_MAP_ARM)
    bad["spec"]["configMap"]["configMapRef"]["namespace"] = "default"
    decision = _decide(bad, _snapshot(deep(2)))
    ready = next(c for c in decision.conditions if c.type == "Ready")
    assert ready.reason == sources.LEVEL_LIMIT_EXCEEDED
    assert ready.message.startswith(f"spec.levels: {LIMIT} (lists 16)")
    assert ready.message.endswith("(and 1 more)")


def test_a_317_character_level_is_a_level_limit_too() -> None:
    decision = _decide(source([KEY_317]))
    assert _conditions(decision)["Ready"] == ("False", sources.LEVEL_LIMIT_EXCEEDED)


def test_a_15_level_configmap_source_applies_its_snapshot() -> None:
    decision = _decide(source(deep(15), CONFIG_MAP_ARM), _snapshot(deep(15)))
    assert _conditions(decision)["Ready"] == ("True", "Observed")
    (body,) = decision.apply.values()
    assert body["spec"]["labels"] == {k: f"v{i}" for i, k in enumerate(deep(15))}


# --- the profile assigner -------------------------------------------------------------------------------


def test_the_assigner_never_uses_a_16_level_source_even_while_its_status_still_says_ready() -> None:
    """Right after an upgrade the cache holds the status the previous release wrote (Ready=True); the
    Node-profile controller may run before the source is reconciled again."""
    stale_ready = source(deep(16), CONFIG_MAP_ARM, ready_status())
    assert profiles.source_input(stale_ready) == profiles.OUT_OF_EFFECT
    assert profiles.ready_source("deep", profiles.source_input(stale_ready)) is None
    fits = source(deep(15), CONFIG_MAP_ARM, ready_status())
    assert profiles.source_input(fits).in_effect
    assert profiles.source_input(fits).levels == tuple(deep(15))
    # Fixing the levels is a change the assigner sees: the Node-profile controllers wake on it.
    assert profiles.wakes_profiles("MODIFIED", stale_ready, fits)
    assert profiles.source_input(source([KEY_317], NODE_LABELS_ARM, ready_status())) == profiles.OUT_OF_EFFECT


def test_fifteen_topograph_tiers_normalised_make_a_16_level_topology_kueue_accepts() -> None:
    tiers = [f"{keys.TOPOGRAPH_TIER_PREFIX}{n}" for n in range(1, 16)]  # leaf first, as Topograph numbers
    assert spec_errors(spec(tiers), namespace=NS) == []
    ready = profiles.ready_source(
        "fabric", profiles.source_input(source(tiers, NODE_LABELS_ARM, ready_status()))
    )
    assert ready is not None
    node = {keys.MANAGED: "true", **{t: "x" for t in tiers}}
    assignment = profiles.node_assignment(node, [ready])
    assert assignment is not None
    assert assignment.levels == (*reversed(tiers), keys.HOSTNAME)  # coarsest first, 16 levels
    assert profiles.topology_problems(profiles.topology_body(assignment.levels)) == []


# --- the property: accepted exactly when its Topology is ---------------------------------------------

#: Keys drawn from the families that reach the limits: private keys, Topograph tiers (normalised), and
#: keys at Kueue's 316-character nodeLabel limit and one past it.
_KEYS = st.one_of(
    st.integers(0, 40).map(lambda i: f"topology.gpustack.ai/l{i}"),
    st.integers(0, 40).map(lambda n: f"{keys.TOPOGRAPH_TIER_PREFIX}{n}"),
    st.sampled_from([KEY_316, KEY_317, f"{PREFIX_253}/{'k' * 61}"]),
)


#: Any length from 1 to 20, evenly (a plain ``st.lists`` draws mostly short lists, rarely 15 or 16).
_LEVELS = st.integers(1, 20).flatmap(lambda n: st.lists(_KEYS, min_size=n, max_size=n, unique=True))


@settings(max_examples=examples(300))
@given(levels=_LEVELS)
@example(levels=deep(15))
@example(levels=deep(16))
@example(levels=[KEY_317])
def test_a_source_is_accepted_exactly_when_its_fullest_topology_is(levels: list[str]) -> None:
    """For a Node populating every level (the deepest profile the source yields), the generated Topology
    is one Kueue's API server accepts if and only if the source passes admission; and a source that does
    not is never in effect, whatever its status says."""
    accepted = not spec_errors(spec(levels), namespace=NS)
    fullest = lv.profile_levels(levels, dict.fromkeys(levels, "x"))
    assert accepted == (profiles.topology_problems(profiles.topology_body(fullest)) == [])
    in_effect = profiles.source_input(source(levels, NODE_LABELS_ARM, ready_status())).in_effect
    assert in_effect == accepted


# --- the create path -----------------------------------------------------------------------------------


class RecordingClient:
    """Records server-side applies; answers each with ``refuse`` (an ApiError) when set."""

    def __init__(self, refuse: ApiError | None = None) -> None:
        #: The levels of every Topology applied.
        self.applied: list[list[str]] = []
        #: (kind, name) of every other object applied.
        self.others: list[tuple[str, str]] = []
        self.refuse = refuse

    async def apply(self, _resource: Any, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        if body["kind"] != kinds.TOPOLOGY.kind:
            self.others.append((body["kind"], body["metadata"]["name"]))
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}
        self.applied.append([lvl["nodeLabel"] for lvl in body["spec"]["levels"]])
        if self.refuse is not None:
            raise self.refuse
        return {**body, "metadata": {**body["metadata"], "uid": "u-1", "resourceVersion": "1"}}


def _topology(client: RecordingClient) -> Topology:
    api = cast("Any", client)
    settings_ = SettingsSource(api, model=WorkerSettings, env={}, post_events=False)
    topology = Topology(api, settings_, InformerRegistry(api))
    topology.topologies.last_resource_version = "0"
    return topology


def _steps(client: RecordingClient) -> Any:
    return _topology(client).steps


async def test_a_topology_kueue_would_refuse_is_never_sent() -> None:
    client = RecordingClient()
    steps = _steps(client)
    seventeen = (*deep(16), keys.HOSTNAME)
    assert await steps._ensure_topology(seventeen) is False
    assert await steps._ensure_topology(seventeen) is False
    assert client.applied == []
    name = keys.topology_name(lv.profile_of(seventeen))
    assert "spec.levels: must have 1 to 16 items" in steps.refused[name]
    sixteen = (*deep(15), keys.HOSTNAME)
    assert await steps._ensure_topology(sixteen) is True
    assert client.applied == [list(sixteen)]


async def test_a_topology_refused_with_422_is_reported_once_and_not_sent_again() -> None:
    client = RecordingClient(ApiError(422, "Invalid", {}, "spec.levels: Too many"))
    steps = _steps(client)
    levels = ("example.com/rack", keys.HOSTNAME)
    assert await steps._ensure_topology(levels) is False
    assert await steps._ensure_topology(levels) is False
    assert len(client.applied) == 1
    assert "422" in steps.refused[keys.topology_name(lv.profile_of(levels))]


# --- plan ---------------------------------------------------------------------------------------------


def _snapshot_source(levels: list[str]) -> dict[str, Any]:
    src = source(levels, CONFIG_MAP_ARM)
    src["metadata"] = {"name": "deep"}
    src["spec"]["nodeSelector"] = {"matchLabels": {"example.com/inventory": "racks"}}
    return src


def _rack_snapshot(levels: list[str]) -> str:
    nodes = {f"rack-node-{i}": {k: f"v{j}" for j, k in enumerate(levels)} for i in range(1, 9)}
    return yaml.safe_dump({"apiVersion": keys.SNAPSHOT_API_VERSION, "revision": "deep-1", "nodes": nodes})


def test_plan_refuses_a_16_level_source_naming_the_limit() -> None:
    with pytest.raises(PlanError) as refused:
        plan_chain(
            packaged_scenario("topology-8"),
            parse_sets([]),
            topology_source=_snapshot_source(deep(16)),
            snapshot=_rack_snapshot(deep(16)),
        )
    message = str(refused.value)
    assert f"{sources.LEVEL_LIMIT_EXCEEDED}: spec.levels: {LIMIT}" in message
    assert WHY in message


def test_plan_of_a_15_level_source_is_a_16_level_topology_and_a_ready_queue() -> None:
    plan = plan_chain(
        packaged_scenario("topology-8"),
        parse_sets([]),
        topology_source=_snapshot_source(deep(15)),
        snapshot=_rack_snapshot(deep(15)),
    )
    assert plan.refused == []
    profile = keys.topology_profile([*deep(15), keys.HOSTNAME])
    topology = plan.topologies[keys.topology_name(profile)]
    assert len(topology["spec"]["levels"]) == 16
    assert {plan.profiles[f"rack-node-{i}"] for i in range(1, 9)} == {profile}
    l4 = plan.cluster_queues["gpustack--nvidia-l4-linux-amd64"]
    ready = next(c for c in l4["status"]["conditions"] if c["type"] == "TopologyReady")
    assert ready["status"] == "True", ready


def test_plan_cli_refuses_a_16_level_source_file_naming_the_limit(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(source(deep(16))))
    assert main(["plan", "topology-8", "--topology-source", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"spec.levels: {LIMIT} (lists 16): {WHY}" in err


def test_plan_from_cluster_with_a_stored_16_level_source_plans_hostname_only_profiles() -> None:
    """The source was stored by a release before the limit (Ready=True); the plan decides it as the
    controller does: not in effect, every Node hostname-only, no Topology Kueue would refuse."""
    stored = _snapshot_source(deep(16))
    stored["status"] = ready_status()
    live = applied_fleet(packaged_scenario("topology-8"), source=stored, snapshot=_rack_snapshot(deep(16)))
    desired = desired_chain(live, parse_sets([]), namespace=NS)
    (note,) = [n for n in desired.notes if "TopologySource deep" in n]
    assert f"{sources.LEVEL_LIMIT_EXCEEDED}: spec.levels: {LIMIT}" in note
    hostname_only = keys.topology_profile([keys.HOSTNAME])
    assert {desired.profiles[f"rack-node-{i}"] for i in range(1, 9)} == {hostname_only}
    assert desired.refused == []
    for body in desired.objects.get(kinds.TOPOLOGY.kind, {}).values():
        assert validation.object_problems(body) == []


@pytest.mark.parametrize("refused", [False, True], ids=["created", "refused-422"])
async def test_no_node_is_given_a_profile_whose_topology_was_refused(refused: bool) -> None:
    client = RecordingClient(ApiError(422, "Invalid", {}, "spec.levels: Too many") if refused else None)
    topology = _topology(client)
    rack = "example.com/rack"
    labels = {
        keys.HOSTNAME: "n0",
        keys.MANAGED: "true",
        rack: "r1",
        keys.TOPOLOGY_PROFILE: lv.HOSTNAME_ONLY_PROFILE,
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n0", "uid": "u-n0", "resourceVersion": "1", "labels": labels},
    }
    topology.nodes._apply({"type": "ADDED", "object": node})
    topology.sources._apply({"type": "ADDED", "object": source([rack], NODE_LABELS_ARM, ready_status())})
    await topology.steps.node_profile("n0")
    await topology.steps.node_profile("n0")
    if refused:
        assert client.applied == [[rack, keys.HOSTNAME]]  # tried once, never again
        assert client.others == []  # the Node keeps the profile it carries
    else:
        assert client.applied[0] == [rack, keys.HOSTNAME]
        assert (kinds.NODE.kind, "n0") in client.others
