"""Every Prometheus metric the runtime exports, declared once.

The names are the conventional ones of client-go and controller-runtime (listed in docs/runtime.md,
"Metrics") so existing dashboards and alerts work unchanged; our own additions use the
``gpustack_`` prefix. They live in the default registry, which also carries prometheus-client's
``process_*`` and ``python_*`` collectors, and :mod:`gpustack_worker.runtime.health` serves that registry.
No ``*_created`` series are exported (``disable_created_metrics()`` below, once, before any metric is
declared): Go's client_golang exports none, so neither do we, and each counter and histogram child would
otherwise add one sample per label set that no rule or dashboard reads.
Label values that are known up front are pre-registered at zero by the code that owns them, so rates do
not start from "absent".
"""

from __future__ import annotations

import collections
import weakref
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from gpustack_worker.runtime.version import VERSION

disable_created_metrics()  # type: ignore[no-untyped-call]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    #: Object → its label values in a :class:`CacheCount`, or None when it is not counted.
    Classifier = Callable[[Any], tuple[str, ...] | None]

#: Buckets of controller-runtime's reconcile-time histogram (5 ms … 60 s).
RECONCILE_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip
#: Buckets of controller-runtime's workqueue duration histograms: ``ExponentialBuckets(10e-9, 10, 12)``,
#: 10 ns … 1000 s by factor 10 (pkg/internal/metrics/workqueue.go). A reconcile stuck for minutes lands in
#: a bucket of its own instead of in +Inf, and ``le`` values match controller-runtime's dashboards.
QUEUE_BUCKETS: Final = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
#: Buckets of controller-runtime's webhook latency histogram: the same ``ExponentialBuckets(10e-9, 10, 12)``
#: (pkg/webhook/internal/metrics/metrics.go).
WEBHOOK_BUCKETS: Final = QUEUE_BUCKETS

#: client-go's request counter: the HTTP verb, so a WATCH counts as ``GET`` (client-go has no WATCH verb;
#: the per-instance ``Client.requests_by_method`` keeps WATCH apart for tests).
REST_REQUESTS: Final = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ("code", "method", "host"),
)

RECONCILE_TOTAL: Final = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ("controller", "result"),
)
RECONCILE_ERRORS: Final = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ("controller",),
)
RECONCILE_PANICS: Final = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics (unexpected exceptions) per controller",
    ("controller",),
)
RECONCILE_TIME: Final = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ("controller",),
    buckets=RECONCILE_BUCKETS,
)
MAX_CONCURRENT: Final = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ("controller",),
)
ACTIVE_WORKERS: Final = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ("controller",),
)

QUEUE_DEPTH: Final = Gauge("workqueue_depth", "Current depth of workqueue", ("name", "controller"))
QUEUE_ADDS: Final = Counter(
    "workqueue_adds_total", "Total number of adds handled by workqueue", ("name", "controller")
)
QUEUE_LATENCY: Final = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ("name", "controller"),
    buckets=QUEUE_BUCKETS,
)
QUEUE_WORK: Final = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ("name", "controller"),
    buckets=QUEUE_BUCKETS,
)
QUEUE_UNFINISHED: Final = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration."
    " Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate"
    " at which this increases.",
    ("name", "controller"),
)
QUEUE_LONGEST: Final = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ("name", "controller"),
)
QUEUE_RETRIES: Final = Counter(
    "workqueue_retries_total", "Total number of retries handled by workqueue", ("name", "controller")
)

#: controller-runtime's webhook metrics (pkg/webhook/internal/metrics/metrics.go), same names, help, labels
#: and buckets; ``webhook`` is the path the webhook is served at. Only registered paths are labelled (an
#: arbitrary path a scanner sends would be an unbounded label value): runtime/webhook_server.py counts
#: every answer on a registered path, whatever its status (reviews allowed or denied, 400, 405, 408, 411,
#: 413), and pre-registers ``code`` 200 and 500 per path at zero as controller-runtime does.
WEBHOOK_LATENCY: Final = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Histogram of the latency of processing admission requests",
    ("webhook",),
    buckets=WEBHOOK_BUCKETS,
)
WEBHOOK_REQUESTS: Final = Counter(
    "controller_runtime_webhook_requests_total",
    "Total number of admission requests by HTTP status code.",
    ("webhook", "code"),
)
WEBHOOK_IN_FLIGHT: Final = Gauge(
    "controller_runtime_webhook_requests_in_flight",
    "Current number of admission requests being served.",
    ("webhook",),
)

LEADER_STATUS: Final = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 master.",
    ("name",),
)
#: client-go's count: a renewal by the holder that had to re-read the Lease (GET, then update) because
#: the optimistic update of the last Lease it wrote failed. Healthy leaders add ~0; losing the Lease does
#: not count.
LEADER_SLOWPATH: Final = Counter(
    "leader_election_slowpath_total",
    "Total number of slow path exercised in renewing leader leases.",
    ("name",),
)
#: Writes the client's write fence stopped (``runtime/client.py``, ``Fenced``), by HTTP verb and outcome:
#: ``refused`` (nothing sent), ``incomplete`` (part of the request left, the connection was closed before
#: the rest), ``cut_off`` (it left whole, the answer outlived the fence: maybe applied). Non-zero only on a
#: replica that is not (or no longer) the leader yet tried to write.
FENCED_WRITES: Final = Counter(
    "gpustack_fenced_writes_total",
    "Write requests stopped by the leader-election write fence, by method and outcome.",
    ("method", "outcome"),
)

