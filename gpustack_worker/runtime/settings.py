"""Operator settings: one ConfigMap, read live into one frozen pydantic model.

Every tunable exists exactly once, in :class:`Settings`, with its default and the reason for it. The
ConfigMap key of a field is its kebab-case name (``node-management-manual``); when the ConfigMap lacks a
key the value is seeded from the environment variable ``GPUSTACK_<UPPER_SNAKE_NAME>`` (reference §4.2),
else the default applies. :class:`SettingsSource` watches the ConfigMap and exposes :attr:`current`,
the last *good* snapshot; every reconcile reads that snapshot, so a change applies from the next
reconcile on without restarts. A value that does not validate never takes effect and never crashes
anything: the last good settings stay in force and the rejection is reported three ways — a structured
log line, a Kubernetes Event on the ConfigMap, and ``gpustack_settings_invalid_total``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Final, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpustack_worker.runtime.informer import DELETED, Informer, InformerOptions
from gpustack_worker.runtime.metrics import SETTINGS_INVALID, SETTINGS_LAST_GOOD
from gpustack_worker.runtime.resources import CONFIG_MAP, EVENT

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from gpustack_worker.runtime.client import Client

__all__ = (
    "DEFAULT_CONFIGMAP",
    "DEFAULT_NAMESPACE",
    "ENV_PREFIX",
    "Settings",
    "SettingsError",
    "SettingsSource",
    "env_name",
    "settings_from",
)

DEFAULT_CONFIGMAP: Final = "gpustack-settings"
DEFAULT_NAMESPACE: Final = "gpustack-system"
ENV_PREFIX: Final = "GPUSTACK_"
_log = structlog.get_logger("gpustack_worker.runtime.settings")


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Settings(BaseModel):
    """Every tunable of the worker, once. Immutable: a change is a new snapshot."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        alias_generator=_kebab,
        populate_by_name=True,
        use_attribute_docstrings=True,
        str_strip_whitespace=True,
    )

    # -- scheduling chain (reference §4.2) ------------------------------------------------------------
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

    # -- runtime tunables -----------------------------------------------------------------------------
    controller_workers: int = Field(default=2, ge=1, le=64)
    """Concurrent reconciles per controller; reconciles are I/O-bound and keyed, 2 hides one slow apply."""
    requeue_base_delay_seconds: float = Field(default=0.005, gt=0, le=60)
    """First retry delay of a failing key (client-go default): fast recovery from transient conflicts."""
    requeue_max_delay_seconds: float = Field(default=1000.0, gt=0, le=86400)
    """Cap of the per-key exponential retry delay (client-go default)."""
    requeue_qps: float = Field(default=10.0, gt=0, le=10000)
    """Global retry rate: a mass failure must not become a retry storm against the API server."""
    requeue_burst: int = Field(default=100, ge=1, le=100000)
    """Retries allowed at once before ``requeue-qps`` pacing starts."""
    watch_timeout_min_seconds: float = Field(default=300.0, ge=10, le=3600)
    """Lower bound of the random watch timeout (spreads reconnects of many informers)."""
    watch_timeout_max_seconds: float = Field(default=600.0, ge=10, le=3600)
    """Upper bound of the random watch timeout (kube-apiserver closes watches after 30-60 min anyway)."""
    watch_inactivity_seconds: float = Field(default=120.0, ge=5, le=3600)
    """A watch silent this long (not even a bookmark) is presumed dead and reconnected."""
    watch_backoff_initial_seconds: float = Field(default=0.8, gt=0, le=60)
    """First list/watch retry delay (client-go reflector)."""
    watch_backoff_max_seconds: float = Field(default=30.0, gt=0, le=600)
    """Cap of the list/watch retry delay: ~0.22 QPS per informer against an unhealthy API server."""
    api_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """Per-request HTTP timeout (kr8s has none by default; a hung request would stall a worker)."""
    cache_sync_timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    """How long start-up waits for informers to list before failing (controller-runtime: 2 min)."""
    leader_lease_seconds: float = Field(default=15.0, gt=0, le=600)
    """How long a crashed leader's Lease blocks the standbys (controller-runtime/Kueue default); read at
    start-up from the environment, since the election starts before the ConfigMap is read."""
    leader_renew_deadline_seconds: float = Field(default=10.0, gt=0, le=600)
    """A leader that could not renew for this long steps down; shorter than the lease, so it always stops
    before a standby may take over (never two leaders)."""
    leader_retry_period_seconds: float = Field(default=2.0, gt=0, le=60)
    """How often the leader renews (a standby looks four times as often, to take over promptly)."""
    fit_label_coalesce_seconds: float = Field(default=3.0, ge=0, le=300)
    """The node agent batches fit-label changes this long, so a burst of device events is one write."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log verbosity."""

    def informer_options(self) -> InformerOptions:
        """The reflector tunables as the informer takes them."""
        low = min(self.watch_timeout_min_seconds, self.watch_timeout_max_seconds)
        return InformerOptions(
            watch_timeout_min_s=low,
            watch_timeout_max_s=max(low, self.watch_timeout_max_seconds),
            inactivity_timeout_s=self.watch_inactivity_seconds,
            backoff_initial_s=self.watch_backoff_initial_seconds,
            backoff_max_s=self.watch_backoff_max_seconds,
        )


