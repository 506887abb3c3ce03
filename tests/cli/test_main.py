"""``gpustack-worker`` behaves like kubectl's neighbours: ``--version``, ``--kubeconfig``/``--context`` chosen
as kubectl chooses them, one-line errors naming the server and the cause (:mod:`gpustack_worker.cli.errors`,
applied once in ``main``), a closed pipe that ends the command quietly."""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import httpx
import kr8s
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import kinds
from gpustack_worker.cli import errors, flags, main
from gpustack_worker.cli.output import FORMATS
from gpustack_worker.runtime.client import (
    DEFAULT_USER_AGENT,
    ApiError,
    Client,
    KubeconfigError,
    NotFound,
    api_of,
    kubeconfig_source,
    merge_kubeconfigs,
    user_agent_of,
)
from gpustack_worker.runtime.version import VERSION, package_version
from tests.kit.properties import examples

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

SERVER = "https://10.0.0.1:6443"
MISSING_API_BODY = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}
MISSING_OBJECT_BODY = {
    "kind": "Status",
    "status": "Failure",
    "message": 'nodes "n1" not found',
    "reason": "NotFound",
    "details": {"name": "n1", "kind": "nodes"},
    "code": 404,
}


def _api_error(status: int, body: dict[str, Any], path: str) -> ApiError:
    err = ApiError.from_status(status, body)
    err.server, err.path = SERVER, path
    return err


# --- flags ---------------------------------------------------------------------------------------------


def test_version_is_the_package_metadata_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"gpustack-worker {VERSION}\n"
    assert VERSION == package_version() != "0+unknown"


#: What building the command line may load: its own flags, names, and the light modules they sit in.
_PARSER_MAY_IMPORT = frozenset(
    {
        "gpustack_worker.api.kinds",
        "gpustack_worker.api.kueue_install",
        "gpustack_worker.cli.flags",
        "gpustack_worker.cli.main",
        "gpustack_worker.cli.output",
        "gpustack_worker.cli.request_timeout",
        "gpustack_worker.runtime.defaults",
        "gpustack_worker.runtime.resources",
        "gpustack_worker.runtime.version",
    }
)
#: Libraries a command's code needs and the parser must not: each costs tens to hundreds of milliseconds.
_HEAVY_LIBRARIES = ("kr8s", "httpx", "pydantic", "structlog", "opentelemetry", "cryptography", "anyio")


def test_the_command_line_is_built_without_loading_any_command() -> None:
    """``--version``, ``--help`` and a usage error answer before any command's code loads: a fresh
    interpreter that builds the parser and parses a bad deadline has loaded only the parsers and names."""
    probe = (
        "import json, sys\n"
        "from gpustack_worker.cli import main\n"
        "try:\n"
        "    main.build_parser().parse_args(['preflight', '--request-timeout', 'soon'])\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        "packages = [m for m, module in sys.modules.items() if hasattr(module, '__path__')]\n"
        "print(json.dumps({'code': code, 'modules': sorted(sys.modules), 'packages': packages}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    assert seen["code"] == 2, done.stderr
    ours = {m for m in seen["modules"] if m.startswith("gpustack_worker.")}
    parsers = {m for m in ours if m.endswith(".parser")}
    assert len(parsers) == 5, parsers  # plan, explain, cleanup, preflight, kueue-config
    assert ours - _PARSER_MAY_IMPORT - parsers - set(seen["packages"]) == set()
    assert {m.split(".")[0] for m in seen["modules"]} & set(_HEAVY_LIBRARIES) == set()


def test_the_version_is_in_the_user_agent_after_the_program_and_its_identity() -> None:
    assert user_agent_of("gpustack-worker-controller/host_1") == (
        f"gpustack-worker-controller/host_1 gpustack-worker/{VERSION}"
    )
    assert user_agent_of(None) == user_agent_of(DEFAULT_USER_AGENT) == f"gpustack-worker/{VERSION}"


@pytest.mark.parametrize(
    "argv",
    [
        ["catalog"],
        ["explain", "node", "n1"],
        ["controller"],
        ["agent", "--all-nodes"],
        ["simulate", "apply", "f.yaml"],
    ],
)
def test_every_api_command_takes_kubeconfig_and_context(argv: list[str]) -> None:
    args = main.build_parser().parse_args([*argv, "--kubeconfig", "kc", "--context", "second"])
    assert (args.kubeconfig, args.context) == ("kc", "second")
    assert main.build_parser().parse_args(argv).context is None


def test_the_kubeconfig_help_names_what_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main.main(["catalog", "--help"])
    help_text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert "$KUBECONFIG" in help_text
    assert "~/.kube/config" in help_text
    assert "in-cluster" in help_text
    assert "current-context" in help_text


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_subcommands(sub, f"{prefix}{name} "))
    return found


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def test_every_command_that_prints_takes_the_same_three_formats() -> None:
    printing = {name: _options(sub)["--output"] for name, sub in _subcommands(main.build_parser()).items()
                if "--output" in _options(sub)}  # fmt: skip
    assert {"catalog", "explain", "plan", "preflight", "cleanup"} <= set(printing)
    for name, action in printing.items():
        assert (tuple(action.choices or ()), action.default) == (FORMATS, "text"), name
        assert action.option_strings == ["-o", "--output"], name


