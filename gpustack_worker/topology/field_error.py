"""One validation problem of an object, named by its field path (``spec.levels[2]: ...``).

Kept in its own module so the selector and the spec checks (which uses the selector) can both build
them; :mod:`gpustack_worker.topology.spec_check` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("FieldError", "child", "index", "key")


@dataclass(frozen=True, slots=True)
class FieldError:
    """A problem at ``path`` (Kubernetes field-path syntax: ``spec.webhook.url``, ``spec.levels[2]``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def child(path: str, name: str) -> str:
    """``spec`` + ``webhook`` → ``spec.webhook``."""
    return f"{path}.{name}" if path else name


def index(path: str, i: int) -> str:
    """``spec.levels`` + 2 → ``spec.levels[2]``."""
    return f"{path}[{i}]"


def key(path: str, k: str) -> str:
    """A map entry: ``spec.nodeSelector.matchLabels`` + ``zone`` → ``spec.nodeSelector.matchLabels[zone]``."""
    return f"{path}[{k}]"
