"""Traces in a real Jaeger: a real agent process, configured only through the standard ``OTEL_*``
variables, exports its spans over OTLP/HTTP to the Jaeger that ``DevCluster(with_jaeger=True)`` started,
and Jaeger's HTTP query API returns a reconcile trace — root span ``reconcile <controller>`` with the
``controller``, ``key`` and ``reconcileID`` attributes — whose children are the API calls that reconcile
made (method, path, status code).

The control plane here is a module's own (API server only, plus Jaeger): the agent's simulated node must
not leak into the shared cluster other modules count Nodes in.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import rbac
from gpustack_worker.devcluster import build
from gpustack_worker.devcluster.cluster import DevCluster
from gpustack_worker.devcluster.jaeger import STORE, jaeger_config
from gpustack_worker.devcluster.procs import ManagedProcess
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster

#: A generous bound for polling only (a failure here means 'never', not 'slow').
PATIENCE_S = 180.0
AGENT_CONTROLLERS = ("agent-nodefeature", "agent-capacity", "agent-fit")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def test_config_listens_on_loopback_only_and_stores_in_memory() -> None:
    config = jaeger_config(4318, 16686, 16685)
    extensions = config["extensions"]
    assert extensions["jaeger_storage"]["backends"][STORE] == {"memory": {"max_traces": 50_000}}
    assert extensions["jaeger_query"]["storage"] == {"traces": STORE}
    assert config["exporters"]["jaeger_storage_exporter"]["trace_storage"] == STORE
    endpoints = [
        extensions["jaeger_query"]["http"]["endpoint"],
        extensions["jaeger_query"]["grpc"]["endpoint"],
        config["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
    ]
    assert endpoints == ["127.0.0.1:16686", "127.0.0.1:16685", "127.0.0.1:4318"]
    assert config["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]
    # the Collector's own metrics endpoint would bind a fixed port: off
    assert config["service"]["telemetry"]["metrics"] == {"level": "none"}


def test_jaeger_is_optional_never_on_the_default_build_path(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "jaeger" in build.OPTIONAL
    assert "jaeger" not in build.COMPONENTS  # ensure_all() builds COMPONENTS only
    jaeger = build.OPTIONAL["jaeger"]
    assert (jaeger.package, jaeger.version) == ("github.com/jaegertracing/jaeger/cmd/jaeger", "v1.75.0")
    with pytest.raises(build.BuildError, match="unknown optional component 'nope'"):
        build.ensure_optional("nope")
    built: list[str] = []
    monkeypatch.setattr(build, "ensure_binary", lambda component, log=print: built.append(component.name))
    build.ensure_all()
    assert "jaeger" not in built and built == list(build.COMPONENTS)


@pytest.fixture(scope="module")
def traced_cluster() -> Iterator[DevCluster]:
    directory = Path(tempfile.mkdtemp(prefix="gpustack-jaeger-"))
    cluster = DevCluster(
        directory,
        with_kueue=False,
        with_nfd=False,
        with_scheduler=False,
        with_jaeger=True,
        log=lambda msg: print(f"[jaeger devcluster] {msg}"),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or ()}


def _parent(span: dict[str, Any]) -> str | None:
    for ref in span.get("references") or ():
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


def _reconcile_traces(traces: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(root reconcile span, its direct children) of every trace rooted at a reconcile that made API calls."""
    found = []
    for trace in traces:
        spans = trace.get("spans") or []
        roots = [s for s in spans if _parent(s) is None and s["operationName"].startswith("reconcile ")]
        for root in roots:
            children = [s for s in spans if _parent(s) == root["spanID"]]
            if children:
                found.append((root, children))
    return found


def _node_writes(found: list[tuple[dict[str, Any], list[dict[str, Any]]]], node: str) -> list[dict[str, Any]]:
    """The attributes of every non-GET API-call span that targets one of ``node``'s objects."""
    calls = [_tags(child) for _, children in found for child in children]
    return [c for c in calls if c.get("http.request.method") != "GET" and node in str(c.get("url.path"))]


async def test_reconcile_trace_has_its_api_calls_as_children(traced_cluster: DevCluster) -> None:
    assert traced_cluster.jaeger is not None
    jaeger = traced_cluster.jaeger
    assert traced_cluster.otlp_endpoint == jaeger.otlp_endpoint
    assert traced_cluster.jaeger_url == jaeger.ui_url
    # one simulated accelerator node, under a name of this run
    scenario = packaged_scenario("mixed-4")
    template = next(n for n in scenario.nodes if n.name == "gpu-hygon")
    node_name = f"trace-{uuid.uuid4().hex[:8]}"
    admin = await Client.connect(str(traced_cluster.kubeconfig))
    try:
        await apply_scenario(
            admin, scenario.model_copy(update={"nodes": [template.model_copy(update={"name": node_name})]})
        )
    finally:
        await admin.close()

    service = f"gpustack-worker-agent-{node_name}"
    kubeconfig = traced_cluster.service_account_kubeconfig(rbac.AGENT.name)
    log_path = traced_cluster.dir / "logs" / "traced-agent.log"
    argv = [
        sys.executable, "-m", "gpustack_worker", "agent", "--node-name", node_name,
        "--kubeconfig", str(kubeconfig), "--metrics-bind", "127.0.0.1:0",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(jaeger.otel_env(service))
    # dies with this process (PDEATHSIG) if the test run is killed
    agent = ManagedProcess("traced-agent", argv, log_path, env)
    agent.start()

    async def a_write_traced() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The reconcile traces so far, once one of them holds a successful write to the node's objects
        (empty before)."""
        assert agent.alive(), f"the agent exited:\n{agent.log_tail()}"
        found = _reconcile_traces(await asyncio.to_thread(jaeger.traces, service, limit=1000))
        written = any(200 <= w["http.response.status_code"] < 300 for w in _node_writes(found, node_name))
        return found if written else []

    print(f"[jaeger] the agent's traces: service {service} in {jaeger.ui_url}")
    try:
        found = await eventually(a_write_traced, within=PATIENCE_S, every=0.5)
    finally:
        await asyncio.to_thread(agent.stop)

    assert service in await asyncio.to_thread(jaeger.services)
    for root, children in found:  # for the record (pytest -s)
        calls = ", ".join(f"{c['operationName']} {_tags(c)['url.path']}" for c in children)
        print(f"{root['operationName']} key={_tags(root)['key']}: {calls}")
    for root, children in found:
        attrs = _tags(root)
        assert attrs["controller"] in AGENT_CONTROLLERS
        assert root["operationName"] == f"reconcile {attrs['controller']}"
        assert attrs["key"] == node_name
        assert re.fullmatch(r"[0-9a-f]{32}", attrs["reconcileID"])
        for child in children:
            call = _tags(child)
            assert child["operationName"] == f"k8s {call['http.request.method']}"
            assert call["http.request.method"] in HTTP_METHODS
            assert str(call["url.path"]).startswith(("/api/", "/apis/"))
            assert isinstance(call["http.response.status_code"], int)
    # Reconcile IDs are per reconcile: no two traces share one.
    ids = [_tags(root)["reconcileID"] for root, _ in found]
    assert len(ids) == len(set(ids))
    # At least one reconcile wrote to this node's own objects (a Node or its NodeFeature), and it succeeded.
    writes = _node_writes(found, node_name)
    assert writes, [[_tags(c) for c in children] for _, children in found]
    assert any(200 <= w["http.response.status_code"] < 300 for w in writes)
