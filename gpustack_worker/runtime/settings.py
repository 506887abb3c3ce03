"""Operator settings: one ConfigMap, read live into one frozen pydantic model per process.

Every tunable exists exactly once, in the settings model of the stage that reads it, with its default
and the reason for it: the runtime's own tunables in :class:`RuntimeSettings` (here), the scheduling
chain's in ``gpustack_worker.api.settings``, the node agent's in ``gpustack_worker.agent.settings``.
The command line composes them into the one model every process validates the ConfigMap against, so
the agent and the controller accept exactly the same keys. Every model derives from
:class:`SettingsModel`.

A setting's ConfigMap key is its kebab-case field name (``node-management-manual``) and its
environment seed is ``GPUSTACK_<UPPER_SNAKE_NAME>``, the naming GPUStack's own operator seeds its
settings with, so a setting both have (``GPUSTACK_NODE_MANAGEMENT_MANUAL``) is seeded by the same variable.
Two kinds of setting:

* **live** — read from :attr:`SettingsSource.current` (the last *good* snapshot) at every use, so a
  ConfigMap change applies from the next reconcile on, without restarts. Precedence: ConfigMap key,
  else environment seed, else default.
* **start-up-only** — marked ``json_schema_extra=STARTUP_ONLY`` on the field: read once when the process
  starts, from the environment (they shape things built before the ConfigMap can be read: the worker
  pool, the retry limiters, the informers, the HTTP client, the leader election). In the ConfigMap
  they are *rejected*, naming the environment variable to set on the workload instead, so the
  ConfigMap never claims a value that is not in force.

A revision that does not validate — an unknown key (``did you mean …?`` when one is close), a start-up-
only key, an empty or malformed value, a value out of range, a violated order between two settings —
never takes effect and never crashes anything: the settings in force stay, and the rejection is
reported three ways, the same for every cause: one structured log line, a Warning Event on the
ConfigMap (``reason=InvalidSettings``) and ``gpustack_settings_invalid_total``. The same rejected
content is reported once, however often the informer delivers it again. A malformed environment
seed is a :class:`SettingsError` at start-up (the command line turns it into one line and exit 2).
"""

from __future__ import annotations

import difflib
import os
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    TypeVar,
    cast,
    get_args,
    get_origin,
)

import annotated_types
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from gpustack_worker.runtime.events import EventRecorder
from gpustack_worker.runtime.informer import DELETED, Informer, InformerOptions
from gpustack_worker.runtime.metrics import SETTINGS_INVALID, SETTINGS_LAST_GOOD, SETTINGS_REJECTED
from gpustack_worker.runtime.resources import CONFIG_MAP

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from pydantic.fields import FieldInfo

    from gpustack_worker.runtime.client import Client

__all__ = (
    "ENV_PREFIX",
    "STARTUP_ONLY",
    "Order",
    "RuntimeSettings",
    "SettingsError",
    "SettingsModel",
    "SettingsSource",
    "check_revision",
    "env_name",
    "is_startup_only",
    "kebab",
    "live_keys",
    "rule",
    "settings_from",
    "startup_only_keys",
)

#: ``reportingController`` of the Events a rejected revision gets.
REPORTING_CONTROLLER: Final = "gpustack.ai/worker"
ENV_PREFIX: Final = "GPUSTACK_"
#: The one marker of a start-up-only field: ``Field(..., json_schema_extra=STARTUP_ONLY)``.
STARTUP_ONLY: Final[dict[str, Any]] = {"startup_only": True}
#: Rejected values are quoted up to this length in errors (an Event note holds 1 KiB).
_VALUE_SHOWN = 64
_log = structlog.get_logger("gpustack_worker.runtime.settings")

M = TypeVar("M", bound="SettingsModel")
S_co = TypeVar("S_co", bound="SettingsModel", covariant=True)


def kebab(name: str) -> str:
    """``node_management_manual`` → ``node-management-manual`` (the ConfigMap key)."""
    return name.replace("_", "-")


def env_name(field: str) -> str:
    """``node_management_manual`` → ``GPUSTACK_NODE_MANAGEMENT_MANUAL`` (the environment seed)."""
    return ENV_PREFIX + field.upper()


