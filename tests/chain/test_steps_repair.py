"""An admin's edit of a field the chain owns: written back once, reported once (issue 17).

The flavor step against a recording client whose answers carry the managedFields the server would store:
after the first pass writes every flavor, a pass writes nothing; an admin's change of a chain annotation
on one flavor (the field moved to the admin's managedFields entry) makes the next pass write that flavor
alone, forced (a plain apply would be refused as a conflict and retried forever), and post one
``FieldsRepaired`` Warning naming the field; the pass after that writes nothing again. A label of the
admin's own is never written. The cluster test is ``test_faults_admin_edit_cluster.py``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

from gpustack_worker.api import keys
from gpustack_worker.chain import managers
from gpustack_worker.chain.controller import Chain
from gpustack_worker.chain.steps import FLAVORS_KEY, REASON_FIELDS_REPAIRED
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.apply import desired_fields
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from tests.chain.builders import mixed_cluster

if TYPE_CHECKING:
    from gpustack_worker.runtime.apply import FieldPath
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.resources import Resource

NOTE = f"{keys.NOTE_PREFIX}product"


def _tree(paths: frozenset[FieldPath]) -> dict[str, Any]:
    """A managedFields ``fieldsV1`` tree owning exactly ``paths``."""
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        for element in path:
            node = node.setdefault(element, {})
    return root


class StoringClient:
    """Stores what is applied as the server would (the manager's entry owns the applied fields) and records
    every write with its ``force``; Events are kept apart."""

    def __init__(self) -> None:
        self.applies: list[tuple[str, str, bool]] = []
        self.events: list[dict[str, Any]] = []
        self.stored: dict[str, dict[str, Any]] = {}

    async def apply(self, resource: Resource, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.applies.append((resource.kind, name, bool(kw.get("force"))))
        entry = {
            "manager": kw["field_manager"],
            "operation": "Apply",
            "fieldsV1": _tree(desired_fields(body, resource.hints)),
        }
        obj = copy.deepcopy(body)
        obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(len(self.applies)))
        obj["metadata"]["managedFields"] = [entry]
        self.stored[name] = obj
        return obj

    async def create(self, resource: Resource, body: dict[str, Any], *_a: Any, **_kw: Any) -> dict[str, Any]:
        if resource.kind == "Event":
            self.events.append(body)
        return body

    async def list(self, _resource: Resource, **_kw: Any) -> tuple[list[Any], str]:
        return [], "1"

    async def delete(self, resource: Resource, name: str, *_a: Any, **_kw: Any) -> bool:
        raise AssertionError(f"unexpected delete of {resource.kind} {name}")


def _feed(informer: Informer, obj: dict[str, Any]) -> None:
    informer._apply({"type": "MODIFIED", "object": copy.deepcopy(obj)})


def _chain(client: StoringClient) -> Chain:
    c = cast("Client", client)
    chain = Chain(c, SettingsSource(c, model=WorkerSettings, env={}, post_events=False), InformerRegistry(c))
    for n in mixed_cluster():
        n["metadata"]["resourceVersion"] = "1"
        _feed(chain.nodes, n)
    return chain


def _flavor_applies(client: StoringClient) -> list[tuple[str, bool]]:
    return [(name, force) for kind, name, force in client.applies if kind == "ResourceFlavor"]


async def test_an_admin_edit_of_a_flavor_annotation_is_forced_back_once_and_reported_once() -> None:
    client = StoringClient()
    chain = _chain(client)
    await chain.steps.flavors(FLAVORS_KEY)
    first = _flavor_applies(client)
    assert first and not any(force for _name, force in first), "a name the chain does not hold is not forced"
    for name, _force in first:
        _feed(chain.flavors, client.stored[name])
    client.applies.clear()
    await chain.steps.flavors(FLAVORS_KEY)
    assert _flavor_applies(client) == [], "converged: no write"

    # An admin changes a chain annotation on one flavor (kubectl annotate --overwrite: an Update that
    # moves the field to the admin's entry) and adds a label of their own on another.
    target, other = first[0][0], first[-1][0]
    edited = copy.deepcopy(client.stored[target])
    edited["metadata"]["annotations"][NOTE] = "edited by an admin"
    ours = edited["metadata"]["managedFields"][0]
    del ours["fieldsV1"]["f:metadata"]["f:annotations"][f"f:{NOTE}"]
    theirs = {"f:metadata": {"f:annotations": {f"f:{NOTE}": {}}}}
    edited["metadata"]["managedFields"].append(
        {"manager": "kubectl-annotate", "operation": "Update", "fieldsV1": theirs}
    )
    _feed(chain.flavors, edited)
    labelled = copy.deepcopy(client.stored[other])
    labelled["metadata"]["labels"]["example.com/team"] = "ml"
    labelled["metadata"]["managedFields"].append(
        {
            "manager": "kubectl-label",
            "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:example.com/team": {}}}},
        }
    )
    _feed(chain.flavors, labelled)
    client.applies.clear()
    await chain.steps.flavors(FLAVORS_KEY)
    assert _flavor_applies(client) == [(target, True)], "only the edited flavor, forced"
    assert client.stored[target]["metadata"]["annotations"][NOTE] != "edited by an admin"
    assert chain.steps.events is not None
    await chain.steps.events.flush()
    repaired = [e for e in client.events if e["reason"] == REASON_FIELDS_REPAIRED]
    assert len(repaired) == 1
    assert repaired[0]["type"] == "Warning"
    assert repaired[0]["regarding"]["kind"] == "ResourceFlavor" and repaired[0]["regarding"]["name"] == target
    assert f"metadata.annotations.{NOTE}" in repaired[0]["note"]

    # Repaired: the next passes write nothing and report nothing.
    _feed(chain.flavors, client.stored[target])
    client.applies.clear()
    for _ in range(2):
        await chain.steps.flavors(FLAVORS_KEY)
    await chain.steps.events.flush()
    assert _flavor_applies(client) == []
    assert len([e for e in client.events if e["reason"] == REASON_FIELDS_REPAIRED]) == 1
    assert managers.FLAVOR in {e["manager"] for e in client.stored[target]["metadata"]["managedFields"]}
