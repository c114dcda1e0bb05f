"""The reconcile: snapshot → demand → plan → act. Only this module acts on the cloud and the cluster.

``reconcile_once`` is the fat, testable step; the daemon wraps it in a thin loop with batching and leader
election. Events, metrics and log lines go through injected recorders that never fail the loop.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from autoscaler.catalog import OfferingCatalog
from autoscaler.cloud import CapacityUnavailable, CloudProvider, ProviderError, QuotaExceeded, Throttled
from autoscaler.config import Config
from autoscaler.demand import Reason
from autoscaler.drain import DrainJob, DrainRunner, remove_node
from autoscaler.fit import node_labels, node_taints
from autoscaler.fleet import Fleet, State
from autoscaler.kube.convert import parse_time
from autoscaler.model import (
    LABEL_CLUSTER,
    LABEL_LAUNCH_TOKEN,
    LABEL_MANAGED,
    Instance,
    LaunchRequest,
    Snapshot,
)
from autoscaler.planning import Plan, plan
from autoscaler.planning.cluster import pods_by_node
from autoscaler.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.planning.plan import Launch, Removal
from autoscaler.planning.scaledown import NODE_MODE, UNNEEDED_SINCE
from autoscaler.projection import with_labels, without_dead_nodes, without_nodes
from autoscaler.reason_watch import ReasonWindow
from autoscaler.status import STATUS_CONFIGMAP, rfc3339, status_summary, unplaced_kind

log = structlog.get_logger("tidal.controller")
NOTIFY_REASONS = {
    Reason.QUEUE_LIMIT,
    Reason.QUEUE_QUOTA,
    Reason.BAD_ANNOTATION,
    Reason.GANG_INCOMPLETE,
    Reason.UNREADABLE,
}


class ClusterView(Protocol):
    def snapshot(self) -> Snapshot: ...


class Recorder(Protocol):
    def pod(self, pod: Any, reason: str, message: str, event_type: str = "Normal") -> object: ...
    def node(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> object: ...


def launch_token(cluster: str, pods: Iterable[str], attempt: int) -> str:
    """A UUID derived from the pods a launch is for, so a replan after a restart reuses it (and the cloud
    deduplicates); ``attempt`` moves on once an instance with the previous token has ended."""
    digest = hashlib.sha256("\n".join([cluster, str(attempt), *sorted(pods)]).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


@dataclass(slots=True)
class LaunchOutcome:
    launch: Launch
    token: str
    instance: Instance | None = None
    error: str = ""
    capacity_failed: tuple[Any, ...] = ()


@dataclass(slots=True)
class ReconcileResult:
    """What one reconcile decided and did, for tests, the status ConfigMap and logs."""

    plan: Plan | None = None
    launched: list[LaunchOutcome] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    drains_started: list[str] = field(default_factory=list)
    acted: bool = False
    error: str = ""


class Controller:
    """Observe the cluster and the cloud, decide with the pure core, act through the provider and the API."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        cluster: ClusterView,
        provider: CloudProvider,
        actions: Any,
        events: Recorder,
        metrics: Any = None,
        leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
        drainer: DrainRunner | None = None,
        planner: Callable[..., Plan] = plan,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.provider = provider
        self.actions = actions
        self.events = events
        self.metrics = metrics
        self.leader = leader
        self.clock = clock
        self.dry_run = dry_run
        cfg = config()
        self.fleet = Fleet(cfg)
        self.catalog = OfferingCatalog(
            provider.offerings, refresh_interval=300.0, unavailable_for=cfg.offering_unavailable_duration
        )
        self.drainer = drainer
        self.planner = planner  # the simulator swaps in baseline policies here
        self._index: OfferingsMemo[OfferingIndex] = OfferingsMemo(OfferingIndex)
        self._last_status: dict[str, Any] | None = None
        self._retired_tokens: set[str] = set()
        self.last: ReconcileResult | None = None
        self._reasons = ReasonWindow()
        self._warned: tuple[Plan | None, list[str]] = (None, [])

    # -- one step ---------------------------------------------------------------------------------------

    def reconcile_once(self) -> ReconcileResult:
        """One full reconcile; never raises (errors are reported and the next reconcile starts clean)."""
        started = time.perf_counter()
        now = self.clock()
        result = ReconcileResult()
        try:
            self._reconcile(now, result)
        except Exception as err:  # the loop must survive anything; the error is counted and logged
            result.error = f"{type(err).__name__}: {err}"
            log.exception("reconcile_failed")
        self._metric("observe_reconcile", time.perf_counter() - started, not result.error, now)
        self.last = result
        return result

    def _reconcile(self, now: float, result: ReconcileResult) -> None:
        cfg = self.config()
        self.fleet.config = cfg
        self.catalog.unavailable_for = cfg.offering_unavailable_duration
        snapshot = self.cluster.snapshot()
        try:
            instances = self.provider.instances()
        except ProviderError as err:
            self._metric("cloud_error", self.provider.name, "instances", type(err).__name__)
            raise
        offerings = self.catalog.offerings(now)
        overdue = self.fleet.observe(instances, snapshot, offerings, now)
        leading = self.leader()
        result.acted = leading
        relabel = self._offering_labels(cfg)
        if relabel:
            # Plan with the labels being written now: until then a just-registered Node may carry only the
            # cloud's own (the bare machine type, no GPU count) and would look unable to hold the pods it
            # was launched for, which would launch them a second node.
            snapshot = with_labels(snapshot, relabel)
        if leading:
            self._handle_overdue(overdue, now)
            if not self.dry_run:
                for name, labels in relabel.items():
                    self._best_effort("label_node", name, labels)
            doomed = self._interrupted(snapshot, result)
            if doomed:
                # Their pods are demand now, so the replacement is planned in this very reconcile.
                snapshot = without_nodes(snapshot, doomed, now)
        snapshot = without_dead_nodes(snapshot, instances, now)
        decided = self._plan(snapshot, cfg, now)
        result.plan = decided
        if leading:
            result.launched = self._launch_all(decided, cfg, instances, now)
            if any(o.capacity_failed for o in result.launched):
                # Capacity errors benched offerings: plan again now so the pods fall back in this reconcile.
                decided = self._plan(snapshot, cfg, now)
                result.plan = decided
                result.launched += self._launch_all(decided, cfg, instances, now)
            self._scale_down(decided, snapshot, result, now)
            self._notify(decided, result, snapshot)
            self._write_status(decided, cfg, now)
        self._record(decided, snapshot, cfg)

    def _plan(self, snapshot: Snapshot, cfg: Config, now: float) -> Plan:
        offerings = self.catalog.offerings(now)
        extra: dict[str, Any] = {}
        if self.planner is plan:
            extra["index"] = self._index.get(offerings, cfg, snapshot.daemonsets)
        return self.planner(
            snapshot,
            offerings,
            cfg,
            now,
            **extra,
            launching=self.fleet.launching_capacity(),
            launching_usage=self.fleet.launching_usage(),
        )

    # -- scale-up -------------------------------------------------------------------------------------------

    def _launch_all(
        self, decided: Plan, cfg: Config, instances: Sequence[Instance], now: float
    ) -> list[LaunchOutcome]:
        launches = decided.launch.launches
        if not launches:
            return []
        # A token is reused on purpose while its instance is launching or its Node is not yet Ready, so that
        # the cloud deduplicates a launch planned twice. Once that Node is Ready (or the instance ended, or is
        # being reclaimed), a plan for the same pods is new demand: the node went to other pods, or away.
        ended = {i.launch_token for i in instances if i.state == "terminated"} | self._retired_tokens
        ended |= {
            m.instance.launch_token
            for m in self.fleet.members.values()
            if m.instance is not None and m.state in (State.READY, State.IDLE, State.DRAINING)
        }
        outcomes = []
        for la in launches:
            attempt = 0
            token = launch_token(cfg.cluster_name, la.pods, attempt)
            while token in ended:
                attempt += 1
                token = launch_token(cfg.cluster_name, la.pods, attempt)
            outcomes.append(LaunchOutcome(la, token))
        if self.dry_run:
            for o in outcomes:
                log.info(
                    "would_launch",
                    instance_type=o.launch.offering.instance_type,
                    zone=o.launch.offering.zone,
                    capacity_type=o.launch.offering.capacity_type,
                    price=o.launch.offering.price,
                    pods=len(o.launch.pods),
                )
                self._metric(
                    "launch",
                    o.launch.offering.instance_type,
                    o.launch.offering.zone,
                    o.launch.offering.capacity_type,
                    "dry_run",
                )
            return outcomes
        with ThreadPoolExecutor(
            max_workers=cfg.max_parallel_launches, thread_name_prefix="tidal-launch"
        ) as pool:
            list(pool.map(lambda o: self._launch_one(o, cfg), outcomes))
        for o in outcomes:
            if o.instance is not None:
                self.fleet.record_launch(o.token, o.launch.offering, o.launch.pods, o.instance, now)
            if o.capacity_failed:
                self.catalog.bench(o.capacity_failed, now)
        return outcomes

    def _launch_one(self, outcome: LaunchOutcome, cfg: Config) -> None:
        la = outcome.launch
        labels = {
            LABEL_MANAGED: "true",
            LABEL_CLUSTER: cfg.cluster_name,
            LABEL_LAUNCH_TOKEN: outcome.token,
            NODE_MODE: la.mode,
            **cfg.node_labels,
        }
        tags = {
            LABEL_CLUSTER: cfg.cluster_name,
            LABEL_MANAGED: "true",
            LABEL_LAUNCH_TOKEN: outcome.token,
            **cfg.node_tags,
        }
        candidates = tuple(o for o in la.candidates if o.available)
        # Taints must be there when the kubelet registers, before any pod lands: send those every candidate
        # shares (the GPU taint on GPU offerings, AKS's spot taint on spot ones).
        shared = set.intersection(*(set(node_taints(o, cfg)) for o in candidates)) if candidates else set()
        taints = tuple(cfg.node_taints) + tuple(sorted(shared - set(cfg.node_taints), key=str))
        request = LaunchRequest(outcome.token, candidates, labels, taints, tags)
        o = la.offering
        try:
            outcome.instance = self.provider.launch(request)
            self._metric(
                "launch",
                outcome.instance.instance_type,
                outcome.instance.zone,
                outcome.instance.capacity_type,
                "success",
            )
            log.info(
                "launched",
                instance=outcome.instance.id,
                instance_type=outcome.instance.instance_type,
                zone=outcome.instance.zone,
                capacity_type=outcome.instance.capacity_type,
                pods=len(la.pods),
                idempotency_token=outcome.token,
            )
        except CapacityUnavailable as err:
            outcome.capacity_failed = err.offerings or candidates
            outcome.error = str(err)
            self._launch_failed(o, "capacity_unavailable", err)
        except QuotaExceeded as err:
            outcome.error = str(err)
            self._launch_failed(o, "quota_exceeded", err)
        except Throttled as err:
            outcome.error = str(err)
            self._launch_failed(o, "throttled", err)
        except ProviderError as err:
            outcome.error = str(err)
            self._launch_failed(o, "error", err)

    def _launch_failed(self, o: Any, outcome: str, err: Exception) -> None:
        self._metric("launch", o.instance_type, o.zone, o.capacity_type, outcome)
        self._metric("cloud_error", self.provider.name, "launch", type(err).__name__)
        log.warning(
            "launch_failed",
            instance_type=o.instance_type,
            zone=o.zone,
            capacity_type=o.capacity_type,
            outcome=outcome,
            error=str(err),
        )

    def _interrupted(self, snapshot: Snapshot, result: ReconcileResult) -> set[str]:
        """Nodes whose instances the cloud is about to reclaim (spot interruption notices): cordon and drain
        them at once. Reading the notices consumes them, so only the acting leader reads, never a dry run."""
        poll = getattr(self.provider, "interrupted_instances", None)
        if not callable(poll) or self.dry_run:
            return set()
        try:
            doomed = list(poll())
        except ProviderError as err:
            self._metric("cloud_error", self.provider.name, "interruptions", type(err).__name__)
            log.warning("interruptions_unavailable", error=str(err))
            return set()
        by_provider_id = {n.provider_id: n for n in snapshot.nodes if n.managed and n.provider_id}
        draining = self.drainer.active() if self.drainer else set()
        names = set()
        for inst in doomed:
            node = by_provider_id.get(inst.provider_id)
            if node is None:
                continue
            names.add(node.name)
            self._retired_tokens.add(inst.launch_token)
            if node.name in draining:
                continue
            self.events.node(node.name, "SpotInterrupted", "the cloud is reclaiming this node; draining now")
            pods = tuple(
                p
                for p in snapshot.pods
                if p.node_name == node.name and not p.daemonset and not p.mirror and not p.finished
            )
            if self.drainer is not None and self.drainer.submit(
                DrainJob(node.name, pods, inst, "spot interruption")
            ):
                result.drains_started.append(node.name)
        return names

    def _offering_labels(self, cfg: Config) -> dict[str, dict[str, str]]:
        """The offering labels tidal planned with that registered Nodes still lack, by node name, whatever
        the cloud's bootstrap set: pods that select on capacity type or GPU model must be able to land."""
        out: dict[str, dict[str, str]] = {}
        for m in self.fleet.members.values():
            if m.node is None or m.offering is None or m.instance is None:
                continue
            offering = m.offering
            if (
                offering.zone not in ("", m.instance.zone)
                or offering.capacity_type != m.instance.capacity_type
            ):
                continue
            wanted = node_labels(offering, cfg)
            missing = {k: v for k, v in wanted.items() if m.node.labels.get(k) != v}
            if missing:
                out[m.node.name] = missing
        return out

    # -- timeouts and orphans ---------------------------------------------------------------------------

    def _handle_overdue(self, overdue: Sequence[Any], now: float) -> None:
        for item in overdue:
            m = item.member
            log.warning("fleet_overdue", member=m.key, reason=item.reason)
            if self.dry_run:
                continue
            if item.delete_node and m.node is not None and not self._best_effort("delete_node", m.node.name):
                continue
            try:
                if item.terminate and m.instance is not None:
                    self.provider.terminate(m.instance)
                    self._metric("termination", "timeout", "success")
                if item.bench_offering and m.offering is not None:
                    self.catalog.bench([m.offering], now)
            except ProviderError as err:
                self._metric("cloud_error", self.provider.name, "terminate", type(err).__name__)
                log.warning("overdue_cleanup_failed", member=m.key, error=str(err))

    # -- scale-down -------------------------------------------------------------------------------------

    def _scale_down(self, decided: Plan, snapshot: Snapshot, result: ReconcileResult, now: float) -> None:
        cfg = self.config()
        removal = decided.removal
        nodes = {n.name: n for n in snapshot.nodes}
        # Persist "unneeded since" on the Node so every replica (and a restart) counts from the same time.
        for name, since in removal.unneeded_since.items():
            node = nodes.get(name)
            # A missing or mangled value is (re)written, so the count that starts now survives the next reconcile.
            if node is not None and parse_time(node.annotations.get(UNNEEDED_SINCE)) is None:
                self._best_effort("annotate_node", name, {UNNEEDED_SINCE: rfc3339(since)})
        for node in snapshot.nodes:
            if (
                node.managed
                and UNNEEDED_SINCE in node.annotations
                and node.name not in removal.unneeded_since
            ):
                self._best_effort("annotate_node", node.name, {UNNEEDED_SINCE: None})
        draining = self.drainer.active() if self.drainer else set()
        empty: list[Removal] = []
        for r in removal.removals:
            if r.node in draining:
                continue
            if self.dry_run:
                log.info("would_remove", node=r.node, reason=r.reason)
                continue
            if r.empty:
                empty.append(r)
            elif self.drainer is not None:
                pods = tuple(p for p in snapshot.pods if p.key in set(r.pods))
                instance = self.fleet.instance_for_node(r.node)
                if self.drainer.submit(DrainJob(r.node, pods, instance, r.reason)):
                    result.drains_started.append(r.node)
        self._remove_empty(empty[: cfg.scale_down.max_empty_bulk_delete], result)

    def _remove_empty(self, removals: Sequence[Removal], result: ReconcileResult) -> None:
        """Cordon the empty nodes, look again, and delete those still empty: a pod the scheduler bound after
        the snapshot was taken must never go down with its Node outside the Eviction API."""
        cordoned = [r for r in removals if self._best_effort("cordon", r.node)]
        if not cordoned:
            return
        fresh = pods_by_node(
            p for p in self.cluster.snapshot().pods if p.unreadable or (not p.daemonset and not p.mirror)
        )
        for r in cordoned:
            arrived = fresh.get(r.node)
            if arrived:
                self._keep(r.node, f"pod {arrived[0].key} was scheduled to it")
                continue
            try:
                self.events.node(r.node, "ScaleDown", f"removing empty node: {r.reason}")
                remove_node(self.actions, self.provider, r.node, self.fleet.instance_for_node(r.node))
            except ProviderError as err:
                # The Node is gone; the fleet's orphan cleanup terminates the instance later.
                self._metric("termination", "empty", "error")
                log.warning("terminate_failed", node=r.node, error=str(err))
                continue
            except Exception as err:  # the Node could not be deleted: put it back in service
                self._metric("termination", "empty", "error")
                self._keep(r.node, f"could not delete the Node: {err}")
                continue
            self._metric("termination", "empty", "success")
            result.removed.append(r.node)

    def _keep(self, node: str, why: str) -> None:
        """Undo a cordon for a removal that will not happen, and say why."""
        self._best_effort("uncordon", node)
        self.events.node(node, "ScaleDownFailed", f"removal abandoned, node uncordoned: {why}", "Warning")
        log.warning("remove_abandoned", node=node, reason=why)

    def _best_effort(self, action: str, *args: Any) -> bool:
        """Call an API action whose failure must not stop the reconcile; False (logged) when it failed."""
        try:
            getattr(self.actions, action)(*args)
        except Exception as err:  # the next reconcile tries again
            log.warning("action_failed", action=action, target=args[0] if args else "", error=str(err))
            return False
        return True

    # -- reporting --------------------------------------------------------------------------------------

    def _notify(self, decided: Plan, result: ReconcileResult, snapshot: Snapshot) -> None:
        pods = {p.key: p for p in snapshot.pods}
        for o in result.launched:
            if o.instance is None and not self.dry_run:
                continue
            off = o.launch.offering
            verb = "would launch" if self.dry_run else "launching"
            msg = (
                f"{verb} {off.instance_type} in {off.zone or 'any zone'} ({off.capacity_type}, "
                f"${off.price:.4f}/h) for this pod"
            )
            for key in o.launch.pods:
                if key in pods:
                    self.events.pod(pods[key], "TriggeredScaleUp", msg)
                    cond = pods[key].scheduled
                    if cond is not None and cond.last_transition and not self.dry_run:
                        self._metric("scale_up_latency", max(0.0, self.clock() - cond.last_transition))
        for u in decided.launch.unplaced:
            if u.pod in pods:
                self.events.pod(pods[u.pod], "NotTriggerScaleUp", u.reason, "Warning")
        for i in decided.demand.ignored:
            if i.reason in NOTIFY_REASONS and i.pod in pods:
                self.events.pod(pods[i.pod], "NotTriggerScaleUp", i.detail)

    def _record(self, decided: Plan, snapshot: Snapshot, cfg: Config) -> None:
        self._warnings(decided, self.clock())
        if self.metrics is None:
            return
        counts: Counter[tuple[str, str]] = Counter()
        counts.update(("counted", "launching") for la in decided.launch.launches for _ in la.pods)
        counts.update(("ignored", i.reason.value) for i in decided.ignored)
        counts.update(("unplaced", unplaced_kind(u.reason)) for u in decided.launch.unplaced)
        self._metric("set_pending", dict(counts))
        self._metric("set_nodes", self.fleet.counts())
        requested = sum(p.requests.gpus for p in snapshot.pods if p.node_name and not p.finished)
        requested += sum(p.requests.gpus for p in decided.demand.counted)
        self._metric("set_gpus", decided.launch.gpus_after, requested, cfg.cluster_gpu_limit)
        self._metric("set_cost", self.fleet.cost_per_hour())

    def _write_status(self, decided: Plan, cfg: Config, now: float) -> None:
        summary = status_summary(decided, self.fleet.counts(), cfg, now, self.catalog.benched(now))
        summary["warnings"] = self._warnings(decided, now)
        unchanged = {k: v for k, v in summary.items() if k != "time"}
        if unchanged == self._last_status:
            return  # nothing new to say; spare the API server a write every reconcile
        self._last_status = unchanged
        try:
            self.actions.write_status(
                cfg.leader_election.namespace,
                STATUS_CONFIGMAP,
                {"status": json.dumps(summary, indent=2)},
            )
        except Exception as err:  # status is informational; it must not fail the reconcile
            log.warning("status_write_failed", error=str(err))

    def _warnings(self, decided: Plan, now: float) -> list[str]:
        """What people should hear about the configuration (today: a pendingPodReasonRegexp that matched
        none of the unschedulable pods in the last ten minutes): logged when it appears or goes, carried by
        the status ConfigMap and the tidal_pending_reason_regexp_pods metric. Once per plan."""
        seen, found = self._warned
        if seen is decided:
            return found
        self._reasons.observe(decided.demand, now)
        counts = self._reasons.counts()
        self._metric("set_reason_regexp", counts.matched, counts.unmatched)
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

    def _metric(self, name: str, *args: Any) -> None:
        if self.metrics is None:
            return
        try:
            getattr(self.metrics, name)(*args)
        except Exception:  # metrics never fail the loop
            log.exception("metric_failed", metric=name)