def is_startup_only(info: FieldInfo) -> bool:
    """True for a field marked :data:`STARTUP_ONLY`."""
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("startup_only") is True


def startup_only_keys(model: type[SettingsModel]) -> list[str]:
    """The ConfigMap keys of ``model`` that are read once at start-up (and rejected in the ConfigMap)."""
    return [kebab(n) for n, f in model.model_fields.items() if is_startup_only(f)]


def live_keys(model: type[SettingsModel]) -> list[str]:
    """The ConfigMap keys of ``model`` that take effect live."""
    return [kebab(n) for n, f in model.model_fields.items() if not is_startup_only(f)]


@dataclass(frozen=True, slots=True)
class Order:
    """Two settings that must keep an order: ``low × factor`` ≤ ``high`` (``<`` when ``strict``)."""

    low: str
    high: str
    strict: bool = False
    factor: float = 1.0
    why: str = ""

    def holds(self, settings: BaseModel) -> bool:
        low = float(getattr(settings, self.low)) * self.factor
        high = float(getattr(settings, self.high))
        return low < high if self.strict else low <= high

    def relation(self) -> str:
        return "must be less than" if self.strict else "must not exceed"


class SettingsModel(BaseModel):
    """The base of every stage's settings model: frozen, kebab-case aliases, reasons as docstrings.

    A subclass may declare :attr:`ORDERS` (pairs of its fields that must keep an order); every order of
    every base is checked when a model is built, so a composed model keeps all of them.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=kebab,
        populate_by_name=True,
        use_attribute_docstrings=True,
        str_strip_whitespace=True,
        allow_inf_nan=False,
    )

    ORDERS: ClassVar[tuple[Order, ...]] = ()

    @classmethod
    def all_orders(cls) -> list[Order]:
        """The orders declared by this model and every settings model it is composed of."""
        seen: list[Order] = []
        for klass in cls.__mro__:
            for order in vars(klass).get("ORDERS", ()):
                if order not in seen:
                    seen.append(order)
        return seen

    @model_validator(mode="after")
    def _check_orders(self) -> SettingsModel:
        for order in type(self).all_orders():
            if not order.holds(self):
                low, high = getattr(self, order.low), getattr(self, order.high)
                factor = f" × {order.factor:g}" if order.factor != 1.0 else ""
                raise PydanticCustomError(
                    "settings_order",
                    "{low_key}={low}{factor} {relation} {high_key}={high}: {why}",
                    {
                        "low_key": kebab(order.low),
                        "high_key": kebab(order.high),
                        "low": f"{low:g}",
                        "high": f"{high:g}",
                        "factor": factor,
                        "relation": order.relation(),
                        "low_field": order.low,
                        "high_field": order.high,
                        "why": order.why,
                    },
                )
        return self


class RuntimeSettings(SettingsModel):
    """The runtime's tunables. Only ``log-level`` is live; the rest shape objects built at start-up."""

    ORDERS: ClassVar[tuple[Order, ...]] = (
        Order(
            "requeue_base_delay_seconds",
            "requeue_max_delay_seconds",
            why="the first retry delay cannot be above the cap",
        ),
        Order(
            "watch_timeout_min_seconds",
            "watch_timeout_max_seconds",
            why="the watch timeout is drawn between them",
        ),
        Order(
            "watch_backoff_initial_seconds",
            "watch_backoff_max_seconds",
            why="the first list/watch retry delay cannot be above the cap",
        ),
        Order(
            "leader_renew_deadline_seconds",
            "leader_lease_seconds",
            strict=True,
            why="a leader must step down before a standby may take its Lease",
        ),
        Order(
            "leader_retry_period_seconds",
            "leader_renew_deadline_seconds",
            strict=True,
            factor=1.2,
            why="a jittered renewal must fit in the renew deadline, as client-go requires",
        ),
    )

    controller_workers: int = Field(default=2, ge=1, le=64, json_schema_extra=STARTUP_ONLY)
    """Concurrent reconciles per controller; reconciles are I/O-bound and keyed, 2 hides one slow apply.
    Start-up-only: the workers are started with the controller."""
    requeue_base_delay_seconds: float = Field(default=0.005, gt=0, le=60, json_schema_extra=STARTUP_ONLY)
    """First retry delay of a failing key (client-go default): fast recovery from transient conflicts.
    Start-up-only, as are all ``requeue-*``: the rate limiter is built with the queue."""
    requeue_max_delay_seconds: float = Field(default=1000.0, gt=0, le=86400, json_schema_extra=STARTUP_ONLY)
    """Cap of the per-key exponential retry delay (client-go default)."""
    requeue_qps: float = Field(default=10.0, gt=0, le=10000, json_schema_extra=STARTUP_ONLY)
    """Global retry rate: a mass failure must not become a retry storm against the API server."""
    requeue_burst: int = Field(default=100, ge=1, le=100000, json_schema_extra=STARTUP_ONLY)
    """Retries allowed at once before ``requeue-qps`` pacing starts."""
    watch_timeout_min_seconds: float = Field(default=300.0, ge=10, le=3600, json_schema_extra=STARTUP_ONLY)
    """Lower bound of the random watch timeout (spreads reconnects of many informers). Start-up-only,
    as are all ``watch-*``: the informers take them when they are built."""
    watch_timeout_max_seconds: float = Field(default=600.0, ge=10, le=3600, json_schema_extra=STARTUP_ONLY)
    """Upper bound of the random watch timeout (kube-apiserver closes watches after 30-60 min anyway)."""
    watch_inactivity_seconds: float = Field(default=120.0, ge=5, le=3600, json_schema_extra=STARTUP_ONLY)
    """A watch silent this long (not even a bookmark) is presumed dead and reconnected."""
    watch_backoff_initial_seconds: float = Field(default=0.8, gt=0, le=60, json_schema_extra=STARTUP_ONLY)
    """First list/watch retry delay (client-go reflector)."""
    watch_backoff_max_seconds: float = Field(default=30.0, gt=0, le=600, json_schema_extra=STARTUP_ONLY)
    """Cap of the list/watch retry delay: ~0.22 QPS per informer against an unhealthy API server."""
    api_timeout_seconds: float = Field(default=30.0, gt=0, le=600, json_schema_extra=STARTUP_ONLY)
    """Per-request HTTP timeout (kr8s has none by default; a hung request would stall a worker).
    Start-up-only: the client is connected before the ConfigMap can be read."""
    cache_sync_timeout_seconds: float = Field(default=120.0, gt=0, le=3600, json_schema_extra=STARTUP_ONLY)
    """How long start-up waits for informers to list before failing (controller-runtime: 2 min)."""
    leader_lease_seconds: float = Field(default=15.0, gt=0, le=600, json_schema_extra=STARTUP_ONLY)
    """How long a crashed leader's Lease blocks the standbys (controller-runtime/Kueue default).
    Start-up-only, as are all ``leader-*``: the election starts before the ConfigMap is read."""
    leader_renew_deadline_seconds: float = Field(default=10.0, gt=0, le=600, json_schema_extra=STARTUP_ONLY)
    """A leader that could not renew for this long steps down; shorter than the lease, so it always stops
    before a standby may take over (never two leaders)."""
    leader_retry_period_seconds: float = Field(default=2.0, gt=0, le=60, json_schema_extra=STARTUP_ONLY)
    """How often the leader renews (a standby looks four times as often, to take over promptly)."""
    loop_lag_interval_seconds: float = Field(default=0.1, gt=0, le=60, json_schema_extra=STARTUP_ONLY)
    """How often the event-loop lag is sampled (``gpustack_event_loop_lag_seconds``). A stall is seen
    within one interval of its true length, so 0.1 s resolves every stall that matters (a lease renewal
    is at risk at seconds); ten wake-ups a second cost ~0.02 % of a core. Start-up-only: the monitor
    starts with the process."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log verbosity (any case). Live: re-applied to every logger when it changes."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    def informer_options(self) -> InformerOptions:
        """The reflector tunables as the informer takes them."""
        return InformerOptions(
            watch_timeout_min_s=self.watch_timeout_min_seconds,
            watch_timeout_max_s=self.watch_timeout_max_seconds,
            inactivity_timeout_s=self.watch_inactivity_seconds,
            backoff_initial_s=self.watch_backoff_initial_seconds,
            backoff_max_s=self.watch_backoff_max_seconds,
        )


class SettingsError(ValueError):
    """A settings source did not validate; ``errors`` lists one ``name='value': problem`` line per
    problem (``name`` is the ConfigMap key or the environment variable the value came from)."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


