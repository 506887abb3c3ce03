"""``-o text|json|yaml``: the one output flag and the one printer of every command that prints objects.

Every command that prints something a script may read (``catalog``, ``explain``, ``plan``, ``preflight``,
``cleanup``) takes the same flag with the same three formats, as kubectl's neighbours do:

* ``text`` (the default): what the command's own renderer makes of the payload, for a person;
* ``json``: the payload as indented JSON with sorted keys;
* ``yaml``: the same data as YAML (block style, sorted keys).

When the payload is a list of Kubernetes objects (every item has ``apiVersion`` and ``kind``), ``json`` and
``yaml`` print it as a ``v1`` ``List``, the way ``kubectl get -o yaml`` does, so ``kubectl apply -f -``,
``kubectl diff -f -`` and ``kubectl create --dry-run=server -f -`` can read it. Anything else is printed as
it is. Writing to a closed pipe is not handled here: ``gpustack-worker``'s ``main`` catches
``BrokenPipeError`` once for every command.

Usage::

    add_output_flag(parser)
    ...
    emit(payload, args.output, render_text)
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

import yaml

if TYPE_CHECKING:
    import argparse

__all__ = ("FORMATS", "add_output_flag", "emit", "is_object", "kube_list", "render", "to_data")

#: The formats of ``-o``, the default first.
FORMATS: Final = ("text", "json", "yaml")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``-o/--output text|json|yaml`` (default ``text``) to ``parser``."""
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default=FORMATS[0],
        help="output format: text, json or yaml (a list of Kubernetes objects is a kind: List); "
        "default: %(default)s",
    )


def is_object(item: Any) -> bool:
    """Whether ``item`` is a Kubernetes object (a mapping with a non-empty ``apiVersion`` and ``kind``)."""
    return isinstance(item, Mapping) and bool(item.get("apiVersion")) and bool(item.get("kind"))


def kube_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``items`` as a ``v1`` ``List``, exactly the envelope ``kubectl get -o yaml`` prints."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}


def to_data(obj: Any) -> Any:
    """``obj`` as plain JSON data: an ``as_dict()`` result, a dataclass or a pydantic model (by alias,
    ``None`` fields left out) is converted; mappings and sequences are converted item by item."""
    as_dict = getattr(obj, "as_dict", None)
    if callable(as_dict):
        return to_data(as_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_data(dataclasses.asdict(obj))
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump) and not isinstance(obj, type):
        return model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(obj, Mapping):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_data(v) for v in obj]
    return obj


def render(obj: Any, fmt: str, text_renderer: Callable[[Any], str]) -> str:
    """What :func:`emit` prints, ending in exactly one newline (``""`` for empty text output)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "text":
        text = text_renderer(obj)
        return text if not text or text.endswith("\n") else text + "\n"
    data = to_data(obj)
    if isinstance(data, list) and data and all(is_object(item) for item in data):
        data = kube_list(data)
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    # Non-ASCII is escaped: PyYAML writes U+0085 and U+2028/9 raw when allowed unicode, and reads them
    # back as line breaks (found by the round-trip property test).
    return str(yaml.safe_dump(data, sort_keys=True, default_flow_style=False, allow_unicode=False))


def emit(obj: Any, fmt: str, text_renderer: Callable[[Any], str], *, stream: TextIO | None = None) -> None:
    """Print ``obj`` to ``stream`` (default stdout) in ``fmt`` (one of :data:`FORMATS`);
    ``text_renderer(obj)`` makes the text output."""
    out = sys.stdout if stream is None else stream
    out.write(render(obj, fmt, text_renderer))
    out.flush()
