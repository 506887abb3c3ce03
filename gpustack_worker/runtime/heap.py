"""Give freed heap memory back to the operating system after a LIST (glibc ``malloc_trim``).

A LIST is decoded page by page in worker threads (:meth:`~gpustack_worker.runtime.client.Client.
list_pages`): glibc serves those threads from arenas of their own, and the pages' memory, once freed,
stays mapped to the process — the RSS after a start-up list of 5,000 bench Nodes was 82 MiB over the
RSS before it, 62 MiB with a trim (bench/relist_bench.py). The memory limit has to cover the RSS a
process keeps *and* the next list's transient on top, so the list returns what it no longer uses.
Nothing happens where the C library has no ``malloc_trim`` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

__all__ = ("release_free_memory",)


@functools.cache
def _trim() -> Any | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


def release_free_memory() -> bool:
    """Return the free memory of every malloc arena to the OS; False where that is not available.

    Blocking (it walks the heap: milliseconds for a few hundred MiB): call it off the event loop."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
