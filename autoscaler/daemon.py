"""``tidal run``: wire the Kubernetes edge, the provider, leader election and observability around the
controller, and loop: wait for a batch or the scan interval, reconcile, repeat."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from autoscaler.batching import Batcher
from autoscaler.cloud import CloudProvider, load_provider
from autoscaler.config import Config, load_config
from autoscaler.config_watch import ConfigWatcher
from autoscaler.controller import Controller
from autoscaler.drain import Drainer, pods_on
from autoscaler.kube.actions import ClusterActions
from autoscaler.kube.client import KubeClient, make_api_client
from autoscaler.kube.cluster_cache import ClusterCache
from autoscaler.kube.leader import LeaderElector
from autoscaler.model import Pod
from autoscaler.observability.events import EventRecorder
from autoscaler.observability.logging import configure_logging
from autoscaler.observability.metrics import Metrics
from autoscaler.observability.server import HealthServer, HealthState

log = structlog.get_logger("tidal.daemon")


def became_unschedulable(old: Any, new: Any) -> bool:
    """A pod whose PodScheduled=False condition appeared or changed its message: a batch trigger."""
    if not isinstance(new, Pod) or new.node_name or new.scheduled is None or new.scheduled.status != "False":
        return False
    before = old.scheduled if isinstance(old, Pod) else None
    return before is None or before.status != "False" or before.message != new.scheduled.message


@dataclass
class Daemon:
    """Everything ``tidal run`` starts, kept together so tests can run several replicas in one process."""

    config_path: str | None
    client: KubeClient
    provider: CloudProvider
    dry_run: bool = False
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    clock: Callable[[], float] = time.time
    metrics_address: str | None = None
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
        self.health = HealthState(staleness_limit=max(60.0, cfg.scan_interval * 6), clock=self.clock)
        self.health.mark_config_ok(True)
        self.cache = ClusterCache(self.client)
        self.actions = ClusterActions(self.client, dry_run=self.dry_run)
        self.events = EventRecorder(self._pod_event, node_sink=self._node_event, clock=self.clock)
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
            )
        drainer = Drainer(
            self.actions,
            None if self.dry_run else self.provider,
            self.events,
            pods_on(self.cache.snapshot),
            max_parallel=cfg.scale_down.max_parallel_drains,
        )
        self.controller = Controller(
            config=lambda: self.config,
            cluster=self.cache,
            provider=self.provider,
            actions=self.actions,
            events=self.events,
            metrics=self.metrics,
            leader=self.is_leader,
            clock=self.clock,
            dry_run=self.dry_run,
            drainer=drainer,
        )
        self.server = HealthServer(self.metrics_address or cfg.metrics_address, self.metrics, self.health)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- callbacks ---------------------------------------------------------------------------------------

    def _pod_event(self, pod: Pod, reason: str, message: str, event_type: str = "Normal") -> None:
        self.actions.pod_event(pod, reason=reason, message=message, event_type=event_type)

    def _node_event(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> None:
        self.actions.node_event(node_name, reason=reason, message=message, event_type=event_type)

    def _on_change(self, kind: str, event_type: str, old: Any, new: Any) -> None:
        if kind == "pods" and became_unschedulable(old, new):
            self.batcher.notify()

    def _config_changed(self, cfg: Config) -> None:
        self.config = cfg
        self.batcher.idle, self.batcher.maximum = cfg.batch_idle_duration, cfg.batch_max_duration
        self.metrics.config_reload(True)
        self.health.mark_config_ok(True)
        log.info("config_reloaded", path=self.config_path)

    def _config_invalid(self, message: str) -> None:
        self.metrics.config_reload(False)
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

    def is_leader(self) -> bool:
        leading = self.elector.is_leader() if self.elector else True
        self.metrics.set_leader(leading)
        return leading

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, *, serve: bool = True, sync_timeout: float = 120.0) -> None:
        """Start caches, leader election and the health server; wait for the first sync."""
        if serve:
            self.server.start()
        self.cache.start()
        if not self.cache.wait_for_sync(sync_timeout):
            raise RuntimeError(f"caches did not sync within {sync_timeout:.0f}s")
        self.health.mark_synced()
        if self.elector is not None:
            self._spawn("tidal-leader", lambda: self.elector.run(self._stop) if self.elector else None)
        if self.watcher is not None:
            self.watcher.start()
        start = getattr(self.provider, "start", None)
        if callable(start):
            start()

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def run_forever(self) -> None:
        """The thin loop: batch or scan, reconcile, heartbeat."""
        while not self._stop.is_set():
            why = self.batcher.wait(self.config.scan_interval)
            if why == "stop":
                break
            self.reconcile()

    def reconcile(self) -> Any:
        result = self.controller.reconcile_once()
        self.health.heartbeat(self.clock())
        return result

    def stop(self) -> None:
        self._stop.set()
        self.batcher.stop()
        if self.watcher is not None:
            self.watcher.stop()
        stop = getattr(self.provider, "stop", None)
        if callable(stop):
            stop()
        if self.elector is not None and self.elector.is_leader():
            try:
                self.elector.release()
            except Exception:  # the lease simply expires instead
                log.warning("lease_release_failed")
        if self.controller.drainer is not None:
            self.controller.drainer.shutdown()
        self.cache.stop()
        self.server.stop()


def build_provider(cfg: Config, client: KubeClient) -> CloudProvider:
    """The configured cloud's provider, found through the ``tidal.providers`` entry points."""
    return load_provider(cfg.cloud, cfg, kube_api_client=client.api_client)


def run(config_path: str | None, kubeconfig: str | None, *, dry_run: bool, once: bool) -> int:
    """``tidal run``: returns the process exit status."""
    cfg = load_config(config_path)
    configure_logging(cfg.log_format, cfg.log_level)
    client = make_api_client(kubeconfig=kubeconfig)
    provider = build_provider(cfg, client)
    daemon = Daemon(config_path, client, provider, dry_run=dry_run)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    daemon.start(serve=not once)
    try:
        if once:
            if daemon.elector is not None:
                daemon.elector.try_acquire_or_renew()
            result = daemon.reconcile()
            return 1 if result.error else 0
        daemon.run_forever()
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        daemon.stop()
