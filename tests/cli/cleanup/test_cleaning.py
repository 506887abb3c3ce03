"""The pure uninstall plan (:mod:`gpustack_worker.cli.cleanup.cleaning`): what is ours and why, in order.

Tables over listed objects — ours by owner label or field manager, look-alikes by name or type label that
are not (left alone), objects someone else also manages (only our fields go) — the Lease refusal, the
step order, and a property: no object without our evidence is ever written, and no key another manager
owns is ever removed.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import managers as chain
from gpustack_worker.cli.cleanup import cleaning
from gpustack_worker.cli.cleanup.cleaning import Inventory, Step, Verb, lease_holder, plan
from gpustack_worker.runtime.prune import OWNER_LABEL
from gpustack_worker.topology import managers as topology
from tests.kit.properties import examples

NOW = datetime.datetime(2026, 12, 3, 20, 0, 0, tzinfo=datetime.UTC)
SPEC = {"f:spec": {".": {}}}


def entry(manager: str, fields: dict[str, Any], *, op: str = "Apply", sub: str = "") -> dict[str, Any]:
    e: dict[str, Any] = {"manager": manager, "operation": op, "fieldsV1": fields}
    if sub:
        e["subresource"] = sub
    return e


def labels_fields(*names: str) -> dict[str, Any]:
    return {"f:metadata": {"f:labels": {f"f:{n}": {} for n in names}}}


def obj(
    name: str,
    *,
    namespace: str = "",
    labels: dict[str, str] | None = None,
    managed: list[dict[str, Any]] | None = None,
    finalizers: list[str] | None = None,
    status: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": labels or {}}
    if namespace:
        meta["namespace"] = namespace
    if managed is not None:
        meta["managedFields"] = managed
    if finalizers:
        meta["finalizers"] = finalizers
    out: dict[str, Any] = {"metadata": meta, "spec": spec or {}}
    if status is not None:
        out["status"] = status
    return out


def refs(p: cleaning.Plan, step: Step | None = None, verb: Verb | None = None) -> list[str]:
    return [a.ref for a in p.actions if (step is None or a.step is step) and (verb is None or a.verb is verb)]


def left(p: cleaning.Plan) -> dict[str, str]:
    return {f"{x.kind} {x.name}": x.reason for x in p.left_alone}


# --- owner labels --------------------------------------------------------------------------------------
def test_flavors_topologies_local_queues_by_owner_label_only() -> None:
    inv = Inventory(
        flavors=[
            obj("gpustack--intel-linux-amd64-4c-fnv64-1", labels={OWNER_LABEL: chain.OWNER_FLAVORS}),
            # named and typed like ours, no stamp: an admin's
            obj("gpustack--lookalike-linux-amd64-1c", labels={keys.RESOURCE_TYPE: keys.TYPE_NODES}),
            # stamped by somebody else's controller
            obj("gpustack--other", labels={OWNER_LABEL: "someone-else"}),
            obj("plain-admin-flavor"),
        ],
        topologies=[
            obj("gpustack-fnv64-1", labels={OWNER_LABEL: topology.OWNER_TOPOLOGIES}),
            obj("gpustack-fnv64-2", labels={keys.RESOURCE_TYPE: keys.TYPE_TOPOLOGY}),
        ],
        local_queues=[
            obj("gpustack-fnv64-a", namespace="team", labels={OWNER_LABEL: chain.OWNER_LOCAL_QUEUES}),
            obj("gpustack-fnv64-b", namespace="team"),
        ],
    )
    p = plan(inv, now=NOW)
    assert refs(p, Step.FLAVORS) == ["ResourceFlavor gpustack--intel-linux-amd64-4c-fnv64-1"]
    assert refs(p, Step.TOPOLOGIES) == ["Topology gpustack-fnv64-1"]
    assert refs(p, Step.LOCAL_QUEUES) == ["LocalQueue team/gpustack-fnv64-a"]
    assert all(
        a.why == f"owner label {OWNER_LABEL}={owner}"
        for a, owner in zip(
            p.actions, (chain.OWNER_FLAVORS, topology.OWNER_TOPOLOGIES, chain.OWNER_LOCAL_QUEUES), strict=True
        )
    )
    assert left(p) == {
        "ResourceFlavor gpustack--lookalike-linux-amd64-1c": f"no owner label {OWNER_LABEL}",
        "ResourceFlavor gpustack--other": "owner label names 'someone-else', not 'chain-flavors'",
        "Topology gpustack-fnv64-2": f"no owner label {OWNER_LABEL}",
        "LocalQueue gpustack-fnv64-b": f"no owner label {OWNER_LABEL}",
    }


# --- field managers ------------------------------------------------------------------------------------
KUEUE_STATUS = entry("kueue", {"f:status": {"f:conditions": {}}}, op="Update", sub="status")
KUEUE_FINALIZER = entry("kueue", {"f:metadata": {"f:finalizers": {}}}, op="Update")


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        # the chain's queue, Kueue's status and finalizer entries beside it: deleted, drained first
        pytest.param(
            obj(
                "gpustack--t4",
                managed=[entry(chain.QUEUE, SPEC), KUEUE_STATUS, KUEUE_FINALIZER],
                status={"reservingWorkloads": 1, "admittedWorkloads": 1},
            ),
            [("drain", "drain"), ("queues", "delete")],
            id="ours-reserving",
        ),
        pytest.param(
            obj("gpustack--cpu", managed=[entry(chain.QUEUE, SPEC)], status={"reservingWorkloads": 0}),
            [("queues", "delete")],
            id="ours-idle",
        ),
        # an unreadable count may hide a reservation
        pytest.param(
            obj("gpustack--x", managed=[entry(chain.QUEUE, SPEC)], status={"reservingWorkloads": "1"}),
            [("drain", "drain"), ("queues", "delete")],
            id="ours-unreadable-count",
        ),
        # an admin label added with kubectl does not make the queue someone else's
        pytest.param(
            obj(
                "gpustack--y",
                managed=[entry(chain.QUEUE, SPEC), entry("kubectl-label", labels_fields("a"), op="Update")],
            ),
            [("queues", "delete")],
            id="ours-admin-label",
        ),
        # someone else owns spec fields too: keep the queue, release only ours (no drain)
        pytest.param(
            obj(
                "gpustack--shared",
                managed=[entry(chain.QUEUE, SPEC), entry("admin-tool", {"f:spec": {"f:cohortName": {}}})],
                status={"reservingWorkloads": 2},
            ),
            [("fields", "release")],
            id="shared",
        ),
        # named and labelled like ours, written by someone else only
        pytest.param(
            obj(
                "gpustack--admin",
                labels={keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES},
                managed=[entry("kubectl-client-side-apply", SPEC, op="Update")],
            ),
            [],
            id="lookalike",
        ),
        # our manager without a spec (only status): not ours to delete
        pytest.param(
            obj("gpustack--status-only", managed=[entry(chain.QUEUE, {"f:status": {}}, sub="status")]),
            [],
            id="no-spec",
        ),
    ],
)
def test_cluster_queues_by_field_manager(queue: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    p = plan(Inventory(cluster_queues=[queue]), now=NOW)
    assert [(a.step.name.lower(), a.verb.value) for a in p.actions] == expected
    if not expected:
        assert list(left(p)) == [f"ClusterQueue {queue['metadata']['name']}"]


def test_admission_checks_only_ours_by_their_own_manager() -> None:
    inv = Inventory(
        admission_checks=[
            obj(keys.NODE_DEVICES_CHECK, managed=[entry(keys.NODE_DEVICES_CHECK, SPEC)]),
            # our name, an admin's object
            obj(keys.JOINT_CHECK, managed=[entry("kubectl-create", SPEC, op="Update")]),
            obj("gpustack-extra-check", managed=[entry("admin", SPEC)]),
            obj("vendor-check", managed=[entry("vendor", SPEC)]),
        ]
    )
    p = plan(inv, now=NOW)
    assert refs(p) == [f"AdmissionCheck {keys.NODE_DEVICES_CHECK}"]
    assert set(left(p)) == {f"AdmissionCheck {keys.JOINT_CHECK}", "AdmissionCheck gpustack-extra-check"}


def test_node_features_by_manager_never_by_name() -> None:
    ns = kinds.SYSTEM_NAMESPACE
    inv = Inventory(
        node_features=[
            obj(
                keys.worker_nodefeature_name("n1"),
                namespace=ns,
                managed=[entry(nodefeature.FIELD_MANAGER, SPEC)],
            ),
            obj("gpustack-topology-0123456789abcdef", namespace=ns, managed=[entry(topology.SOURCE, SPEC)]),
            # the Device Manager's: looks like ours by name, written by another component
            obj(
                keys.device_manager_nodefeature_name("n1"),
                namespace=ns,
                managed=[entry("gpustack-simulator", SPEC)],
            ),
            # our name, no manager of ours (someone copied it)
            obj(keys.worker_nodefeature_name("n2"), namespace=ns, managed=[entry("admin", SPEC)]),
        ]
    )
    p = plan(inv, now=NOW)
    assert refs(p, Step.NODE_FEATURES) == [
        f"NodeFeature {ns}/gpustack-topology-0123456789abcdef",
        f"NodeFeature {ns}/n1-gpustack-worker",
    ]
    assert set(left(p)) == {"NodeFeature n1-gpustack-device-manager", "NodeFeature n2-gpustack-worker"}
    assert p.notes  # nfd-master drops the labels it projected


# --- fields on others' objects -------------------------------------------------------------------------
FIT_A = keys.sliced_max_free_units_key("nvidia-l4")
FIT_B = keys.shared_free_cards_key("nvidia-l4")
UNITS = keys.sliced_resource("nvidia.com/gpu", "units")


def test_node_fields_released_per_manager_shared_keys_kept() -> None:
    node = obj(
        "n1",
        labels={FIT_A: "1600000", FIT_B: "2", keys.TOPOLOGY_PROFILE: "fnv64-1", "example.com/rack": "r1"},
        managed=[
            entry(fit.FIELD_MANAGER, labels_fields(FIT_A, FIT_B)),
            # an admin also applies FIT_B: shared, stays
            entry("admin-tool", labels_fields(FIT_B, "example.com/rack")),
            entry(
                capacity.FIELD_MANAGER,
                {"f:status": {"f:capacity": {f"f:{UNITS}": {}}, "f:allocatable": {f"f:{UNITS}": {}}}},
                sub="status",
            ),
            # an Update entry of ours (a merge patch): removed key by key, values tested
            entry(topology.NODE_TOPOLOGY, labels_fields(keys.TOPOLOGY_PROFILE), op="Update"),
            entry("nfd-master", labels_fields(keys.MANAGED), op="Update"),
            entry("kubelet", {"f:status": {"f:capacity": {"f:cpu": {}}}}, op="Update", sub="status"),
        ],
    )
    p = plan(Inventory(nodes=[node]), now=NOW)
    by_manager = {a.manager: a for a in p.actions}
    assert set(by_manager) == {fit.FIELD_MANAGER, capacity.FIELD_MANAGER, topology.NODE_TOPOLOGY}
    f = by_manager[fit.FIELD_MANAGER]
    assert (f.step, f.verb, f.subresource) == (Step.FIELDS, Verb.RELEASE, "")
    assert f.removed == (f"metadata.labels.{FIT_A}",)
    assert f.kept == (f"metadata.labels.{FIT_B}",)
    c = by_manager[capacity.FIELD_MANAGER]
    assert (c.verb, c.subresource) == (Verb.RELEASE, "status")
    assert c.removed == (f"status.capacity.{UNITS}", f"status.allocatable.{UNITS}")
    t = by_manager[topology.NODE_TOPOLOGY]
    assert t.verb is Verb.REMOVE_KEYS
    assert t.values == (("/metadata/labels", keys.TOPOLOGY_PROFILE, "fnv64-1"),)
    assert not any(a.verb is Verb.DELETE for a in p.actions)


def test_an_update_entry_of_ours_that_owns_only_shared_keys_writes_nothing() -> None:
    node = obj(
        "n1",
        labels={keys.TOPOLOGY_PROFILE: "p"},
        managed=[
            entry(topology.NODE_TOPOLOGY, labels_fields(keys.TOPOLOGY_PROFILE), op="Update"),
            entry("admin-tool", labels_fields(keys.TOPOLOGY_PROFILE)),
        ],
    )
    assert plan(Inventory(nodes=[node]), now=NOW).actions == ()


# --- InstanceTypes and finalizers ----------------------------------------------------------------------
def test_instance_types_authored_deleted_admins_only_unfinalized() -> None:
    authored = obj(
        "gpustack--t4",
        labels={keys.DERIVED_FROM_NODE: "true"},
        managed=[
            entry(chain.AUTHOR, SPEC, op="Update"),
            entry(chain.INSTANCE_TYPE, {"f:metadata": {}}, op="Update"),
        ],
        finalizers=[keys.FINALIZER_CONTROLLED],
    )
    admins = obj(
        "my-pool",
        managed=[entry("kubectl", SPEC, op="Update")],
        finalizers=[keys.FINALIZER_CONTROLLED, "x/y"],
    )
    # says "derived" in a label an admin can copy; never authored by us
    lookalike = obj(
        "gpustack--copy", labels={keys.DERIVED_FROM_NODE: "true"}, managed=[entry("kubectl", SPEC)]
    )
    source = obj("racks", managed=[entry("kubectl", SPEC)], finalizers=[keys.FINALIZER_TOPOLOGY_SOURCE])
    p = plan(Inventory(instance_types=[authored, admins, lookalike], topology_sources=[source]), now=NOW)
    assert refs(p, Step.INSTANCE_TYPES, Verb.DELETE) == ["InstanceType gpustack--t4"]
    assert refs(p, Step.FINALIZERS, Verb.UNFINALIZE) == [
        "InstanceType gpustack--t4",
        "InstanceType my-pool",
        "TopologySource racks",
    ]
    assert {a.finalizer for a in p.actions if a.verb is Verb.UNFINALIZE} == {
        keys.FINALIZER_CONTROLLED,
        keys.FINALIZER_TOPOLOGY_SOURCE,
    }
    assert "InstanceType gpustack--copy" in left(p)


# --- the Lease -----------------------------------------------------------------------------------------
def lease(
    holder: str, renewed: str | None, duration: Any = 15, manager: str = cleaning.CONTROLLER_MANAGER
) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if renewed is not None:
        spec["renewTime"] = renewed
    return {
        "metadata": {
            "name": cleaning.LEASE_NAME,
            "namespace": kinds.SYSTEM_NAMESPACE,
            "uid": "lease",
            "managedFields": [entry(manager, {"f:spec": {}}, op="Update")],
        },
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("value", "held"),
    [
        (lease("ctl-0_1", "2026-12-03T19:59:50.000000Z"), "ctl-0_1"),  # renewed 10 s ago, 15 s lease
        (lease("ctl-0_1", "2026-12-03T19:59:40.000000Z"), None),  # expired
        (lease("", "2026-12-03T19:59:59.000000Z"), None),  # released on graceful stop
        (lease("ctl-0_1", None), "ctl-0_1"),  # no renew time: refuse
        (lease("ctl-0_1", "yesterday"), "ctl-0_1"),  # unreadable: refuse
        (lease("ctl-0_1", "2026-12-03T19:59:59Z", duration="15"), "ctl-0_1"),
        (None, None),
    ],
)
def test_lease_holder(value: dict[str, Any] | None, held: str | None) -> None:
    assert lease_holder(value, NOW) == held


def test_a_held_lease_refuses_and_a_released_one_is_deleted_last() -> None:
    queue = obj("gpustack--q", managed=[entry(chain.QUEUE, SPEC)])
    held = plan(Inventory(cluster_queues=[queue], lease=lease("ctl-0_1", "2026-12-03T19:59:59Z")), now=NOW)
    assert held.refusal is not None and "ctl-0_1" in held.refusal and "--force" in held.refusal
    free = plan(Inventory(cluster_queues=[queue], lease=lease("", "2026-12-03T19:59:59Z")), now=NOW)
    assert free.refusal is None
    assert [a.step for a in free.actions] == [Step.QUEUES, Step.LEASE]
    foreign = plan(Inventory(lease=lease("", None, manager="someone")), now=NOW)
    assert foreign.actions == () and list(left(foreign)) == [f"Lease {cleaning.LEASE_NAME}"]


# --- order and output ----------------------------------------------------------------------------------
def test_steps_run_in_the_safe_order() -> None:
    ns = kinds.SYSTEM_NAMESPACE
    inv = Inventory(
        instance_types=[
            obj(
                "gpustack--t4",
                managed=[entry(chain.AUTHOR, SPEC, op="Update")],
                finalizers=[keys.FINALIZER_CONTROLLED],
            )
        ],
        cluster_queues=[
            obj("gpustack--t4", managed=[entry(chain.QUEUE, SPEC)], status={"reservingWorkloads": 1})
        ],
        flavors=[obj("f", labels={OWNER_LABEL: chain.OWNER_FLAVORS})],
        topologies=[obj("t", labels={OWNER_LABEL: topology.OWNER_TOPOLOGIES})],
        admission_checks=[obj(keys.JOINT_CHECK, managed=[entry(keys.JOINT_CHECK, SPEC)])],
        local_queues=[obj("lq", namespace="team", labels={OWNER_LABEL: chain.OWNER_LOCAL_QUEUES})],
        node_features=[
            obj("n-gpustack-worker", namespace=ns, managed=[entry(nodefeature.FIELD_MANAGER, SPEC)])
        ],
        nodes=[obj("n", labels={FIT_A: "1"}, managed=[entry(fit.FIELD_MANAGER, labels_fields(FIT_A))])],
        lease=lease("", None),
    )
    p = plan(inv, now=NOW)
    assert [a.step for a in p.actions] == list(Step)
    text = cleaning.render_text(p, dry_run=True)
    assert text.startswith("cleanup would run 11 action(s):\n1. drain queues with reservations\n")
    doc = cleaning.to_json(p, dry_run=True)
    assert '"step": "drain"' in doc and '"verb": "unfinalize"' in doc


# --- the property: evidence or nothing -----------------------------------------------------------------
_MANAGERS = [*cleaning.OUR_MANAGERS, "kubectl", "admin-tool", "kueue", "nfd-master", "gpustack-simulator"]
_OWNERS = [*cleaning.OUR_OWNERS, "someone-else", None]
_LABEL_KEYS = [FIT_A, FIT_B, keys.TOPOLOGY_PROFILE, "example.com/rack"]


@st.composite
def _objects(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["gpustack--a", "gpustack--b", "n-gpustack-worker", keys.JOINT_CHECK, "x"]))
    labels = {k: "v" for k in draw(st.lists(st.sampled_from(_LABEL_KEYS), unique=True))}
    owner = draw(st.sampled_from(_OWNERS))
    if owner:
        labels[OWNER_LABEL] = owner
    if draw(st.booleans()):
        labels[keys.RESOURCE_TYPE] = keys.TYPE_NODES
    managed = []
    for _ in range(draw(st.integers(0, 3))):
        fields: dict[str, Any] = {}
        if draw(st.booleans()):
            fields.update(SPEC)
        owned = draw(st.lists(st.sampled_from(_LABEL_KEYS), unique=True))
        if owned:
            fields.update(labels_fields(*owned))
        managed.append(
            entry(
                draw(st.sampled_from(_MANAGERS)),
                fields,
                op=draw(st.sampled_from(["Apply", "Update"])),
                sub=draw(st.sampled_from(["", "", "status"])),
            )
        )
    return obj(
        name,
        namespace="ns",
        labels=labels,
        managed=managed,
        status={"reservingWorkloads": draw(st.integers(0, 2))},
    )


@settings(max_examples=examples(300))
@given(st.lists(_objects(), max_size=6))
def test_no_write_without_evidence_and_no_foreign_key_removed(objs: list[dict[str, Any]]) -> None:
    for i, o in enumerate(objs):
        o["metadata"]["uid"] = f"uid-{i}"
    inv = Inventory(
        cluster_queues=objs,
        flavors=objs,
        topologies=objs,
        admission_checks=objs,
        local_queues=objs,
        node_features=objs,
        nodes=objs,
        instance_types=objs,
    )
    p = plan(inv, now=NOW)
    by_uid = {o["metadata"]["uid"]: o for o in objs}
    assert len(by_uid) == len(objs)
    for a in p.actions:
        o = by_uid[a.uid]
        entries = o["metadata"]["managedFields"]
        ours = {e["manager"] for e in entries} & set(cleaning.OUR_MANAGERS)
        stamp = o["metadata"]["labels"].get(OWNER_LABEL)
        assert ours or stamp in cleaning.OUR_OWNERS, a
        if a.verb is Verb.DELETE and a.kind not in ("ResourceFlavor", "Topology", "LocalQueue"):
            foreign_spec = [
                e
                for e in entries
                if e["manager"] not in cleaning.OUR_MANAGERS
                and "f:spec" in e["fieldsV1"]
                and not e.get("subresource")
            ]
            assert a.kind == "InstanceType" or not foreign_spec, a
        if a.verb is Verb.REMOVE_KEYS:
            foreign = {
                k
                for e in entries
                if e["manager"] != a.manager and e.get("subresource", "") == a.subresource
                for k in (e["fieldsV1"].get("f:metadata") or {}).get("f:labels", {})
            }
            assert not {f"f:{k}" for _, k, _ in a.values} & foreign, a


def test_the_drain_follows_the_queue_decided_on_not_its_name() -> None:
    """Regression (found by the property above): a drain was matched to a deleted queue by name, so another
    object of the same name (an admin's queue seen in the same listing) was drained too."""
    ours = obj("gpustack--t4", managed=[entry(chain.QUEUE, SPEC)], status={"reservingWorkloads": 0})
    admins = obj("gpustack--t4", managed=[entry("admin-tool", SPEC)], status={"reservingWorkloads": 1})
    admins["metadata"]["uid"] = "uid-admin"
    p = plan(Inventory(cluster_queues=[ours, admins]), now=NOW)
    assert [(a.verb, a.uid) for a in p.actions] == [(Verb.DELETE, "uid-gpustack--t4")]