class SettingsError(ValueError):
    """A settings source did not validate; ``errors`` lists ``key: message`` lines."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def env_name(field: str) -> str:
    """``node_management_manual`` → ``GPUSTACK_NODE_MANAGEMENT_MANUAL``."""
    return ENV_PREFIX + field.upper()


def settings_from(data: Mapping[str, str] | None, env: Mapping[str, str] | None = None) -> Settings:
    """Validate ConfigMap ``data`` over env seeds over defaults; raises :class:`SettingsError`."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for field in Settings.model_fields:
        seeded = env.get(env_name(field))
        if seeded is not None:
            values[field] = seeded
    for key, value in (data or {}).items():
        field = key.replace("-", "_")
        if field in Settings.model_fields:
            values[field] = value
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(
            [f"{_kebab(str(e['loc'][0])) if e['loc'] else '?'}: {e['msg']}" for e in exc.errors()]
        ) from exc


def _micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SettingsSource:
    """Watches one settings ConfigMap and keeps the last good :class:`Settings`."""

    def __init__(
        self,
        client: Client,
        *,
        name: str = DEFAULT_CONFIGMAP,
        namespace: str = DEFAULT_NAMESPACE,
        env: Mapping[str, str] | None = None,
        reporting_instance: str = "",
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self._env = dict(os.environ if env is None else env)
        self._instance = reporting_instance or os.environ.get("HOSTNAME", "gpustack-worker")
        self._current = self._baseline()
        self._listeners: list[Callable[[Settings], None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.rejections = 0
        self.last_error: SettingsError | None = None
        self.informer = Informer(
            client, CONFIG_MAP, namespace=namespace, field_selector=f"metadata.name={name}"
        )
        self.informer.add_handler(self._on_event)
        SETTINGS_INVALID.labels(configmap=f"{namespace}/{name}")

    @property
    def current(self) -> Settings:
        """The settings in force (last good snapshot)."""
        return self._current

    def subscribe(self, listener: Callable[[Settings], None]) -> None:
        """Call ``listener`` with every newly accepted snapshot."""
        self._listeners.append(listener)

    async def run(self) -> None:
        """Watch the ConfigMap until cancelled."""
        await self.informer.run()

    async def wait_synced(self) -> None:
        await self.informer.wait_synced()

    def _baseline(self) -> Settings:
        try:
            settings = settings_from(None, self._env)
        except SettingsError as exc:
            _log.error("invalid settings in environment, using defaults", errors=exc.errors)
            settings = Settings()
        SETTINGS_LAST_GOOD.labels(configmap=f"{self.namespace}/{self.name}").set(time.time())
        return settings

    def _on_event(self, event: str, old: Any | None, new: Any | None) -> None:
        if event == DELETED or new is None:
            self._accept(self._baseline(), reason="configmap deleted")
            return
        try:
            settings = settings_from(new.get("data") or {}, self._env)
        except SettingsError as exc:
            self._reject(new, exc)
            return
        self._accept(settings, reason="configmap")

    def _accept(self, settings: Settings, *, reason: str) -> None:
        SETTINGS_LAST_GOOD.labels(configmap=f"{self.namespace}/{self.name}").set(time.time())
        self.last_error = None
        if settings == self._current:
            return
        changed = {_kebab(k): v for k, v in settings.model_dump().items() if getattr(self._current, k) != v}
        self._current = settings
        _log.info("settings updated", reason=reason, changed=changed)
        for listener in self._listeners:
            try:
                listener(settings)
            except Exception:
                _log.exception("settings listener failed")

    def _reject(self, configmap: Any, exc: SettingsError) -> None:
        self.rejections += 1
        self.last_error = exc
        SETTINGS_INVALID.labels(configmap=f"{self.namespace}/{self.name}").inc()
        _log.error(
            "invalid settings rejected, keeping last good",
            configmap=f"{self.namespace}/{self.name}",
            errors=exc.errors,
        )
        task = asyncio.get_running_loop().create_task(self._post_event(configmap, exc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post_event(self, configmap: Any, exc: SettingsError) -> None:
        meta = configmap.get("metadata") or {}
        event = {
            "apiVersion": EVENT.api_version,
            "kind": "Event",
            "metadata": {"name": f"{self.name}.{uuid.uuid4().hex[:16]}", "namespace": self.namespace},
            "eventTime": _micro_time(),
            "reportingController": "gpustack.ai/worker",
            "reportingInstance": self._instance[:128],
            "action": "LoadSettings",
            "reason": "InvalidSettings",
            "type": "Warning",
            "note": f"rejected, last good settings stay in force: {exc}"[:1024],
            "regarding": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": self.name,
                "namespace": self.namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            await self.client.create(EVENT, event, namespace=self.namespace)
        except Exception as err:
            _log.warning("could not post settings event", error=repr(err))
