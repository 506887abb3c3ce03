"""The API client through a real proxy process (proxy.py) to the real control plane.

A kubeconfig whose cluster has a ``proxy-url`` (a plain ``http://`` CONNECT proxy, and an ``https://``
one: TLS to the proxy, then TLS to kube-apiserver inside the tunnel) is used for every request, loopback
included, as client-go uses it: ``Client.connect`` lists, watches and server-side applies through it
(the proxy's log shows the CONNECTs to the API server), the write fence still refuses a write on the wire
through it, and the pool keeps its connections (a few tunnels for many requests). A CLI command runs
through it too, and a bad ``proxy-url`` is one line.

``HTTPS_PROXY`` from the environment: kube-apiserver listens on 127.0.0.1 only, and Go (so kubectl)
never sends a loopback server through an environment proxy, so here the environment proxy is shown to be
*not* used — with ``NO_PROXY`` covering the server, and without it (loopback) — while the routing of a
non-loopback server is covered by ``test_proxy_route.py``'s tables.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.runtime.client import Client, Fenced
from gpustack_worker.runtime.resources import CONFIG_MAP, Resource
from tests.runtime.proxy_server import RealProxy, running_proxy
from tests.runtime.test_fence_wire import Script

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

NAMESPACE = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
MANAGER = "proxy-test"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(scope="module", params=["http", "https"])
def proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProxy]:
    with running_proxy(tmp_path_factory.mktemp(f"proxy-{request.param}"), tls=request.param == "https") as p:
        yield p


@pytest.fixture
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def trust_proxy(proxy: RealProxy, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An https proxy's certificate is checked against the default trust store (``SSL_CERT_FILE``)."""
    if proxy.ca_pem is None:
        return {}
    monkeypatch.setenv("SSL_CERT_FILE", str(proxy.ca_file))
    return {"SSL_CERT_FILE": str(proxy.ca_file)}


