"""One object the API server refuses never stalls its siblings (issue 16 follow-up): in every chain reconcile
whose key covers many objects (every flavor, the authored InstanceTypes, a Namespace's LocalQueues, the
AdmissionChecks) the other objects are written in the same pass, the refused one is reported once per
distinct failure (a Warning Event on what it belongs to, a log line), a foreign holder of the name is
named and never overwritten or deleted, and the key is retried through the rate limiter."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import admissionchecks, flavors, managers
from gpustack_worker.chain.controller import Chain
from gpustack_worker.chain.steps import (
    FLAVORS_KEY,
    REASON_NAME_TAKEN,
    REASON_WRITE_REFUSED,
    WriteFailure,
    WritesRefused,
    is_ours,
    write_failure,
)
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.settings import SettingsSource
from tests.chain.builders import mixed_cluster
from tests.kit import kueue
from tests.kit.properties import examples

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.informer import Informer
    from gpustack_worker.runtime.resources import Resource

TEAM = "team-a"


def _error(status: int, message: str) -> ApiError:
    return ApiError.from_status(status, {"kind": "Status", "reason": "Refused", "message": message})


def _foreign(name: str) -> dict[str, Any]:
    """A ResourceFlavor an admin created under a generated name: no type or owner label."""
    return kueue.resource_flavor(
        name,
        {"nodeLabels": {"example.com/foreign": "true"}},
        uid=f"uid-{name}",
        managedFields=[{"manager": "kubectl-create"}],
    )


class RefusingClient:
    """Answers every write, except the named objects' (refused with the given error); records them all.
    ``existing`` is what a LIST of a refused name finds on the server."""

    def __init__(self, refuse: dict[str, ApiError], existing: dict[str, dict[str, Any]]) -> None:
        self.refuse = refuse
        self.existing = existing
        self.writes: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.lists = 0

    def _write(self, resource: Resource, name: str) -> None:
        if name in self.refuse:
            raise self.refuse[name]
        self.writes.append((resource.kind, name))

    async def apply(self, resource: Resource, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        self._write(resource, body["metadata"]["name"])
        return body

    async def create(self, resource: Resource, body: dict[str, Any], *_a: Any, **_kw: Any) -> dict[str, Any]:
        if resource.kind == "Event":
            self.events.append(body)
        else:
            self._write(resource, body["metadata"]["name"])
        return body

    async def list(self, _resource: Resource, **_kw: Any) -> tuple[list[Any], str]:
        self.lists += 1
        return list(self.existing.values()), "1"

    async def delete(self, resource: Resource, name: str, *_a: Any, **_kw: Any) -> bool:
        self._write(resource, name)
        return True


def _feed(informer: Informer, obj: dict[str, Any]) -> None:
    informer._apply({"type": "ADDED", "object": copy.deepcopy(obj)})


def _chain(client: RefusingClient) -> Chain:
    c = cast("Client", client)
    chain = Chain(c, SettingsSource(c, model=WorkerSettings, env={}, post_events=False), InformerRegistry(c))
    for n in mixed_cluster():
        n["metadata"]["resourceVersion"] = "1"
        _feed(chain.nodes, n)
    return chain


def _flavor_names(chain: Chain) -> list[str]:
    return [p.name for p in flavors.plan_flavors(chain.steps.hardware(), mixed_on_node=True)]


def _written(client: RefusingClient, kind: str) -> set[str]:
    return {name for k, name in client.writes if k == kind}


# --- the pure part ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "foreign"),
    [
        (None, False),  # nothing of that name: the object itself was refused
        (_foreign("f"), True),  # no owner label: an admin's object
        ({"metadata": {"name": "f", "labels": {keys.OWNER_LABEL: managers.OWNER_FLAVORS}}}, False),
        ({"metadata": {"name": "f", "labels": {keys.OWNER_LABEL: managers.OWNER_LOCAL_QUEUES}}}, True),
    ],
)
def test_a_refused_flavor_names_a_foreign_holder(existing: dict[str, Any] | None, foreign: bool) -> None:
    failure = write_failure(
        kinds.RESOURCE_FLAVOR,
        "f",
        None,
        _error(409, 'Apply failed with 1 conflict: conflict with "kubectl-create"'),
        existing,
        owner=managers.OWNER_FLAVORS,
        field_managers=(managers.FLAVOR,),
    )
    assert failure.foreign is foreign
    assert failure.status == 409 and "kubectl-create" in failure.message
    assert failure.reason == (REASON_NAME_TAKEN if foreign else REASON_WRITE_REFUSED)
    # The note says what to do about a foreign holder, and never promises to overwrite it.
    assert ("Delete or rename ResourceFlavor f" in failure.note()) is foreign


def test_unstamped_kinds_are_ours_by_field_manager() -> None:
    # The chain applies each AdmissionCheck under the check's own name as field manager.
    check = {"metadata": {"name": "c", "managedFields": [{"manager": keys.JOINT_CHECK}]}}
    assert is_ours(check, owner=None, field_managers=tuple(admissionchecks.CHECKS))
    assert not is_ours(check, owner=None, field_managers=(managers.AUTHOR,))


# --- the flavor step -------------------------------------------------------------------------------


async def test_a_foreign_flavor_skips_only_its_name_and_is_reported_once() -> None:
    probe = _chain(RefusingClient({}, {}))
    names = _flavor_names(probe)
    taken = names[0]
    client = RefusingClient(
        {taken: _error(409, 'Apply failed with 1 conflict: conflict with "kubectl-create": .spec')},
        {taken: _foreign(taken)},
    )
    chain = _chain(client)
    for _ in range(3):
        with pytest.raises(WritesRefused) as refused:
            await chain.steps.flavors(FLAVORS_KEY)
        assert [f.name for f in refused.value.failures] == [taken]
    assert chain.steps.events is not None
    await chain.steps.events.flush()
    # Every other flavor (and every authored InstanceType) written, the taken name never written.
    assert _written(client, kinds.RESOURCE_FLAVOR.kind) == set(names) - {taken}
    assert not any(name == taken for _kind, name in client.writes)
    # Reported once over three passes, on what the flavor belongs to, naming the holder to delete.
    assert len(client.events) == 1
    event = client.events[0]
    assert event["type"] == "Warning" and event["reason"] == REASON_NAME_TAKEN
    assert event["regarding"]["kind"] in {"InstanceType", "Node"}
    assert f"Delete or rename ResourceFlavor {taken}" in event["note"]
    # The holder gone: the next pass writes the flavor and succeeds.
    client.refuse.clear()
    client.existing.clear()
    await chain.steps.flavors(FLAVORS_KEY)
    assert taken in _written(client, kinds.RESOURCE_FLAVOR.kind)


async def test_the_controller_retries_a_refused_key_rate_limited() -> None:
    probe = _chain(RefusingClient({}, {}))
    taken = _flavor_names(probe)[-1]
    client = RefusingClient({taken: _error(422, "spec.nodeLabels: Invalid value")}, {})
    chain = _chain(client)
    await chain.flavor_ctl.process(FLAVORS_KEY)
    await chain.flavor_ctl.process(FLAVORS_KEY)
    assert chain.flavor_ctl.queue.num_requeues(FLAVORS_KEY) == 2
    client.refuse.clear()
    await chain.flavor_ctl.process(FLAVORS_KEY)
    assert chain.flavor_ctl.queue.num_requeues(FLAVORS_KEY) == 0


async def test_a_server_error_still_fails_the_whole_pass() -> None:
    probe = _chain(RefusingClient({}, {}))
    first = _flavor_names(probe)[0]
    client = RefusingClient({first: _error(503, "etcdserver: leader changed")}, {})
    chain = _chain(client)
    with pytest.raises(ApiError) as failed:
        await chain.steps.flavors(FLAVORS_KEY)
    assert not isinstance(failed.value, WritesRefused) and failed.value.status == 503


@settings(max_examples=examples(25))
@given(data=st.data())
async def test_any_refused_subset_leaves_the_rest_written(data: st.DataObject) -> None:
    names = _flavor_names(_chain(RefusingClient({}, {})))
    refused = data.draw(st.sets(st.sampled_from(names), max_size=len(names)))
    statuses = {n: data.draw(st.sampled_from([400, 403, 404, 409, 422])) for n in sorted(refused)}
    foreign: set[str] = set()
    if refused:
        foreign = data.draw(st.sets(st.sampled_from(sorted(refused))))
    client = RefusingClient(
        {n: _error(s, f"refused {n}") for n, s in statuses.items()}, {n: _foreign(n) for n in foreign}
    )
    chain = _chain(client)
    for _ in range(2):
        if refused:
            with pytest.raises(WritesRefused) as error:
                await chain.steps.flavors(FLAVORS_KEY)
            failures: tuple[WriteFailure, ...] = error.value.failures
            assert {f.name for f in failures} == refused
            assert {f.name for f in failures if f.foreign} == foreign
        else:
            await chain.steps.flavors(FLAVORS_KEY)
    assert chain.steps.events is not None
    await chain.steps.events.flush()
    assert _written(client, kinds.RESOURCE_FLAVOR.kind) == set(names) - refused
    assert len(client.events) == len(refused)  # one per distinct failure, not per pass


async def test_a_foreign_holder_is_never_merged_into_even_without_a_conflict() -> None:
    # Server-side apply would merge the chain's fields into an admin's flavor whose fields do not conflict
    # (and a later pass would then replace it as a flavor with a changed selector): it is looked up first.
    probe = _chain(RefusingClient({}, {}))
    names = _flavor_names(probe)
    taken = names[1]
    client = RefusingClient({}, {taken: _foreign(taken)})
    chain = _chain(client)
    with pytest.raises(WritesRefused) as refused:
        await chain.steps.flavors(FLAVORS_KEY)
    (failure,) = refused.value.failures
    assert failure.foreign and failure.status == 409 and "kubectl-create" in failure.message
    assert _written(client, kinds.RESOURCE_FLAVOR.kind) == set(names) - {taken}
    assert client.lists == 1  # one LIST of the kind per pass, not one per name


# --- LocalQueues and AdmissionChecks ---------------------------------------------------------------


def _cluster_queue(name: str) -> dict[str, Any]:
    labels = {keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES}
    return kueue.cluster_queue(name, {}, uid=f"uid-{name}", resourceVersion="1", labels=labels)


async def test_one_refused_local_queue_leaves_the_namespaces_others_written() -> None:
    taken = keys.local_queue_name("pool-b")
    client = RefusingClient(
        {taken: _error(409, "object is being deleted")},
        {taken: {"metadata": {"name": taken, "namespace": TEAM}}},
    )
    chain = _chain(client)
    for q in ("pool-a", "pool-b", "pool-c"):
        _feed(chain.queues, _cluster_queue(q))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM, "uid": "n"}}
    _feed(chain.namespaces, namespace)
    with pytest.raises(WritesRefused):
        await chain.steps.local_queues(TEAM)
    with pytest.raises(WritesRefused):
        await chain.steps.local_queues(TEAM)
    assert chain.steps.events is not None
    await chain.steps.events.flush()
    others = {keys.local_queue_name(q) for q in ("pool-a", "pool-c")}
    assert _written(client, kinds.LOCAL_QUEUE.kind) == others
    reported = [(e["regarding"]["kind"], e["reason"]) for e in client.events]
    assert reported == [("Namespace", REASON_NAME_TAKEN)]


async def test_one_refused_admission_check_leaves_the_other_written() -> None:
    first, second = sorted(admissionchecks.CHECKS)
    client = RefusingClient({first: _error(403, "denied by policy")}, {})
    chain = _chain(client)
    with pytest.raises(WritesRefused):
        await chain.steps.admission_checks("checks")
    assert _written(client, kinds.ADMISSION_CHECK.kind) == {second}
