"""The settings reference (docs/settings.md) is rendered from the settings models and kept in sync: the
committed page equals a fresh render, and every field of the composed model appears once with its key,
env seed, default, live/start-up marker and reason, read back from the committed page itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from gpustack_worker.agent.settings import AgentTunables
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.cli.settingsdoc import render as settingsdoc
from gpustack_worker.runtime.settings import (
    STARTUP_ONLY,
    RuntimeSettings,
    SettingsModel,
    env_name,
    is_startup_only,
    kebab,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "settings.md"
_ROW = re.compile(
    r"^\| `([a-z0-9-]+)` \| `(GPUSTACK_[A-Z0-9_]+)` \| (.+?) \| `([^`]*)` \| (live|start-up) \| (.+) \|$"
)


def _rows(text: str) -> dict[str, tuple[str, str, str, str, str]]:
    """key → (env seed, accepts, default, read, reason) for every setting row of a rendered page."""
    rows: dict[str, tuple[str, str, str, str, str]] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            key, env, accepts, default, read, reason = match.groups()
            assert key not in rows, f"{key} listed twice"
            rows[key] = (env, accepts, default, read, reason)
    return rows


def test_committed_page_equals_a_fresh_render() -> None:
    assert DOC.read_text(encoding="utf-8") == settingsdoc.render(), (
        "docs/settings.md is stale: run `nox -s settings_doc`"
    )
    assert settingsdoc.check(DOC) == []


def test_every_field_appears_with_its_default_and_reason() -> None:
    rows = _rows(DOC.read_text(encoding="utf-8"))
    fields = WorkerSettings.model_fields
    assert sorted(rows) == sorted(kebab(name) for name in fields)
    for name, info in fields.items():
        env, _accepts, default, read, reason = rows[kebab(name)]
        assert env == env_name(name)
        # the default as a ConfigMap value validates back to the model's default
        assert WorkerSettings.model_validate({name: default}).model_dump()[name] == info.default, name
        assert read == ("start-up" if is_startup_only(info) else "live"), name
        first_words = " ".join((info.description or "").split()[:4]).replace("``", "`")
        assert first_words and reason.startswith(first_words), (name, reason)


def test_spot_values() -> None:
    """A few rows written out by hand, so the page is checked against more than its own renderer."""
    rows = _rows(DOC.read_text(encoding="utf-8"))
    assert rows["controller-workers"][:4] == (
        "GPUSTACK_CONTROLLER_WORKERS",
        "an integer from 1 to 64",
        "2",
        "start-up",
    )
    assert rows["log-level"][2:4] == ("INFO", "live")
    assert rows["node-management-manual"][1:4] == ("true or false", "false", "live")
    assert rows["requeue-base-delay-seconds"][2] == "0.005"
    assert rows["model-artifact-delivery-mode"][1:3] == ("one of Engine, Node", "Engine")
    text = DOC.read_text(encoding="utf-8")
    assert "1.2 × `leader-retry-period-seconds` < `leader-renew-deadline-seconds`" in text


def test_fields_are_grouped_by_the_stage_that_declares_them() -> None:
    stages = settingsdoc.stages()
    names = [n for _klass, own in stages for n in own]
    assert sorted(names) == sorted(WorkerSettings.model_fields) and len(names) == len(set(names))
    by_stage = {klass.__name__: own for klass, own in stages}
    assert by_stage["RuntimeSettings"] == list(RuntimeSettings.model_fields)
    assert by_stage["AgentTunables"] == list(AgentTunables.model_fields)


class _Toy(SettingsModel):
    """A toy model: one of each kind."""

    alpha_seconds: float = Field(default=1.5, gt=0, le=10, json_schema_extra=STARTUP_ONLY)
    """Uses ``pipes | in`` its reason."""
    beta: bool = True
    """A flag."""


def test_render_of_a_toy_model_escapes_and_marks() -> None:
    text = settingsdoc.render(_Toy)
    rows: Mapping[str, tuple[str, str, str, str, str]] = _rows(text.replace("\\|", "¦"))
    assert rows["alpha-seconds"] == (
        "GPUSTACK_ALPHA_SECONDS",
        "a number greater than 0 and at most 10",
        "1.5",
        "start-up",
        "Uses `pipes ¦ in` its reason.",
    )
    assert rows["beta"] == ("GPUSTACK_BETA", "true or false", "true", "live", "A flag.")
    assert "2 in all (1 live, 1 start-up-only)" in text
    assert "## Orders between settings" not in text


def test_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "settings.md"
    assert settingsdoc.main(["--check", str(out)]) == 1
    assert "missing" in capsys.readouterr().err
    assert settingsdoc.main([str(out)]) == 0
    assert settingsdoc.main(["--check", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8").replace("`2`", "`3`", 1), encoding="utf-8")
    assert settingsdoc.main(["--check", str(out)]) == 1
    assert "stale" in capsys.readouterr().err
