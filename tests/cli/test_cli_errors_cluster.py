"""``gpustack-worker`` against a real kube-apiserver when something is wrong: each failure is one line on
stderr, ``gpustack-worker: error: <server>: <cause>``, exit code 1, no traceback — an unreachable server,
a rejected token (401), a ServiceAccount without RBAC (403), an API the server does not serve (a CRD not
installed), an untrusted certificate. ``--context`` picks the kubeconfig context, the version is in the
User-Agent the audit log records, and output cut by a closed pipe ends quietly.

Each command runs as a subprocess, as a user runs it (the central handler is ``main``'s). The control
plane is the session's, put back to its baseline: deleting the InstanceType CRD waits for every
InstanceType to go, and one another module's controllers left holds our finalizer with no controller
left to release it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kinds
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.devcluster.cluster import NFD_MASTER_NODE
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime.client import api_of
from gpustack_worker.runtime.version import VERSION
from tests.kit.cluster import shared_baseline
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline (shadows the session fixture): no InstanceType
    of another module's holds up the deletion of the InstanceType CRD."""
    return shared_baseline()


PREFIX = "gpustack-worker: error: "
#: The two read-only commands, with arguments that name something that exists in the dev cluster.
COMMANDS = (("catalog",), ("explain", "node", NFD_MASTER_NODE))
#: The two long-running processes, bound to ports that never collide.
RUNNING = (
    ("controller", "--metrics-bind", "127.0.0.1:0", "--webhook-bind", ""),
    ("agent", "--all-nodes", "--metrics-bind", "127.0.0.1:0"),
)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("GPUSTACK_DEBUG", "KUBECONFIG")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpustack_worker", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def _is_log_record(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "event" in record and "level" in record


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single error line of a failed command (asserting there is exactly one, and no traceback). The
    controller and the agent log before it (JSON records on stderr, e.g. the credentials reloaded after a
    401 on their first request); nothing else may be there."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not _is_log_record(line)]
    assert len(lines) == 1, result.stderr
    assert result.stderr.rstrip("\n").endswith(lines[0]), result.stderr
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0].removeprefix(PREFIX)


def _config(devcluster: DevCluster) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(devcluster.kubeconfig.read_text())
    return loaded