# -- validation ---------------------------------------------------------------------------------------


_KINDS: Final[dict[Any, str]] = {int: "an integer", float: "a number", str: "a string"}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def rule(info: FieldInfo) -> str:
    """What a field accepts, in words: ``an integer from 1 to 64``, ``true or false``, …"""
    annotation = info.annotation
    if annotation is bool:
        return "true or false"
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(annotation))
    kind = _KINDS.get(annotation, "a value")
    bounds: dict[str, Any] = {}
    for meta in info.metadata:
        for attr in ("ge", "gt", "le", "lt"):
            if hasattr(meta, attr) and isinstance(meta, annotated_types.BaseMetadata):
                bounds[attr] = getattr(meta, attr)
    if "ge" in bounds and "le" in bounds:
        return f"{kind} from {_number(bounds['ge'])} to {_number(bounds['le'])}"
    words = {"ge": "at least", "gt": "greater than", "le": "at most", "lt": "less than"}
    parts = [f"{words[attr]} {_number(bounds[attr])}" for attr in ("ge", "gt", "le", "lt") if attr in bounds]
    return f"{kind} {' and '.join(parts)}" if parts else kind


def _cut(text: str) -> str:
    return text if len(text) <= _VALUE_SHOWN else text[:_VALUE_SHOWN] + "…"


