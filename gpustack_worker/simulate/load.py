"""Reading a scenario: bytes → UTF-8 text → YAML → shape validation → cross-field checks → checks of
the rendered objects, one :class:`ScenarioError` listing every problem.

The file is untrusted input, so reading it is bounded before any of it is believed:

* at most :data:`MAX_FILE_BYTES` are read;
* the text must be UTF-8 (the error names the offset, line and column of the first bad byte);
* exactly one YAML document, whose top level is a mapping;
* YAML anchors and aliases are allowed (``cpu: *epyc`` saves repetition) but the document, with every
  alias expanded, may hold at most :data:`MAX_YAML_NODES` nodes, and an alias may not contain itself.
  Without that bound a few kilobytes of nested aliases (a "billion laughs" file) expand to billions
  of values for the validation to walk;
* a decoding problem is one line (``not valid YAML: line 3, column 7: …``), never a traceback.

The bounds are fixed properties of the file format, not deployment settings: a scenario of 10,000
nodes is about 4 MB and 0.6 M YAML nodes.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Final

import yaml
from pydantic import ValidationError

from gpustack_worker.simulate.checks import check_scenario
from gpustack_worker.simulate.scenario import Scenario, ScenarioError, format_validation_error

__all__ = (
    "MAX_FILE_BYTES",
    "MAX_YAML_NODES",
    "load_scenario",
    "packaged_scenario",
    "packaged_scenario_names",
    "parse_scenario",
    "parse_text",
)

#: Largest scenario file read (bytes). 10,000 synthetic nodes take about 4 MB; 8× that is generous
#: and still parses in seconds.
MAX_FILE_BYTES: Final = 32 * 1024 * 1024
#: Most YAML nodes (scalars, lists, mappings) the document may hold with every alias expanded;
#: 10,000 synthetic nodes are about 0.6 M. Bounds what a small file of nested aliases can expand to.
MAX_YAML_NODES: Final = 4_000_000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_scenario(data: object, source: str = "") -> Scenario:
    """Validate already-loaded YAML/JSON data; raise :class:`ScenarioError` listing every problem."""
    if data is None:
        raise ScenarioError(["the file is empty: expected a mapping with a top-level 'nodes:' list"], source)
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"
        raise ScenarioError([f"expected a mapping with a top-level 'nodes:' list, got {kind}"], source)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, data), source) from None
    problems = check_scenario(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line out of PyYAML's multi-line message (which quotes the source around the error)."""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    text = " ".join(str(part) for part in (context, problem) if part) or str(exc).splitlines()[0]
    return f"not valid YAML: {_where(exc)}{text}"


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document with every alias expanded (an alias shares the anchored node object).

    Counted bottom-up over the distinct node objects, so the cost is linear in the *written* document
    even when the expansion is astronomically large. Raises ``ValueError`` on an alias to itself.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ValueError("an alias refers to a node that contains it (a recursive structure)")
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise ValueError("an alias refers to a node that contains it (a recursive structure)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_data(text: str, source: str) -> object:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        try:
            size = _expanded_size(root)
        except ValueError as exc:
            raise ScenarioError([f"not accepted YAML: {exc}"], source) from None
        if size > MAX_YAML_NODES:
            raise ScenarioError(
                [
                    f"not accepted YAML: with its aliases expanded the document has {size} values, "
                    f"more than the {MAX_YAML_NODES} a scenario may have"
                ],
                source,
            )
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise ScenarioError([_yaml_problem(exc)], source) from None
    finally:
        loader.dispose()


def parse_text(text: str, source: str = "") -> Scenario:
    """Parse and validate scenario YAML text."""
    return parse_scenario(_yaml_data(text, source), source)


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        bad = raw[exc.start : exc.end].hex(" ")
        problem = (
            f"not UTF-8 text: byte {bad} at offset {exc.start} (line {line}, column {column}) "
            f"is {exc.reason}; save the file as UTF-8"
        )
        raise ScenarioError([problem], source) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (``OSError`` when it cannot be read at all)."""
    source = str(path)
    with Path(path).open("rb") as handle:
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(
            [f"the file is larger than {MAX_FILE_BYTES} bytes, the most a scenario may be"], source
        )
    return parse_text(_decode(raw, source), source)


def packaged_scenario_names() -> list[str]:
    """The example scenarios shipped in ``gpustack_worker/simulate/scenarios`` (``mixed-4`` …)."""
    folder = resources.files("gpustack_worker.simulate").joinpath("scenarios")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def packaged_scenario(name: str) -> Scenario:
    """One of the example scenarios shipped in ``gpustack_worker/simulate/scenarios`` (e.g. ``mixed-4``)."""
    ref = resources.files("gpustack_worker.simulate").joinpath("scenarios", f"{name}.yaml")
    return parse_text(ref.read_text(encoding="utf-8"), f"scenarios/{name}.yaml")
