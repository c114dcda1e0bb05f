"""``tidal run``: wire the Kubernetes edge, the provider, leader election and observability around the
controller, and loop: wait for a batch or the scan interval, reconcile, repeat."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from autoscaler.cloud import CloudProvider, Starts, Stops, check_cloud, load_provider
from autoscaler.config.layers import load_layers
from autoscaler.config.options import Config, load_config
from autoscaler.core.model import Pod
from autoscaler.runtime.batching import Batcher, Wake
from autoscaler.runtime.config_watch import ConfigWatcher
from autoscaler.runtime.controller import Controller, ReconcileResult
from autoscaler.runtime.drain import STOPPED, Drainer, DrainJob, pods_on
from autoscaler.runtime.kube.actions import ClusterActions
from autoscaler.runtime.kube.client import KubeClient, make_api_client
from autoscaler.runtime.kube.cluster_cache import ClusterCache
from autoscaler.runtime.kube.leader import LeaderElector
from autoscaler.runtime.kube.reachability import BACKOFF_CAP, wait_for_api_server
from autoscaler.runtime.kube.request_writes import RequestStatusWrites
from autoscaler.runtime.observability.event_queue import EventQueue
from autoscaler.runtime.observability.events import EventRecorder
from autoscaler.runtime.observability.logging import configure_logging
from autoscaler.runtime.observability.metrics import Metrics
from autoscaler.runtime.observability.server import HealthServer, HealthState
from autoscaler.runtime.observability.status_writer import StatusWriter
from autoscaler.runtime.status import Leadership
from autoscaler.runtime.warmup import warm_up

log = structlog.get_logger("tidal.daemon")
EXIT_NOT_LEADING = 3  # `tidal run --once` could not take the Lease, so it did nothing
EXIT_NOT_STARTED = 4  # `tidal run --once` could not reach the API server or sync its caches
# `tidal run --once` gives the API server this many probes (about 7 s with the pauses between them).
ONCE_API_ATTEMPTS = 4
SYNC_REPORT_AFTER = 15.0  # the first "still not synced" line; later ones come twice as far apart


class StartFailed(Exception):
    """The daemon could not start: the API server is not there, or the caches cannot sync. One line."""


# Options read once at start-up: the provider, the client, the lease and the metrics server are built from
# them. A reload that changes one applies everything else and keeps these at their running values.
RESTART_REQUIRED: dict[str, str] = {
    "cloud": "cloud",
    "region": "region",
    "zones": "zones",
    "cluster_name": "clusterName",
    "leader_election": "leaderElection",
    "kube_client": "kubeClient",
    "metrics_address": "metricsAddress",
    "providers": "",  # the simulated, aws, gcp and azure sections, named key by key
}


def restart_required_changes(running: Config, loaded: Config) -> list[str]:
    """The keys (``leaderElection.leaseDuration``, ``simulated.launchDelay``...) whose new values only take
    effect after a restart, in the order of RESTART_REQUIRED."""
    changed: list[str] = []
    for attr, key in RESTART_REQUIRED.items():
        old, new = getattr(running, attr), getattr(loaded, attr)
        if old == new:
            continue
        if attr == "providers":
            for section in sorted(set(old) | set(new)):
                before, after = dict(old.get(section) or {}), dict(new.get(section) or {})
                changed += [
                    f"{section}.{k}"
                    for k in sorted(set(before) | set(after))
                    if before.get(k) != after.get(k)
                ]
        elif dataclasses.is_dataclass(old):
            names = [f.name for f in dataclasses.fields(old)]
            changed += [f"{key}.{_camel(n)}" for n in names if getattr(old, n) != getattr(new, n)]
        else:
            changed.append(key)
    return changed


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


def became_unschedulable(old: Any, new: Any) -> bool:
    """A pod whose PodScheduled=False condition appeared or changed its message: a batch trigger."""
    if not isinstance(new, Pod) or new.node_name or new.scheduled is None or new.scheduled.status != "False":
        return False
    before = old.scheduled if isinstance(old, Pod) else None
    return before is None or before.status != "False" or before.message != new.scheduled.message


@dataclass
class Daemon:
    """Everything ``tidal run`` starts, kept together so tests can run several replicas in one process.

    ``config_path`` is one file or several layered ones (later files override earlier ones' keys, see
    :mod:`autoscaler.config.layers`).
    """

    config_path: str | Sequence[str] | None
    client: KubeClient
    provider: CloudProvider
    dry_run: bool = False
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    clock: Callable[[], float] = time.time
    metrics_address: str | None = None
    # Set by `tidal run`, which configured logging from the file: a reload then applies logFormat/logLevel.
    manage_logging: bool = False
    # The command line's --log-format and --log-level: they win over the file's, reloads included.
    log_format: str | None = None
    log_level: str | None = None
    cache: ClusterCache = field(init=False)
    controller: Controller = field(init=False)

    def __post_init__(self) -> None:
        self.watcher = (
            ConfigWatcher(self.config_path, on_change=self._config_changed, on_error=self._config_invalid)
            if self.config_path
            else None
        )
        self.config: Config = self.watcher.current if self.watcher else load_config(None)
        cfg = self.config
        self.metrics = Metrics()
        # Every failed API request, from every part of the edge, is counted by verb, resource and code.
        self.client.on_error = self.metrics.kube_error
        # The liveness limit follows the scan interval of the configuration in use, reloads included.
        self.health = HealthState(staleness_limit=self.staleness_limit, clock=self.clock)
        self.health.mark_config_ok(True)
        self.cache = ClusterCache(self.client)
        self.actions = ClusterActions(self.client, dry_run=self.dry_run)
        # Sent by a thread of their own once started: a burst's hundreds of pod events must not hold back
        # the reconcile that launches their nodes.
        self.event_queue = EventQueue()
        self.status_writer = StatusWriter(self.actions.write_status)
        self.events = EventRecorder(
            self.event_queue.wrap(self._pod_event),
            node_sink=self.event_queue.wrap(self._node_event),
            clock=self.clock,
        )
        self.batcher = Batcher(cfg.batch_idle_duration, cfg.batch_max_duration)
        self.cache.add_listener(self._on_change)
        self.elector: LeaderElector | None = None
        le = cfg.leader_election
        if le.enabled:
            self.elector = LeaderElector(
                self.client,
                namespace=le.namespace,
                name=le.lease_name,
                identity=self.identity,
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
                clock=self.clock,
                on_started_leading=lambda: self.metrics.set_leader(True),
                on_stopped_leading=self._stopped_leading,
            )
        if self.elector is not None:
            elector = self.elector
            self.health.report_leadership(lambda: elector.state().describe())
        self.drainer = Drainer(
            self.actions,
            None if self.dry_run else self.provider,
            self.events,
            pods_on(self.cache.snapshot),
            max_parallel=cfg.scale_down.max_parallel_drains,
            on_done=self._drain_done,
            leading=self.leads,
        )
        self.controller = Controller(
            config=lambda: self.config,
            cluster=self.cache,
            provider=self.provider,
            actions=self.actions,
            events=self.events,
            metrics=self.metrics,
            leader=self.is_leader,
            leadership=self.leadership,
            clock=self.clock,
            dry_run=self.dry_run,
            drainer=self.drainer,
            requests=RequestStatusWrites(self.client, self.actions, dry_run=self.dry_run),
            status=self.status_writer.submit,
        )
        self.server = HealthServer(self.metrics_address or cfg.metrics_address, self.metrics, self.health)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- callbacks ---------------------------------------------------------------------------------------

    def staleness_limit(self) -> float:
        """Seconds without a reconcile after which ``/healthz`` fails: six scan intervals, at least 60s."""
        return max(60.0, self.config.scan_interval * 6)

    def _pod_event(self, pod: Pod, reason: str, message: str, event_type: str = "Normal") -> None:
        self.actions.pod_event(pod, reason=reason, message=message, event_type=event_type)

    def _node_event(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> None:
        self.actions.node_event(node_name, reason=reason, message=message, event_type=event_type)

    def _on_change(self, kind: str, event_type: str, old: Any, new: Any) -> None:
        if kind == "pods" and became_unschedulable(old, new):
            self.batcher.notify()

    def _drain_done(self, job: DrainJob, outcome: str, why: str) -> None:
        """Every drain ends in tidal_terminations_total, spot interruptions included."""
        self.metrics.termination(job.termination, outcome)
        if outcome != STOPPED and why:
            log.info("drain_finished", node=job.node, outcome=outcome, reason=why)

    def _stopped_leading(self) -> None:
        self.metrics.set_leader(False)
        active = sorted(self.drainer.active())
        if active:
            log.warning("lost_leadership_during_drains", nodes=active)

    def _config_changed(self, cfg: Config) -> None:
        running = self.config
        pending = restart_required_changes(running, cfg)
        if pending:
            # Keep what was built at start consistent with the configuration the controller reads.
            cfg = dataclasses.replace(cfg, **{attr: getattr(running, attr) for attr in RESTART_REQUIRED})
        self.config = cfg
        self.batcher.idle, self.batcher.maximum = cfg.batch_idle_duration, cfg.batch_max_duration
        self.drainer.max_parallel = cfg.scale_down.max_parallel_drains
        if self.manage_logging:
            was = (self.log_format or running.log_format, self.log_level or running.log_level)
            now = (self.log_format or cfg.log_format, self.log_level or cfg.log_level)
            if now != was:
                configure_logging(*now)
        self.health.mark_config_ok(True)
        if pending:
            self.metrics.config_reload(True, restart_required=True)
            log.warning("config_restart_required", path=self.config_path, keys=pending)
            self._self_event(
                "ConfigRestartRequired",
                f"applied the new configuration except {', '.join(pending)}, which keep their running "
                "values until tidal restarts",
            )
        else:
            self.metrics.config_reload(True)
        log.info("config_reloaded", path=self.config_path)

    def _config_invalid(self, message: str) -> None:
        self.metrics.config_reload(False)
        self.health.mark_config_ok(False)
        log.error("config_invalid_kept_last_good", error=message)
        self._self_event("ConfigReloadFailed", f"kept the last good configuration: {message}")

    def _self_event(self, reason: str, message: str) -> None:
        pod_name = os.environ.get("POD_NAME")
        namespace = os.environ.get("POD_NAMESPACE", self.config.leader_election.namespace)
        if pod_name:
            self.events.pod(
                Pod(namespace=namespace, name=pod_name, uid=os.environ.get("POD_UID", "")),
                reason,
                message,
                "Warning",
            )

    def leads(self) -> bool:
        """Whether this replica may act now (always, without leader election)."""
        return self.elector.is_leader() if self.elector else True

    def is_leader(self) -> bool:
        leading = self.leads()
        self.metrics.set_leader(leading)
        return leading

    def leadership(self) -> Leadership | None:
        """Whether this replica leads, and why not (None without leader election)."""
        return self.elector.state() if self.elector else None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(
        self, *, serve: bool = True, sync_timeout: float | None = 120.0, api_attempts: int | None = None
    ) -> None:
        """Start the health server, wait for the API server, start the caches and wait for their first
        sync, then leader election. Raises :class:`StartFailed` (one line) when the API server did not
        answer within ``api_attempts`` probes or the caches did not sync within ``sync_timeout`` seconds;
        with ``None`` for either, it waits for as long as it takes (``/readyz`` says what it waits for)."""
        if serve:
            self.server.start()
        self.event_queue.start()
        self.status_writer.start()
        warm_up(self.config.exact_plan_max_pods > 0)
        failure = wait_for_api_server(
            self.client, attempts=api_attempts, report=self.health.report_not_ready, stop=self._stop
        )
        if failure is not None:
            raise StartFailed(failure)
        self.cache.start()
        self._wait_for_sync(sync_timeout)
        self.health.report_not_ready(None)
        self.health.mark_synced()
        if self.elector is not None:
            self._spawn("tidal-leader", lambda: self.elector.run(self._stop) if self.elector else None)
        if self.watcher is not None:
            self.watcher.start()
        if isinstance(self.provider, Starts):
            self.provider.start()

    def _wait_for_sync(self, timeout: float | None) -> None:
        """Until every watch has listed once; a line (and ``/readyz``) says which have not, and why."""
        waited, step = 0.0, SYNC_REPORT_AFTER
        while not self._stop.is_set():
            chunk = step if timeout is None else min(step, timeout - waited)
            if self.cache.wait_for_sync(max(chunk, 0.0)):
                return
            waited += chunk
            why = f"watch caches not synced after {waited:.0f}s: {', '.join(self.cache.unsynced())}"
            self.health.report_not_ready(why)
            if timeout is not None and waited >= timeout:
                raise StartFailed(why)
            log.warning("caches_not_synced", waited=round(waited), unsynced=self.cache.unsynced())
            step = min(step * 2, BACKOFF_CAP)
        raise StartFailed("stopped before the watch caches synced")

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def run_forever(self) -> None:
        """The thin loop: pods arriving, a closed batch window or the scan interval, reconcile, heartbeat.
        While a window is open, a reconcile launches only what no later pod could share and what has waited
        ``batchIdleDuration`` for company."""
        due: float | None = None
        while not self._stop.is_set():
            # A launch held for company wakes the loop when it has waited long enough, pods arriving or not.
            wait = self.config.scan_interval if due is None else min(self.config.scan_interval, due)
            why = self.batcher.wait(wait)
            if why == Wake.STOP:
                break
            result = self.reconcile(window_open=self.batcher.is_open())
            due = result.held_due_in

    def reconcile(self, *, window_open: bool = False) -> ReconcileResult:
        """One reconcile; ``window_open`` holds back the launches that wait for the batch window."""
        result = self.controller.reconcile_once(window_open=window_open)
        self.health.heartbeat(self.clock())
        return result

    @property
    def stopping(self) -> bool:
        """``stop()`` was called (SIGTERM)."""
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        self.batcher.stop()
        if self.watcher is not None:
            self.watcher.stop()
        if isinstance(self.provider, Stops):
            self.provider.stop()
        if self.elector is not None and self.elector.is_leader():
            try:
                self.elector.release()
            except Exception:  # the lease simply expires instead
                log.warning("lease_release_failed")
        self.drainer.shutdown()
        self.event_queue.stop()
        self.status_writer.stop()
        self.cache.stop()
        self.server.stop()


def build_provider(cfg: Config, client: KubeClient) -> CloudProvider:
    """The configured cloud's provider, found through the ``tidal.providers`` entry points."""
    return load_provider(cfg.cloud, cfg, kube_api_client=client.api_client)