@pytest.mark.parametrize("command", ["catalog", "explain", "controller", "agent", "preflight", "cleanup"])
def test_the_kubeconfig_flags_are_the_shared_ones(command: str) -> None:
    parser = main.build_parser()
    options = _options(_subcommands(parser)[command])
    reference = argparse.ArgumentParser()
    flags.add_kubeconfig_flags(reference)
    for flag in ("--kubeconfig", "--context"):
        assert options[flag].help == _options(reference)[flag].help, (command, flag)


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {"GPUSTACK_DEBUG": "1"}, True),
        (False, {"GPUSTACK_DEBUG": "true"}, True),
        (False, {"GPUSTACK_DEBUG": "0"}, False),
        (False, {"GPUSTACK_DEBUG": ""}, False),
    ],
)
def test_debug_is_the_flag_or_the_environment(flag: bool, env: dict[str, str], expected: bool) -> None:
    args = main.build_parser().parse_args(["--debug", "catalog"] if flag else ["catalog"])
    assert main.debugging(args, env) is expected


# --- kubeconfig precedence -----------------------------------------------------------------------------


def test_the_kubeconfig_is_the_flag_then_the_environment_then_the_default(tmp_path: Path) -> None:
    given_file = tmp_path / "kc"
    given_file.write_text("")
    assert kubeconfig_source(str(given_file), {"KUBECONFIG": "/env"}) == (str(given_file), str(given_file))
    assert kubeconfig_source(None, {"KUBECONFIG": "/a:/b"}) == ("/a:/b", "$KUBECONFIG (/a:/b)")
    assert kubeconfig_source(None, {}) == (None, "~/.kube/config")
    with pytest.raises(KubeconfigError, match=r"kubeconfig /no/such: no such file"):
        kubeconfig_source("/no/such", {})


# --- error lines ----------------------------------------------------------------------------------------


