"""The composed settings model every process validates against; the live log level; the docs and the
chart agree with the model; a malformed environment seed is one line and exit 2 for every command that
reads settings (real subprocesses)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import structlog
import yaml

from gpustack_worker.agent.settings import AgentSettings, AgentTunables
from gpustack_worker.api.settings import ChainSettings, ControllerSettings
from gpustack_worker.cli.settings import WorkerSettings, open_settings
from gpustack_worker.runtime import telemetry
from gpustack_worker.runtime.settings import (
    RuntimeSettings,
    env_name,
    is_startup_only,
    kebab,
    live_keys,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.runtime.client import Client

ROOT = Path(__file__).resolve().parents[2]
STAGE_MODELS = (RuntimeSettings, ChainSettings, AgentTunables)


def test_worker_settings_is_every_stage_model_once() -> None:
    fields = [name for model in STAGE_MODELS for name in model.model_fields]
    # the controller's own tunables beyond the runtime's and the reference chain settings (§4.2)
    fields += [
        n
        for n in ControllerSettings.model_fields
        if n not in RuntimeSettings.model_fields and n not in ChainSettings.model_fields
    ]
    assert len(fields) == len(set(fields)), "a setting is defined by two stages"
    assert set(WorkerSettings.model_fields) == set(fields)
    assert issubclass(WorkerSettings, AgentSettings)  # what the agent's code is typed against
    assert [n for n, f in WorkerSettings.model_fields.items() if not (f.description or "").strip()] == []


def test_processes_open_settings_with_the_composed_model() -> None:
    """Both commands open their settings through ``open_settings`` (so both accept the same keys)."""
    source = open_settings(cast("Client", object()), name=None, namespace="ns", reporting_instance="x")
    assert source.model is WorkerSettings and source.name == "gpustack-settings"
    for command in ("agent_cmd.py", "controller_cmd.py"):
        text = (ROOT / "gpustack_worker" / "cli" / command).read_text()
        assert "open_settings(" in text and "SettingsSource(" not in text, command


# -- the log level is live --------------------------------------------------------------------------


@pytest.fixture
def captured_logging() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    root_level = logging.getLogger().level
    stream = io.StringIO()
    real_stderr = sys.stderr
    try:
        telemetry.configure_logging("INFO")
        # The lines go to whatever sys.stderr is when written, which pytest's capture replaces between
        # set-up and the test: write them to this stream instead.
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(stream))
        yield stream
    finally:
        sys.stderr = real_stderr
        telemetry.set_log_level("INFO")
        structlog.configure(**saved)
        logging.getLogger().setLevel(root_level)


def test_log_level_from_the_configmap_applies_to_loggers_already_in_use(
    captured_logging: io.StringIO,
) -> None:
    log = structlog.get_logger("test.live-level")
    log.debug("hidden-1")
    log.info("shown-1")  # the logger is now cached by structlog
    source = open_settings(cast("Client", object()), name="cm", namespace="ns", reporting_instance="x")
    assert source.load({"metadata": {"name": "cm"}, "data": {"log-level": "debug"}}) is True
    log.debug("shown-2")
    assert source.load({"metadata": {"name": "cm"}, "data": {"log-level": "ERROR"}}) is True
    log.warning("hidden-2")
    log.error("shown-3")
    events = [json.loads(line)["event"] for line in captured_logging.getvalue().splitlines()]
    assert [e for e in events if e.startswith(("shown", "hidden"))] == ["shown-1", "shown-2", "shown-3"]


# -- docs and chart agree with the model --------------------------------------------------------------


def _docs_table() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "runtime.md").read_text()
    section = text[text.index("## Settings keys") : text.index("### Bad settings")]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| `([^`]*)` \| (live|start-up) \| (\w+) \|$", section, re.M)
    return {key: (default, when) for key, default, when, _stage in rows}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_docs_list_exactly_which_settings_are_live() -> None:
    table = _docs_table()
    fields = WorkerSettings.model_fields
    expected = {
        kebab(name): (_shown(f.default), "start-up" if is_startup_only(f) else "live")
        for name, f in fields.items()
    }
    assert table == expected


def test_chart_sets_only_live_keys_in_the_configmap() -> None:
    values = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())["settings"]
    assert set(values["values"]) <= set(live_keys(WorkerSettings))
    assert set(values.get("env") or {}) <= {env_name(n) for n in WorkerSettings.model_fields}


# -- a malformed environment seed: one line, exit 2, no traceback ------------------------------------

BAD_SEEDS = [
    (
        {"GPUSTACK_CONTROLLER_WORKERS": "abc"},
        "invalid settings in the environment: "
        "GPUSTACK_CONTROLLER_WORKERS='abc' is invalid: expected an integer from 1 to 64",
    ),
    (
        {"GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS": "700"},
        "invalid settings in the environment: GPUSTACK_WATCH_TIMEOUT_MIN_SECONDS='700' must not exceed "
        "watch-timeout-max-seconds=600 (default): the watch timeout is drawn between them",
    ),
]


@pytest.mark.parametrize(
    "argv",
    [["agent", "--all-nodes"], ["agent", "--node-name", "n1"], ["controller"], ["demo", "--dir", "{tmp}"]],
    ids=["agent-all-nodes", "agent-node", "controller", "demo"],
)
@pytest.mark.parametrize(("seed", "message"), BAD_SEEDS, ids=["not-an-integer", "cross-field"])
def test_bad_env_seed_is_one_line_and_exit_2(
    argv: list[str], seed: dict[str, str], message: str, tmp_path: Path
) -> None:
    settings_env = {env_name(n) for n in WorkerSettings.model_fields}
    env = {k: v for k, v in os.environ.items() if k not in settings_env}
    env.update(seed)
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")  # nothing may be contacted anyway
    args = [a.replace("{tmp}", str(tmp_path / "dev")) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "gpustack_worker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"gpustack-worker {argv[0]}: {message}\n"
    assert proc.stdout == ""
    assert not (tmp_path / "dev").exists()  # the demo started nothing
