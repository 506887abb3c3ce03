"""A resync the test waits out: every key handed over again, and each one reconciled since.

``await resynced(controllers, resync, settled)`` calls ``resync()`` (the owner's own, e.g.
``Chain.resync``), counts how many keys each controller was handed (its queue's ``adds``), and waits
until controller-runtime's reconcile counter of each has moved by at least that many — whatever the
result — and ``settled(controllers)`` holds (queues drained, as strictly as the caller needs). Every
decision has then been taken again from the state as it stands: the positive signal a negative claim
("nothing written", "still held") is checked after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import REGISTRY

from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gpustack_worker.runtime.controller import Controller

__all__ = ("idle", "reconciles", "resynced")

_COUNTER = "controller_runtime_reconcile_total"
_RESULTS = ("success", "error", "requeue_after")


def reconciles(controllers: Sequence[Controller]) -> dict[str, float]:
    """Each controller's reconciles so far, whatever their result (controller-runtime's counter, by the
    controller's name: a module runs one set of these controllers, so the process' count is theirs)."""
    return {
        c.name: sum(
            REGISTRY.get_sample_value(_COUNTER, {"controller": c.name, "result": r}) or 0.0
            for r in _RESULTS
        )
        for c in controllers
    }


def idle(controllers: Sequence[Controller]) -> bool:
    """No key queued or in flight (a delayed key — a timer the test's clock owns — may wait)."""
    return all(len(c.queue) == 0 and not c.queue.processing for c in controllers)


async def resynced(
    controllers: Sequence[Controller],
    resync: Callable[[], None],
    settled: Callable[[Sequence[Controller]], bool] = idle,
) -> None:
    """Hand every key over again with ``resync`` and wait until each controller reconciled at least as
    many keys as it was handed and ``settled(controllers)`` holds."""
    start = reconciles(controllers)
    adds = {c.name: c.queue.adds for c in controllers}
    resync()
    handed = {c.name: c.queue.adds - adds[c.name] for c in controllers}

    def reconciled_and_settled() -> bool:
        now = reconciles(controllers)
        return all(now[name] >= start[name] + n for name, n in handed.items()) and settled(controllers)

    await eventually(reconciled_and_settled)