def _transport(exc_type: type[httpx.TransportError], message: str) -> httpx.TransportError:
    return exc_type(message, request=httpx.Request("GET", f"{SERVER}/version"))


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (
            _transport(httpx.ConnectError, "[Errno 111] Connection refused"),
            f"{SERVER}: cannot connect: connection refused "
            "(is the API server running, and is this its address?)",
        ),
        (
            _transport(httpx.ReadTimeout, "timed out"),
            f"{SERVER}: no answer: timed out waiting for the server",
        ),
        (
            _api_error(401, {"kind": "Status", "message": "Unauthorized", "code": 401}, "/api/v1/nodes"),
            f"{SERVER}: Unauthorized (401): the server rejected the credentials "
            "(an invalid or expired token?)",
        ),
        (
            _api_error(
                403,
                {"kind": "Status", "message": 'nodes is forbidden: User "u" cannot list resource "nodes"'},
                "/api/v1/nodes",
            ),
            f'{SERVER}: Forbidden (403): nodes is forbidden: User "u" cannot list resource "nodes"',
        ),
        (
            _api_error(404, MISSING_API_BODY, "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"),
            f"{SERVER}: the server does not serve the API resourceflavors.kueue.x-k8s.io/v1beta2 (404): "
            "is its CRD installed?",
        ),
        (
            _api_error(422, {"kind": "Status", "reason": "Invalid", "message": "bad\nvalue"}, "/api/v1/x"),
            f"{SERVER}: Invalid (422): bad value",
        ),
        (KubeconfigError('context "zz" does not exist in kc'), 'context "zz" does not exist in kc'),
        (
            FileNotFoundError(2, "No such file or directory", "scenario.yaml"),
            "scenario.yaml: No such file or directory",
        ),
        (RuntimeError("boom"), "RuntimeError: boom (run with --debug for the traceback)"),
    ],
    ids=["refused", "timeout", "401", "403", "missing-api", "other-status", "context", "oserror", "other"],
)
def test_each_failure_is_one_line_naming_the_server_and_the_cause(exc: BaseException, line: str) -> None:
    assert errors.error_line(exc) == f"gpustack-worker: error: {line}"
    assert "\n" not in errors.error_line(exc)


def test_a_tls_failure_says_tls_and_why() -> None:
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "unable to get local issuer certificate"
    exc = _transport(httpx.ConnectError, "[SSL: CERTIFICATE_VERIFY_FAILED]")
    exc.__cause__ = cause
    assert errors.describe(exc) == (
        f"{SERVER}: TLS: the server's certificate is not trusted: unable to get local issuer certificate"
    )


def test_a_kr8s_timeout_names_the_server_it_was_waiting_for() -> None:
    exc = kr8s.APITimeoutError("Timeout while waiting for the Kubernetes API server")
    exc.__cause__ = _transport(httpx.ConnectTimeout, "")
    assert errors.describe(exc) == f"{SERVER}: no answer: timed out waiting for the server"


def test_exception_groups_are_unwrapped_to_the_error_that_explains_them() -> None:
    forbidden = _api_error(403, {"kind": "Status", "message": "nope"}, "/api/v1/nodes")
    group = ExceptionGroup(
        "unhandled errors in a TaskGroup",
        [ValueError("a sibling's symptom"), ExceptionGroup("inner", [forbidden])],
    )
    assert errors.root_cause(group) is forbidden
    assert errors.describe(group) == f"{SERVER}: Forbidden (403): nope"
    only = BaseExceptionGroup("g", [asyncio.CancelledError(), KeyError("k")])
    assert isinstance(errors.root_cause(only), KeyError)


_known = st.sampled_from(
    [
        _api_error(403, {"kind": "Status", "message": "nope"}, "/api/v1/nodes"),
        _transport(httpx.ConnectError, "refused"),
        KubeconfigError("no credentials"),
    ]
)
_noise: st.SearchStrategy[BaseException] = st.sampled_from(
    [asyncio.CancelledError(), RuntimeError("symptom"), ValueError("x")]
)


def _groups(leaf: st.SearchStrategy[BaseException]) -> st.SearchStrategy[BaseException]:
    return st.recursive(
        leaf,
        lambda inner: st.lists(inner, min_size=1, max_size=3).map(lambda es: BaseExceptionGroup("g", es)),
        max_leaves=8,
    )


@settings(max_examples=examples(200))
@given(st.data())
def test_a_known_error_anywhere_in_nested_groups_is_the_one_reported(data: st.DataObject) -> None:
    known = data.draw(_known)
    noise = data.draw(st.lists(_groups(_noise), max_size=3))
    position = data.draw(st.integers(0, len(noise)))
    tree = BaseExceptionGroup("top", [*noise[:position], known, *noise[position:]])
    assert errors.root_cause(tree) is known
    assert errors.describe(tree) == errors.describe(known)


