"""runtime.heap: the freed heap goes back to the OS where the C library can do it."""

from __future__ import annotations

import ctypes.util
import platform

from gpustack_worker.runtime.heap import release_free_memory


def test_glibc_trims_and_other_libraries_are_left_alone() -> None:
    is_glibc = platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None
    assert release_free_memory() is is_glibc
    assert release_free_memory() is is_glibc  # idempotent, the symbol looked up once
