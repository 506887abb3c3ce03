"""A status body re-derived from a cache that has not seen our own write yet differs from the one we sent
only in a condition's ``lastTransitionTime`` (taken from the clock when the reconcile finds no condition,
or the old one): it is the same state and is not sent again. Anything else that differs is.

Seen in the 5,000-Node cold start (issue 18): a ClusterQueue's ``TopologyReady`` written twice 77 ms apart,
the second reconcile reading the queue before the first status write's event reached the cache, the two
bodies one second apart."""

from __future__ import annotations

from typing import Any

import pytest
from echo_objects import MANAGER, NS, THING, Cache, StubClient

from gpustack_worker.runtime import conditions
from gpustack_worker.runtime.apply import Applier


def status_body(
    status: str = "True", reason: str = "Ready", at: str = "2026-12-05T00:37:12Z", extra: str = "x"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "q", "namespace": NS},
        "status": {
            "extra": extra,
            "conditions": [
                {"type": "TopologyReady", "status": status, "reason": reason, "message": "m",
                 "observedGeneration": 1, "lastTransitionTime": at},
            ],
        },
    }  # fmt: skip


def stale() -> dict[str, Any]:
    """The object as the cache still holds it: before our status write (no condition yet)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "q", "namespace": NS, "uid": "u1", "resourceVersion": "10"},
        "status": {},
    }


@pytest.mark.parametrize(
    ("second", "sent_again"),
    [
        (status_body(at="2026-12-05T00:37:13Z"), False),  # the same state a second later
        (status_body(at="2026-12-05T00:40:00Z"), False),
        (status_body(), False),  # the very same body
        (status_body(status="False", reason="TopologyMissing", at="2026-12-05T00:37:13Z"), True),
        (status_body(reason="Other", at="2026-12-05T00:37:13Z"), True),
        (status_body(extra="y"), True),  # another status field
    ],
)
async def test_a_condition_re_derived_from_a_stale_cache_is_not_written_twice(
    second: dict[str, Any], sent_again: bool
) -> None:
    client = StubClient(11, 12)
    applier = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    assert await applier.apply_status(THING, status_body(), stale()) is not None
    again = await applier.apply_status(THING, second, stale())  # the cache has not caught up
    assert (again is not None) == sent_again
    assert len(client.sent) == (2 if sent_again else 1)


async def test_once_the_cache_caught_up_the_cache_decides() -> None:
    """The timeless comparison is only for our write still on its way: a cache at our write's version
    holds the condition with its real time, and the no-op check compares against that."""
    client = StubClient(11, 12)
    applier = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    await applier.apply_status(THING, status_body(), stale())
    caught_up = {**stale(), "metadata": {**stale()["metadata"], "resourceVersion": "11"}}
    # no managedFields entry of ours in this hand-made cache object: the no-op check must write
    assert await applier.apply_status(THING, status_body(at="2026-12-05T00:37:13Z"), caught_up) is not None
    assert len(client.sent) == 2


def test_the_chain_condition_bodies_carry_the_time_the_digest_ignores() -> None:
    """``conditions.for_apply`` is what puts ``lastTransitionTime`` into a status body; with nothing found
    it stamps ``now``, so two reconciles a second apart make bodies that differ only there."""
    from datetime import UTC, datetime

    want = conditions.Condition("TopologyReady", "True", "Ready", "m", observed_generation=1)
    first = conditions.for_apply((), [want], now=datetime(2026, 12, 5, 0, 37, 12, tzinfo=UTC))
    later = conditions.for_apply((), [want], now=datetime(2026, 12, 5, 0, 37, 13, tzinfo=UTC))
    assert first != later
    assert [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in first] == [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in later
    ]
