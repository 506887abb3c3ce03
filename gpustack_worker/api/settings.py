"""The scheduling-chain settings (GPUStack's online-adjustable settings): read by the node agent and by
the chain controllers.

They are live: every reconcile reads the snapshot in force, so a ConfigMap change applies from the
next reconcile on. The names, environment seeds and defaults are GPUStack's; the ConfigMap key
of a field is its kebab-case name and the seed is ``GPUSTACK_<UPPER_SNAKE_NAME>``
(:mod:`gpustack_worker.runtime.settings` has the mechanism).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, field_validator

from gpustack_worker.api import keys
from gpustack_worker.api.kueue_install import KUEUE_NAMESPACE
from gpustack_worker.runtime.labelselector import SelectorError, parse_selector
from gpustack_worker.runtime.settings import STARTUP_ONLY, RuntimeSettings, SettingsModel

__all__ = ("DEFAULT_LOCAL_QUEUE_NAMESPACE_SELECTOR", "ChainSettings", "ControllerSettings")

#: The Namespaces of the components the chain runs beside — Kueue's and NFD's, at their charts' default
#: namespaces — get no LocalQueue by default: nothing submits GPUStack workloads there, and a queue in
#: Kueue's own namespace invites Workloads into the namespace Kueue's webhooks exclude.
DEFAULT_LOCAL_QUEUE_NAMESPACE_SELECTOR: Final = (
    f"{keys.NAMESPACE_NAME} notin ({KUEUE_NAMESPACE},{keys.NFD_NAMESPACE})"
)


class ChainSettings(SettingsModel):
    """GPUStack's online-adjustable scheduling settings, with GPUStack's defaults. All live."""

    node_management_manual: bool = False
    """false: the worker stamps ``gpustack.ai/managed=true`` on every node; true: only an admin-set label
    counts, for clusters where only some nodes may serve GPUStack."""
    instance_type_mixed_on_node: bool = True
    """An accelerated node also contributes CPU capacity, so small CPU workloads can use spare cores."""
    instance_type_derived_from_node: bool = True
    """InstanceTypes are authored from discovered flavors; false leaves authoring to admins."""
    instance_type_drain_when_no_flavors: bool = True
    """A pool that lost all flavors is drained (HoldAndDrain) instead of waiting for reservations to end."""
    instance_type_aware_cpu_manufacturer: bool = False
    """Group the aggregation layer by CPU manufacturer; off keeps one pool per accelerator class."""
    workload_fit_affinity: bool = True
    """The Workload webhook adds the fit pins, so Kueue only admits onto nodes where the request fits."""
    instance_general_resources_overcommit: bool = True
    """Scale instance Pod requests down (limits stay), since inference rarely uses its full preset."""
    instance_persistent_volume_placement: bool = True
    """Bound claims add PV node affinity so an instance lands where its volume is."""
    model_artifact_delivery_mode: Literal["Engine", "Node"] = "Engine"
    """``Node`` adds node-store preference terms; ``Engine`` lets the engine fetch artifacts itself."""


class ControllerSettings(RuntimeSettings, ChainSettings):
    """Everything the controller process's controllers (chain, topology, placement) read: the runtime's
    tunables and the chain settings. The process validates the ConfigMap against the command line's
    composed model (a subclass), so the controller accepts exactly the keys the agent accepts."""

    chain_settle_seconds: float = Field(default=10.0, ge=0, le=600)
    """How long the chain waits for a Node's topology profile before it writes the flavors, queues and
    InstanceType status that Node feeds: a cold fleet is written once, not once per arriving profile. The
    wait lasts while profiles keep arriving (none more than this apart) and ends this long after the last;
    a Node still without one then no longer holds anything back. 0 writes at once, on every partial view."""
    local_queue_namespace_selector: str = DEFAULT_LOCAL_QUEUE_NAMESPACE_SELECTOR
    """The Namespaces that get a LocalQueue per operator ClusterQueue, as a label selector in kubectl's
    syntax (``team``, ``tier in (gpu,inference)``, ``!no-gpu``). The default selects every Namespace but
    Kueue's and NFD's (``kueue-system``, ``node-feature-discovery``: nothing submits workloads there);
    empty selects every Namespace; a selector of your own replaces the default, so add
    ``kubernetes.io/metadata.name notin (...)`` to it to keep those out (or to name where your Kueue and
    NFD run). System Namespaces (``kube-*`` and the worker's own) never get one, selected or not. A
    Namespace that stops
    matching loses the operator's LocalQueues (Workloads already admitted through them keep running; new
    ones there cannot be queued). Live: a change re-evaluates every Namespace. A selector that does not
    parse rejects the whole settings revision (a Warning Event names the fault)."""

    node_devices_never_fits_retries: int = Field(default=3, ge=1, le=100)
    """How many times Gate 3 answers ``Retry`` on a Workload (Kueue's ``retryCount`` of the check) before it
    stops retrying one that asks more than any node of its pool has free as the fleet stands: then it
    deactivates the Workload (the quota and topology domain are freed) and reactivates it once a node of
    the pool has room. Each retry is an eviction and a new reservation 30 s apart; a few let a ledger that
    is about to free cards (a finishing Pod) do so first. Live: read at every verdict."""

    @field_validator("local_queue_namespace_selector")
    @classmethod
    def _selector_parses(cls, value: str) -> str:
        try:
            parse_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from exc
        return value

    node_profile_workers: int = Field(default=8, ge=1, le=64, json_schema_extra=STARTUP_ONLY)
    """Concurrent reconciles of ``topology-nodes``, the one controller with a write per Node (the topology
    profile label and its ``Devices`` mirror). A first install needs that write on every Node, so this sets
    how close the cold start comes to the API server's own write rate: 8 in flight is what a bare client
    needs to reach it; ``controller-workers`` (2) would leave it at a quarter. Start-up-only."""
