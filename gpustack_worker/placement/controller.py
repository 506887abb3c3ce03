"""The placement controllers' wiring inside ``gpustack-worker controller``: ModelDeployment role replicas
as Kueue pod groups (:mod:`.deployments`), the joint AdmissionCheck (:mod:`.joint_controller`), Gate 3
(:mod:`.node_devices`), and the Workload fit pin's webhook handler (:mod:`.fitpin_webhook`), all over
the process's one informer registry. The controllers run while this replica leads; the webhook handler
is served by every replica (it only reads the caches)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import kinds, webhooks
from gpustack_worker.placement.deployments import ModelDeployments
from gpustack_worker.placement.fitpin_webhook import FitPinWebhook
from gpustack_worker.placement.joint_controller import JointCheck
from gpustack_worker.placement.node_devices import NodeDevicesCheck

if TYPE_CHECKING:
    from gpustack_worker.api.settings import ControllerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.controller import Controller
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import SettingsSource
    from gpustack_worker.runtime.webhook_server import Handler

__all__ = ("Placement",)


class Placement:
    """Every placement controller, and the webhook handlers that read their caches."""

    def __init__(
        self,
        client: Client,
        settings: SettingsSource[ControllerSettings],
        registry: InformerRegistry,
        *,
        system_namespace: str = kinds.SYSTEM_NAMESPACE,
    ) -> None:
        self.deployments = ModelDeployments(client, registry, settings, system_namespace=system_namespace)
        self.joint = JointCheck(client, registry, settings)
        self.node_devices = NodeDevicesCheck(client, registry, settings)
        self.fit_pin = FitPinWebhook.from_registry(registry, settings)
        self._parts: tuple[Any, ...] = (self.deployments, self.joint, self.node_devices)

    @property
    def controllers(self) -> list[Controller]:
        return [c for part in self._parts for c in part.controllers]

    @property
    def handlers(self) -> dict[str, Handler]:
        """Webhook path → handler, for :func:`gpustack_worker.cli.webhook_serving.admission_webhooks`."""
        return {webhooks.WORKLOAD_FIT_PATH: self.fit_pin.review}

    def start_keys(self) -> None:
        for part in self._parts:
            part.start_keys()

    def resync(self) -> None:
        for part in self._parts:
            part.resync()
