"""Scale-down actuation: cordon, evict through the Eviction API, wait, delete the Node, terminate.

A 429 from the Eviction API means a PodDisruptionBudget says "not now": tidal retries until the drain's
deadline and never forces. A drain that cannot finish uncordons the node and says why.

A Node is deleted only after a last look at the API server itself (not the informer cache): every pod still
bound to it must be one the drain evicted (and it is waited for), never one the scheduler bound meanwhile.

Only the leader acts, and a drain outlives many reconciles: before every cordon, eviction, Node deletion and
termination the drain asks whether this replica still leads. One that lost the lease stops where it is and
touches nothing more, not even to uncordon: the new leader owns the node from then on.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from autoscaler.cloud import InstanceNotFound, ProviderError
from autoscaler.core.disruption.method import Method
from autoscaler.core.model import TAINT_DISRUPTED, Pod, Snapshot
from autoscaler.core.offering import Instance
from autoscaler.core.quantity import format_duration

log = structlog.get_logger("tidal.drain")

EVICTION_SLACK_S = 30.0

# How a drain ended (label ``outcome`` of tidal_terminations_total).
SUCCESS = "success"  # Node deleted, instance terminated
ERROR = "error"  # Node deleted, but the instance could not be terminated (the orphan cleanup retries)
ABANDONED = "abandoned"  # pods could not be moved in time: the node was uncordoned and kept
STOPPED = "stopped"  # this replica stopped leading mid-drain and left the node to the new leader

DoneCallback = Callable[["DrainJob", str, str], None]
"""``fn(job, outcome, why)`` after every drain, on the drain's thread."""


class LeadershipLost(Exception):
    """This replica no longer leads: the drain must not make another change."""


class Termination(enum.StrEnum):
    """Why a drain takes its node away: the bounded ``reason`` label of tidal_node_terminations_total."""

    SPOT_INTERRUPTION = "spot_interruption"
    EMPTY = "empty"
    UNDERUTILIZED = "underutilized"
    REPLACED = "replaced"
    EXPIRED = "expired"
    DRIFTED = "drifted"
    UNHEALTHY = "unhealthy"
    DRAIN = "drain"  # any other: a Capacity Block ending, a node whose replacements are Ready

    @classmethod
    def of(cls, method: str) -> Termination:
        """The termination of a removal decided by ``method`` (a :class:`Method` value)."""
        return _BY_METHOD.get(method, cls.DRAIN)


_BY_METHOD: dict[str, Termination] = {
    Method.INTERRUPTED: Termination.SPOT_INTERRUPTION,
    Method.EMPTY: Termination.EMPTY,
    Method.UNDERUTILISED: Termination.UNDERUTILIZED,
    Method.REPLACE: Termination.REPLACED,
    Method.EXPIRED: Termination.EXPIRED,
    Method.DRIFTED: Termination.DRIFTED,
    Method.UNHEALTHY: Termination.UNHEALTHY,
}


class Actions(Protocol):
    def cordon(self, node_name: str, *, taint_key: str = ...) -> None: ...
    def uncordon(self, node_name: str, *, taint_key: str = ...) -> None: ...
    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Any: ...
    def delete_node(self, name: str) -> bool: ...
    def workload_on(self, node_name: str) -> list[str]: ...


class Terminator(Protocol):
    """What a drain needs of the cloud: to terminate the instance of the node it removed."""

    def terminate(self, instance: Instance) -> None: ...


