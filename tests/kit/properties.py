"""Hypothesis profiles, and the one setting every property test's example count goes through.

Two profiles, chosen with hypothesis' own pytest option ``--hypothesis-profile`` (``nox -s tests_thorough``
passes ``thorough``):

- ``ci`` (the default): a quarter of each test's thorough count (at least ten, or the thorough count when
  that is smaller). The README's test command runs it, so the whole suite stays fast.
- ``thorough``: each test's full count — the counts the tests had before profiles existed.

A test names its thorough count once, ``@settings(max_examples=examples(300))``; a test that names none gets
the profile's own ``max_examples`` (100 thorough, 25 ci), which is the same scale. In both profiles: no
per-example deadline (a fresh CI machine is slower than a dev one, and a test never asserts on time), the
slow-data health check off for the same reason, and the failing example printed with its reproduction
blob. Failing examples are kept in hypothesis' example database (``.hypothesis/`` in the working directory,
hypothesis' default), and a later run replays them first — so a failure found by a ``thorough`` run is tried
first by every ``ci`` run on that checkout.
"""

from __future__ import annotations

import math
from typing import Final

from hypothesis import HealthCheck, settings

__all__ = ("CI", "PROFILES", "THOROUGH", "examples", "register")

CI: Final = "ci"
THOROUGH: Final = "thorough"
#: The examples a test without its own count gets: the scale ``examples`` keeps.
PROFILES: Final = {CI: 25, THOROUGH: 100}
#: Fewer examples than this (or the thorough count, if smaller) say little about a property.
_FLOOR: Final = 10


def register() -> None:
    """Register both profiles and load ``ci`` (``--hypothesis-profile`` loads another after this)."""
    for name, count in PROFILES.items():
        settings.register_profile(
            name,
            max_examples=count,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            print_blob=True,
        )
    settings.load_profile(CI)


def examples(thorough: int) -> int:
    """The example count of a property test whose ``thorough`` count is given, under the loaded profile."""
    scale = settings.default.max_examples / PROFILES[THOROUGH]
    return max(min(thorough, _FLOOR), math.ceil(thorough * scale))
