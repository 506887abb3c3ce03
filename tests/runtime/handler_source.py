"""A stand-in for an informer where only its handlers matter: what ``Controller.watch`` registers, and
events handed to them as an informer's dispatch would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack_worker.runtime.informer import Handler


class HandlerSource:
    """Records the handlers a controller registers; :meth:`emit` calls each in turn."""

    def __init__(self) -> None:
        self.handlers: list[Handler] = []

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def emit(self, event: str, old: Any | None, new: Any | None) -> None:
        for handler in self.handlers:
            handler(event, old, new)