def _write(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _with_server(config: dict[str, Any], server: str) -> dict[str, Any]:
    first = config["clusters"][0]
    cluster = {**first["cluster"], "server": server}
    return {**config, "clusters": [{"name": first["name"], "cluster": cluster}]}


def test_an_unreachable_server_is_named_in_one_line(devcluster: DevCluster, tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    kubeconfig = _write(tmp_path / "kc", _with_server(_config(devcluster), server))
    for command in (*COMMANDS, *RUNNING):
        line = _one_error_line(_cli(*command, "--kubeconfig", kubeconfig))
        assert line.startswith(f"{server}: cannot connect: "), (command, line)


def test_no_credentials_anywhere_says_where_it_looked(tmp_path: Path) -> None:
    """No --kubeconfig, no $KUBECONFIG, no ~/.kube/config and not in a Pod: one line naming the default
    path and the service-account token it also looked for, for every command that talks to a cluster."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    for command in (
        *COMMANDS,
        *RUNNING,
        ("preflight",),
        ("plan", "--from-cluster"),
        ("cleanup", "--dry-run"),
    ):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
        result = subprocess.run(
            [sys.executable, "-m", "gpustack_worker", *command],
            capture_output=True,
            text=True,
            env={**{k: v for k, v in environ.items() if k not in ("GPUSTACK_DEBUG", "KUBECONFIG")}, **env},
            timeout=120,
            check=False,
        )
        line = _one_error_line(result)
        assert "no credentials: no kubeconfig at " in line, (command, line)
        assert str(home / ".kube" / "config") in line or "~/.kube/config" in line, (command, line)
        assert "/var/run/secrets/kubernetes.io/serviceaccount" in line, (command, line)


def test_a_rejected_token_is_401_for_every_command(devcluster: DevCluster, tmp_path: Path) -> None:
    config = _config(devcluster)
    config["users"][0]["user"] = {"token": "not-a-valid-token"}
    kubeconfig = _write(tmp_path / "kc", config)
    for command in (*COMMANDS, *RUNNING):
        line = _one_error_line(_cli(*command, "--kubeconfig", kubeconfig))
        assert line.startswith(f"{devcluster.server}: Unauthorized (401): "), (command, line)


def test_a_service_account_without_rbac_is_403_and_the_audit_log_has_the_version(
    devcluster: DevCluster,
) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    kubeconfig = str(devcluster.service_account_kubeconfig("cli-errors-nobody"))
    user = "system:serviceaccount:gpustack-system:cli-errors-nobody"
    for command in COMMANDS:
        line = _one_error_line(_cli(*command, "--kubeconfig", kubeconfig))
        assert line.startswith(f"{devcluster.server}: Forbidden (403): "), line
        assert f'User "{user}" cannot' in line
    agents = {e.user_agent for e in audit.events(username=user)}
    assert f"gpustack-worker-catalog gpustack-worker/{VERSION}" in agents
    assert f"gpustack-worker-explain gpustack-worker/{VERSION}" in agents


def _served(devcluster: DevCluster, path: str) -> bool:
    api = devcluster.bootstrap()
    try:
        return api.request("GET", path).status_code != 404
    finally:
        api.close()


def test_an_api_the_server_does_not_serve_is_named(devcluster: DevCluster) -> None:
    """The InstanceType CRD is deleted for the duration of the test (and installed again after it):
    ``explain node`` lists InstanceTypes after the Node, its NodeFeatures and the ClusterQueues."""
    crd = f"{kinds.INSTANCE_TYPE.plural}.{kinds.INSTANCE_TYPE.group}"
    path = kinds.INSTANCE_TYPE.collection_path()
    documents = [d for d in devcluster._crd_documents() if d["metadata"]["name"] == crd]
    assert len(documents) == 1
    api = devcluster.bootstrap()
    try:
        api.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        eventually_sync(lambda: _served(devcluster, path), lambda served: not served, within=60, every=0.1)
        kubeconfig = str(devcluster.kubeconfig)
        line = _one_error_line(_cli("explain", "node", NFD_MASTER_NODE, "--kubeconfig", kubeconfig))
        assert line == (
            f"{devcluster.server}: the server does not serve the API {api_of(path)} (404): "
            "is its CRD installed?"
        )
        assert api_of(path) == "instancetypes.worker.gpustack.ai/v1alpha1"
    finally:
        api.install_crds(documents)
        api.close()
    assert _served(devcluster, path)


def test_an_untrusted_certificate_is_a_tls_error(devcluster: DevCluster, tmp_path: Path) -> None:
    config = _config(devcluster)
    cluster = dict(config["clusters"][0]["cluster"])
    cluster.pop("certificate-authority-data")  # the system's CAs do not sign the dev cluster's
    config["clusters"] = [{"name": config["clusters"][0]["name"], "cluster": cluster}]
    kubeconfig = _write(tmp_path / "kc", config)
    line = _one_error_line(_cli("catalog", "--kubeconfig", kubeconfig))
    assert line.startswith(f"{devcluster.server}: TLS: the server's certificate is not trusted: "), line


def test_context_selects_a_second_context_and_current_context_is_the_default(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    config = _config(devcluster)
    unreachable = f"https://127.0.0.1:{free_port()}"
    real = config["clusters"][0]
    config["clusters"] = [real, {"name": "gone", "cluster": {**real["cluster"], "server": unreachable}}]
    user = config["users"][0]["name"]
    config["contexts"] = [
        {"name": "first", "context": {"cluster": "gone", "user": user}},
        {"name": "second", "context": {"cluster": real["name"], "user": user}},
    ]
    config["current-context"] = "first"
    kubeconfig = _write(tmp_path / "kc", config)
    for command in COMMANDS:
        chosen = _cli(*command, "--kubeconfig", kubeconfig, "--context", "second", "-o", "json")
        assert chosen.returncode == 0, chosen.stderr
        default = _one_error_line(_cli(*command, "--kubeconfig", kubeconfig))
        assert default.startswith(f"{unreachable}: cannot connect: "), default
    # $KUBECONFIG is read when there is no flag; --context applies to it the same way
    assert _cli("catalog", "--context", "second", env={"KUBECONFIG": kubeconfig}).returncode == 0
    line = _one_error_line(_cli("catalog", "--context", "third", env={"KUBECONFIG": kubeconfig}))
    assert line == f'context "third" does not exist in $KUBECONFIG ({kubeconfig})'


def test_a_closed_pipe_exits_quietly(devcluster: DevCluster) -> None:
    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m gpustack_worker catalog | head -1; echo ${{PIPESTATUS[0]}} >&2"],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(devcluster.kubeconfig)},
        timeout=120,
        check=False,
    )
    assert result.stdout.startswith("INSTANCETYPE ")
    assert len(result.stdout.splitlines()) == 1
    assert result.stderr.strip() in ("0", "141"), result.stderr  # nothing but the exit status


def test_the_start_up_log_line_names_the_version_the_server_and_the_context(devcluster: DevCluster) -> None:
    """An agent for a Node that does not exist (it watches that one Node and writes nothing)."""
    argv = ["agent", "--node-name", "cli-errors-no-such-node", "--kubeconfig", str(devcluster.kubeconfig)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpustack_worker", *argv, "--metrics-bind", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    assert first["event"] == "gpustack-worker starting"
    assert first["version"] == VERSION
    assert first["server"] == devcluster.server
    assert first["context"] == "devcluster"
    assert first["user_agent"] == f"gpustack-worker-agent/cli-errors-no-such-node gpustack-worker/{VERSION}"