def run(
    config_path: str | Sequence[str] | None,
    kubeconfig: str | None,
    *,
    dry_run: bool,
    once: bool,
    context: str | None = None,
    log_format: str | None = None,
    log_level: str | None = None,
) -> int:
    """``tidal run``: returns the process exit status. ``log_format`` and ``log_level``, when given (the
    command line's), win over the configuration's logFormat and logLevel, reloads included."""
    paths = [config_path] if isinstance(config_path, str) else list(config_path or [])
    cfg, layers = load_layers(paths)
    # An unknown cloud is the configuration's mistake: say so before the kubeconfig is read.
    check_cloud(cfg.cloud)
    configure_logging(log_format or cfg.log_format, log_level or cfg.log_level)
    log.info("configuration_read", files=list(layers.files) or "defaults")
    for override in layers.overrides:
        # Once, at start: the earlier file's value has no effect, which whoever edits it should know.
        log.warning(
            "configuration_key_set_twice",
            key=override.key,
            earlier=override.earlier,
            later=override.later,
            same_value=override.same_value,
        )
    client = make_api_client(
        kubeconfig=kubeconfig, context=context, qps=cfg.kube_client.qps, burst=cfg.kube_client.burst
    )
    provider = build_provider(cfg, client)
    daemon = Daemon(
        paths or None,
        client,
        provider,
        dry_run=dry_run,
        manage_logging=True,
        log_format=log_format,
        log_level=log_level,
    )
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        daemon.start(
            serve=not once,
            sync_timeout=120.0 if once else None,
            api_attempts=ONCE_API_ATTEMPTS if once else None,
        )
    except StartFailed as failed:
        stopping = daemon.stopping
        daemon.stop()
        if stopping:  # SIGTERM while waiting for the API server: a clean exit, as after a reconcile
            return 0
        print(f"tidal: {failed}", file=sys.stderr)
        return EXIT_NOT_STARTED
    except KeyboardInterrupt:
        daemon.stop()
        return 130
    try:
        if once:
            if daemon.elector is not None and not daemon.elector.try_acquire_or_renew():
                # Nothing would be done; say so in one line instead of exiting 0 having done nothing.
                state = daemon.elector.state()
                print(f"tidal: {state.describe()}; nothing was done", file=sys.stderr)
                return EXIT_NOT_LEADING
            result = daemon.reconcile()
            return 1 if result.error else 0
        daemon.run_forever()
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        daemon.stop()
