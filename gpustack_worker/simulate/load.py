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
* a key written twice in one mapping is refused (YAML loaders silently keep the last one, so a second
  ``accelerators:`` would hide the first);
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
from gpustack_worker.simulate.scenario import (
    MAX_NODES,
    MAX_SHOWN_PROBLEMS,
    NodeSpec,
    Scenario,
    ScenarioError,
    cut,
    format_validation_error,
)

__all__ = (
    "MAX_FILE_BYTES",
    "MAX_YAML_NODES",
    "load_scenario",
    "packaged_scenario",
    "packaged_scenario_names",
    "parse_scenario",
    "parse_text",
)

#: Largest scenario file read (bytes): 10,000 synthetic nodes (the most a scenario may have) take
#: about 5 MB.
MAX_FILE_BYTES: Final = 16 * 1024 * 1024
#: Most values (scalars, lists, mappings) the document may write, and may hold with every alias
#: expanded: 10,000 synthetic nodes are about 0.52 M. Bounds the parse (about 10 µs per value) and
#: what a small file of nested aliases can expand to (the validation walks every expanded value).
MAX_YAML_NODES: Final = 1_000_000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_scenario(data: object, source: str = "") -> Scenario:
    """Validate already-loaded YAML/JSON data; raise :class:`ScenarioError` listing every problem.

    Nodes are validated one at a time, and once :data:`~gpustack_worker.simulate.scenario.MAX_SHOWN_PROBLEMS`
    lines are collected the rest are only counted, so the cost of a file full of errors stays that
    of reading it.
    """
    if data is None:
        raise ScenarioError(["the file is empty: expected a mapping with a top-level 'nodes:' list"], source)
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"
        raise ScenarioError([f"expected a mapping with a top-level 'nodes:' list, got {kind}"], source)
    problems: list[str] = []
    nodes = data.get("nodes")
    if "nodes" not in data:
        problems.append("nodes: required")
    elif not isinstance(nodes, list):
        problems.append("nodes: must be a list")
    elif not nodes:
        problems.append("nodes: must not be empty")
    elif len(nodes) > MAX_NODES:
        problems.append(f"nodes: must have at most {MAX_NODES} nodes (has {len(nodes)})")
    problems += [f"{cut(str(key), 64)}: unknown key" for key in data if key != "nodes"]
    if problems:
        raise ScenarioError(problems, source)
    assert isinstance(nodes, list)
    uncollected = 0
    specs: list[NodeSpec] = []
    for i, raw in enumerate(nodes):
        try:
            specs.append(NodeSpec.model_validate(raw))
        except ValidationError as exc:
            room = max(0, MAX_SHOWN_PROBLEMS - len(problems))
            if room:
                problems.extend(format_validation_error(exc, data, ("nodes", i), limit=room))
            uncollected += exc.error_count() - min(room, exc.error_count())
    if problems or uncollected:
        raise ScenarioError(problems, source, uncollected=uncollected)
    scenario = Scenario(nodes=specs)
    problems = check_scenario(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"{_at(mark)}: " if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line out of PyYAML's multi-line message (which quotes the source around the error)."""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    text = " ".join(str(part) for part in (context, problem) if part) or str(exc).splitlines()[0]
    return f"not valid YAML: {_where(exc)}{text}"


class _Refused(ValueError):
    """A YAML document PyYAML would load but a scenario may not be."""


def _at(mark: object) -> str:
    """``line 3, column 7`` of a parser mark (1-based, as editors count)."""
    line, column = getattr(mark, "line", None), getattr(mark, "column", None)
    return f"line {line + 1}, column {column + 1}" if line is not None and column is not None else "?"


_NODE_EVENTS: Final = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)
_MERGE_KEY: Final = "<<"


class _Frame:
    """An open mapping (``keys`` set) or sequence (``keys`` None) while streaming the events."""

    __slots__ = ("at_key", "keys")

    def __init__(self, mapping: bool) -> None:
        self.keys: dict[tuple[str, bool], object] | None = {} if mapping else None
        self.at_key = mapping


def _scan(text: str) -> bool:
    """Stream the parser's events (cheap: no nodes are built) and refuse, before anything is composed:

    * more than :data:`MAX_YAML_NODES` written values — composing costs about 10 µs and 300 bytes per
      value, so a few megabytes of ``0,0,0,…`` would take a minute and gigabytes;
    * a key written twice in one mapping — YAML loaders silently keep the last one.

    Returns whether the document uses aliases (only then can its expanded size exceed the written one).
    """
    loader = _Loader(text)
    written = 0
    aliases = False
    stack: list[_Frame] = []
    try:
        while loader.check_event():
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                stack.pop()
                event = None  # the closed collection was a value (or key) of its parent
            elif isinstance(event, _NODE_EVENTS):
                written += 1
                if written > MAX_YAML_NODES:
                    raise _Refused(
                        f"the document has more than the {MAX_YAML_NODES} values a scenario may have"
                    )
                aliases = aliases or isinstance(event, yaml.AliasEvent)
            else:
                continue  # stream and document boundaries
            parent = stack[-1] if stack else None
            at_key = parent is not None and parent.keys is not None and parent.at_key
            if at_key and isinstance(event, yaml.ScalarEvent) and event.value != _MERGE_KEY:
                assert parent is not None and parent.keys is not None
                key = (event.value, not event.style)  # a quoted "1" is not the integer key 1
                first = parent.keys.setdefault(key, event.start_mark)
                if first is not event.start_mark:
                    where, name = _at(event.start_mark), cut(event.value, 64)
                    raise _Refused(f"{where}: duplicate key {name!r} (first at {_at(first)})")
            if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                stack.append(_Frame(isinstance(event, yaml.MappingStartEvent)))
            elif parent is not None and parent.keys is not None:
                parent.at_key = not parent.at_key
    finally:
        loader.dispose()
    return aliases


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document with every alias expanded (an alias shares the anchored node object).

    Counted bottom-up over the distinct node objects, so the cost is linear in the *written* document
    even when the expansion is astronomically large. Raises :class:`_Refused` on an alias to a node
    that contains it.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()  # the nodes whose subtree is being counted: the ancestors of the next
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise _Refused(f"{_at(child.start_mark)}: the node anchored here contains an alias of itself")
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
        try:
            aliases = _scan(text)
        except _Refused as exc:
            raise ScenarioError([f"not accepted YAML: {exc}"], source) from None
        root = loader.get_single_node()
        if root is None:
            return None
        try:
            size = _expanded_size(root) if aliases else 0
        except _Refused as exc:
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
    except RecursionError:  # only the pure-Python loader recurses; libyaml stops at 1,000 levels
        raise ScenarioError(["not valid YAML: nested too deeply"], source) from None
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
