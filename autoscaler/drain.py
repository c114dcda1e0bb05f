"""Scale-down actuation: cordon, evict through the Eviction API, wait, delete the Node, terminate.

A 429 from the Eviction API means a PodDisruptionBudget says "not now": tidal retries until the drain's
deadline and never forces. A drain that cannot finish uncordons the node and says why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from autoscaler.cloud import CloudProvider, ProviderError
from autoscaler.model import TAINT_DISRUPTED, Instance, Pod, Snapshot

log = structlog.get_logger("tidal.drain")

EVICTION_SLACK_S = 30.0


class Actions(Protocol):
    def cordon(self, node_name: str, *, taint_key: str = ...) -> None: ...
    def uncordon(self, node_name: str, *, taint_key: str = ...) -> None: ...
    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Any: ...
    def delete_node(self, name: str) -> bool: ...


class Recorder(Protocol):
    def node(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> object: ...


class DrainRunner(Protocol):
    """What the controller needs from whatever runs drains (threads in the daemon, at once in simulation)."""

    def active(self) -> set[str]: ...
    def submit(self, job: DrainJob) -> bool: ...
    def shutdown(self) -> None: ...


@dataclass(frozen=True, slots=True)
class DrainJob:
    node: str
    pods: tuple[Pod, ...]
    instance: Instance | None
    reason: str


def remove_node(
    actions: Actions, provider: CloudProvider | None, node: str, instance: Instance | None
) -> None:
    """Delete the Node object, then terminate its instance (the order keeps the scheduler off a dying node)."""
    actions.delete_node(node)
    if instance is not None and provider is not None:
        provider.terminate(instance)


class Drainer:
    """Runs drains on a bounded pool; the controller starts them and reads progress."""

    def __init__(
        self,
        actions: Actions,
        provider: CloudProvider | None,
        events: Recorder,
        pods_on_node: Callable[[str], list[Pod]],
        *,
        max_parallel: int,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        poll_interval: float = 1.0,
        on_done: Callable[[str, bool, str], None] | None = None,
    ) -> None:
        self.actions = actions
        self.provider = provider
        self.events = events
        self.pods_on_node = pods_on_node
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.on_done = on_done
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="tidal-drain")
        self._max = max_parallel
        self._active: set[str] = set()
        self._lock = threading.Lock()

    def active(self) -> set[str]:
        with self._lock:
            return set(self._active)

    def submit(self, job: DrainJob) -> bool:
        """Start draining; False when the node is already draining or every drain slot is busy."""
        with self._lock:
            if job.node in self._active or len(self._active) >= self._max:
                return False
            self._active.add(job.node)
        self._pool.submit(self._run, job)
        return True

    def _run(self, job: DrainJob) -> None:
        ok, why = False, ""
        try:
            ok, why = self.drain(job)
        except Exception as err:  # a drain must never take the daemon down; it reports and uncordons
            why = f"{type(err).__name__}: {err}"
            log.exception("drain_crashed", node=job.node)
        finally:
            if not ok:
                self._abort(job, why)
            with self._lock:
                self._active.discard(job.node)
            if self.on_done:
                self.on_done(job.node, ok, why)

    def drain(self, job: DrainJob) -> tuple[bool, str]:
        """Cordon, evict every pod (retrying PDB refusals), wait for them to go, then remove the node."""
        self.actions.cordon(job.node, taint_key=TAINT_DISRUPTED)
        self.events.node(job.node, "ScaleDown", f"draining: {job.reason}")
        grace = max((p.grace_period_s for p in job.pods), default=0)
        deadline = self.clock() + grace + EVICTION_SLACK_S
        remaining = {p.key: p for p in job.pods}
        while True:
            for key, pod in list(remaining.items()):
                result = self.actions.evict(pod.namespace, pod.name)
                name = getattr(result, "name", str(result))
                if name in ("EVICTED", "GONE"):
                    del remaining[key]
                elif name == "FAILED":
                    return False, f"eviction of {key} failed"
            still = {p.key for p in self.pods_on_node(job.node) if not p.daemonset and not p.mirror}
            if not still and not remaining:
                break
            if self.clock() > deadline:
                waiting = sorted(set(remaining) | still)
                return (
                    False,
                    f"pods still on the node after {int(grace + EVICTION_SLACK_S)}s: {', '.join(waiting[:5])}",
                )
            self.sleep(self.poll_interval)
        try:
            remove_node(self.actions, self.provider, job.node, job.instance)
        except ProviderError as err:
            # The Node is gone; the orphaned instance is retried by the fleet's orphan cleanup.
            log.warning("terminate_failed", node=job.node, error=str(err))
        return True, ""

    def _abort(self, job: DrainJob, why: str) -> None:
        try:
            self.actions.uncordon(job.node, taint_key=TAINT_DISRUPTED)
        except Exception:  # reported below either way
            log.exception("uncordon_failed", node=job.node)
        self.events.node(job.node, "ScaleDownFailed", f"removal abandoned, node uncordoned: {why}", "Warning")
        log.warning("drain_abandoned", node=job.node, reason=why)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def pods_on(snapshot_source: Callable[[], Snapshot]) -> Callable[[str], list[Pod]]:
    """Bound, unfinished pods of a node, read from the live cache."""

    def read(node: str) -> list[Pod]:
        return [p for p in snapshot_source().pods if p.node_name == node and not p.finished]

    return read
