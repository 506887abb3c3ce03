"""Issue 28, problem 2: a server-side-apply no-op is answered with the *current* version, so the event that
made that version — someone else's — must not be taken for our write's echo.

At base B our managedFields still own a field G our new body has released; another manager updates G
(taking it out of our entry) and a field H; at that state our apply changes nothing, the server skips the
write and answers X — the version the other manager made. The event B → X is theirs and must wake the
controller, whether it arrives before our answer (held, then released) or after it. Driven with the real
:class:`Applier`, the real ingest transform and the SSA model of ``echo_ssa.py``; the variants of the class
(which field the other manager changes, and how) are below.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from echo_ssa import MANAGER, THING, ModelClient, Server, Watch, body_of, data, label

from gpustack_worker.runtime.apply import Applier

if TYPE_CHECKING:
    from collections.abc import Callable

G, K, H = data("g"), data("k"), data("h")


class Cache:
    field_managers = frozenset({MANAGER})


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _converged(server: Server) -> tuple[Applier, ModelClient, Watch]:
    """Our manager owns G and K (applied and echoed); an admin's H is there too."""
    client = ModelClient(server)
    applier = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    watch = Watch(server, applier)
    task = asyncio.ensure_future(applier.apply(THING, body_of({G: "a", K: "b"}), watch.store))
    await _settle()
    assert client.process(), "the first apply writes"
    client.answer()
    await task
    watch.deliver()
    assert [d.woken for d in watch.deliveries] == [False], "our first write's echo is dropped"
    return applier, client, watch


#: What another manager does while our apply releasing G is on its way (each leaves our apply a no-op).
VARIANTS: dict[str, Callable[[Server], Any]] = {
    "G and H (the issue's case)": lambda s: s.update("kubectl-edit", {G: "x", H: "2"}),
    "G only, to another value": lambda s: s.update("kubectl-edit", {G: "x"}),
    "G and a label": lambda s: s.update("kubectl-edit", {G: "x", label("team"): "t"}),
    "G removed and H changed": lambda s: s.update("kubectl-edit", {G: None, H: "2"}),
    "G in one update, H in the next": lambda s: (
        s.update("kubectl-edit", {G: "x"}),
        s.update("labeller", {H: "3"}),
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("order", ["event before the answer", "event after the answer"])
async def test_a_noop_apply_does_not_swallow_the_foreign_event_it_was_answered_with(
    variant: str, order: str
) -> None:
    server = Server(content={H: "1"})
    applier, client, watch = await _converged(server)
    seen = len(watch.deliveries)
    # Our next reconcile releases G: computed from the cached B, not a no-op there (our entry owns G).
    task = asyncio.ensure_future(applier.apply(THING, body_of({K: "b"}), watch.store))
    await _settle()
    assert client.pending, "the apply was sent"
    VARIANTS[variant](server)
    foreign = len(server.events) - seen
    assert foreign >= 1
    wrote = client.process()
    if order == "event before the answer":
        watch.deliver()
        client.answer()
        await task
    else:
        client.answer()
        await task
        watch.deliver()
    ours = [d for d in watch.deliveries[seen:] if d.event.writer == MANAGER]
    theirs = [d for d in watch.deliveries[seen:] if d.event.writer != MANAGER]
    assert len(theirs) == foreign
    assert all(d.woken for d in theirs), (
        f"a foreign change was dropped as our echo ({variant}, {order}, our apply wrote: {wrote})"
    )
    assert all(not d.woken for d in ours), "our own write's echo is still dropped"


async def test_another_managers_removal_of_exactly_the_field_we_released_is_dropped_as_ours() -> None:
    """The one foreign change that is dropped: it makes exactly the state our own write would have made
    (G removed, nothing else), so a reconcile woken by it would find what our write's echo shows."""
    server = Server(content={H: "1"})
    applier, client, watch = await _converged(server)
    seen = len(watch.deliveries)
    task = asyncio.ensure_future(applier.apply(THING, body_of({K: "b"}), watch.store))
    await _settle()
    server.update("kubectl-edit", {G: None})
    assert client.process() is False, "our apply is a no-op at their version"
    client.answer()
    await task
    watch.deliver()
    (theirs,) = watch.deliveries[seen:]
    assert theirs.woken is False
    # What our own write would have made from B: the same content and the same entry of ours.
    alone = Server(content={H: "1"})
    await _converged(alone)
    alone.apply(MANAGER, {K: "b"})
    assert server.content == alone.content
    assert server.managers[MANAGER].fields == alone.managers[MANAGER].fields
