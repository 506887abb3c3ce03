"""An operator's first hour against a server that never answers: the command ends with one line naming the
server and what did not happen within ``--request-timeout``, exit code 1, no traceback — it does not hang.

Each command runs as a subprocess, as an operator runs it, against local servers on 127.0.0.1
(tests/runtime/unanswered_servers.py) that accept TCP and never answer, complete TLS and never send
headers, send headers and stall the body, or (a proxy) never answer CONNECT; plus a server that answers
only ``GET /version``, so the deadline of a later request ends the command too. The subprocess' own
timeout is generous: it only catches a hang, no elapsed time is asserted.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml

from gpustack_worker.cli.request_timeout import ENV
from tests.runtime.unanswered_servers import Server, kubeconfig, serving

if TYPE_CHECKING:
    from pathlib import Path

PREFIX = "gpustack-worker: error: "
HINT = "(the deadline: --request-timeout, or $GPUSTACK_API_TIMEOUT_SECONDS)"
#: Only a hang reaches this (a command ends within a few deadlines of 0.5 s, retries included).
HANG = 180

#: (behaviour, what the first request's line says after "GET /version: ")
FIRST_REQUEST = [
    ("silent", "no TLS handshake within 0.5 s"),
    ("no-headers", "no response headers within 0.5 s"),
    ("stalled-body", "no complete response body within 0.5 s"),
    ("proxy-silent", "no proxy CONNECT within 0.5 s"),
]
#: Commands that read the cluster (preflight first: the operator's first command).
COMMANDS = [
    ("preflight",),
    ("catalog",),
    ("controller", "--metrics-bind", "127.0.0.1:0", "--webhook-bind", ""),
    ("agent", "--all-nodes", "--metrics-bind", "127.0.0.1:0"),
]


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GPUSTACK_DEBUG", "KUBECONFIG", ENV) and not k.lower().endswith("_proxy")
    }
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker", *argv],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=HANG,
        check=False,
    )


def _the_error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command: exit 1, no traceback, one ``gpustack-worker: error:`` line
    (the processes may log their start-up before it: the proxy in use, at info level)."""
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith(PREFIX)]
    assert len(errors) == 1, out.stderr
    assert out.stderr.rstrip("\n").endswith(errors[0]), out.stderr  # the last thing it says
    return errors[0].removeprefix(PREFIX)


def _api_server(server: Server) -> str:
    return "https://10.255.255.1:6443" if server.behaviour.startswith("proxy") else server.url


@pytest.mark.parametrize(("behaviour", "words"), FIRST_REQUEST, ids=[f[0] for f in FIRST_REQUEST])
@pytest.mark.parametrize("command", COMMANDS[:2], ids=[c[0] for c in COMMANDS[:2]])
def test_a_command_against_a_server_that_stops_answering_ends_with_one_line_naming_the_phase(
    tmp_path: Path, behaviour: str, words: str, command: tuple[str, ...]
) -> None:
    with serving(behaviour, tmp_path) as server:
        path = kubeconfig(tmp_path / "kubeconfig", server)
        out = _run(*command, "--kubeconfig", str(path), "--request-timeout", "0.5")
        assert server.accepted >= 1  # it reached the server: the deadline, not a refusal, ended it
    via = f" (via proxy {server.url} (kubeconfig proxy-url))" if behaviour.startswith("proxy") else ""
    assert _the_error_line(out) == f"{_api_server(server)}: GET /version: {words}{via} {HINT}"


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_proxy_that_cannot_be_reached_is_named_not_the_api_server(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The kubeconfig's proxy refuses connections (nothing listens on its port): the line says the proxy
    could not be reached and which setting named it — not that the API server may not be running."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections to it are refused
        with serving("silent", tmp_path) as server:
            path = kubeconfig(tmp_path / "kc", server)
            config = yaml.safe_load(path.read_text())
            config["clusters"][0]["cluster"]["proxy-url"] = f"http://127.0.0.1:{port}"
            path.write_text(yaml.safe_dump(config))
            out = _run(*command, "--kubeconfig", str(path), "--request-timeout", "5")
            assert server.accepted == 0  # the API server was never asked
    assert _the_error_line(out) == (
        f"{server.url}: cannot connect to the proxy (via proxy http://127.0.0.1:{port} (kubeconfig"
        " proxy-url)): connection refused"
    )


@pytest.mark.parametrize("command", COMMANDS[2:], ids=[c[0] for c in COMMANDS[2:]])
def test_both_processes_take_the_flag_too(tmp_path: Path, command: tuple[str, ...]) -> None:
    with serving("no-headers", tmp_path) as server:
        out = _run(
            *command, "--kubeconfig", str(kubeconfig(tmp_path / "kc", server)), "--request-timeout", "500ms"
        )
        assert server.accepted >= 1
    assert _the_error_line(out) == f"{server.url}: GET /version: no response headers within 0.5 s {HINT}"


@pytest.mark.parametrize("command", [COMMANDS[0], COMMANDS[2]], ids=["preflight", "controller"])
def test_the_environment_sets_the_deadline_when_the_flag_is_not_given(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    with serving("silent", tmp_path) as server:
        out = _run(*command, "--kubeconfig", str(kubeconfig(tmp_path / "kc", server)), env={ENV: "0.5"})
        assert server.accepted >= 1
    assert _the_error_line(out) == f"{server.url}: GET /version: no TLS handshake within 0.5 s {HINT}"


def test_the_flag_wins_over_the_environment(tmp_path: Path) -> None:
    with serving("no-headers", tmp_path) as server:
        kc = str(kubeconfig(tmp_path / "kc", server))
        out = _run("catalog", "--kubeconfig", kc, "--request-timeout", "0.5", env={ENV: "600"})
        assert server.accepted >= 1
    assert _the_error_line(out) == f"{server.url}: GET /version: no response headers within 0.5 s {HINT}"


def test_a_later_request_with_no_answer_ends_preflight_too(tmp_path: Path) -> None:
    """The server answers ``GET /version`` only: preflight's next read has no answer within the deadline
    (each of the client's retries), and the line names that request."""
    with serving("version-only", tmp_path) as server:
        out = _run(
            "preflight", "--kubeconfig", str(kubeconfig(tmp_path / "kc", server)), "--request-timeout", "0.5"
        )
    line = _the_error_line(out)
    assert line.startswith(f"{server.url}: GET /"), line
    assert line.endswith(f": no response headers within 0.5 s {HINT}"), line


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "kubectl's 0 (no timeout) is not accepted"),
        ("-1", "is not a duration"),
        ("soon", "is not a duration"),
        ("601", "is longer than the most allowed, 600 s"),
        ("11m", "is longer than the most allowed, 600 s"),
    ],
)
def test_a_bad_deadline_is_a_usage_error(tmp_path: Path, value: str, why: str) -> None:
    out = _run("preflight", "--kubeconfig", str(tmp_path / "unused"), "--request-timeout", value)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"argument --request-timeout: '{value}'" in out.stderr and why in out.stderr, out.stderr


def test_a_bad_deadline_in_the_environment_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    out = _run("catalog", "--kubeconfig", str(tmp_path / "unused"), env={ENV: "0"})
    assert out.returncode == 2, out.stderr
    assert "argument --request-timeout: '0'" in out.stderr and f"(from ${ENV})" in out.stderr, out.stderr
