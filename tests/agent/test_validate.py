"""Table tests for the agent's own checks (``agent/validate.py``) and for holding the last good value,
plus the once-per-finding reporting (``agent/report.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.agent import validate
from gpustack_worker.agent.report import Reporter
from gpustack_worker.api import keys
from gpustack_worker.api.devices_check import Finding

from .builders import devices, node

NV_POOL = "nvidia.com/gpu.sliced"


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        (None, "absent"),
        ("0", "absent"),
        ("512", "present"),
        ("1k", "present"),
        ("2147483647", "present"),
        ("2147483648", "unknown"),
        ("1e1000000", "unknown"),
        ("10e999999", "unknown"),
        ("1500m", "unknown"),
        ("-1", "unknown"),
        ("many", "unknown"),
    ],
)
def test_pool_state(raw: str | None, state: str) -> None:
    capacity = {} if raw is None else {NV_POOL: raw}
    assert validate.pool_state(node(capacity=capacity), NV_POOL) == state


COUNT = keys.count_key(keys.general_key("intel"))


@pytest.mark.parametrize(
    ("capacity", "labels", "found"),
    [
        ({"cpu": "96"}, {}, []),
        ({"cpu": "3500m"}, {}, []),
        ({"cpu": "1048576"}, {}, []),
        ({"cpu": "1048577"}, {}, [("status.capacity[cpu]", "ValueOutOfRange", (COUNT,))]),
        ({"cpu": "1e1000000"}, {}, [("status.capacity[cpu]", "ValueOutOfRange", (COUNT,))]),
        ({"cpu": "-1"}, {}, [("status.capacity[cpu]", "ValueOutOfRange", (COUNT,))]),
        ({NV_POOL: "1e1000000"}, {}, [(f"status.capacity[{NV_POOL}]", "ValueOutOfRange", (NV_POOL + ".*",))]),
        ({}, {keys.MANAGED: "true"}, []),
        ({}, {keys.MANAGED: "false"}, []),
        ({}, {keys.MANAGED: "True"}, [(f"metadata.labels[{keys.MANAGED}]", "ManagedLabelIgnored", ())]),
        ({}, {keys.MANAGED: ""}, [(f"metadata.labels[{keys.MANAGED}]", "ManagedLabelIgnored", ())]),
    ],
)
def test_check_node(
    capacity: dict[str, str], labels: dict[str, str], found: list[tuple[str, str, tuple[str, ...]]]
) -> None:
    findings = validate.check_node(node(capacity=capacity, labels={keys.NFD_CPU_VENDOR: "Intel", **labels}))
    assert [(f.path, f.reason, f.holds) for f in findings] == found
    assert all(f.kind == "Node" for f in findings)


PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id,gpustack.ai/managed"}


@pytest.mark.parametrize(
    ("value", "annotations", "reason"),
    [
        pytest.param("true", PROJECTED, None, id="projected-true"),
        pytest.param("true", {}, None, id="admin-true"),
        pytest.param("false", {}, None, id="admin-false"),
        # Issue 16 defect 11: an admin overwrote the value nfd-master projected — the flavors stop
        # selecting the node, so it is said, whoever wrote the value.
        pytest.param("yes", PROJECTED, "ManagedLabelIgnored", id="projected-overwritten-yes"),
        pytest.param("True", PROJECTED, "ManagedLabelIgnored", id="projected-overwritten-True"),
        pytest.param("false", PROJECTED, "ManagedLabelOverwritten", id="projected-overwritten-false"),
        pytest.param("TRUE", {}, "ManagedLabelIgnored", id="admin-TRUE"),
        pytest.param(" true", {}, "ManagedLabelIgnored", id="admin-space-true"),
        pytest.param("1", {}, "ManagedLabelIgnored", id="admin-1"),
    ],
)
def test_managed_value_is_checked_whoever_wrote_it(
    value: str, annotations: dict[str, str], reason: str | None
) -> None:
    n = node(labels={keys.NFD_CPU_VENDOR: "Intel", keys.MANAGED: value}, annotations=annotations)
    findings = validate.check_node(n)
    assert [f.reason for f in findings] == ([reason] if reason else [])
    for f in findings:
        # The note names the value and what is withheld.
        assert f.path == f"metadata.labels[{keys.MANAGED}]"
        assert repr(value) in f.note()
        assert "the node's capacity in every flavor" in f.note()
        assert "its fit labels" in f.note()
        assert f.holds == ()
        assert (keys.NFD_FEATURE_LABELS_ANNOTATION in f.note()) is bool(annotations)


def _link(name: str, numa: str, state: str = "Active", rdma: bool = True) -> dict[str, Any]:
    return {"name": name, "rdma": rdma, "state": state, "numaAffinity": numa}


@pytest.mark.parametrize(
    ("links", "found"),
    [
        ([_link("ib0", "0"), _link("ib1", "1")], []),
        ([_link("ib0", "0 1")], [("spec.interfaces[name=ib0].numaAffinity", (keys.RDMA_NUMA,))]),
        ([_link("ib0", "0 1", state="Down")], [("spec.interfaces[name=ib0].numaAffinity", ())]),
        ([_link("ib0", "0 1", rdma=False)], [("spec.interfaces[name=ib0].numaAffinity", ())]),
        ([_link("ib0", "n/a")], [("spec.interfaces[name=ib0].numaAffinity", (keys.RDMA_NUMA,))]),
        (
            [_link(f"l{i}", str(1000 + i)) for i in range(13)],
            [("spec.interfaces[*].numaAffinity", (keys.RDMA_NUMA,))],
        ),
        ([_link("ib0", "1" * 5000)], [("spec.interfaces[name=ib0].numaAffinity", (keys.RDMA_NUMA,))]),
    ],
)
def test_check_interfaces(links: list[dict[str, Any]], found: list[tuple[str, tuple[str, ...]]]) -> None:
    findings = validate.check_interfaces(devices([], interfaces=links).interfaces)
    assert [(f.path, f.holds) for f in findings] == found


def _read(_key: str, raw: str) -> int | None:
    return validate.read_count(raw)


@pytest.mark.parametrize(
    ("out", "holds", "published", "result"),
    [
        pytest.param({"a": 1, "b": 2}, (), {"a": "9"}, {"a": 1, "b": 2}, id="no-holds"),
        pytest.param({"a": 1, "b": 2}, ("a",), {"a": "9"}, {"a": 9, "b": 2}, id="held-last-good"),
        pytest.param({"a": 1, "b": 2}, ("a",), {}, {"b": 2}, id="held-withheld-without-published"),
        pytest.param({"a": 1}, ("a",), {"a": "10e999999"}, {}, id="garbage-published-is-not-good"),
        pytest.param({"a": 1}, ("a",), {"a": "1600k"}, {"a": 1_600_000}, id="canonical-quantity"),
        pytest.param({"x.1": 1, "x.2": 2, "y": 3}, ("x.*",), {"x.1": "5", "x.3": "7"},
                     {"x.1": 5, "x.3": 7, "y": 3}, id="prefix-keeps-published-drops-new"),
        pytest.param({}, ("a",), {"a": "4"}, {"a": 4}, id="held-when-nothing-is-computed"),
        pytest.param({"b": 1}, ("out-of-scope",), {"out-of-scope": "4"}, {"b": 1}, id="scope"),
    ],
)  # fmt: skip
def test_apply_holds(
    out: dict[str, int], holds: tuple[str, ...], published: dict[str, str], result: dict[str, int]
) -> None:
    got = validate.apply_holds(out, holds, published, read=_read, scope=lambda k: k != "out-of-scope")
    assert got == result


@pytest.mark.parametrize(
    ("raw", "limit", "value"),
    [
        ("12", 100, 12),
        ("101", 100, None),
        ("1.5", 100, None),
        ("-1", 100, None),
        ("1k", 10**6, 1000),
        ("x", 9, None),
    ],
)
def test_read_count(raw: str, limit: int, value: int | None) -> None:
    assert validate.read_count(raw, limit) == value


def test_check_composes_node_devices_and_interfaces() -> None:
    n = node(capacity={"cpu": "1e1000000"}, labels={keys.NFD_CPU_VENDOR: "Intel"})
    d = devices(
        [{"id": "a100", "manufacturer": "nvidia", "name": "A100", "memory": 10**16, "accelerators": []}],
        interfaces=[_link("ib0", "0 1")],
    )
    checked = validate.check(n, d)
    assert {f.kind for f in checked.findings} == {"Node", "Devices"}
    assert set(checked.holds()) == {COUNT, "nvidia.com/gpu.sliced.memory-mib", keys.RDMA_NUMA}
    assert validate.check(n, None).devices is None


class _Sink:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str, str]] = []

    def warning(self, regarding: Any, *, reason: str, action: str, note: str) -> None:
        self.notes.append((regarding["kind"], reason, note))


def _finding(path: str, kind: str = "Devices") -> Finding:
    return Finding(kind, path, "1", "rule", "ValueOutOfRange", holds=("k",))


def test_reporter_reports_each_finding_once_while_it_persists() -> None:
    sink = _Sink()
    reporter = Reporter(sink)
    a, b = _finding("a"), _finding("b", kind="Node")
    reporter.report("n1", [a], {"Devices": "u1"})
    reporter.report("n1", [a], {})
    assert [n[2] for n in sink.notes] == ["a=1: rule; keeping the last published value of k"]
    reporter.report("n1", [a, b], {})
    assert [(n[0], n[2].split("=")[0]) for n in sink.notes] == [("Devices", "a"), ("Node", "b")]
    reporter.report("n1", [], {})  # fixed: forgotten
    reporter.report("n1", [a], {})  # made again: reported again
    assert len(sink.notes) == 3
    reporter.report("n2", [a], {})  # per node
    assert len(sink.notes) == 4
    reporter.forget("n2")
    reporter.report("n2", [a], {})
    assert len(sink.notes) == 5


def test_reporter_without_events_still_counts() -> None:
    reporter = Reporter(None)
    reporter.report("n1", [_finding("a")], {})
    assert len(reporter.reported) == 1