def test_main_prints_one_line_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    forbidden = _api_error(403, {"kind": "Status", "message": "nope"}, "/api/v1/nodes")

    def fail(_: object) -> int:
        raise ExceptionGroup("g", [forbidden])

    monkeypatch.setattr(main, "_run", fail)
    monkeypatch.delenv("GPUSTACK_DEBUG", raising=False)
    assert main.main(["catalog"]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"gpustack-worker: error: {SERVER}: Forbidden (403): nope\n"
    assert captured.out == ""
    with pytest.raises(ExceptionGroup):
        main.main(["--debug", "catalog"])


# --- the API a path belongs to; a missing API is not a missing object -----------------------------------


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", "resourceflavors.kueue.x-k8s.io/v1beta2"),
        ("/apis/kueue.x-k8s.io/v1beta2/namespaces/t/workloads/w", "workloads.kueue.x-k8s.io/v1beta2"),
        ("/api/v1/nodes/n1", "nodes/v1"),
        ("/api/v1/namespaces/t/configmaps/c", "configmaps/v1"),
        ("/api/v1/namespaces/t", "namespaces/v1"),
        ("/apis/example.com", "example.com"),
        ("/version", ""),
    ],
)
def test_the_api_of_a_path(path: str, api: str) -> None:
    assert api_of(path) == api


def test_a_missing_api_is_told_from_a_missing_object() -> None:
    assert NotFound(404, "NotFound", MISSING_API_BODY).api_missing
    assert not NotFound(404, "NotFound", MISSING_OBJECT_BODY).api_missing
    assert not NotFound(404, "NotFound", {"reason": "NotFound"}).api_missing  # not a Status: unknown


# --- against a local HTTP server: context selection, 401 at connect, a missing API on get ---------------


async def _serve(status: int, body: dict[str, Any] | str, seen: list[str]) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        seen.append(head)
        path = head.split(" ", 2)[1]
        code, payload = (200, {"gitVersion": "v1.35.4"}) if path.startswith("/version") else (status, body)
        raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nConnection: close\r\n".encode())
        writer.write(f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def _kubeconfig(tmp_path: Path, ports: dict[str, int], current: str) -> Path:
    clusters = ", ".join(
        f"{{name: {n}, cluster: {{server: 'http://127.0.0.1:{p}'}}}}" for n, p in ports.items()
    )
    contexts = ", ".join(f"{{name: {n}, context: {{cluster: {n}, user: u}}}}" for n in ports)
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: {current}\nclusters: [{clusters}]\n"
        f"users: [{{name: u, user: {{}}}}]\ncontexts: [{contexts}]\n"
    )
    return path


async def _servers(
    n: int, status: int, body: dict[str, Any] | str
) -> AsyncIterator[tuple[list[int], list[str]]]:
    seen: list[str] = []
    servers = [await _serve(status, body, seen) for _ in range(n)]
    try:
        yield [s.sockets[0].getsockname()[1] for s in servers], seen
    finally:
        for s in servers:
            s.close()


async def test_context_selects_the_kubeconfig_context_and_current_context_is_the_default(
    tmp_path: Path,
) -> None:
    async for (first, second), seen in _servers(2, 404, MISSING_OBJECT_BODY):
        kubeconfig = _kubeconfig(tmp_path, {"one": first, "two": second}, current="one")
        default = await Client.connect(str(kubeconfig))
        chosen = await Client.connect(str(kubeconfig), context="two", user_agent="prog/id")
        try:
            assert (default.server, default.context) == (f"http://127.0.0.1:{first}", "one")
            assert (chosen.server, chosen.context) == (f"http://127.0.0.1:{second}", "two")
            assert await chosen.get(kinds.NODE, "n1") is None  # a missing object is None
        finally:
            await default.close()
            await chosen.close()
        assert any(f"user-agent: prog/id gpustack-worker/{VERSION}" in h.lower() for h in seen)
        with pytest.raises(KubeconfigError, match='context "three" does not exist'):
            await Client.connect(str(kubeconfig), context="three")


