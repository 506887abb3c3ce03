"""The cluster scenario file: what a simulated cluster's nodes look like to stages 1-2.

A scenario is YAML with a top-level ``nodes:`` list (format and example in ``docs/simulator.md``).
The models here fix the *shape* (types, ranges, unknown keys rejected); the cross-field rules
(cards exist, profiles fit, allocations match the card's family) live in
:mod:`gpustack_worker.simulate.checks`, and :mod:`gpustack_worker.simulate.load` runs both and
reports every problem in one :class:`ScenarioError`, each line naming the node and the field, e.g.
``nodes[2] (name=gpu-b).accelerators[0].count: must be ≥ 1`` — a scenario is written by hand, so the
message must say where to look, not how pydantic walked the tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from gpustack_worker.api import keys

__all__ = (
    "CPU_DETAIL_FIELDS",
    "MAX_SHOWN_PROBLEMS",
    "SHOWN_CHARS",
    "Accelerator",
    "Allocation",
    "Cpu",
    "NodeSpec",
    "Partitioning",
    "Profile",
    "RdmaInterface",
    "Scenario",
    "ScenarioError",
    "cut",
    "format_validation_error",
    "node_path",
)

_QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$"
_PROFILE_NAME = r"^[0-9a-z][0-9a-z.+-]*$"

#: Checked as a DNS subdomain and as a hostname label value by the checks (which say why, not a regex).
NodeName = Annotated[str, StringConstraints(min_length=1)]
Quantity = Annotated[str, StringConstraints(pattern=_QUANTITY)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=256)]
if TYPE_CHECKING:
    CpuDetail = str
else:  # a Literal built from the one list in api.keys, so pydantic reports the allowed names
    CpuDetail = Literal[keys.CPU_DETAIL_SUFFIXES]
CPU_DETAIL_FIELDS: Final[tuple[str, ...]] = keys.CPU_DETAIL_SUFFIXES

# --- sizes --------------------------------------------------------------------------------------------
# Every list and mapping of a scenario has a ceiling, checked before its entries are: a scenario is
# untrusted input, and validating a million bad entries costs seconds and gigabytes for error
# objects nobody reads. The ceilings are physical (a card-indexed list cannot outnumber the cards) or
# far above any real node.

#: Nodes in one scenario: twice the 5,000-node scale the benchmarks target.
MAX_NODES: Final = 10_000
#: Cards in one accelerator entry (``count``), and so entries of every card-indexed list.
MAX_CARDS: Final = 64
#: Accelerator entries (distinct models) on one node; real nodes carry one or two.
MAX_ACCELERATOR_ENTRIES: Final = 16
#: Partition profiles one card offers (an H100 offers about ten).
MAX_PROFILES: Final = 32
#: Placements of one profile: at most one per memory slice.
MAX_PLACEMENTS: Final = 8
#: Extra labels on one node.
MAX_LABELS: Final = 256
#: NICs on one node.
MAX_NICS: Final = 64


def _at_most(limit: int, what: str) -> BeforeValidator:
    """Refuse a list or mapping longer than ``limit`` before validating any entry of it."""

    def check(value: object) -> object:
        if isinstance(value, list | dict) and len(value) > limit:
            raise PydanticCustomError(
                "too_many",
                "must have at most {limit} {what} (has {count})",
                {"limit": limit, "what": what, "count": len(value)},
            )
        return value

    return BeforeValidator(check)


CardList = Annotated[list[Annotated[int, Field(ge=0)]], _at_most(MAX_CARDS, "cards")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cpu(_Strict):
    """The CPU as NFD and the ``gpustack-cpu-info`` rule report it."""

    vendor: Text  # NFD cpu-model.vendor_id, e.g. AMD, Intel
    model: Text  # feature.gpustack.ai/cpu-name annotation
    cores: Annotated[int, Field(ge=1)]
    family: Annotated[int, Field(ge=0)] | None = None  # NFD cpu-model.family
    id: Annotated[int, Field(ge=0)] | None = None  # NFD cpu-model.id
    details: Annotated[dict[CpuDetail, Text], _at_most(len(CPU_DETAIL_FIELDS), "details")] = Field(
        default_factory=dict
    )


class Profile(_Strict):
    """A partition profile the card offers (manufacturer spelling, e.g. ``3g.40gb``, ``4g48gb``)."""

    name: Annotated[str, StringConstraints(pattern=_PROFILE_NAME, max_length=40)]
    memoryMiB: Annotated[int, Field(ge=1)]
    computeSlices: Annotated[int, Field(ge=1, le=7)]
    memorySlices: Annotated[int, Field(ge=1, le=8)]
    #: Legal starts (memory slices) on an empty card; default: aligned to ``memorySlices``.
    placements: (
        Annotated[list[Annotated[int, Field(ge=0)]], _at_most(MAX_PLACEMENTS, "placements")] | None
    ) = None


class Partitioning(_Strict):
    """Hardware partitioning (MIG-style) of some or all cards of one accelerator entry."""

    kind: Text  # must be the manufacturer's partition kind (``mig``)
    #: Positions (0-based within the entry) of the cards in partitioning mode; default: all.
    cards: CardList | None = None
    computeSlices: Annotated[int, Field(ge=1, le=7)] = 7
    memorySlices: Annotated[int, Field(ge=1, le=8)] = 8
    profiles: Annotated[list[Profile], Field(min_length=1), _at_most(MAX_PROFILES, "profiles")]


class Allocation(_Strict):
    """The pre-existing ledger state of one card."""

    card: Annotated[int, Field(ge=0)]
    mode: Literal["exclusive", "shared", "sliced", "partitioned"]
    units: Annotated[int, Field(ge=1)] | None = None  # sliced
    slices: Annotated[int, Field(ge=1)] | None = None  # sliced
    shares: Annotated[int, Field(ge=1)] | None = None  # shared
    profiles: (  # partitioned
        Annotated[dict[str, Annotated[int, Field(ge=1)]], _at_most(MAX_PROFILES, "profiles")] | None
    ) = None


class Accelerator(_Strict):
    """``count`` identical cards of one model (one ``Devices`` group)."""

    manufacturer: Text
    product: Text
    memoryMiB: Annotated[int, Field(ge=1)]
    cores: Annotated[int, Field(ge=1)] | None = None
    count: Annotated[int, Field(ge=1, le=MAX_CARDS)]
    family: Text | None = None
    computeCapability: Text | None = None
    driverVersion: Text | None = None
    runtimeVersion: Text | None = None
    #: Positions of unhealthy cards (they offer no device-plugin token).
    unhealthy: CardList = Field(default_factory=list)
    partitioning: Partitioning | None = None
    allocations: Annotated[list[Allocation], _at_most(MAX_CARDS, "allocations")] = Field(default_factory=list)
    #: False: the group is in ``Devices.spec`` but has no ``status`` ledger yet.
    ledgerPublished: StrictBool = True


class RdmaInterface(_Strict):
    """One NIC in ``Devices.spec.interfaces``."""

    name: Text
    rdma: StrictBool = True
    state: Literal["Active", "Down", "Init", "Armed", "Unknown"] = "Active"
    linkLayer: Literal["InfiniBand", "Ethernet"]
    numaAffinity: Text | None = None
    distance: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None = None


class NodeSpec(_Strict):
    """One simulated Node."""

    name: NodeName
    os: Text = "linux"
    arch: Text = "amd64"
    labels: Annotated[dict[str, str], _at_most(MAX_LABELS, "labels")] = Field(default_factory=dict)
    cpu: Cpu
    memory: Quantity
    pods: Annotated[int, Field(ge=1)] = 110
    ephemeralStorage: Quantity = "100Gi"
    accelerators: Annotated[list[Accelerator], _at_most(MAX_ACCELERATOR_ENTRIES, "entries")] = Field(
        default_factory=list
    )
    rdma: Annotated[list[RdmaInterface], _at_most(MAX_NICS, "interfaces")] = Field(default_factory=list)


class Scenario(_Strict):
    """The whole file."""

    nodes: Annotated[list[NodeSpec], Field(min_length=1), _at_most(MAX_NODES, "nodes")]


#: Problem lines a :class:`ScenarioError` message shows; the rest are counted ("… and 12 more problems").
#: A hand-written file is fixed a few lines at a time, and a generated or hostile one must not print
#: millions of lines.
MAX_SHOWN_PROBLEMS: Final = 50


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; ``problems`` holds one line per offending field.

    The message lists at most :data:`MAX_SHOWN_PROBLEMS` of them and counts the rest.
    """

    def __init__(self, problems: list[str], source: str = "", *, uncollected: int = 0) -> None:
        #: The problem lines collected (a caller may stop collecting early; ``uncollected`` counts the rest).
        self.problems = problems
        self.total = len(problems) + uncollected
        head = f"{source}: " if source else ""
        shown = problems[:MAX_SHOWN_PROBLEMS]
        more = self.total - len(shown)
        tail = [f"… and {more} more problem{'s' if more != 1 else ''}"] if more else []
        super().__init__(head + "invalid scenario:\n  " + "\n  ".join([*shown, *tail]))


