"""Per-card fit labels: what one accelerator of a model can still give (docs/agent.md, "Per-card fit labels").

Node capacity keys are node totals and cannot tell a fragmented node (ten cards with 10 % free each)
from one with a whole free card. Two labels per model, written directly on the Node, let the Workload
webhook pin ``Gt U-1`` / ``Gt N-1`` so Kueue's topology-aware scheduling skips nodes Gate 3 would
refuse. Both values come from Gate 3's own per-card predicates (:mod:`gpustack_worker.api.card_fit`,
which Gate 3 judges with), so for a single Pod asking for one accelerator a label admits a node exactly when
Gate 3 would:

- ``sliced-max-free-units.fit.gpustack.ai/<aKey>`` — present iff some card of the model serves the
  logical-slicing family; the largest slice one such card still takes (``card_fit.free_slice_units``:
  its ``remaining`` when it is healthy, free or already sliced, and has a free slot —
  ``allocatedSlices < logicalSliced.count``; a Hygon card hosting its four slices is full however much
  memory is left).
- ``shared-free-cards.fit.gpustack.ai/<aKey>`` — present iff some unpartitioned card serves the
  shared family; how many of them still grant one owner share (``card_fit.grants_share``: healthy,
  free or shared, M/10 left).

The cards are the node's ``spec`` cards (``card_fit.node_cards``). An unhealthy card stays in its
population but gives nothing: a model whose only free card broke reads ``0``, never that card's
``remaining``. A card whose ledger entry is not published yet (no ``status.groups`` yet, or no entry for
it) reads as free, as Gate 3 reads it; a ledger entry without a matching card in ``spec`` (capability
unknown) is ignored. Values are ``0`` when the population is full; a label disappears with its
population, and every label disappears when the node is unmanaged or has no ``Devices``. ``aKey`` is
``<mfr>-<group id>``; a key that is not a valid qualified label name is skipped.

Inputs are checked first (:mod:`gpustack_worker.agent.validate`): ``desired`` computes from the
sanitized ledger (a status group that does not match the spec group holding its cards is dropped, so
a ledger ``manufacturer: amd`` on NVIDIA cards cannot move the labels), and a label a bad value feeds
(``holds``) keeps its published value (the Node's labels) or is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.agent.labels import is_qualified_name
from gpustack_worker.agent.managed import is_managed
from gpustack_worker.agent.validate import apply_holds, read_count
from gpustack_worker.api import bounds, card_fit, keys

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.agent.facts import DevicesFacts, NodeFacts

__all__ = (
    "FIELD_MANAGER",
    "apply_body",
    "desired",
    "is_fit_label",
    "observed",
)

#: Server-side apply field manager of the fit labels (Node metadata).
FIELD_MANAGER = "gpustack-worker-fit"


def _read_published(key: str, raw: str) -> str | None:
    """A published fit value still in bounds (free units of one card, or a number of cards)."""
    limit = bounds.MAX_UNITS if key.startswith(keys.SLICED_FIT_PREFIX) else bounds.MAX_ACCELERATORS_PER_GROUP
    value = read_count(raw, limit) if raw.isascii() and raw.isdigit() else None
    return None if value is None else str(value)


def desired(
    node: NodeFacts,
    devices: DevicesFacts | None,
    *,
    manual: bool,
    holds: Iterable[str] = (),
    published: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The fit labels this node should carry, by key (``devices`` is the checked view; labels matching
    ``holds`` keep their ``published`` value when it is in bounds, else are left out)."""
    if devices is None or not is_managed(node, manual=manual):
        return {}
    sliced: dict[str, int] = {}
    shared: dict[str, int] = {}
    for nc in card_fit.node_cards(devices):
        if card_fit.serves_slices(nc.card):
            sliced[nc.a_key] = max(sliced.get(nc.a_key, 0), card_fit.free_slice_units(nc.card, nc.ledger))
        if card_fit.serves_shares(nc.card):
            shared[nc.a_key] = shared.get(nc.a_key, 0) + card_fit.grants_share(nc.card, nc.ledger)
    out = {keys.sliced_max_free_units_key(a): str(v) for a, v in sliced.items()}
    out.update({keys.shared_free_cards_key(a): str(v) for a, v in shared.items()})
    valid = {k: v for k, v in out.items() if is_qualified_name(k)}
    return apply_holds(valid, holds, published, read=_read_published, scope=is_fit_label)


def is_fit_label(key: str) -> bool:
    """Whether a Node label key is one of the fit labels (ours to prune)."""
    return key.startswith(keys.FIT_LABEL_DOMAINS)


def observed(node: NodeFacts) -> dict[str, str]:
    """The fit labels currently on the node."""
    return {k: v for k, v in node.labels.items() if is_fit_label(k)}


def apply_body(node_name: str, wanted: Mapping[str, str]) -> dict[str, Any]:
    """The Node metadata apply body; keys left out are removed from what this manager owns (with no
    label wanted the body is bare, which releases every label this manager held)."""
    meta: dict[str, Any] = {"name": node_name}
    if wanted:
        meta["labels"] = dict(wanted)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}