@pytest.mark.parametrize(
    "body", [MISSING_API_BODY, "404 page not found\n"], ids=["status", "the-mux-plain-text"]
)
async def test_get_raises_for_an_api_the_server_does_not_serve(
    tmp_path: Path, body: dict[str, Any] | str
) -> None:
    async for (port,), _ in _servers(1, 404, body):
        client = await Client.connect(str(_kubeconfig(tmp_path, {"one": port}, current="one")))
        try:
            with pytest.raises(NotFound) as caught:
                await client.get(kinds.RESOURCE_FLAVOR, "f")
        finally:
            await client.close()
        assert errors.describe(caught.value) == (
            f"http://127.0.0.1:{port}: the server does not serve the API "
            f"{api_of(kinds.RESOURCE_FLAVOR.object_path('f', None))} (404): is its CRD installed?"
        )


# --- a closed pipe ---------------------------------------------------------------------------------------


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """The reader goes away before the output is written (``| head -1`` on a long output)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpustack_worker", "plan", "mixed-4", "-o", "yaml"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == main.BROKEN_PIPE_EXIT
    assert err == ""


# --- $KUBECONFIG with several files: kubectl's merge -----------------------------------------------------


def _file_config(cluster: str, server: str, *, current: str = "", ca: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"server": server, **({"certificate-authority": ca} if ca else {})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        **({"current-context": current} if current else {}),
        "clusters": [{"name": cluster, "cluster": body}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "u"}}],
    }


def test_several_kubeconfigs_merge_as_kubectl_merges_them() -> None:
    first = _file_config("a", "http://one", ca="ca.crt")
    second = _file_config("a", "http://two", current="a")
    third = _file_config("b", "http://three", current="b")
    merged = merge_kubeconfigs([("/etc/k/first", first), ("/home/second", second), ("/third", third)])
    assert merged["current-context"] == "a"  # the first one set (the first file sets none)
    clusters = {c["name"]: c["cluster"] for c in merged["clusters"]}
    assert clusters == {
        "a": {"server": "http://one", "certificate-authority": "/etc/k/ca.crt"},  # first definition wins
        "b": {"server": "http://three"},
    }
    assert [c["name"] for c in merged["contexts"]] == ["a", "b"]


_entry_names = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4)


@settings(max_examples=examples(100))
@given(st.lists(st.tuples(_entry_names, st.sampled_from(["", "a", "b"])), min_size=1, max_size=4))
def test_every_name_comes_from_the_first_file_defining_it(files: list[tuple[list[str], str]]) -> None:
    docs = [
        (
            f"/k/{i}",
            {
                "current-context": current,
                "clusters": [{"name": n, "cluster": {"server": f"http://{i}"}} for n in names],
            },
        )
        for i, (names, current) in enumerate(files)
    ]
    merged = merge_kubeconfigs(docs)
    for entry in merged["clusters"]:
        first = next(i for i, (names, _) in enumerate(files) if entry["name"] in names)
        assert entry["cluster"]["server"] == f"http://{first}"
    assert sorted(c["name"] for c in merged["clusters"]) == sorted({n for names, _ in files for n in names})
    assert merged["current-context"] == next((c for _, c in files if c), "")


async def test_kubeconfig_lists_several_files_the_first_without_a_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async for (one, two), _ in _servers(2, 404, MISSING_OBJECT_BODY):
        first, second = tmp_path / "first", tmp_path / "second"
        first.write_text(json.dumps(_file_config("a", f"http://127.0.0.1:{one}")))
        second.write_text(json.dumps(_file_config("b", f"http://127.0.0.1:{two}", current="b")))
        monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{first}:{second}")
        chosen = await Client.connect()
        other = await Client.connect(context="a")
        try:
            assert (chosen.server, chosen.context) == (f"http://127.0.0.1:{two}", "b")
            assert (other.server, other.context) == (f"http://127.0.0.1:{one}", "a")
        finally:
            await chosen.close()
            await other.close()