#: Characters of a user-written value a problem line shows before cutting it with ``…``.
SHOWN_CHARS: Final = 40


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` itself, or its first ``limit - 1`` characters and ``…``: one problem stays one line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node_path(index: int, name: object) -> str:
    """``nodes[2] (name=gpu-b)``: how every problem line starts."""
    if isinstance(name, str) and name:
        return f"nodes[{index}] (name={cut(name, 64)})"
    return f"nodes[{index}]"


_MESSAGES: Final = {
    "extra_forbidden": "unknown key",
    "missing": "required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def _message(err: Any) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "greater_than_equal":
        return f"must be ≥ {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be ≤ {ctx['le']}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} entries"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    return _MESSAGES.get(kind, str(err["msg"]))


def _render_loc(loc: tuple[int | str, ...], data: object) -> str:
    out = ""
    node = data
    for i, step in enumerate(loc):
        if isinstance(step, int):
            node = node[step] if isinstance(node, list) and 0 <= step < len(node) else None
            if i == 1 and loc[0] == "nodes":
                out = node_path(step, node.get("name") if isinstance(node, dict) else None)
            else:
                out += f"[{step}]"
        elif step == "[key]":  # pydantic's marker for "the key itself", after the key
            out += " (the key)"
        else:
            out += f".{cut(step, 64)}" if out else cut(step, 64)
            node = node.get(step) if isinstance(node, dict) else None
    return out or "<file>"


def format_validation_error(
    exc: ValidationError, data: object, prefix: tuple[int | str, ...] = (), limit: int | None = None
) -> list[str]:
    """One ``<path>: <message>`` line per pydantic error (the first ``limit``), paths rendered against
    the raw ``data``; ``prefix`` is where the validated value sits in ``data`` (``("nodes", 3)``)."""
    errors = exc.errors(include_url=False, include_input=False)
    return [
        f"{_render_loc((*prefix, *err['loc']), data)}: {_message(err)}"
        for err in (errors if limit is None else errors[:limit])
    ]