def _shown(value: str) -> str:
    return repr(_cut(value))


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where a value came from: its name there (ConfigMap key or env variable) and the raw text."""

    name: str
    raw: str
    kind: Literal["configmap", "env"]


def _unknown(key: str, known: Iterable[str]) -> str:
    candidates = sorted(known)
    normalized = kebab(key.strip().lower().removeprefix(ENV_PREFIX.lower()))
    if normalized in candidates and normalized != key:
        return f"unknown setting, did you mean {normalized}?"
    close = difflib.get_close_matches(normalized, candidates, n=1, cutoff=0.8)
    return f"unknown setting, did you mean {close[0]}?" if close else "unknown setting"


def settings_from(model: type[M], data: Mapping[str, str] | None, env: Mapping[str, str] | None = None) -> M:
    """Validate ConfigMap ``data`` over ``GPUSTACK_*`` env seeds over defaults into ``model``.

    ``data=None`` validates the environment alone (start-up). Raises :class:`SettingsError` listing
    every problem: unknown keys, start-up-only keys in ``data``, empty values, malformed or out-of-range
    values, violated orders — each naming where the value came from, the value and the rule.
    """
    env = os.environ if env is None else env
    fields = model.model_fields
    by_key = {kebab(name): name for name in fields}
    errors: list[str] = []
    values: dict[str, str] = {}
    origins: dict[str, _Origin] = {}

    def take(field: str, origin: _Origin) -> None:
        value = origin.raw.strip()
        if not value:
            undo = "remove the key" if origin.kind == "configmap" else "unset the variable"
            errors.append(
                f"{origin.name}={_shown(origin.raw)}: empty value; expected {rule(fields[field])} "
                f"({undo} to use the default)"
            )
            values.pop(field, None)
            origins.pop(field, None)
            return
        values[field] = value
        origins[field] = origin

    for field in fields:
        seeded = env.get(env_name(field))
        if seeded is not None:
            take(field, _Origin(env_name(field), seeded, "env"))
    for key, raw in sorted((data or {}).items()):
        text = str(raw)
        target = by_key.get(key)
        if target is None:
            errors.append(f"{_cut(key)}={_shown(text)}: {_unknown(key, by_key)}")
        elif is_startup_only(fields[target]):
            errors.append(
                f"{key}={_shown(text)}: start-up-only setting, read once when the process starts; "
                f"set {env_name(target)} on the workload instead"
            )
        else:
            take(target, _Origin(key, text, "configmap"))
    try:
        settings = model.model_validate(values)
    except ValidationError as exc:
        errors.extend(_explain(exc, fields, origins))
        raise SettingsError(errors) from exc
    if errors:
        raise SettingsError(errors)
    return settings


def _explain(
    exc: ValidationError, fields: Mapping[str, FieldInfo], origins: Mapping[str, _Origin]
) -> list[str]:
    """One ``name='value': problem`` line per pydantic error, named by where the value came from."""

    def named(field: str) -> str:
        origin = origins.get(field)
        if origin is None:
            return f"{kebab(field)}={_number(fields[field].default)} (default)"
        return f"{origin.name}={_shown(origin.raw.strip())}"

    out: list[str] = []
    for err in exc.errors():
        ctx = err.get("ctx") or {}
        if err["type"] == "settings_order":
            low, high = str(ctx["low_field"]), str(ctx["high_field"])
            out.append(f"{named(low)}{ctx['factor']} {ctx['relation']} {named(high)}: {ctx['why']}")
            continue
        field = str(err["loc"][0]) if err["loc"] else ""
        if field in fields:
            out.append(f"{named(field)} is invalid: expected {rule(fields[field])}")
        else:
            out.append(f"{field or '?'}: {err['msg']}")
    return out


def check_revision(
    model: type[M], configmap: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[M | None, list[str]]:
    """One settings ConfigMap revision as :meth:`SettingsSource.load` judges it: the settings it yields,
    or None and every problem (its ``data`` validated over ``env`` by :func:`settings_from`; a key in
    ``binaryData`` is a problem too). ``plan --from-cluster`` judges the live revision with it."""
    data = {str(k): str(v) for k, v in (configmap.get("data") or {}).items()}
    binary = sorted(configmap.get("binaryData") or {})
    problems = [f"{_cut(key)}: in binaryData; settings are read from data only" for key in binary]
    try:
        settings = settings_from(model, data, env)
    except SettingsError as exc:
        return None, exc.errors + problems
    return (None, problems) if problems else (settings, [])


# -- the live source ----------------------------------------------------------------------------------


class SettingsSource(Generic[S_co]):
    """Watches one settings ConfigMap and keeps the last good settings of ``model``.

    The environment seeds are validated when the source is built (a :class:`SettingsError` then):
    every revision is validated over them, so a bad seed would otherwise reject every revision.
    ``post_events=False`` reports rejections by log line and metric only (for processes that run on
    every node: one Event per process would be thousands of copies of the same Event). Events go
    through ``recorder`` (an :class:`~.events.EventRecorder`; one of its own when not given).
    """

    def __init__(
        self,
        client: Client,
        *,
        model: type[S_co],
        name: str = DEFAULT_CONFIGMAP,
        namespace: str = DEFAULT_NAMESPACE,
        env: Mapping[str, str] | None = None,
        reporting_instance: str = "",
        post_events: bool = True,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.name = name
        self.namespace = namespace
        self.post_events = post_events
        self._env = dict(os.environ if env is None else env)
        self._instance = reporting_instance or os.environ.get("HOSTNAME", "gpustack-worker")
        self._label = f"{namespace}/{name}"
        self._current: S_co = settings_from(model, None, self._env)
        SETTINGS_LAST_GOOD.labels(configmap=self._label).set(time.time())
        self._listeners: list[Callable[[S_co], None]] = []
        self.recorder: EventRecorder | None = None
        if post_events:
            self.recorder = recorder or EventRecorder(
                client, controller=REPORTING_CONTROLLER, instance=self._instance
            )
        self._rejected: tuple[tuple[tuple[str, str], ...], tuple[str, ...]] | None = None
        #: The resourceVersion of the revision last rejected, until a revision is accepted (then None).
        self._rejected_revision: str | None = None
        self.rejections = 0
        self.last_error: SettingsError | None = None
        self.informer = Informer(
            client, CONFIG_MAP, namespace=namespace, field_selector=f"metadata.name={name}"
        )
        self.informer.add_handler(self._on_event)
        SETTINGS_INVALID.labels(configmap=self._label)
        SETTINGS_REJECTED.labels(configmap=self._label).set(0)

    @property
    def current(self) -> S_co:
        """The settings in force (last good snapshot)."""
        return self._current

    def subscribe(self, listener: Callable[[S_co], None]) -> None:
        """Call ``listener`` with every newly accepted snapshot."""
        self._listeners.append(listener)

    async def run(self) -> None:
        """Watch the ConfigMap until cancelled."""
        await self.informer.run()

    async def wait_synced(self) -> None:
        await self.informer.wait_synced()

    async def settle(self) -> None:
        """Wait for the Events being posted (tests; a stopping process)."""
        if self.recorder is not None:
            await self.recorder.flush()

    def load(self, configmap: Mapping[str, Any] | None) -> bool:
        """Validate one ConfigMap revision (``None``: deleted) and accept it, or reject it keeping the
        settings in force. Returns whether it was accepted. Called by the informer for every event."""
        if configmap is None:
            self._rejected = None
            self._rejected_revision = None
            self._accept(settings_from(self.model, None, self._env), reason="configmap deleted")
            return True
        data = {str(k): str(v) for k, v in (configmap.get("data") or {}).items()}
        binary = sorted(configmap.get("binaryData") or {})
        settings, problems = check_revision(self.model, configmap, self._env)
        content = (tuple(sorted(data.items())), tuple(binary))
        if settings is None:
            if content == self._rejected:
                _log.debug("rejected settings seen again, already reported", configmap=self._label)
                return False
            self._rejected = content
            self._reject(configmap, SettingsError(problems))
            return False
        self._rejected = None
        self._accept(settings, reason="configmap")
        self._confirm(configmap)
        return True

    def _on_event(self, event: str, old: Any | None, new: Any | None) -> None:
        self.load(None if event == DELETED or new is None else new)

    def _accept(self, accepted: SettingsModel, *, reason: str) -> None:
        settings = cast("S_co", accepted)
        SETTINGS_LAST_GOOD.labels(configmap=self._label).set(time.time())
        SETTINGS_REJECTED.labels(configmap=self._label).set(0)
        self.last_error = None
        if settings == self._current:
            return
        changed = {kebab(k): v for k, v in settings.model_dump().items() if getattr(self._current, k) != v}
        self._current = settings
        _log.info("settings updated", configmap=self._label, reason=reason, changed=changed)
        for listener in self._listeners:
            try:
                listener(settings)
            except Exception:
                _log.exception("settings listener failed")

    def _reject(self, configmap: Mapping[str, Any], exc: SettingsError) -> None:
        self.rejections += 1
        self.last_error = exc
        self._rejected_revision = str((configmap.get("metadata") or {}).get("resourceVersion") or "?")
        SETTINGS_INVALID.labels(configmap=self._label).inc()
        SETTINGS_REJECTED.labels(configmap=self._label).set(1)
        _log.error(
            "invalid settings rejected, the settings in force stay",
            configmap=self._label,
            errors=exc.errors,
        )
        if self.recorder is not None:
            revision = self._rejected_revision
            self.recorder.warning(
                self._regarding(configmap),
                reason="InvalidSettings",
                action="LoadSettings",
                # The revision in the note makes every rejected content its own Event: the same content
                # is never re-reported while it stays (see load), and the same content coming back after
                # a fix is a new incident, not a series count (the ConfigMap Events are create-only).
                note=f"revision {revision} rejected, the settings in force stay: {exc}",
            )

    def _regarding(self, configmap: Mapping[str, Any]) -> dict[str, Any]:
        """The ConfigMap revision an Event is about."""
        meta = configmap.get("metadata") or {}
        return {
            "apiVersion": CONFIG_MAP.api_version,
            "kind": CONFIG_MAP.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }

    def _confirm(self, configmap: Mapping[str, Any]) -> None:
        """A revision accepted after a rejected one: a log line and a Normal Event ``SettingsApplied`` naming
        both revisions, so the rejection's Warning is not the last word on the ConfigMap. Nothing when the
        revision before was accepted too (every accepted revision is already a log line)."""
        rejected, self._rejected_revision = self._rejected_revision, None
        if rejected is None:
            return
        revision = str((configmap.get("metadata") or {}).get("resourceVersion") or "?")
        note = (
            f"revision {revision} applied, the settings in force are its own; "
            f"it replaces the rejected revision {rejected}"
        )
        _log.info("settings accepted after a rejected revision", configmap=self._label, note=note)
        if self.recorder is not None:
            self.recorder.normal(
                self._regarding(configmap), reason="SettingsApplied", action="LoadSettings", note=note
            )
