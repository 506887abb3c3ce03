"""The client's session against the real kube-apiserver: it offers h2 in ALPN (shown by a raw handshake
that asks for it), and every connection of the client's session is HTTP/1.1 all the same."""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from gpustack_worker.runtime.client import Client, _Api

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster


async def _negotiated(cluster: DevCluster, offer: list[str]) -> str | None:
    """The protocol the server picks from ``offer`` in a bare TLS handshake."""
    api = _Api(user_agent="alpn-probe", kubeconfig=str(cluster.kubeconfig), context=None)
    await api.auth
    context = await api.auth.ssl_context()
    if not isinstance(context, ssl.SSLContext):
        context = ssl.create_default_context()
    context.set_alpn_protocols(offer)
    server = urlsplit(api.auth.server)
    _, writer = await asyncio.open_connection(server.hostname, server.port, ssl=context)
    try:
        return str(writer.get_extra_info("ssl_object").selected_alpn_protocol())
    finally:
        writer.close()


async def test_the_api_server_offers_h2_and_the_client_speaks_http1(devcluster: DevCluster) -> None:
    assert await _negotiated(devcluster, ["h2", "http/1.1"]) == "h2", "kube-apiserver prefers h2 when asked"
    client = await Client.connect(str(devcluster.kubeconfig), user_agent="transport-cluster")
    try:
        seen: list[tuple[str, str | None]] = []

        async def one(i: int) -> None:
            path = f"/api/v1/namespaces/default/configmaps/h1-{i}"
            api = client._api if i % 2 else client._watch_api  # both sessions
            async with api.call_api("GET", base=path) as response:
                await response.aread()
                ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
                seen.append((response.http_version, ssl_object.selected_alpn_protocol()))

        await asyncio.gather(*(one(i) for i in range(12)))  # several connections at once
        assert len(seen) == 12
        assert set(seen) == {("HTTP/1.1", "http/1.1")}, seen
    finally:
        await client.close()
