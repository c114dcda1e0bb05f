"""The reconcile: snapshot → demand → plan → act. Only this module acts on the cloud and the cluster.

``reconcile_once`` is the fat, testable step; the daemon wraps it in a thin loop with batching and leader
election. Events, metrics and log lines go through injected recorders that never fail the loop.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from autoscaler.cloud import CloudProvider, InstanceNotFound, ProviderError, ReportsNodeLead
from autoscaler.config.values import Config
from autoscaler.core.census import census
from autoscaler.core.demand_memo import DemandMemo
from autoscaler.core.disruption.choose import progress
from autoscaler.core.disruption.method import Method
from autoscaler.core.model import Snapshot
from autoscaler.core.new_nodes import node_labels
from autoscaler.core.offering import Instance, Offering
from autoscaler.core.planning.decisions import Launch, Removal
from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.core.planning.planner import Plan, PlanInput, Planner, plan
from autoscaler.core.planning.reserved import InFlight, ending_blocks
from autoscaler.core.planning.rooms import NodeRooms
from autoscaler.core.planning.scaledown import UNNEEDED_SINCE
from autoscaler.core.planning.window import Patience, launch_now, next_due, patience_for
from autoscaler.core.projection import with_labels, without_dead_nodes, without_nodes
from autoscaler.runtime.answering import Answers
from autoscaler.runtime.availability import Availability
from autoscaler.runtime.catalog import OfferingCatalog
from autoscaler.runtime.derived import OfPods
from autoscaler.runtime.disrupting import Disruptions
from autoscaler.runtime.drain import DrainJob, DrainRunner, Termination
from autoscaler.runtime.fleet import Fleet, Member, Overdue
from autoscaler.runtime.gangs import Gangs
from autoscaler.runtime.kube.convert import parse_time
from autoscaler.runtime.launching import Launcher, LaunchOutcome
from autoscaler.runtime.reporting import Reporter
from autoscaler.runtime.seams import (
    ClusterView,
    ClusterWrites,
    EventRecorder,
    Metrics,
    NoMetrics,
    RequestWrites,
    attempt,
)
from autoscaler.runtime.status import STATUS_CONFIGMAP, Leadership, rfc3339

log = structlog.get_logger("tidal.controller")
# Plans made in one reconcile: the first, then one more after each round of launches the cloud refused, so a
# pod falls back past a stockout, then a family quota, then a region's spot quota without waiting a reconcile.
PLAN_ROUNDS = 4
__all__ = ["STATUS_CONFIGMAP", "Controller", "LaunchOutcome", "ReconcileResult"]


@dataclass(slots=True)
class ReconcileResult:
    """What one reconcile decided and did, for tests, the status ConfigMap and logs."""

    plan: Plan | None = None
    launched: list[LaunchOutcome] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    drains_started: list[str] = field(default_factory=list)
    acted: bool = False
    error: str = ""
    rolled_back: list[str] = field(default_factory=list)  # gangs whose partial launch was undone
    held: int = 0  # launches of the last plan left for the batch window to close
    # Seconds until the first held launch has waited batchIdleDuration for company and goes; None: none held.
    held_due_in: float | None = None


class Controller:
    """Observe the cluster and the cloud, decide with the pure core, act through the provider and the API."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        cluster: ClusterView,
        provider: CloudProvider,
        actions: ClusterWrites,
        events: EventRecorder,
        metrics: Metrics | None = None,
        leader: Callable[[], bool] = lambda: True,
        leadership: Callable[[], Leadership | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
        drainer: DrainRunner | None = None,
        planner: Planner = plan,
        rng: random.Random | None = None,
        requests: RequestWrites | None = None,
        status: Callable[[str, str, Mapping[str, str]], None] | None = None,
    ) -> None:
        """``leadership`` says why this replica does (not) lead, for the status ConfigMap; ``rng`` is the
        random source of the back-off jitter (seeded in the simulator, so one seed gives one run);
        ``requests`` writes the answers to ProvisioningRequests and CapacityBuffers; ``status`` the status
        ConfigMap (``actions.write_status`` when not given)."""
        self.config = config
        self.cluster = cluster
        self.provider = provider
        self.actions = actions
        self.events = events
        self.metrics: Metrics = metrics if metrics is not None else NoMetrics()
        self.leader = leader
        self.leadership = leadership
        self.clock = clock
        self.dry_run = dry_run
        cfg = config()
        self.fleet = Fleet(cfg, on_refused=self.metrics.transition_refused)
        self.catalog = OfferingCatalog(provider.offerings, refresh_interval=300.0)
        self.availability = Availability(unavailable_for=cfg.offering_unavailable_duration, rng=rng)
        self.launcher = Launcher(provider, self.availability, self.fleet, self.metrics, dry_run=dry_run)
        self.in_flight = InFlight()
        # The offering labels each member's Node lacks, by member key, with the fleet's members and the
        # configuration they were worked out for (see _offering_labels).
        self._lacking: tuple[Mapping[str, Member], Config, dict[str, dict[str, str]]] | None = None
        self.gangs = Gangs()
        # Per node counted unneeded: the Node, and whether its unneeded-since annotation reads as a time.
        self._stamped: dict[str, tuple[object, bool]] = {}
        self.drainer = drainer
        self.disruptions = Disruptions(
            provider=provider,
            actions=actions,
            events=events,
            fleet=self.fleet,
            launcher=self.launcher,
            availability=self.availability,
            drainer=drainer,
            metrics=self.metrics,
            dry_run=dry_run,
        )
        self.answers = Answers(requests, dry_run=dry_run)
        self.planner = planner  # the simulator swaps in baseline policies here
        self._index: OfferingsMemo[OfferingIndex] = OfferingsMemo(OfferingIndex)
        # Each node's room for pending pods, worked out again only for nodes whose Node or pods changed.
        self._rooms = NodeRooms()
        # What demand read of each pending pod, read again only for pods that changed.
        self._screened = DemandMemo()
        # What the plan reads of every pod (the pods on each node, bound nodes, claims, waiting pods, queue
        # candidates), gathered again only when the snapshot's pods are not those of the last plan.
        self._census = OfPods(census)
        self._planned_with: Sequence[Offering] = ()  # the offerings the last plan was made with
        # When each pod a launch is planned for was first planned so: how long it has waited for company.
        self._planned_since: dict[str, float] = {}
        # When pods were first planned onto a new node, oldest first, over the last few batch windows: whether
        # pods kept arriving before a launch's own (see _patience).
        self._arrivals: list[float] = []
        self.last: ReconcileResult | None = None
        self.reporter = Reporter(
            actions=actions,
            events=events,
            metrics=self.metrics,
            measured=metrics is not None,
            fleet=self.fleet,
            availability=self.availability,
            leadership=leadership,
            clock=clock,
            dry_run=dry_run,
            status=status,
        )

    # -- one step ---------------------------------------------------------------------------------------

    def reconcile_once(self, *, window_open: bool = False) -> ReconcileResult:
        """One full reconcile; never raises (errors are reported and the next reconcile starts clean).

        ``window_open``: pods are still arriving in a batch window, so only launches no later pod could share
        are made (:func:`~autoscaler.core.planning.window.launch_now`); the others are planned again when the
        window closes, and counted in ``ReconcileResult.held``."""
        started = time.perf_counter()
        now = self.clock()
        result = ReconcileResult()
        try:
            self._reconcile(now, result, window_open)
        except Exception as err:  # the loop must survive anything; the error is counted and logged
            result.error = f"{type(err).__name__}: {err}"
            log.exception("reconcile_failed")
        self.metrics.observe_reconcile(time.perf_counter() - started, not result.error, now)
        self.last = result
        return result

    def _reconcile(self, now: float, result: ReconcileResult, window_open: bool = False) -> None:
        cfg = self.config()
        self.fleet.config = cfg
        self.availability.unavailable_for = cfg.offering_unavailable_duration
        self.launcher.node_template = self.disruptions.template(cfg)
        snapshot = self.cluster.snapshot()
        try:
            instances = self.provider.instances()
        except ProviderError as err:
            self.metrics.cloud_error(self.provider.name, "instances", type(err).__name__)
            raise
        self._late_failures(now)
        offerings = self._offerings(now)
        # The census of these pods is the plan's too, unless the nodes dropped below change them.
        overdue = self.fleet.observe(instances, snapshot, offerings, now, census=self._census(snapshot.pods))
        leading = self.leader()
        result.acted = leading
        relabel = self._offering_labels(cfg)
        if relabel:
            # Plan with the labels being written now: until then a just-registered Node may carry only the
            # cloud's own (the bare machine type, no GPU count) and would look unable to hold the pods it
            # was launched for, which would launch them a second node.
            snapshot = with_labels(snapshot, relabel)
        snapshot = self.disruptions.overlay(snapshot)
        if leading:
            self._handle_overdue(overdue, now)
            if not self.dry_run:
                for name, labels in relabel.items():
                    attempt(self.actions.label_node, name, labels)
            doomed, started = self.disruptions.interrupted(snapshot)
            result.drains_started += started
            doomed |= self._blocks_ending(snapshot, cfg, now, result)
            if doomed:
                # Their pods are demand now, so the replacement is planned in this very reconcile.
                snapshot = without_nodes(snapshot, doomed, now)
            waiting = list(progress(snapshot).values())
            result.drains_started += self.disruptions.advance(snapshot, waiting, cfg, now)
        snapshot = without_dead_nodes(snapshot, instances, now, census=self._census(snapshot.pods))
        decided = self._plan(snapshot, cfg, now)
        result.plan = decided
        if leading:
            decided = self._launch(decided, snapshot, cfg, instances, result, now, window_open)
            expired = self.gangs.settle(decided, result.launched, now, cfg.gang_launch_timeout)
            result.rolled_back = self.gangs.roll_back(
                expired,
                self.fleet,
                self.launcher,
                self._terminate,
                self.metrics,
                dry_run=self.dry_run,
                in_use=self.disruptions.in_use,
            )
            self.answers.write(decided, result.launched, now)
            self._scale_down(decided, snapshot, instances, result, now)
            self.reporter.notify(decided, result.launched, snapshot, self._census(snapshot.pods))
        if leading or self.reporter.nobody_leads():
            self.reporter.write_status(decided, cfg, now)
        self.reporter.record(decided, snapshot, cfg)

    def _offerings(self, now: float) -> Sequence[Offering]:
        offerings = self.availability.apply(self.catalog.offerings(now), now)
        # What reservations have free, as the provider counted it, less what tidal launched into them since.
        if not self.in_flight.reserves(offerings):
            return offerings  # no reservation to count launches into (a pass over the whole fleet)
        return self.in_flight.apply(offerings, self.fleet.launched_into_reservations(self.catalog.fetched_at))

    def _plan(self, snapshot: Snapshot, cfg: Config, now: float) -> Plan:
        # A replacement's room is for the pods of the node it replaces: pending pods are not planned into it
        # (it still counts against the limits).
        reserved = self.disruptions.reserved(list(progress(snapshot).values()))
        self._planned_with = self._offerings(now)
        pods = self._census(snapshot.pods)
        request = PlanInput(
            snapshot,
            self._planned_with,
            cfg,
            now,
            launching=[la for la in self.fleet.launching_capacity() if la.name not in reserved],
            launching_usage=self.fleet.launching_usage(),
            memo=self._index,
            node_template=self.launcher.node_template,
            draining=self.drainer.active() if self.drainer else frozenset(),
            launched_for=self.fleet.launched_for(),
            by_node=pods.by_node,
            rooms=self._rooms,
            census=pods,
            screened=self._screened,
        )
        return self.planner(request)

    # -- scale-up -------------------------------------------------------------------------------------------

    def _launch(
        self,
        decided: Plan,
        snapshot: Snapshot,
        cfg: Config,
        instances: Sequence[Instance],
        result: ReconcileResult,
        now: float,
        window_open: bool = False,
    ) -> Plan:
        """Launch the plan; while the cloud refuses launches (whatever the kind: no capacity, a quota, an
        invalid request), plan again with what it refused benched and launch the fallback, in this same
        reconcile. Returns the last plan made. Throttling stops the rounds: every launch waits for it.
        With the batch window open, only the launches that need not wait for it are made."""
        pods = {p.key: p for p in snapshot.pods} if window_open else {}
        for round_ in range(PLAN_ROUNDS):
            launches = decided.launch.launches
            waited = self._waited(launches, now, cfg)
            if window_open:
                index = self._index.get(self._planned_with, cfg, snapshot.daemonsets)
                patience = self._patience(cfg)
                ready = launch_now(
                    launches, pods, index, decided.demand.constraints, waited=waited, patience=patience
                )
                result.held = len(launches) - len(ready)
                going = set(ready)
                result.held_due_in = next_due([la for la in launches if la not in going], waited, patience)
                launches = ready
            outcomes = self.launcher.launch_all(launches, cfg, instances, now)
            result.launched += outcomes
            # Candidates passed over by launches that then took another are benched too.
            self._late_failures(now)
            refused = any(o.refusals for o in outcomes)
            if not refused or round_ == PLAN_ROUNDS - 1 or self.availability.launch_backoff(now) > 0:
                break
            decided = self._plan(snapshot, cfg, now)
            result.plan = decided
        return decided

    def _patience(self, cfg: Config) -> Patience:
        """How long each launch waits for company: ``batchIdleDuration``, or less for a node that the provider
        says takes pods within a second, unless pods kept arriving within ``batchIdleDuration`` before the
        launch's own (see :func:`~autoscaler.core.planning.window.patience_for`)."""
        idle = cfg.batch_idle_duration
        provider = self.provider
        if not isinstance(provider, ReportsNodeLead):
            return idle
        arrivals, since = self._arrivals, self._planned_since

        def patience(la: Launch) -> float:
            first = min((since[k] for k in la.pods if k in since), default=math.inf)
            # Arrivals within idle before the first of its pods, that first arrival itself not counted.
            preceded = bisect.bisect_left(arrivals, first - 1e-6) > bisect.bisect_left(arrivals, first - idle)
            return patience_for(idle, provider.node_lead(la.offering), preceded=preceded)

        return patience

    def _waited(self, launches: Sequence[Launch], now: float, cfg: Config) -> dict[str, float]:
        """Seconds each pod of ``launches`` has been planned onto a new node; pods no longer planned so are
        forgotten."""
        known = self._planned_since
        since = {k: known.get(k, now) for la in launches for k in la.pods}
        if any(k not in known for k in since):
            self._arrivals.append(now)
        self._planned_since = since
        # Kept as long as a launch first planned within the last window may look back over a window before it.
        horizon = now - 3 * max(cfg.batch_max_duration, 1.0)
        del self._arrivals[: bisect.bisect_left(self._arrivals, horizon)]
        return {k: now - t for k, t in since.items()}

    def _late_failures(self, now: float) -> None:
        """Failures of earlier launches the cloud reported since (a stockout in a GCE zone operation, an ARM
        operation that failed), and candidates a successful launch passed over: they bench their offerings
        before anything more is planned."""
        try:
            late = self.provider.poll_errors()
        except ProviderError as err:
            self.metrics.cloud_error(self.provider.name, "poll_errors", type(err).__name__)
            log.warning("late_failures_unavailable", error=str(err))
            return
        for failure in late:
            a = failure.attempt
            self.metrics.launch_refusal(self.provider.name, a.refusal.value)
            for bench in self.availability.refused([a], now):
                log.warning(
                    # A launch that failed after it answered, or a candidate one passed over before another took.
                    "launch_failed_later" if failure.instance is not None else "candidate_refused",
                    offering=a.offering.key,
                    refusal=a.refusal.value,
                    benched=bench.key,
                    seconds=round(bench.until - now, 1),
                    idempotency_token=failure.token,
                    detail=a.detail,
                )

    def _terminate(self, instance: Instance, reason: str) -> bool:
        """Terminate one instance; an instance the cloud no longer has counts as done."""
        try:
            self.provider.terminate(instance)
        except InstanceNotFound:
            log.info("terminate_already_gone", instance=instance.id, reason=reason)
        except ProviderError as err:
            self.metrics.termination(reason, "error")
            self.metrics.cloud_error(self.provider.name, "terminate", type(err).__name__)
            log.warning("terminate_failed", instance=instance.id, reason=reason, error=str(err))
            return False
        self.metrics.termination(reason, "success")
        return True

    def _blocks_ending(
        self, snapshot: Snapshot, cfg: Config, now: float, result: ReconcileResult
    ) -> set[str]:
        """Nodes on a Capacity Block that ends within ``reservations.drainBeforeBlockEnd``: cordon and drain
        them now, before the cloud terminates them, and plan their pods again like those of a spot
        interruption (never in a dry run)."""
        if self.dry_run:
            return set()
        ending = ending_blocks(snapshot.nodes, self._offerings(now), cfg, now)
        draining = self.drainer.active() if self.drainer else set()
        names = set()
        for e in ending:
            names.add(e.node)
            instance = self.fleet.instance_for_node(e.node)
            if instance is not None:
                self.launcher.retired_tokens.add(instance.launch_token)
            if e.node in draining:
                continue
            self.events.node(e.node, "CapacityBlockEnding", f"{e.reason}; draining now")
            log.info("capacity_block_ending", node=e.node, reservation=e.reservation, end=e.end)
            pods = tuple(
                p
                for p in snapshot.pods
                if p.node_name == e.node and not p.daemonset and not p.mirror and not p.finished
            )
            if self.drainer is not None and self.drainer.submit(DrainJob(e.node, pods, instance, e.reason)):
                result.drains_started.append(e.node)
        return names

    def _offering_labels(self, cfg: Config) -> dict[str, dict[str, str]]:
        """The offering labels tidal planned with that registered Nodes still lack, by node name, whatever
        the cloud's bootstrap set: pods that select on capacity type or GPU model must be able to land.

        Worked out again only for the members the fleet's last observe changed (a member it kept has the
        same Node and offering, so lacks the same labels), unless the configuration changed."""
        members = self.fleet.members
        seen = self._lacking
        changes = self.fleet.changes_since(seen[0]) if seen is not None and seen[1] is cfg else None
        if seen is None or changes is None:
            lacking = {key: self._lacks(m, cfg) for key, m in members.items()}
        else:
            lacking = seen[2]
            rebuilt, gone = changes
            for key in gone:
                lacking.pop(key, None)
            for key in rebuilt:
                m = members.get(key)
                if m is not None:
                    lacking[key] = self._lacks(m, cfg)
        needy = {key: missing for key, missing in lacking.items() if missing}
        self._lacking = (members, cfg, lacking)
        if len(needy) > 1:  # in the fleet's order, as every Node is labelled in turn
            needy = {key: needy[key] for key in members if key in needy}
        out: dict[str, dict[str, str]] = {}
        for key, missing in needy.items():
            node = members[key].node
            assert node is not None  # only members with a Node lack labels
            out[node.name] = dict(missing)
        return out

    @staticmethod
    def _lacks(m: Member, cfg: Config) -> dict[str, str]:
        """The offering labels ``m``'s Node lacks (none when it has no Node, or its instance is not of the
        offering it was planned with)."""
        if m.node is None or m.offering is None or m.instance is None:
            return {}
        offering = m.offering
        if offering.zone not in ("", m.instance.zone) or offering.capacity_type != m.instance.capacity_type:
            return {}
        wanted = node_labels(offering, cfg)
        return {k: v for k, v in wanted.items() if m.node.labels.get(k) != v}

    # -- timeouts and orphans ---------------------------------------------------------------------------

    def _handle_overdue(self, overdue: Sequence[Overdue], now: float) -> None:
        for item in overdue:
            m, action = item.member, item.action
            log.warning("fleet_overdue", member=m.key, action=action.name.lower(), reason=item.reason)
            if self.dry_run:
                continue
            why = self.disruptions.still_in_use(m, action)
            if why:
                log.warning("fleet_overdue_kept", member=m.key, action=action.name.lower(), reason=why)
                continue
            if (
                action.delete_node
                and m.node is not None
                and not attempt(self.actions.delete_node, m.node.name)
            ):
                continue
            if action.terminate and m.instance is not None and not self._terminate(m.instance, "timeout"):
                continue
            if action.bench_offering and m.offering is not None:
                self.availability.bench([m.offering], now, item.reason)

    # -- scale-down -------------------------------------------------------------------------------------

    def _scale_down(
        self,
        decided: Plan,
        snapshot: Snapshot,
        instances: Sequence[Instance],
        result: ReconcileResult,
        now: float,
    ) -> None:
        cfg = self.config()
        removal = decided.removal
        nodes = {n.name: n for n in snapshot.nodes}
        # Persist "unneeded since" on the Node so every replica (and a restart) counts from the same time.
        stamped, known = {}, self._stamped
        for name, since in removal.unneeded_since.items():
            node = nodes.get(name)
            if node is None:
                continue
            # Whether its value reads as a time: the same Node object carries the same value.
            seen = known.get(name)
            if seen is None or seen[0] is not node:
                seen = (node, parse_time(node.annotations.get(UNNEEDED_SINCE)) is not None)
            stamped[name] = seen
            # A missing or mangled value is (re)written, so the count that starts now survives the next reconcile.
            if not seen[1]:
                attempt(self.actions.annotate_node, name, {UNNEEDED_SINCE: rfc3339(since)})
        self._stamped = stamped  # nodes no longer unneeded are forgotten
        for node in snapshot.nodes:
            if (
                node.managed
                and UNNEEDED_SINCE in node.annotations
                and node.name not in removal.unneeded_since
            ):
                attempt(self.actions.annotate_node, node.name, {UNNEEDED_SINCE: None})
        draining = self.drainer.active() if self.drainer else set()
        empty: list[Removal] = []
        for r in removal.removals:
            if r.node in draining:
                continue
            if r.replacement and r.node in nodes:
                # Launched (and Ready) first; the drain comes in a later reconcile.
                result.launched += self.disruptions.start(r, nodes[r.node], cfg, instances, now)
                continue
            if self.dry_run:
                log.info("would_remove", node=r.node, reason=r.reason)
                continue
            if r.empty:
                empty.append(r)
            elif self.drainer is not None:
                keys = set(r.pods)
                pods = tuple(p for p in snapshot.pods if p.key in keys)
                instance = self.fleet.instance_for_node(r.node)
                # An unhealthy node's kubelet may never report its pods gone: accepted evictions are enough.
                job = DrainJob(
                    r.node,
                    pods,
                    instance,
                    r.reason,
                    wait_for_exit=r.method != Method.UNHEALTHY,
                    termination=Termination.of(r.method),
                )
                if self.drainer.submit(job):
                    result.drains_started.append(r.node)
        result.removed += self.disruptions.remove_empty(
            empty[: cfg.scale_down.max_empty_bulk_delete], self.cluster.snapshot
        )
