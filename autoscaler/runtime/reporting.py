"""What a reconcile tells people: Events on the pods it launched (or could not launch) for, the metrics, the
status ConfigMap and the warnings about the configuration. Nothing here can fail the reconcile."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from autoscaler.config.values import Config
from autoscaler.core.census import PodCensus
from autoscaler.core.demand import Reason
from autoscaler.core.model import Pod, Snapshot
from autoscaler.core.planning.planner import Plan
from autoscaler.core.reason_watch import ReasonWindow
from autoscaler.runtime.availability import Availability
from autoscaler.runtime.derived import OfPods
from autoscaler.runtime.fleet import Fleet
from autoscaler.runtime.launching import LaunchOutcome
from autoscaler.runtime.notices import OVERSIZED_NODE, idle_notice, post_estimates
from autoscaler.runtime.seams import ClusterWrites, EventRecorder, Metrics, attempt
from autoscaler.runtime.status import STATUS_CONFIGMAP, Leadership, status_summary

__all__ = ["NOTIFY_REASONS", "UNREADABLE", "Reporter"]

log = structlog.get_logger("tidal.controller")
NOTIFY_REASONS = {
    Reason.QUEUE_LIMIT,
    Reason.QUEUE_QUOTA,
    Reason.BAD_ANNOTATION,
    Reason.UNSUPPORTED_CLAIM,
    Reason.GANG_INCOMPLETE,
    Reason.UNREADABLE,
}


# The event on a running pod or a Node tidal cannot fully read.
UNREADABLE = "Unreadable"


@dataclass(frozen=True, slots=True)
class _PodFacts:
    """What the events read of every pod (kept while the pods are the same)."""

    by_key: Mapping[str, Pod]
    bound_unreadable: Sequence[Pod]  # bound pods tidal cannot fully read


def _pod_facts(pods: Sequence[Pod]) -> _PodFacts:
    return _PodFacts({p.key: p for p in pods}, [p for p in pods if p.unreadable and p.node_name])


def _gpus_bound(pods: Sequence[Pod]) -> int:
    """GPUs requested by the pods bound to a node that have not finished (read only for the metrics)."""
    return sum(p.requests.gpus for p in pods if p.node_name and not p.finished)


class Reporter:
    """Events, metrics and status for one controller; ``measured`` False skips the metrics' arithmetic."""

    def __init__(
        self,
        *,
        actions: ClusterWrites,
        events: EventRecorder,
        metrics: Metrics,
        measured: bool,
        fleet: Fleet,
        availability: Availability,
        leadership: Callable[[], Leadership | None],
        clock: Callable[[], float],
        dry_run: bool,
        status: Callable[[str, str, Mapping[str, str]], None] | None = None,
    ) -> None:
        """``status`` writes the status ConfigMap (``actions.write_status`` when not given)."""
        self.actions = actions
        self._status = actions.write_status if status is None else status
        self.events = events
        self.metrics = metrics
        self.measured = measured
        self.fleet = fleet
        self.availability = availability
        self.leadership = leadership
        self.clock = clock
        self.dry_run = dry_run
        self._last_status: dict[str, Any] | None = None
        self._reasons = ReasonWindow()
        self._warned: tuple[Plan | None, list[str]] = (None, [])
        self._facts = OfPods(_pod_facts)
        self._gpus_bound = OfPods(_gpus_bound)

    def notify(
        self,
        decided: Plan,
        launched: list[LaunchOutcome],
        snapshot: Snapshot,
        census: PodCensus | None = None,
    ) -> None:
        """Events on the pods a launch is for, on those no launch is for, and their cost estimates.
        ``census``, when it is that of the snapshot's pods, spares another pass over them."""
        facts = self._of(snapshot, census)
        pods = facts.by_key
        for o in launched:
            if o.instance is None and not self.dry_run:
                continue
            off = o.launch.offering
            verb = "would launch" if self.dry_run else "launching"
            msg = (
                f"{verb} {off.instance_type} in {off.zone or 'any zone'} ({off.capacity_type}, "
                f"${off.price:.4f}/h) for this pod"
            )
            idle = idle_notice(o.launch)
            for key in o.launch.pods:
                if key in pods:
                    self.events.pod(pods[key], "TriggeredScaleUp", msg)
                    if idle:
                        self.events.pod(pods[key], OVERSIZED_NODE, idle, "Warning")
                    cond = pods[key].scheduled
                    if cond is not None and cond.last_transition and not self.dry_run:
                        self.metrics.scale_up_latency(max(0.0, self.clock() - cond.last_transition))
        for u in decided.launch.unplaced:
            if u.pod in pods:
                self.events.pod(pods[u.pod], "NotTriggerScaleUp", u.reason, "Warning")
        annotate = None if self.dry_run else self._annotate_pod
        post_estimates(decided.estimates, pods, self.events.pod, annotate)
        for i in decided.demand.ignored:
            if i.reason in NOTIFY_REASONS and i.pod in pods:
                self.events.pod(pods[i.pod], "NotTriggerScaleUp", i.detail)
        self._unreadable(snapshot, facts.bound_unreadable)

    def _of(self, snapshot: Snapshot, census: PodCensus | None) -> _PodFacts | PodCensus:
        """What the events read of the snapshot's pods: its census when given one, else gathered here."""
        if census is not None and census.describes(snapshot.pods):
            return census
        return self._facts(snapshot.pods)

    def _unreadable(self, snapshot: Snapshot, bound_unreadable: Sequence[Pod]) -> None:
        """Say so on every running pod and Node tidal cannot fully read: each keeps a node for ever, which
        nobody would otherwise learn the reason for (a pending one is told by its NotTriggerScaleUp)."""
        for pod in bound_unreadable:
            msg = (
                f"tidal cannot read all of this pod ({pod.unreadable}): it never evicts it and never "
                f"removes node {pod.node_name}"
            )
            self.events.pod(pod, UNREADABLE, msg, "Warning")
        for node in snapshot.nodes:
            if node.unreadable:
                msg = (
                    f"tidal cannot read all of this Node ({node.unreadable}): it plans no pod onto it and "
                    "never removes it"
                )
                self.events.node(node.name, UNREADABLE, msg, "Warning")

    def _annotate_pod(self, namespace: str, name: str, values: dict[str, str | None]) -> bool:
        return attempt(self.actions.annotate_pod, namespace, name, values)

    def record(self, decided: Plan, snapshot: Snapshot, cfg: Config) -> None:
        """The gauges of pending pods, nodes, GPUs, cost and queues after ``decided``."""
        self.warnings(decided, self.clock())
        if not self.measured:
            return
        counts: Counter[tuple[str, str]] = Counter()
        counts.update(("counted", "launching") for la in decided.launch.launches for _ in la.pods)
        counts.update(("ignored", i.reason.value) for i in decided.ignored)
        counts.update(("unplaced", u.shortfall.value) for u in decided.launch.unplaced)
        self.metrics.set_pending(dict(counts))
        self.metrics.set_nodes(self.fleet.counts())
        requested = self._gpus_bound(snapshot.pods)
        requested += sum(p.requests.gpus for p in decided.demand.counted)
        self.metrics.set_gpus(decided.launch.gpus_after, requested, cfg.cluster_gpu_limit)
        self.metrics.set_cost(self.fleet.cost_per_hour())
        self.metrics.set_queues(decided.queues)

    def nobody_leads(self) -> bool:
        """Not leading, and no other replica does either (an error keeps this one from taking the Lease):
        then this replica's status is the only one anybody will see."""
        state = self.leadership()
        return state is not None and not state.leading and not state.held_by_other

    def write_status(self, decided: Plan, cfg: Config, now: float) -> None:
        """The status ConfigMap, written only when something in it changed."""
        summary = status_summary(
            decided, self.fleet.counts(), cfg, now, self.availability.benched(now), self.leadership()
        )
        summary["warnings"] = self.warnings(decided, now)
        unchanged = {k: v for k, v in summary.items() if k != "time"}
        if unchanged == self._last_status:
            return  # nothing new to say; spare the API server a write every reconcile
        self._last_status = unchanged
        try:
            self._status(
                cfg.leader_election.namespace,
                STATUS_CONFIGMAP,
                {"status": json.dumps(summary, indent=2)},
            )
        except Exception as err:  # status is informational; it must not fail the reconcile
            log.warning("status_write_failed", error=str(err))

    def warnings(self, decided: Plan, now: float) -> list[str]:
        """What people should hear about the configuration (today: a pendingPodReasonRegexp that matched
        none of the unschedulable pods in the last ten minutes): logged when it appears or goes, carried by
        the status ConfigMap and the tidal_pending_reason_regexp_pods metric. Once per plan."""
        seen, found = self._warned
        if seen is decided:
            return found
        self._reasons.observe(decided.demand, now)
        counts = self._reasons.counts()
        self.metrics.set_reason_regexp(counts.matched, counts.unmatched)
        warning = self._reasons.warning()
        if bool(warning) != bool(found):  # logged when it appears and when it goes, not every reconcile
            if warning:
                log.warning(
                    "pending_reason_regexp_matches_nothing",
                    warning=warning,
                    unschedulable=counts.unschedulable,
                )
            else:
                log.info("pending_reason_regexp_matches_again", matched=counts.matched)
        self._warned = (decided, [warning] if warning else [])
        return self._warned[1]
