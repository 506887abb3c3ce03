"""What the API server and nfd-master would refuse in the objects a scenario node renders to.

The shape and cross-field checks look at the scenario; this module looks at what
:mod:`~gpustack_worker.simulate.render` actually produces from it — the same functions
:mod:`~gpustack_worker.simulate.apply` writes with — so the check cannot drift from what is written.
A name or label is only as valid as the object it ends up in: a 100-character node name is a fine DNS
subdomain but not a ``kubernetes.io/hostname`` label value. (A long product name is no such case: its
``<aKey>.product`` and other suffixed keys are shortened by :func:`gpustack_worker.api.keys.shortened`.)

Per node, the rendered objects are checked as follows (rules in :mod:`gpustack_worker.api.validation`):

* **Node** — name a DNS-1123 subdomain; every label key a qualified name and every value a label
  value; annotation keys qualified and at most 256 KiB together; every ``status.capacity`` /
  ``allocatable`` quantity non-negative, and an integer that fits ``int64`` in milli-units for integer
  resources (``pods``, extended resources), as the API server requires.
* **NodeFeature** ``<node>-gpustack-device-manager`` — name a DNS-1123 subdomain, its own labels valid,
  and every ``spec.labels`` entry a feature label nfd-master accepts.
* **Devices** — name and labels as above, ``spec`` and ``status`` accepted by the CRD model
  (:class:`gpustack_worker.api.crds.devices.Devices`, from which the installed schema is generated),
  and every integer within ``int64`` (what the API server can decode).

Each problem is reported against the scenario field that produced it (``.accelerators[0].product``)
and names the rendered object and field, e.g.
``.name: Node label kubernetes.io/hostname value 'gpu-…' : must be no more than 63 characters (is 100)``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final, NamedTuple

import orjson
from pydantic import ValidationError

from gpustack_worker.api import keys, validation
from gpustack_worker.api.crds.devices import Devices
from gpustack_worker.simulate import render
from gpustack_worker.simulate.scenario import SHOWN_CHARS, cut

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from gpustack_worker.simulate.scenario import NodeSpec

__all__ = ("check_rendered",)

#: Stand-ins for what only the cluster knows (the Node's uid, the Ready time); no rule looks at them.
_UID: Final = "00000000-0000-0000-0000-000000000000"
_TIME: Final = "1970-01-01T00:00:00Z"

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
#: Integer resources are checked in milli-units (``MilliValue() % 1000``), so their value × 1000 must fit.
_INT_RESOURCE_MAX: Final = _INT64_MAX // 1000
#: Native resources the API server requires to be integers (besides every extended resource).
_INTEGER_NATIVE: Final = frozenset({"pods"})

#: Node labels rendered from one scenario field.
_NODE_LABEL_FIELDS: Final = {
    keys.HOSTNAME: "name",
    keys.OS: "os",
    keys.ARCH: "arch",
    keys.NFD_CPU_VENDOR: "cpu.vendor",
    keys.NFD_CPU_FAMILY: "cpu.family",
    keys.NFD_CPU_ID: "cpu.id",
    keys.NFD_NODE_NAME: "name",
}
#: ``status.capacity`` entries rendered from one scenario field (the rest are accelerator pools).
_CAPACITY_FIELDS: Final = {
    "cpu": "cpu.cores",
    "memory": "memory",
    "pods": "pods",
    "ephemeral-storage": "ephemeralStorage",
}
#: Suffixes of a model's DM feature label → the accelerator field it is rendered from.
_MODEL_SUFFIX_FIELDS: Final = {
    "": "product",
    ".product": "product",
    ".memory": "memoryMiB",
    ".cores": "cores",
    ".count": "count",
    ".family": "family",
    ".comcap": "computeCapability",
}
_MANUFACTURER_SUFFIX_FIELDS: Final = {
    "": "manufacturer",
    ".driver-version": "driverVersion",
    ".runtime-version": "runtimeVersion",
}
#: ``Devices.spec.groups[]`` fields → the accelerator field they are rendered from.
_GROUP_FIELDS: Final = {
    "id": "product",
    "name": "product",
    "manufacturer": "manufacturer",
    "memory": "memoryMiB",
    "cores": "cores",
    "driverVersion": "driverVersion",
    "runtimeVersion": "runtimeVersion",
    "computeCapability": "computeCapability",
    "family": "family",
}


class _Finding(NamedTuple):
    """One refused field: scenario ``field`` → rendered object ``what``, its ``subject``, the ``rule``."""

    field: str
    what: str
    subject: str
    rule: str


def _show(text: str) -> str:
    """``text`` quoted, long values cut so a message stays one readable line."""
    return repr(cut(text))


def _node_label_field(node: NodeSpec, key: str, is_key: bool = False) -> str:
    del is_key  # a Node label's key and value come from the same field
    if key in node.labels:
        return f"labels.{key}"
    return _NODE_LABEL_FIELDS.get(key, "accelerators")


def _feature_label_field(node: NodeSpec, key: str, is_key: bool) -> str:
    """A DM feature label's key is built from the product (model keys) or the manufacturer; its value
    from the field its suffix names."""
    for k, acc in enumerate(node.accelerators):
        model = keys.accelerator_key(render.a_key(acc))
        if key == model or key.startswith(f"{model}."):
            field = "product" if is_key else _MODEL_SUFFIX_FIELDS.get(key[len(model) :], "product")
            return f"accelerators[{k}].{field}"
    for k, acc in enumerate(node.accelerators):
        vendor = keys.accelerator_key(acc.manufacturer)
        if key == vendor or key.startswith(f"{vendor}."):
            suffix = key[len(vendor) :]
            field = "manufacturer" if is_key else _MANUFACTURER_SUFFIX_FIELDS.get(suffix, "manufacturer")
            return f"accelerators[{k}].{field}"
    return "accelerators"


def _labels(what: str, labels: dict[str, str], blame: Callable[[str, bool], str]) -> Iterator[_Finding]:
    for key, value in labels.items():
        for msg in validation.qualified_name(key):
            yield _Finding(blame(key, True), f"{what} label key", key, msg)
        for msg in validation.label_value(value):
            yield _Finding(blame(key, False), f"{what} label {key}", f"value {_show(value)}", msg)


def _object_name(what: str, name: str) -> Iterator[_Finding]:
    for msg in validation.dns1123_subdomain(name):
        yield _Finding("name", what, f"name {_show(name)}", msg)


def _quantity(resource: str, text: str) -> str | None:
    """Why the API server would refuse ``text`` as ``status.capacity[resource]``, or None."""
    integer = resource in _INTEGER_NATIVE or ("/" in resource and "kubernetes.io/" not in resource)
    if not integer:
        return None
    if not (text.isascii() and text.isdigit()):
        return "must be a whole number"
    if int(text) > _INT_RESOURCE_MAX:
        return f"must be at most {_INT_RESOURCE_MAX} (the API server checks it in milli-units of int64)"
    return None


def _node(node: NodeSpec) -> Iterator[_Finding]:
    body = render.render_node(node, _TIME)
    meta = body["metadata"]
    yield from _object_name("Node", meta["name"])
    yield from _labels("Node", meta["labels"], lambda key, _: _node_label_field(node, key))
    for msg in validation.object_annotations(meta["annotations"]):
        yield _Finding("cpu", "Node", "annotations", msg)
    for part in ("capacity", "allocatable"):
        for resource, text in body["status"][part].items():
            problem = _quantity(resource, text)
            if problem:
                field = _CAPACITY_FIELDS.get(resource, "accelerators")
                yield _Finding(field, "Node", f"status.{part}[{resource}] {_show(text)}", problem)


def _node_feature(node: NodeSpec) -> Iterator[_Finding]:
    feature = render.render_node_feature(node, _UID)
    if feature is None:
        return
    meta = feature["metadata"]
    what = f"NodeFeature {meta['name']}"
    yield from _object_name(what, meta["name"])
    yield from _labels(what, meta["labels"], lambda key, _: _node_label_field(node, key))
    for key, value in feature["spec"]["labels"].items():
        for msg in validation.nfd_feature_label(key, value):
            is_key = msg.startswith("key: ")
            yield _Finding(
                _feature_label_field(node, key, is_key),
                f"{what} feature label (nfd-master drops it)",
                key if is_key else f"{key} value {_show(value)}",
                msg.removeprefix("key: ").removeprefix("value: "),
            )


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for step in loc:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def _devices_field(node: NodeSpec, loc: tuple[int | str, ...]) -> str:
    """The scenario field a ``Devices`` path (``spec.groups[0].name``) was rendered from."""
    if len(loc) >= 3 and loc[1] == "groups" and isinstance(loc[2], int):
        if loc[0] == "status":  # the ledger lists only the published entries
            entries = [k for k, acc in enumerate(node.accelerators) if acc.ledgerPublished]
        else:
            entries = list(range(len(node.accelerators)))
        if loc[2] >= len(entries):
            return "accelerators"
        field = f"accelerators[{entries[loc[2]]}]"
        mapped = _GROUP_FIELDS.get(str(loc[3])) if len(loc) > 3 and loc[0] == "spec" else None
        return f"{field}.{mapped}" if mapped else field
    if len(loc) >= 3 and loc[:2] == ("spec", "interfaces") and isinstance(loc[2], int):
        return f"rdma[{loc[2]}]" + (f".{loc[3]}" if len(loc) > 3 else "")
    return "accelerators"


def _all_int64(value: object) -> bool:
    """Every integer in ``value`` fits ``int64`` — the fast pass (``orjson`` refuses integers past 2⁵³
    in strict mode); only when it refuses does :func:`_out_of_int64` walk the object to find where."""
    try:
        orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except orjson.JSONEncodeError:
        return not any(_out_of_int64(value, ()))
    return True


def _out_of_int64(value: object, loc: tuple[int | str, ...]) -> Iterator[tuple[int | str, ...]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            yield loc
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _out_of_int64(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _out_of_int64(item, (*loc, i))


def _devices(node: NodeSpec) -> Iterator[_Finding]:
    devices = render.render_devices(node, _UID)
    ledger = render.render_devices_status(node)
    if devices is None or ledger is None:
        return
    meta = devices["metadata"]
    what = f"Devices {meta['name']}"
    yield from _object_name(what, meta["name"])
    models = {keys.accelerator_key(render.a_key(acc)): k for k, acc in enumerate(node.accelerators)}

    def blame(key: str, _: bool) -> str:
        if key in models:
            return f"accelerators[{models[key]}].product"
        return _node_label_field(node, key)

    yield from _labels(what, meta["labels"], blame)
    body = {**devices, "status": ledger["status"]}
    content = {"spec": body["spec"], "status": body["status"]}
    for loc in () if _all_int64(content) else _out_of_int64(content, ()):
        yield _Finding(_devices_field(node, loc), what, _path(loc), "must fit in a 64-bit integer")
    try:
        Devices.model_validate(body)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            yield _Finding(_devices_field(node, loc), what, _path(loc), str(err["msg"]))


_ACTUAL_LENGTH = re.compile(r" \(is \d+\)")


def _subjects(subjects: list[str]) -> str:
    """``a.b/x.product, a.b/x.memory`` → ``a.b/x{.product,.memory}``: one bad prefix, shown once."""
    if len(subjects) == 1:
        return subjects[0]
    head = min(subjects)
    last = max(subjects)  # the common prefix of all strings is that of the smallest and largest
    while not last.startswith(head):
        head = head[:-1]
    if len(head) < SHOWN_CHARS // 2:
        return ", ".join(subjects)
    return head + "{" + ",".join(s[len(head) :] for s in subjects) + "}"


def check_rendered(node: NodeSpec) -> list[str]:
    """``.<field>: <problem>`` lines for what the cluster would refuse in ``node``'s rendered objects.

    ``node`` must have passed the other checks (rendering assumes a consistent node). Findings that
    differ only in the rendered subject (one long product making every ``<aKey>.<suffix>`` key too
    long) are reported as one line.
    """
    groups: dict[tuple[str, str, str], list[_Finding]] = {}
    for finding in (*_node(node), *_node_feature(node), *_devices(node)):
        rule = _ACTUAL_LENGTH.sub("", finding.rule)
        groups.setdefault((finding.field, finding.what, rule), []).append(finding)
    lines: list[str] = []
    for (field, what, rule), found in groups.items():
        subjects = list(dict.fromkeys(f.subject for f in found))
        if len(found) == 1 or len(subjects) == 1:
            line = f".{field}: {what} {found[0].subject}: {found[0].rule}"
        else:
            line = f".{field}: {what} {_subjects(subjects)}: {rule}"
        if line not in lines:
            lines.append(line)
    return lines