def kubeconfig_with(devcluster: DevCluster, path: Path, proxy_url: str) -> Path:
    config: dict[str, Any] = yaml.safe_load(devcluster.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["proxy-url"] = proxy_url
    path.write_text(yaml.safe_dump(config))
    return path


def api_server(devcluster: DevCluster) -> str:
    return f"127.0.0.1:{devcluster.apiserver_port}"


def configmap(namespace: str, name: str, value: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


async def test_list_watch_and_apply_through_a_kubeconfig_proxy_url(
    devcluster: DevCluster,
    proxy: RealProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy_environment: None,
) -> None:
    trust_proxy(proxy, monkeypatch)
    kubeconfig = kubeconfig_with(devcluster, tmp_path / "kubeconfig", proxy.url)
    before = proxy.connects().count(api_server(devcluster))
    client = await Client.connect(str(kubeconfig), user_agent="proxy-test")
    try:
        ns = f"proxy-{uuid.uuid4().hex[:6]}"
        await client.apply(
            NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            field_manager=MANAGER,
        )
        assert proxy.connects().count(api_server(devcluster)) > before, "no tunnel to the API server"

        items, rv = await client.list(CONFIG_MAP, namespace=ns)
        assert [i["metadata"]["name"] for i in items] == ["kube-root-ca.crt"] or items == []

        seen: list[tuple[str, str]] = []
        opened = asyncio.Event()

        async def watch() -> None:
            async for event in client.watch(
                CONFIG_MAP, resource_version=rv, namespace=ns, timeout_seconds=120, on_open=opened.set
            ):
                obj = event["object"]
                seen.append((event["type"], obj["metadata"]["name"]))
                if obj["metadata"]["name"] == "last":
                    return

        watcher = asyncio.create_task(watch())
        async with asyncio.timeout(120):
            await opened.wait()
        requests = 0
        for i in range(20):
            await client.apply(CONFIG_MAP, configmap(ns, f"cm-{i % 4}", str(i)), field_manager=MANAGER)
            requests += 1
        items, _ = await client.list(CONFIG_MAP, namespace=ns)
        requests += 1
        assert {f"cm-{i}" for i in range(4)} <= {i["metadata"]["name"] for i in items}
        await client.apply(CONFIG_MAP, configmap(ns, "last", "x"), field_manager=MANAGER)
        async with asyncio.timeout(120):
            await watcher
        assert ("ADDED", "cm-0") in seen
        assert ("MODIFIED", "cm-3") in seen
        assert ("ADDED", "last") in seen

        tunnels = proxy.connects().count(api_server(devcluster)) - before
        # One for the requests' session, one for the watch (a kept-alive tunnel serves every request).
        assert 2 <= tunnels <= 4, f"{tunnels} CONNECTs for {requests + 3} requests and a watch"

        # The write fence still refuses a write on the wire through the tunnel.
        client.fence = Script([True, False])  # open when the attempt starts, closed at its first send
        with pytest.raises(Fenced, match="nothing was sent"):
            await client.apply(CONFIG_MAP, configmap(ns, "fenced", "x"), field_manager=MANAGER)
        client.fence = None
        assert await client.get(CONFIG_MAP, "fenced", ns) is None, "the refused write reached the server"
        await client.delete(NAMESPACE, ns)
    finally:
        await client.close()


def cli(*argv: str, kubeconfig: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker.cli.main", *argv],
        env={**clean, "KUBECONFIG": str(kubeconfig), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_cli_command_goes_through_the_kubeconfig_proxy_url(
    devcluster: DevCluster, proxy: RealProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = trust_proxy(proxy, monkeypatch)
    kubeconfig = kubeconfig_with(devcluster, tmp_path / "kubeconfig", proxy.url)
    before = proxy.connects().count(api_server(devcluster))
    out = cli("catalog", kubeconfig=kubeconfig, env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert proxy.connects().count(api_server(devcluster)) > before, "the command did not use the proxy"


def test_a_bad_kubeconfig_proxy_url_is_one_line(devcluster: DevCluster, tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with(devcluster, tmp_path / "kubeconfig", "ftp://proxy.corp:21")
    out = cli("catalog", kubeconfig=kubeconfig, env={})
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "proxy-url='ftp://proxy.corp:21'" in lines[0]
    assert "unsupported proxy scheme 'ftp'" in lines[0]


@pytest.mark.parametrize(
    "no_proxy",
    ["127.0.0.0/8", "127.0.0.1", "localhost,127.0.0.1", ""],
    ids=["cidr", "ip", "list", "loopback-rule-only"],
)
async def test_an_environment_proxy_is_not_used_for_a_loopback_or_no_proxy_server(
    devcluster: DevCluster,
    proxy: RealProxy,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    trust_proxy(proxy, monkeypatch)
    before = proxy.upstream()
    client = await Client.connect(str(devcluster.kubeconfig), user_agent="proxy-test")
    try:
        items, _ = await client.list(NAMESPACE)
        assert any(i["metadata"]["name"] == "default" for i in items)
    finally:
        await client.close()
    # The requests were answered (through whatever route): the proxy had its chance and saw nothing.
    assert proxy.upstream() == before, "the environment proxy was used for a loopback/NO_PROXY server"
    env = {"HTTPS_PROXY": proxy.url, "NO_PROXY": no_proxy}
    out = cli("catalog", kubeconfig=devcluster.kubeconfig, env=env)
    assert out.returncode == 0, out.stderr
    assert proxy.upstream() == before


def kubeconfig_named(devcluster: DevCluster, path: Path, host: str) -> Path:
    """The dev cluster's kubeconfig with its server named ``host`` (the certificate is checked against
    ``localhost``, one of its names, through ``tls-server-name``)."""
    config: dict[str, Any] = yaml.safe_load(devcluster.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://{host}:{devcluster.apiserver_port}"
        cluster["cluster"]["tls-server-name"] = "localhost"
    path.write_text(yaml.safe_dump(config))
    return path


#: 127.0.0.1 spelled so that Go's loopback rule does not see it (not an IP to ``netip.ParseAddr``, not
#: ``localhost``): the resolver maps it to 127.0.0.1, so the environment proxy applies to it.
NOT_LOOPBACK_TO_GO = "127.1"


@pytest.mark.parametrize(
    ("no_proxy", "through_proxy"),
    [("", True), ("example.org,127.1", False), ("127.0.0.0/8", True), ("*", False)],
    ids=["none", "name", "cidr-not-an-ip", "star"],
)
async def test_an_environment_proxy_carries_a_server_no_proxy_does_not_cover(
    devcluster: DevCluster,
    proxy: RealProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
    through_proxy: bool,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    trust_proxy(proxy, monkeypatch)
    kubeconfig = kubeconfig_named(devcluster, tmp_path / "kubeconfig", NOT_LOOPBACK_TO_GO)
    target = f"{NOT_LOOPBACK_TO_GO}:{devcluster.apiserver_port}"
    before = proxy.connects().count(target)
    client = await Client.connect(str(kubeconfig), user_agent="proxy-test")
    try:
        items, _ = await client.list(NAMESPACE)
        assert any(i["metadata"]["name"] == "default" for i in items)
    finally:
        await client.close()
    # The requests were answered: the proxy had its chance, and carried them exactly when it applies.
    assert (proxy.connects().count(target) > before) == through_proxy, proxy.connects()


def test_a_cli_command_through_a_proxy_prints_only_its_output(
    devcluster: DevCluster, proxy: RealProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = trust_proxy(proxy, monkeypatch)
    kubeconfig = kubeconfig_with(devcluster, tmp_path / "kubeconfig", proxy.url)
    out = cli("catalog", "-o", "json", kubeconfig=kubeconfig, env=env)
    assert out.returncode == 0, out.stderr
    assert "API server through a proxy" not in out.stdout
