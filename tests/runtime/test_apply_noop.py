"""The apply no-op decision, against objects and managedFields the real API server stored (fixtures).

The table (``noop_cases.ROWS``) is checked here offline against the committed fixtures, cached exactly as
an informer caches them (through the ingest transform); ``test_capture_cluster.py`` checks the same table
against a live server. Below it: the field-set walk, the hints, the Applier's binding to its caches and
its deletes.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import pytest
from capture_fixtures import CASES_BY_NAME, load
from noop_cases import ROWS, Row, decide

from gpustack_worker.api import kinds
from gpustack_worker.runtime.apply import (
    Applier,
    ApplierConfigError,
    desired_fields,
    is_noop,
    owned_fields,
)
from gpustack_worker.runtime.resources import FieldHints, Resource
from gpustack_worker.runtime.store import Store
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_noop_table_on_captured_objects(row: Row) -> None:
    assert decide(row, load(row.fixture)) is row.noop


@pytest.mark.parametrize("case", sorted(CASES_BY_NAME))
def test_desired_fields_are_what_the_server_recorded(case: str) -> None:
    """Our walk of each body gives exactly the fields the server recorded for it (where nobody else
    took one over since)."""
    record = load(case)
    entry = next(
        e
        for e in record["object"]["metadata"]["managedFields"]
        if e["manager"] == record["manager"] and e.get("subresource") == record["subresource"]
    )
    recorded = owned_fields(entry["fieldsV1"])
    wanted = desired_fields(record["body"], CASES_BY_NAME[case].resource.hints)
    taken = {"clusterqueue-taken-over", "clusterqueue-kueue-first-update", "node-labels-updated-by-other"}
    if case in taken:
        assert recorded < wanted
    else:
        assert recorded == wanted


def test_no_cache_or_another_subresource_is_a_write() -> None:
    record = load("node-status")
    cached = make_transform([record["manager"]])(copy.deepcopy(record["object"]))
    assert not is_noop(record["body"], None, record["manager"], "status", hints=kinds.NODE.hints)
    assert not is_noop(record["body"], cached, record["manager"], None, hints=kinds.NODE.hints)


# -- the field-set walk ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields_v1", "expected"),
    [
        ({"f:metadata": {"f:labels": {"f:a": {}}}}, {("f:metadata", "f:labels", "f:a")}),
        ({"f:spec": {"f:taints": {}}}, {("f:spec", "f:taints")}),
        (
            {
                "f:status": {
                    "f:conditions": {".": {}, 'k:{"type":"A"}': {".": {}, "f:type": {}, "f:status": {}}}
                }
            },
            {("f:status", "f:conditions", 'k:{"type":"A"}', f) for f in ("f:type", "f:status")},
        ),
        (
            {"f:metadata": {"f:finalizers": {".": {}, 'v:"x"': {}}}},
            {("f:metadata", "f:finalizers", 'v:"x"')},
        ),
        ({"f:spec": {'k:{"b":1,"a":"x"}': {}}}, {("f:spec", 'k:{"a":"x","b":1}')}),
    ],
    ids=["map-leaf", "atomic", "keyed-item-fields", "set-item", "key-json-canonical"],
)
def test_owned_fields(fields_v1: dict[str, Any], expected: set[tuple[str, ...]]) -> None:
    assert owned_fields(fields_v1) == expected


HINTS = FieldHints(
    keyed={"spec.groups": ("name",)},
    sets=("spec.tags",),
    atomic=("spec.selector",),
    quantities=("spec.groups[].quota",),
    defaults={"spec.rules[].weight": 1},
)


def body(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "uid": "u"}, "spec": spec}


def test_desired_fields_follow_the_hints() -> None:
    fields = desired_fields(
        body(
            {
                "groups": [{"name": "a", "quota": "1"}],
                "tags": ["t"],
                "selector": {"k": "v"},
                "rules": [{"x": 1}],
                "empty": {},
                "none": [],
            }
        ),
        HINTS,
    )
    assert fields == {
        ("f:spec", "f:groups", 'k:{"name":"a"}', "f:name"),
        ("f:spec", "f:groups", 'k:{"name":"a"}', "f:quota"),
        ("f:spec", "f:tags", 'v:"t"'),
        ("f:spec", "f:selector"),
        ("f:spec", "f:rules"),
        ("f:spec", "f:empty"),
        ("f:spec", "f:none"),  # an atomic list, even empty, is a field
    }


def entry(spec: dict[str, Any]) -> dict[str, Any]:
    def fields(node: dict[str, Any]) -> dict[str, Any]:
        return {f"f:{k}": fields(v) if isinstance(v, dict) and v else {} for k, v in node.items()}

    return {"manager": "m", "operation": "Apply", "fieldsV1": {"f:spec": fields(spec)}}


@pytest.mark.parametrize(
    ("server_rules", "noop"),
    [
        ([{"x": 1, "weight": 1}], True),  # the declared server default, with its value
        ([{"x": 1, "weight": 2}], False),  # a value other than the default: someone changed it
        ([{"x": 1, "other": 1}], False),  # an undeclared extra field inside an atomic value
    ],
    ids=["declared-default", "default-changed", "undeclared-extra"],
)
def test_atomic_values_allow_only_declared_defaults(server_rules: list[Any], noop: bool) -> None:
    cached = body({"rules": server_rules})
    cached["metadata"]["managedFields"] = [entry({"rules": None})]
    assert is_noop(body({"rules": [{"x": 1}]}), cached, "m", hints=HINTS) is noop


def test_quantity_only_where_declared() -> None:
    want = body({"groups": [{"name": "a", "quota": "1000m", "label": "1000m"}]})
    have = body({"groups": [{"name": "a", "quota": 1, "label": "1000m"}]})
    have["metadata"]["managedFields"] = [
        {
            "manager": "m",
            "operation": "Apply",
            "fieldsV1": {
                "f:spec": {
                    "f:groups": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:quota": {}, "f:label": {}}}
                }
            },
        }
    ]
    assert is_noop(want, have, "m", hints=HINTS)
    assert not is_noop(body({"groups": [{"name": "a", "quota": "1", "label": "1"}]}), have, "m", hints=HINTS)
    assert not is_noop(want, have, "m", hints=FieldHints(keyed={"spec.groups": ("name",)}))


def test_hint_paths_are_parsed_strictly() -> None:
    with pytest.raises(ValueError, match="bad segment"):
        FieldHints(atomic=("spec..x",))
    with pytest.raises(ValueError, match="at least one key"):
        FieldHints(keyed={"spec.x": ()})


# -- the Applier: bound to caches that keep its managedFields ----------------------------------------------


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("apply", {"body": body, **kwargs}))
        return body

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **kwargs: Any
    ) -> bool:
        self.calls.append(("delete", {"name": name, "namespace": namespace, **kwargs}))
        return True


def test_applier_refuses_a_cache_that_drops_its_managed_fields() -> None:
    client = cast("Client", FakeClient())
    with pytest.raises(ApplierConfigError, match="keeps the managedFields of \\['a'\\] only"):
        Applier(client, "b", cache=make_transform(["a"]))
    with pytest.raises(ApplierConfigError, match="bound to no cache"):
        Applier(client, "b", cache=[])
    with pytest.raises(ApplierConfigError, match="does not say which field managers"):
        Applier(client, "b", cache=[object()])  # type: ignore[list-item]
    with pytest.raises(ApplierConfigError, match="Store does not say which field managers"):
        Applier(client, "b", cache=Store())  # type: ignore[arg-type]  # a bare store: whose entries?
    applier = Applier(client, "b", cache=[make_transform(["a", "b"]), make_transform(["b"])])
    with pytest.raises(ApplierConfigError):
        applier.bind(make_transform())


def test_informer_says_which_managers_its_transform_keeps() -> None:
    from gpustack_worker.runtime.informer import Informer

    client = cast("Client", FakeClient())
    kept = Informer(client, kinds.NODE, transform=make_transform(["a", "b"]))
    assert kept.field_managers == {"a", "b"}
    Applier(client, "a", cache=kept)
    with pytest.raises(ApplierConfigError, match="the Node informer"):
        Applier(client, "a", cache=Informer(client, kinds.NODE))


async def test_applier_writes_only_when_not_a_noop() -> None:
    record = load("clusterqueue")
    fake = FakeClient()
    applier = Applier(cast("Client", fake), record["manager"], cache=make_transform([record["manager"]]))
    cached = make_transform([record["manager"]])(copy.deepcopy(record["object"]))
    assert await applier.apply(kinds.CLUSTER_QUEUE, record["body"], cached, force=True) is None
    changed = copy.deepcopy(record["body"])
    changed["spec"]["stopPolicy"] = "None"
    assert await applier.apply(kinds.CLUSTER_QUEUE, changed, cached, force=True) == changed
    assert [c for c, _ in fake.calls] == ["apply"]


# -- deletes ------------------------------------------------------------------------------------------------


async def test_applier_delete_uses_the_uid_and_only_asked_for_resource_version() -> None:
    fake = FakeClient()
    applier = Applier(cast("Client", fake), "m", cache=make_transform(["m"]))
    cached = {"metadata": {"name": "q", "uid": "u1", "resourceVersion": "7"}}
    await applier.delete(kinds.CLUSTER_QUEUE, cached)
    await applier.delete(
        kinds.CLUSTER_QUEUE, cached, check_resource_version=True, propagation_policy="Foreground"
    )
    assert [kw for _, kw in fake.calls] == [
        {"name": "q", "namespace": None, "uid": "u1", "resource_version": None, "propagation_policy": None},
        {
            "name": "q",
            "namespace": None,
            "uid": "u1",
            "resource_version": "7",
            "propagation_policy": "Foreground",
        },
    ]
    with pytest.raises(ValueError, match=r"no metadata\.uid"):
        await applier.delete(kinds.CLUSTER_QUEUE, {"metadata": {"name": "q"}})


def test_resource_hints_do_not_change_identity() -> None:
    plain = Resource("g", "v1", "K", "ks", namespaced=False)
    hinted = Resource("g", "v1", "K", "ks", namespaced=False, hints=FieldHints(sets=("spec.x",)))
    assert plain == hinted and hash(plain) == hash(hinted)
