"""The client against servers that stop answering (or answer wrongly) at one point each, as an operator
meets them: ``Client.connect`` with a small deadline ends with one error, and the CLI's line for it
(:func:`gpustack_worker.cli.errors.describe`) names the server and what did not happen.

The servers run in a thread of their own (tests/runtime/unanswered_servers.py); each test first waits for
the positive signal that the client reached the server (a connection accepted), then checks the outcome.
No elapsed time is asserted: the test only ends because the deadline did its work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from gpustack_worker.cli.errors import describe
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime import wire
from gpustack_worker.runtime.client import Client, RequestTimeout
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.runtime.unanswered_servers import kubeconfig, serving

if TYPE_CHECKING:
    from pathlib import Path

DEADLINE = 0.5
HINT = "(the deadline: --request-timeout, or $GPUSTACK_API_TIMEOUT_SECONDS)"

#: (behaviour, the phase the first request stops in, the words of the line after "<METHOD> <path>: ")
TIMEOUTS = [
    ("silent", wire.TLS_HANDSHAKE, "no TLS handshake within 0.5 s"),
    ("no-headers", wire.HEADERS, "no response headers within 0.5 s"),
    ("stalled-body", wire.BODY, "no complete response body within 0.5 s"),
    ("proxy-silent", wire.PROXY_CONNECT, "no proxy CONNECT within 0.5 s"),
]


@pytest.mark.parametrize(("behaviour", "phase", "words"), TIMEOUTS, ids=[t[0] for t in TIMEOUTS])
async def test_the_first_request_to_a_server_that_stops_answering_ends_with_the_phase_named(
    tmp_path: Path, behaviour: str, phase: str, words: str
) -> None:
    with serving(behaviour, tmp_path) as server:
        path = kubeconfig(tmp_path / "kubeconfig", server)
        with pytest.raises(RequestTimeout) as caught:
            await Client.connect(str(path), timeout_s=DEADLINE)
        assert server.accepted >= 1  # the client got to the server: the deadline, not a refusal, ended it
    err = caught.value
    api_server = "https://10.255.255.1:6443" if behaviour.startswith("proxy") else server.url
    assert (err.server, err.method, err.path, err.phase, err.seconds) == (
        api_server,
        "GET",
        "/version",
        phase,
        DEADLINE,
    )
    via = f" (via proxy {server.url} (kubeconfig proxy-url))" if behaviour.startswith("proxy") else ""
    assert err.via == via.strip(" ()") + (")" if via else "")
    assert describe(err) == f"{api_server}: GET /version: {words}{via} {HINT}"


async def test_a_later_request_that_gets_no_answer_ends_too(tmp_path: Path) -> None:
    """The server answers ``GET /version`` and nothing else: ``connect`` succeeds, the next request's
    deadline (each retry's) ends it with the response-headers phase."""
    with serving("version-only", tmp_path) as server:
        client = await Client.connect(str(kubeconfig(tmp_path / "kubeconfig", server)), timeout_s=DEADLINE)
        try:
            with pytest.raises(RequestTimeout) as caught:
                await client.get(CONFIG_MAP, "gpustack-settings", "gpustack-system")
        finally:
            await client.close()
    err = caught.value
    assert (err.method, err.phase) == ("GET", wire.HEADERS)
    assert err.path == "/api/v1/namespaces/gpustack-system/configmaps/gpustack-settings"
    assert describe(err) == (
        f"{server.url}: GET /api/v1/namespaces/gpustack-system/configmaps/gpustack-settings: "
        f"no response headers within 0.5 s {HINT}"
    )


#: (behaviour, the line after "<server>: ")
REFUSALS = [
    (
        "closes",
        "the connection was closed without a complete answer "
        "(Server disconnected without sending a response.)",
    ),
    ("plain-http", "TLS: the server does not speak TLS (an http:// server?): WRONG_VERSION_NUMBER"),
    ("untrusted", "TLS: the server's certificate is not trusted: self-signed certificate"),
    (
        "wrong-name",
        "TLS: the server's certificate is not trusted: IP address mismatch, certificate is not valid for "
        "'127.0.0.1'.",
    ),
    ("proxy-refuses", "the proxy refused the tunnel to the server (its answer to CONNECT: 403 Forbidden)"),
]


@pytest.mark.parametrize(("behaviour", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_a_server_that_answers_wrongly_is_one_line_saying_how(
    tmp_path: Path, behaviour: str, words: str
) -> None:
    with serving(behaviour, tmp_path) as server, pytest.raises(httpx.TransportError) as caught:
        await Client.connect(str(kubeconfig(tmp_path / "kubeconfig", server)), timeout_s=30)
    api_server = "https://10.255.255.1:6443" if behaviour.startswith("proxy") else server.url
    assert describe(caught.value) == f"{api_server}: {words}"


async def test_a_refused_connection_says_so(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    path = tmp_path / "kubeconfig"
    path.write_text(
        "current-context: a\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    with pytest.raises(httpx.ConnectError) as caught:
        await Client.connect(str(path), timeout_s=30)
    assert describe(caught.value) == (
        f"https://127.0.0.1:{port}: cannot connect: connection refused "
        "(is the API server running, and is this its address?)"
    )