INFORMER_RELISTS: Final = Counter(
    "gpustack_informer_relists_total",
    "Full relists per informer, by reason (initial, gone, error).",
    ("resource", "reason"),
)
INFORMER_FAILURES: Final = Counter(
    "gpustack_informer_failures_total",
    "Failed list/watch attempts per informer (each one backs off), by what failed: watch_never_opened,"
    " gone, unauthorized, throttled, server_error, connection, short_watch, error.",
    ("resource", "reason"),
)
INFORMER_WATCH_INACTIVE: Final = Counter(
    "gpustack_informer_watch_inactive_total",
    "Open watches that went silent for the inactivity timeout and were re-opened (a stalled stream).",
    ("resource",),
)
INFORMER_OBJECTS: Final = Gauge(
    "gpustack_informer_objects", "Objects held in the informer cache.", ("resource",)
)

#: Buckets of the loop lag: a healthy loop lags ~1 ms; 10 s is a lease renew deadline.
LOOP_LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EVENT_LOOP_LAG: Final = Histogram(
    "gpustack_event_loop_lag_seconds",
    "How late the event loop woke a task that slept a fixed interval (runtime/looplag.py): every lease"
    " renewal, webhook answer and probe waits this long.",
    buckets=LOOP_LAG_BUCKETS,
)
EVENT_LOOP_LAG_MAX: Final = Gauge(
    "gpustack_event_loop_lag_max_seconds",
    "The longest event loop lag within the last 2 minutes.",
)

SETTINGS_INVALID: Final = Counter(
    "gpustack_settings_invalid_total", "Settings ConfigMap revisions rejected as invalid.", ("configmap",)
)
SETTINGS_LAST_GOOD: Final = Gauge(
    "gpustack_settings_last_good_timestamp",
    "Unix time at which the settings in force were last accepted.",
    ("configmap",),
)

APPLY_REPAIRS: Final = Counter(
    "gpustack_apply_repairs_total",
    "Accepted applies that wrote back fields another field manager had changed (an edit undone).",
    ("field_manager", "kind"),
)
HTTP_POOL_STOCK: Final = Gauge(
    "gpustack_http_pool_stock",
    "1 when the API client's HTTP sessions use httpcore's own connection pool (its quadratic bookkeeping"
    " pass) because the installed httpcore is not one the linear pass was verified on; 0 otherwise.",
)
CLIENT_REAUTHENTICATIONS: Final = Counter(
    "gpustack_client_reauthentications_total",
    "Credential reloads after the API server answered 401 (an expired or rotated token).",
)
APPLY_SKIPPED: Final = Counter(
    "gpustack_apply_skipped_total",
    "Server-side applies skipped because the cache already matched.",
    ("field_manager",),
)


class CacheCount:
    """A gauge counted from informer caches when scraped: how many cached objects are in each state.

    The state is what the objects say (their status or annotations, written by the controllers that
    decide it), so the count needs no bookkeeping of its own and cannot drift from what ``kubectl``
    shows. A controller calls :meth:`watch` with its informer's store and a classifier (a pure function:
    object → label values, or None for an object not counted). Stores are held weakly. Several stores
    of the same kind in one process (two controllers' caches of the same cluster, as in the tests) are
    combined by taking the largest count per label set, not the sum. Label values the controller knows
    up front are always exported (at zero when no object is in that state), so an alert's ``> 0`` never
    starts from "absent". A process that watches no store (the agent) exports no sample.
    """

    def __init__(self, name: str, documentation: str, label_names: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = label_names
        self._sources: list[tuple[weakref.ref[Any], Classifier, tuple[tuple[str, ...], ...]]] = []

    def watch(self, store: Any, classify: Classifier, known: Iterable[tuple[str, ...]] = ((),)) -> None:
        """Count ``store``'s objects (anything with ``list()``) by ``classify`` at every scrape; the
        label values in ``known`` are exported at zero when no object is in that state."""
        self._sources = [s for s in self._sources if s[0]() is not None]
        self._sources.append((weakref.ref(store), classify, tuple(known)))

    def counts(self) -> dict[tuple[str, ...], int]:
        """Label values → count, as the next scrape exports them."""
        out: dict[tuple[str, ...], int] = {}
        for ref, classify, known in list(self._sources):
            store = ref()
            if store is None:
                continue
            out |= {labels: out.get(labels, 0) for labels in known}
            mine = collections.Counter(v for v in map(classify, store.list()) if v is not None)
            for labels, n in mine.items():
                out[labels] = max(out.get(labels, 0), n)
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.label_names)
        for labels, n in sorted(self.counts().items()):
            family.add_metric(list(labels), n)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=self.label_names)


