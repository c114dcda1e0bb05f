"""Prometheus metrics for one tidal controller.

The metric names and labels are a contract: the dashboard and alerts of the Helm chart
(``charts/tidal/files/``) use them, so renaming one is a breaking change. ``METRIC_NAMES`` lists every exported family and a test checks dashboards against it.

Every ``Metrics`` owns its own ``CollectorRegistry``: tests, the simulator and several controllers in one
process each get independent counters instead of colliding in the global registry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Concatenate, ParamSpec, cast

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from autoscaler.core.planning.queues import QueueView

__all__ = [
    "CAPACITY_UNAVAILABLE",
    "DEFERRED",
    "DRY_RUN",
    "ERROR",
    "INVALID_REQUEST",
    "LAUNCH_OUTCOMES",
    "METRIC_NAMES",
    "METRIC_SERIES",
    "NODE_STATES",
    "PENDING_STATES",
    "QUEUE_GPU_STATES",
    "QUOTA_EXCEEDED",
    "SUCCESS",
    "THROTTLED",
    "Metrics",
]

log = structlog.get_logger("tidal.metrics")

# Launch outcomes (label ``outcome`` of tidal_launches_total).
SUCCESS = "success"
CAPACITY_UNAVAILABLE = "capacity_unavailable"
QUOTA_EXCEEDED = "quota_exceeded"
THROTTLED = "throttled"
INVALID_REQUEST = "invalid_request"
ERROR = "error"
DRY_RUN = "dry_run"
DEFERRED = "deferred"  # not sent: launches were backing off after throttling
LAUNCH_OUTCOMES = (
    SUCCESS,
    CAPACITY_UNAVAILABLE,
    QUOTA_EXCEEDED,
    THROTTLED,
    INVALID_REQUEST,
    ERROR,
    DRY_RUN,
    DEFERRED,
)

PENDING_STATES = ("counted", "ignored", "unplaced")
QUEUE_GPU_STATES = ("requested", "allocated", "pending", "launching")
NODE_STATES = ("launching", "registered", "ready", "idle", "draining")

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Scale-up latency includes batching (batchIdleDuration/batchMaxDuration) and cloud back-off, so it spans
# seconds to minutes rather than the reconcile's milliseconds.
SCALE_UP_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0)

# name -> (type, help, label names)
_SPECS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tidal_pending_pods": (
        "gauge",
        "Pending pods by whether tidal counts them as demand (counted|ignored|unplaced) and why.",
        ("state", "reason"),
    ),
    "tidal_nodes": ("gauge", "Nodes tidal manages, by lifecycle state.", ("state",)),
    "tidal_launches_total": (
        "counter",
        "Node launch attempts by offering and outcome.",
        ("instance_type", "zone", "capacity_type", "outcome"),
    ),
    "tidal_launch_refusals_total": (
        "counter",
        "Candidate offerings the cloud refused, by provider and refusal (no-capacity, quota, throttled, "
        "invalid-request, other), whether at launch or reported later.",
        ("provider", "refusal"),
    ),
    "tidal_fleet_transitions_refused_total": (
        "counter",
        "Node lifecycle transitions the facts showed and the fleet refused as illegal, by states.",
        ("from_state", "to_state"),
    ),
    "tidal_gang_rollbacks_total": (
        "counter",
        "Gangs whose launched nodes were terminated because the gang was not complete within "
        "gangLaunchTimeout.",
        (),
    ),
    "tidal_terminations_total": (
        "counter",
        "Node terminations by reason and outcome.",
        ("reason", "outcome"),
    ),
    "tidal_cluster_gpus": ("gauge", "GPUs on nodes tidal manages, including nodes still launching.", ()),
    "tidal_cluster_gpus_requested": ("gauge", "GPUs requested by running and pending counted pods.", ()),
    "tidal_cluster_gpu_limit": ("gauge", "The configured clusterGPULimit; -1 when unlimited.", ()),
    "tidal_cluster_cost_per_hour": ("gauge", "Estimated USD per hour of the nodes tidal manages.", ()),
    "tidal_reconcile_duration_seconds": ("histogram", "Time one reconcile took.", ()),
    "tidal_reconcile_total": ("counter", "Reconciles by outcome (success|error).", ("outcome",)),
    "tidal_last_successful_reconcile_timestamp_seconds": (
        "gauge",
        "Unix time the last successful reconcile finished.",
        (),
    ),
    "tidal_cloud_errors_total": (
        "counter",
        "Cloud API errors by provider, operation and kind.",
        ("provider", "operation", "kind"),
    ),
    "tidal_kube_api_errors_total": (
        "counter",
        "Failed Kubernetes API requests by verb, resource and HTTP status code (or timeout|connection).",
        ("verb", "resource", "code"),
    ),
    "tidal_config_reloads_total": (
        "counter",
        "Configuration reloads by outcome: success, invalid (kept the last good one), or restart_required "
        "(applied except options read only at start).",
        ("outcome",),
    ),
    "tidal_config_last_reload_success": ("gauge", "1 when the last configuration reload was valid.", ()),
    "tidal_leader": ("gauge", "1 while this replica holds the leader lease.", ()),
    "tidal_scale_up_latency_seconds": (
        "histogram",
        "Time from a pod becoming unschedulable to the launch call made for it.",
        (),
    ),
    "tidal_queue_gpus": (
        "gauge",
        "GPUs per KAI queue by state: allocated (its pods bound to nodes), pending (its pods waiting, scheduling "
        "gates aside), launching (of those, pods a node is launching for) and requested (allocated + pending).",
        ("queue", "state"),
    ),
    "tidal_queue_cost_per_hour": (
        "gauge",
        "Estimated USD per hour of the nodes serving each KAI queue: of every node its pods run on, are planned "
        "onto or launched for, the share of the price its pods' GPU requests (cpu on nodes without GPU pods) are.",
        ("queue",),
    ),
    "tidal_queue_budget_per_hour": (
        "gauge",
        "The queueBudgets entry of each KAI queue that has one, in USD per hour.",
        ("queue",),
    ),
    "tidal_pending_reason_regexp_pods": (
        "gauge",
        "Unschedulable pods seen in the last 10 minutes whose PodScheduled message pendingPodReasonRegexp "
        "matched or did not (result=matched|unmatched); none matched while some wait means the regexp is wrong.",
        ("result",),
    ),
}

METRIC_NAMES: frozenset[str] = frozenset(_SPECS)
"""Every metric family tidal exports, as it appears on ``# TYPE`` lines."""

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
METRIC_SERIES: frozenset[str] = frozenset(
    name + suffix
    for name, (kind, _, _) in _SPECS.items()
    for suffix in (_HISTOGRAM_SUFFIXES if kind == "histogram" else ("",))
)
"""Every sample name PromQL can select (histograms as ``_bucket``/``_sum``/``_count``)."""

