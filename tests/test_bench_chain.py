"""bench/chain_bench.py's own logic: when the fleet's per-Node writes are done, and limits that scale with N.

At the top of tests/ (not in a tests/bench package, which would shadow the repository's ``bench``
directory on the import path).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from bench import chain_bench
from gpustack_worker.devcluster.audit import AuditEvent

T0 = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def _event(i: int, resource: str, name: str, *, subresource: str = "", code: int | None = 200) -> AuditEvent:
    return AuditEvent(
        audit_id=f"a{i}",
        stage="ResponseComplete",
        verb="patch",
        api_group="",
        resource=resource,
        subresource=subresource,
        namespace="",
        name=name,
        user_agent=chain_bench.CONTROLLER_UA + "bench",
        username="system:serviceaccount:gpustack-system:controller",
        groups=(),
        code=code,
        request_uri=f"/api/v1/{resource}/{name}",
        received=T0 + dt.timedelta(seconds=i),
    )


def _expected(unprofiled: int, mirrors: int) -> chain_bench.Expected:
    return chain_bench.Expected(
        nodes=unprofiled,
        flavors={},
        types={},
        plans={},
        topologies=set(),
        unprofiled=unprofiled,
        mirrors=mirrors,
    )


@pytest.mark.parametrize(
    ("events", "unprofiled", "mirrors", "at"),
    [
        # both Nodes and the one Devices written: the time of the last needed write
        ([("nodes", "a"), ("devices", "a"), ("nodes", "b")], 2, 1, 2),
        # a Node written twice counts once
        ([("nodes", "a"), ("nodes", "a"), ("devices", "a")], 2, 1, None),
        # the mirror still missing
        ([("nodes", "a"), ("nodes", "b")], 2, 1, None),
        # other writes (a status subresource, chain objects) do not count
        ([("nodes", "a"), ("nodes/status", "b"), ("resourceflavors", "b"), ("devices", "a")], 2, 1, None),
        # later writes do not move the time
        ([("nodes", "a"), ("devices", "a"), ("resourceflavors", "x"), ("nodes", "a")], 1, 1, 1),
    ],
)
def test_profiles_written_at(
    events: list[tuple[str, str]], unprofiled: int, mirrors: int, at: int | None
) -> None:
    audit = []
    for i, (path, name) in enumerate(events):
        resource, _, sub = path.partition("/")
        audit.append(_event(i, resource, name, subresource=sub))
    got = chain_bench.profiles_written_at(audit, _expected(unprofiled, mirrors))
    assert got == (T0 + dt.timedelta(seconds=at) if at is not None else None)


def test_profiles_written_at_counts_only_successful_writes() -> None:
    refused = [_event(0, "nodes", "a", code=409), _event(1, "nodes", "b", code=None)]
    assert chain_bench.profiles_written_at(refused, _expected(1, 0)) is None
    then = chain_bench.profiles_written_at([*refused, _event(2, "nodes", "a")], _expected(1, 0))
    assert then == T0 + dt.timedelta(seconds=2)


def test_profiles_written_at_nothing_needed() -> None:
    """A profiled fleet without Devices: done from the start (the chain objects decide)."""
    assert chain_bench.profiles_written_at([], _expected(0, 0)) == dt.datetime.min.replace(tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("nodes", "converge", "idle"),
    [(100, 600.0, 600.0), (1000, 600.0, 600.0), (5000, 1200.0, 600.0), (20000, 4800.0, 1200.0)],
)
def test_limits_scale_with_the_fleet(nodes: int, converge: float, idle: float) -> None:
    assert chain_bench.converge_limit(nodes) == pytest.approx(converge)
    assert chain_bench.idle_limit(nodes) == pytest.approx(idle)


def test_fleet_larger_than_one_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet over the simulator's per-scenario bound (20,000 > 10,000) is validated in slices and is
    the same fleet: same draws, every name once."""
    whole = chain_bench.fleet(7, seed=3)
    monkeypatch.setattr(chain_bench, "SCENARIO_MAX_NODES", 3)
    sliced = chain_bench.fleet(7, seed=3)
    assert sliced == whole
    assert [s.name for s in sliced] == [f"bench-{i:05d}" for i in range(7)]


def test_repeated_writes_name_each_write_of_a_chain_object_written_twice_with_its_body() -> None:
    first = _event(1, "clusterqueues", "q", subresource="status")
    second = _event(2, "clusterqueues", "q", subresource="status")
    second = dataclasses.replace(second, request_object={"status": {"conditions": []}})
    once = _event(3, "clusterqueues", "q")  # the spec, not the status: another object path
    nodes = [_event(4, "nodes", "n"), _event(5, "nodes", "n")]  # per-Node writes are not chain objects
    lines = chain_bench.repeated_writes([first, once, second, *nodes])
    assert len(lines) == 2
    assert lines[0].endswith("patch clusterqueues/status /q code=200")
    assert lines[1].endswith('code=200 body={"status": {"conditions": []}}')
    assert chain_bench.repeated_writes([first, once]) == []
    created = dataclasses.replace(_event(6, "instancetypes", "t"), verb="create")
    finalizer = _event(7, "instancetypes", "t")  # the create, then the finalizer: two desired writes
    assert chain_bench.repeated_writes([created, finalizer]) == []
