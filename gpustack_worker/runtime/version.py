"""The one place the program's version comes from: the installed package's metadata.

``--version``, the User-Agent of every request and the start-up log line all read :data:`VERSION`, so the
three can never disagree. A source tree that is not installed falls back to ``gpustack_worker.__version__``
when the package defines one, else ``0+unknown`` (a version that sorts below every release).
"""

from __future__ import annotations

from importlib import metadata
from typing import Final

__all__ = ("DISTRIBUTION", "VERSION", "package_version")

#: The distribution name in ``pyproject.toml``.
DISTRIBUTION: Final = "gpustack-worker"


def package_version(distribution: str = DISTRIBUTION) -> str:
    """The installed version of ``distribution``; the fallbacks above when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        import gpustack_worker

        return str(getattr(gpustack_worker, "__version__", "0+unknown"))


VERSION: Final = package_version()
