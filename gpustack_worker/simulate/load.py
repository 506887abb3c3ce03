"""Reading a scenario: YAML → shape validation → cross-field checks, one error listing all problems."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from gpustack_worker.simulate.checks import check_scenario
from gpustack_worker.simulate.scenario import Scenario, ScenarioError, format_validation_error

__all__ = ("load_scenario", "packaged_scenario", "parse_scenario")


def parse_scenario(data: object, source: str = "") -> Scenario:
    """Validate already-loaded YAML/JSON data; raise :class:`ScenarioError` listing every problem."""
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, data), source) from None
    problems = check_scenario(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


def _parse_text(text: str, source: str) -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError([f"not valid YAML: {exc}"], source) from None
    return parse_scenario(data, source)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    return _parse_text(Path(path).read_text(encoding="utf-8"), str(path))


def packaged_scenario(name: str) -> Scenario:
    """One of the example scenarios shipped in ``gpustack_worker/simulate/scenarios`` (e.g. ``mixed-4``)."""
    ref = resources.files("gpustack_worker.simulate").joinpath("scenarios", f"{name}.yaml")
    return _parse_text(ref.read_text(encoding="utf-8"), f"scenarios/{name}.yaml")