class Recorder(Protocol):
    def node(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> object: ...


class DrainRunner(Protocol):
    """What the controller needs from whatever runs drains (threads in the daemon, at once in simulation)."""

    def active(self) -> set[str]: ...
    def submit(self, job: DrainJob) -> bool: ...
    def shutdown(self) -> None: ...


@dataclass(frozen=True, slots=True)
class DrainJob:
    """One node to drain and remove. ``wait_for_exit`` False: once every eviction is accepted, the node goes
    without waiting for the pods to exit (an unhealthy node's kubelet may never report them gone)."""

    node: str
    pods: tuple[Pod, ...]
    instance: Instance | None
    reason: str
    wait_for_exit: bool = True
    # The cloud is reclaiming the node: pods nobody may evict stay on it, and then so does the node (cordoned)
    # for the cloud to take, rather than being deleted with them.
    reclaimed: bool = False
    termination: Termination = Termination.DRAIN


def remove_node(actions: Actions, provider: Terminator | None, node: str, instance: Instance | None) -> None:
    """Delete the Node object, then terminate its instance (the order keeps the scheduler off a dying node);
    an instance the cloud no longer has is done."""
    actions.delete_node(node)
    if instance is not None and provider is not None:
        try:
            provider.terminate(instance)
        except InstanceNotFound:
            log.info("terminate_already_gone", node=node, instance=instance.id)


def last_look(actions: Actions, node: str, evicted: Collection[str]) -> tuple[list[str], list[str]]:
    """Read the node's pods from the API server: (those ``evicted`` that are still there, terminating; the
    others, which nobody evicted and which would die with the Node). Raises when the server cannot say."""
    on_server = actions.workload_on(node)
    return [k for k in on_server if k in evicted], [k for k in on_server if k not in evicted]


class Drainer:
    """Runs drains on a bounded pool; the controller starts them and reads progress."""

    def __init__(
        self,
        actions: Actions,
        provider: Terminator | None,
        events: Recorder,
        pods_on_node: Callable[[str], list[Pod]],
        *,
        max_parallel: int,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        poll_interval: float = 1.0,
        on_done: DoneCallback | None = None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.actions = actions
        self.provider = provider
        self.events = events
        self.pods_on_node = pods_on_node
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.on_done = on_done
        self.leading = leading
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="tidal-drain")
        self._pool_size = max_parallel
        self._max = max_parallel
        self._active: set[str] = set()
        self._lock = threading.Lock()

    @property
    def max_parallel(self) -> int:
        """Most drains at once; lowering it lets running drains finish and starts no new one until below."""
        with self._lock:
            return self._max

    @max_parallel.setter
    def max_parallel(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"max_parallel: {value} must be at least 1")
        with self._lock:
            self._max = value
            if value <= self._pool_size:
                return
            # A larger pool for new drains; the old one finishes what it runs and then lets its threads go.
            old, self._pool = (
                self._pool,
                ThreadPoolExecutor(max_workers=value, thread_name_prefix="tidal-drain"),
            )
            self._pool_size = value
        old.shutdown(wait=False)

    def active(self) -> set[str]:
        with self._lock:
            return set(self._active)

    def submit(self, job: DrainJob) -> bool:
        """Start draining; False when the node is already draining or every drain slot is busy."""
        with self._lock:
            if job.node in self._active or len(self._active) >= self._max:
                return False
            self._active.add(job.node)
            pool = self._pool
        pool.submit(self._run, job)
        return True

    def _run(self, job: DrainJob) -> None:
        ok, why, stopped = False, "", False
        try:
            ok, why = self.drain(job)
        except LeadershipLost as err:
            stopped, why = True, str(err)
            log.warning("drain_stopped_not_leading", node=job.node, before=why)
        except Exception as err:  # a drain must never take the daemon down; it reports and uncordons
            why = f"{type(err).__name__}: {err}"
            log.exception("drain_crashed", node=job.node)
        finally:
            if not ok and not stopped:
                self._abort(job, why)
            with self._lock:
                self._active.discard(job.node)
            outcome = STOPPED if stopped else ABANDONED if not ok else ERROR if why else SUCCESS
            if self.on_done:
                try:
                    self.on_done(job, outcome, why)
                except Exception:  # reporting must not fail the drain thread
                    log.exception("drain_report_failed", node=job.node)

    def _still_leading(self, before: str) -> None:
        """Raise :class:`LeadershipLost` unless this replica still leads; ``before`` names the next step."""
        try:
            leading = self.leading()
        except Exception:  # cannot tell: acting without the lease is the worse mistake
            leading = False
        if not leading:
            raise LeadershipLost(before)

    def drain(self, job: DrainJob) -> tuple[bool, str]:
        """Cordon, evict every pod (retrying PDB refusals), wait for them to go, then remove the node.

        Returns (True, "") when the node is gone, (True, why) when its Node is gone but the instance could
        not be terminated, (False, why) when the drain gave up; raises :class:`LeadershipLost` when this
        replica stopped leading before one of its steps.
        """
        self._still_leading(f"cordon {job.node}")
        self.actions.cordon(job.node, taint_key=TAINT_DISRUPTED)
        self.events.node(job.node, "ScaleDown", f"draining: {job.reason}")
        grace = max((p.grace_period_s for p in job.pods), default=0)
        deadline = self.clock() + grace + EVICTION_SLACK_S
        remaining = {p.key: p for p in job.pods}
        while True:
            for key, pod in list(remaining.items()):
                self._still_leading(f"evict {key}")
                result = self.actions.evict(pod.namespace, pod.name)
                name = getattr(result, "name", str(result))
                if name in ("EVICTED", "GONE"):
                    del remaining[key]
                elif name == "FAILED":
                    return False, f"eviction of {key} failed"
            still = {p.key for p in self.pods_on_node(job.node) if not p.daemonset and not p.mirror}
            if not job.wait_for_exit and not remaining:
                still -= {p.key for p in job.pods}  # evicted: those still there are only terminating
            if job.reclaimed and not remaining:
                still &= {p.key for p in job.pods}  # only the evicted are waited for; the rest stay
            if not still and not remaining:
                terminating, strangers = last_look(self.actions, job.node, {p.key for p in job.pods})
                if strangers and job.reclaimed:
                    return True, f"left to the cloud with pod {strangers[0]}, which tidal never evicts"
                if strangers:
                    return False, f"pod {strangers[0]} was scheduled to it during the drain"
                if not terminating or not job.wait_for_exit:
                    break
                still = set(terminating)
            if self.clock() > deadline:
                waiting = sorted(set(remaining) | still)
                return (
                    False,
                    f"pods still on the node after {format_duration(grace + EVICTION_SLACK_S)}: {', '.join(waiting[:5])}",
                )
            self.sleep(self.poll_interval)
        self._still_leading(f"delete node {job.node}")
        self.actions.delete_node(job.node)
        if job.instance is None or self.provider is None:
            return True, ""
        self._still_leading(f"terminate {job.instance.id}")
        try:
            self.provider.terminate(job.instance)
        except InstanceNotFound:
            log.info("terminate_already_gone", node=job.node, instance=job.instance.id)
        except ProviderError as err:
            # The Node is gone; the orphaned instance is retried by the fleet's orphan cleanup.
            log.warning("terminate_failed", node=job.node, error=str(err))
            return True, f"instance {job.instance.id} not terminated: {err}"
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