class _InformerHealth:
    """``gpustack_informer_healthy{resource}``, read from the informers themselves at scrape time: 1
    while every live informer of that resource is :attr:`~gpustack_worker.runtime.informer.Informer.
    healthy`, else 0. Informers are held weakly and add themselves when built."""

    name: Final = "gpustack_informer_healthy"
    documentation: Final = (
        "1 while every informer of the resource is healthy; 0 once one failed unhealthy_after_failures"
        " list/watch attempts in a row and no watch has stayed open since (its cache may be stale)."
    )

    def __init__(self) -> None:
        self._informers: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, informer: Any) -> None:
        """Export ``informer.healthy`` under ``informer.resource.plural``."""
        self._informers.add(informer)

    def values(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for informer in list(self._informers):
            plural = informer.resource.plural
            out[plural] = min(out.get(plural, 1), int(bool(informer.healthy)))
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=("resource",))
        for plural, value in sorted(self.values().items()):
            family.add_metric([plural], value)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=("resource",))


INFORMER_HEALTHY: Final = _InformerHealth()
REGISTRY.register(INFORMER_HEALTHY)

#: TopologySources whose last valid snapshot is in effect past a failure (``Ready=False/Stale``) or
#: whose NodeFeatures were removed at ``maxStaleness`` (``Ready=False/Expired``); set from the controller's
#: TopologySource cache (topology/controller.py).
TOPOLOGY_SOURCES_LAPSED: Final = CacheCount(
    "gpustack_topologysources_stale_or_expired",
    "TopologySources whose Ready condition is False with reason Stale (the last valid snapshot still in"
    " effect) or Expired (its NodeFeatures removed at maxStaleness), by state.",
    ("state",),
)
REGISTRY.register(TOPOLOGY_SOURCES_LAPSED)

#: ClusterQueues the chain holds ``HoldAndDrain`` in a flavor migration (annotation
#: ``topology.gpustack.ai/migration-phase``), by phase; from the chain's ClusterQueue cache.
QUEUES_HELD_IN_MIGRATION: Final = CacheCount(
    "gpustack_clusterqueues_held_in_migration",
    "ClusterQueues held HoldAndDrain by a flavor migration (topology.gpustack.ai/migration-phase), by phase:"
    " draining (waiting for Kueue to report the queue stopped with no reserving Workload) or switched.",
    ("phase",),
)
REGISTRY.register(QUEUES_HELD_IN_MIGRATION)

#: ModelDeployments whose multi-group set the joint check parked (``status.hold.parkedAt``); from the
#: joint check's ModelDeployment cache (placement/joint_controller.py).
PARKED_SETS: Final = CacheCount(
    "gpustack_joint_parked_sets",
    "ModelDeployments whose set the joint check parked (status.hold.parkedAt set): its Workloads are"
    " deactivated until the spec changes or an admin asks for a retry.",
    (),
)
REGISTRY.register(PARKED_SETS)

#: Gate 3's (the node-devices AdmissionCheck's) verdicts written on Workloads, by state (``Ready`` or
#: ``Retry``): a ``Retry`` evicts and requeues the Workload (placement/node_devices.py).
GATE3_VERDICTS: Final = Counter(
    "gpustack_gate3_verdicts_total",
    "Verdicts the node-devices check (Gate 3) wrote on Workloads, by state (Ready, Retry).",
    ("state",),
)

# --- what the chart's alerts need (chart/templates/metrics-prometheusrule.yaml) ---------------------------
#: One series per process, value 1: the alerts pick the worker's scrape targets out of any scrape
#: configuration (ServiceMonitor, PodMonitor, annotations, a static config) by joining ``on (job,
#: instance)`` with it, because ``controller_runtime_*``, ``rest_client_*`` and ``up`` are shared with Kueue
#: and every other controller. Its name is ours alone; every process that imports this module exports it.
BUILD_INFO: Final = Gauge(
    "gpustack_worker_build_info", "1 in every gpustack-worker process, labelled by its version.", ("version",)
)
BUILD_INFO.labels(version=VERSION).set(1)

#: 1 while the last settings ConfigMap revision a process read was rejected (the settings in force are an
#: older revision's), 0 once a revision is accepted: set by runtime/settings.py where it counts
#: ``gpustack_settings_invalid_total`` and ``gpustack_settings_last_good_timestamp``.
SETTINGS_REJECTED: Final = Gauge(
    "gpustack_settings_rejected",
    "1 while the latest settings ConfigMap revision is rejected and an older one stays in force, else 0.",
    ("configmap",),
)

#: Workloads Gate 3 found asking more than any node of their pool has free as the fleet stands (its record,
#: placement/gate3_parking.py), by state: ``retrying`` (still cycling through Retry) or ``parked``
#: (deactivated until the fleet changes); from Gate 3's Workload cache (placement/node_devices.py).
NEVER_FITTING: Final = CacheCount(
    "gpustack_workloads_never_fitting",
    "Workloads that never fit as the fleet stands (Gate 3's shortfall record), by state: retrying or parked.",
    ("state",),
)
REGISTRY.register(NEVER_FITTING)