_P = ParamSpec("_P")


def _never_raises(
    method: Callable[Concatenate[Metrics, _P], None],
) -> Callable[Concatenate[Metrics, _P], None]:
    """A metric that cannot be recorded must not take a reconcile down with it."""

    @functools.wraps(method)
    def wrapper(self: Metrics, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as err:
            log.warning("metric not recorded", method=method.__name__, error=repr(err))

    # functools.wraps's result type keeps the wrapped signature only in a form mypy cannot match to Concatenate.
    return cast("Callable[Concatenate[Metrics, _P], None]", wrapper)


class _WithoutCreated:
    """Drops the ``*_created`` samples prometheus-client adds to counters and histograms.

    They are OpenMetrics-only; in the text format they show up as extra gauge families, which double the
    series count and break the one-to-one match between METRIC_NAMES and what is exported.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if s.name != family.name + "_created"]
            yield family


class Metrics:
    """The metrics of one controller, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._exposed = _WithoutCreated(self.registry)
        registry = self.registry

        def gauge(name: str) -> Gauge:
            return Gauge(name, _SPECS[name][1], _SPECS[name][2], registry=registry)

        def counter(name: str) -> Counter:
            return Counter(name, _SPECS[name][1], _SPECS[name][2], registry=registry)

        def histogram(name: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, _SPECS[name][1], _SPECS[name][2], registry=registry, buckets=buckets)

        self._pending_pods = gauge("tidal_pending_pods")
        self._nodes = gauge("tidal_nodes")
        self._launches = counter("tidal_launches_total")
        self._terminations = counter("tidal_terminations_total")
        self._launch_refusals = counter("tidal_launch_refusals_total")
        self._transitions_refused = counter("tidal_fleet_transitions_refused_total")
        self._gang_rollbacks = counter("tidal_gang_rollbacks_total")
        self._cluster_gpus = gauge("tidal_cluster_gpus")
        self._cluster_gpus_requested = gauge("tidal_cluster_gpus_requested")
        self._cluster_gpu_limit = gauge("tidal_cluster_gpu_limit")
        self._cluster_cost_per_hour = gauge("tidal_cluster_cost_per_hour")
        self._reconcile_duration = histogram("tidal_reconcile_duration_seconds", RECONCILE_BUCKETS)
        self._reconciles = counter("tidal_reconcile_total")
        self._last_successful_reconcile = gauge("tidal_last_successful_reconcile_timestamp_seconds")
        self._cloud_errors = counter("tidal_cloud_errors_total")
        self._kube_api_errors = counter("tidal_kube_api_errors_total")
        self._config_reloads = counter("tidal_config_reloads_total")
        self._config_last_reload_success = gauge("tidal_config_last_reload_success")
        self._leader = gauge("tidal_leader")
        self._scale_up_latency = histogram("tidal_scale_up_latency_seconds", SCALE_UP_BUCKETS)
        self._reason_regexp_pods = gauge("tidal_pending_reason_regexp_pods")
        self._queue_gpus = gauge("tidal_queue_gpus")
        self._queue_cost = gauge("tidal_queue_cost_per_hour")
        self._queue_budget = gauge("tidal_queue_budget_per_hour")
        self._queues: set[str] = set()
        self._budgeted: set[str] = set()
        for result in ("matched", "unmatched"):
            self._reason_regexp_pods.labels(result=result).set(0)

        # Until a reload fails, the configuration in use is the one the daemon started with, which was valid.
        self._config_last_reload_success.set(1)
        # Unlimited is the default; 0 would read as "no GPUs allowed" until the first reconcile.
        self._cluster_gpu_limit.set(-1)
        # Fleet states are always exported (0 when empty) so dashboards need no absent() handling.
        for state in NODE_STATES:
            self._nodes.labels(state=state).set(0)
        self._pending_labels: set[tuple[str, str]] = set()
        self._extra_node_states: set[str] = set()

    # --- reconcile ---------------------------------------------------------------------------------------

    @_never_raises
    def observe_reconcile(self, seconds: float, ok: bool, now: float) -> None:
        """Record one reconcile: its duration, its outcome and, when it succeeded, when (``now``, Unix time)."""
        # Convert first so a bad argument fails before anything is recorded, not halfway through.
        seconds, now = float(seconds), float(now)
        self._reconcile_duration.observe(seconds)
        self._reconciles.labels(outcome=SUCCESS if ok else ERROR).inc()
        if ok:
            self._last_successful_reconcile.set(now)

    @_never_raises
    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the pending-pod gauge with ``{(state, reason): count}``; label sets not given disappear."""
        new = {(str(state), str(reason)): float(n) for (state, reason), n in counts.items()}
        # Remove only vanished children instead of clear()-then-set, so a scrape racing this update never
        # sees a momentarily empty gauge.
        for labels in self._pending_labels - new.keys():
            self._pending_pods.remove(*labels)
        for (state, reason), value in new.items():
            self._pending_pods.labels(state=state, reason=reason).set(value)
        self._pending_labels = set(new)

    @_never_raises
    def set_reason_regexp(self, matched: int, unmatched: int) -> None:
        """Unschedulable pods of the last 10 minutes whose message pendingPodReasonRegexp matched, and not."""
        values = (float(matched), float(unmatched))
        self._reason_regexp_pods.labels(result="matched").set(values[0])
        self._reason_regexp_pods.labels(result="unmatched").set(values[1])

    @_never_raises
    def set_queues(self, views: Iterable[QueueView]) -> None:
        """Replace the per-queue gauges with ``views`` (one per KAI queue); queues no longer seen disappear."""
        rows = [
            (
                str(v.queue),
                {
                    "requested": float(v.gpus_requested),
                    "allocated": float(v.gpus_allocated),
                    "pending": float(v.gpus_pending),
                    "launching": float(v.gpus_launching),
                },
                float(v.cost_per_hour),
                None if v.budget is None else float(v.budget),
            )
            for v in views
        ]
        names = {name for name, *_ in rows}
        budgeted = {name for name, _, _, budget in rows if budget is not None}
        for name in self._queues - names:
            for state in QUEUE_GPU_STATES:
                self._queue_gpus.remove(name, state)
            self._queue_cost.remove(name)
        for name in self._budgeted - budgeted:
            self._queue_budget.remove(name)
        for name, gpus, cost, budget in rows:
            for state, value in gpus.items():
                self._queue_gpus.labels(queue=name, state=state).set(value)
            self._queue_cost.labels(queue=name).set(cost)
            if budget is not None:
                self._queue_budget.labels(queue=name).set(budget)
        self._queues, self._budgeted = names, budgeted

    @_never_raises
    def set_nodes(self, counts: Mapping[str, int]) -> None:
        """Set the node count per fleet state; known states not given are 0."""
        new = {str(state): float(n) for state, n in counts.items()}
        extra = new.keys() - set(NODE_STATES)
        for state in self._extra_node_states - extra:
            self._nodes.remove(state)
        for state in (*NODE_STATES, *sorted(extra)):
            self._nodes.labels(state=state).set(new.get(state, 0.0))
        self._extra_node_states = set(extra)

    @_never_raises
    def set_gpus(self, provisioned: int, requested: int, limit: int | None) -> None:
        """GPUs provisioned (incl. launching), requested by counted pods, and the limit (None = unlimited)."""
        values = (float(provisioned), float(requested), -1.0 if limit is None else float(limit))
        self._cluster_gpus.set(values[0])
        self._cluster_gpus_requested.set(values[1])
        self._cluster_gpu_limit.set(values[2])

    @_never_raises
    def set_cost(self, per_hour: float) -> None:
        """Estimated USD per hour of every node tidal manages."""
        self._cluster_cost_per_hour.set(float(per_hour))

    # --- actions -----------------------------------------------------------------------------------------

    @_never_raises
    def launch(self, offering_instance_type: str, zone: str, capacity_type: str, outcome: str) -> None:
        """Count one launch attempt of an offering; ``outcome`` is one of LAUNCH_OUTCOMES."""
        self._launches.labels(
            instance_type=offering_instance_type, zone=zone, capacity_type=capacity_type, outcome=outcome
        ).inc()

    @_never_raises
    def termination(self, reason: str, outcome: str) -> None:
        """Count one node removal (reason e.g. empty, underutilized, spot_interruption, timeout; outcome success,
        error, abandoned (drain gave up, node uncordoned) or stopped (leadership lost mid-drain))."""
        self._terminations.labels(reason=reason, outcome=outcome).inc()

    @_never_raises
    def launch_refusal(self, provider: str, refusal: str) -> None:
        """Count one candidate offering the cloud refused (``refusal``: a Refusal value)."""
        self._launch_refusals.labels(provider=provider, refusal=refusal).inc()

    @_never_raises
    def transition_refused(self, old: str, new: str) -> None:
        """Count one illegal lifecycle transition the fleet refused."""
        self._transitions_refused.labels(from_state=str(old), to_state=str(new)).inc()

    @_never_raises
    def gang_rollback(self) -> None:
        """Count one gang whose partial launch was terminated."""
        self._gang_rollbacks.inc()

    @_never_raises
    def scale_up_latency(self, seconds: float) -> None:
        """Observe the time from a pod becoming unschedulable to the launch call made for it."""
        self._scale_up_latency.observe(float(seconds))

    # --- errors and state --------------------------------------------------------------------------------

    @_never_raises
    def cloud_error(self, provider: str, operation: str, kind: str) -> None:
        """Count one cloud API error (kind e.g. capacity_unavailable, quota_exceeded, throttled, error)."""
        self._cloud_errors.labels(provider=provider, operation=operation, kind=kind).inc()

    @_never_raises
    def kube_error(self, verb: str, resource: str, code: int | str) -> None:
        """Count one failed Kubernetes API request (verb e.g. patch, resource e.g. nodes or pods/eviction);
        ``code`` is the HTTP status, or "timeout"/"connection" when no answer came."""
        self._kube_api_errors.labels(verb=verb, resource=resource, code=str(code)).inc()

    @_never_raises
    def config_reload(self, ok: bool, *, restart_required: bool = False) -> None:
        """Record a configuration reload that was applied (ok), applied except options that need a restart
        (``restart_required``), or rejected as invalid."""
        outcome = ("restart_required" if restart_required else SUCCESS) if ok else "invalid"
        self._config_reloads.labels(outcome=outcome).inc()
        self._config_last_reload_success.set(1 if ok else 0)

    @_never_raises
    def set_leader(self, leader: bool) -> None:
        """1 while this replica holds the leader lease, 0 otherwise."""
        self._leader.set(1 if leader else 0)

    # --- exposition --------------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The metrics in the Prometheus text exposition format (version 0.0.4)."""
        return generate_latest(self._exposed)
