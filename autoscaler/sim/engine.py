"""The discrete-event loop: the real controller and decision core on a virtual clock.

Nothing here decides anything: the emulated cluster schedules, the simulated cloud launches, and the same
``Controller`` that ``tidal run`` uses reconciles — with tidal's planner or a baseline policy. The loop only
jumps the clock from one interesting moment to the next and records what happened.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from autoscaler.config.values import Config
from autoscaler.core.model import CapacityType, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.core.planning.planner import Plan, Planner
from autoscaler.core.words import count
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.drain import DrainJob, last_look, remove_node
from autoscaler.runtime.observability.events import EventRecorder
from autoscaler.sim.cluster import EmulatedCluster, held_by_queue
from autoscaler.sim.configuration import GPU_READY_DELAY, LAUNCH_DELAY, REGISTRATION_DELAY
from autoscaler.sim.kueue import Kueue, buffer_object, buffer_template
from autoscaler.sim.record import (
    INTERRUPTION,
    LAUNCH,
    OUTAGE_BEGINS,
    OUTAGE_ENDS,
    REMOVAL,
    CostSoFar,
    Record,
    Sample,
)
from autoscaler.sim.scale_adjuster import ScaleAdjuster
from autoscaler.sim.scenario import JobSpec, Scenario
from autoscaler.sim.waiting import never_served, queue_hold, waiting_reasons


class VirtualClock:
    """Time as the simulation says it is."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class SyncDrainer:
    """Drains at once on the virtual clock (cordon, evict, a last look, delete the Node, terminate): no
    threads, no sleeping. An eviction the cluster refuses, or a pod nobody evicted still on the node, keeps
    the node (uncordoned), as a real drain that runs out of time does."""

    def __init__(self, cluster: EmulatedCluster, provider: Any, on_terminate: Callable[[Instance], None]):
        self.cluster = cluster
        self.provider = provider
        self.on_terminate = on_terminate
        self.abandoned: list[tuple[str, str]] = []  # (node, why)

    def active(self) -> set[str]:
        return set()

    def submit(self, job: DrainJob) -> bool:
        try:
            why = self._drain(job)
        except Exception as err:  # an API error mid-drain: the node is put back, as a real drain does
            why = f"{type(err).__name__}: {err}"
        if why:
            with contextlib.suppress(Exception):  # left cordoned: the next plan decides the node again
                self.cluster.uncordon(job.node)
            self.abandoned.append((job.node, why))
        return True

    def _drain(self, job: DrainJob) -> str:
        self.cluster.cordon(job.node)
        for pod in job.pods:
            result = self.cluster.evict(pod.namespace, pod.name)
            if result.name not in ("EVICTED", "GONE"):
                return f"eviction of {pod.key} {result.name.lower()}"
        _, strangers = last_look(self.cluster, job.node, {p.key for p in job.pods})
        if strangers and job.reclaimed:
            return ""  # pods tidal never evicts stay; the cloud takes the node, cordoned, with them
        if strangers:
            return f"pod {strangers[0]} was scheduled to it during the drain"
        remove_node(self.cluster, self.provider, job.node, job.instance)
        if job.instance is not None:
            self.on_terminate(job.instance)
        return ""

    def shutdown(self) -> None:
        return None


class Simulation:
    """One scenario under one policy, from its first job to its end."""

    def __init__(
        self,
        scenario: Scenario,
        config: Config,
        provider_factory: Callable[..., Any],
        *,
        policy: str = "tidal",
        planner: Planner | None = None,
        jobs: Sequence[JobSpec] | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.config = config
        self.clock = VirtualClock()
        self.cluster = EmulatedCluster(self.clock, scenario.queues, kai=scenario.kai)
        self.provider = provider_factory(config, clock=self.clock, kube=self.cluster)
        self.cluster.gpu_memory = {
            o.instance_type: o.gpu_memory_mib for o in self.provider.offerings() if o.gpu_count
        }
        self.record = Record(policy, scenario.name)
        self._cost = CostSoFar(self.record)  # what the instances cost up to each sample
        self.record.queues = {q.name: (q.quota, q.limit) for q in scenario.queues}
        self.echo = echo
        events = EventRecorder(
            lambda pod, reason, message, event_type: self.cluster.pod_event(
                pod, reason=reason, message=message
            ),
            node_sink=lambda node, reason, message, event_type: self.cluster.node_event(
                node, reason=reason, message=message
            ),
            clock=self.clock,
        )
        kwargs: dict[str, Any] = {"planner": planner} if planner is not None else {}
        kwargs["requests"] = self.cluster.requests
        self.kueue = (
            Kueue(scenario.kueue, self.cluster.requests, self.cluster.submit) if scenario.kueue else None
        )
        for b in scenario.buffers:
            self.cluster.requests.put_template(buffer_template(b, 0.0))
            self.cluster.requests.put_buffer(buffer_object(b))
        self.controller = Controller(
            config=lambda: self.config,
            cluster=self.cluster,
            provider=self.provider,
            actions=self.cluster,
            events=events,
            clock=self.clock,
            drainer=SyncDrainer(self.cluster, self.provider, self._ended),
            rng=random.Random(0),  # back-off jitter, the same in every run of a scenario
            **kwargs,
        )
        self.jobs = sorted(jobs if jobs is not None else scenario.jobs, key=lambda j: (j.at, j.name))
        # cluster-autoscaler and Karpenter see GPU-sharing pods only through KAI's node-scale-adjuster; tidal
        # reads the shares itself (and recognises scaling pods), so it runs without one.
        self.adjuster = ScaleAdjuster() if policy != "tidal" else None
        self._last_version = -1
        self._dirty_at: float | None = None
        # When reservations start and end, when Capacity Blocks are drained and reclaimed: a reconcile then.
        lead = config.reservations.drain_before_block_end
        self._reservation_times = {
            x
            for r in scenario.reservations
            for x in (r.at, *((r.until - lead, r.until - 1800.0, r.until) if r.until is not None else ()))
            if x is not None
        }
        self._reasons: tuple[Plan | None, dict[str, str]] = (None, {})
        self._use: tuple[int, float, dict[str, float]] = (-1, 0.0, {})  # see _bound_use
        # Spot nodes interrupted at their type's published rate: the rate by instance type, and when each
        # node's interruption comes (drawn once, when it is first seen).
        self._spot_rates = {
            o.instance_type: o.interruption_rate
            for o in self.provider.offerings()
            if o.capacity_type == CapacityType.SPOT and o.interruption_rate > 0
        }
        self._interrupt_at: dict[str, float] = {}

    def _say(self, text: str) -> None:
        self.record.lines.append((self.clock.now, text))
        if self.echo is not None:
            self.echo(f"{_hhmm(self.clock.now)}  {text}")

    def _ended(self, instance: Instance) -> None:
        self.record.ended.setdefault(instance.id, self.clock.now)

    # -- the loop ----------------------------------------------------------------------------------------

    def run(self) -> Record:
        wall, cpu = time.perf_counter(), time.process_time()
        rec = self.record
        i = 0
        end = self.scenario.duration
        interruptions = sorted(self.scenario.interruptions, key=lambda x: x.at)
        outages = sorted(self.scenario.outages, key=lambda o: o.at)
        t = min([j.at for j in self.jobs[:1]] + [end])
        while t <= end:
            self.clock.now = t
            arrived = i < len(self.jobs) and self.jobs[i].at <= t
            while i < len(self.jobs) and self.jobs[i].at <= t:
                job = self.jobs[i]
                if self.kueue is not None:
                    self.kueue.submit(job, t)
                else:
                    self.cluster.submit(job, t)
                self._say(
                    f"{job.name}: {count(job.pods, 'pod')} x {_gpus_of(job)} GPU"
                    + (f" in queue {job.queue}" if job.queue else "")
                    + (" (gang)" if job.gang else "")
                )
                i += 1
            self.cluster.finish_due(t)
            self._admit(t)
            self._cloud_events(t, interruptions, outages)
            self._rate_interruptions(t)
            self.provider.advance()
            self._schedule(t)
            if self._due(t):
                self._reconcile(t)
                self.provider.advance()
                self._admit(t)
                self._schedule(t)
            elif arrived and self.record.policy == "tidal":
                # As tidal's daemon does, pods arriving wake a reconcile with the batch window still open: it
                # launches what no later pod could share, the window's reconcile the rest. (The baselines
                # wait for the window, as the autoscalers they stand for do.)
                self._reconcile(t, window_open=True)
                self.provider.advance()
                self._schedule(t)
            live = self._sample(t)
            nxt = self._next(t, i, interruptions, outages, live)
            if nxt is None or nxt > end:
                break
            t = nxt
        self.clock.now = end
        rec.end = end
        for inst in self.provider.instances():
            if inst.state != InstanceState.TERMINATED:
                rec.ended.setdefault(inst.id, end)
                rec.gpu_nodes_at_end += inst.gpu_count > 0
        rec.pods = [*self.cluster.done, *self.cluster.pods.values()]
        rec.cut_runs = list(self.cluster.cut)
        rec.waiting = never_served(self._last_plan(), self.cluster.pods.values())
        rec.scaling_pods = self.adjuster.created if self.adjuster is not None else 0
        rec.wall_seconds = time.perf_counter() - wall
        rec.cpu_seconds = time.process_time() - cpu
        return rec

    def _admit(self, t: float) -> None:
        """Kueue admits what its quota and the answers to its ProvisioningRequests allow."""
        if self.kueue is None:
            return
        cluster = self.cluster

        def running(job: str) -> bool:
            return any(sp.job == job for sp in cluster.pods.values())

        def annotate(key: str, values: dict[str, str]) -> None:
            namespace, name = key.split("/", 1)
            cluster.annotate_pod(namespace, name, values)

        self.kueue.step(t, running, annotate)

    def _schedule(self, t: float) -> None:
        """The schedulers bind what fits; then the scale-adjuster, if one runs, reacts to what still waits."""
        self.cluster.schedule(t)
        if self.adjuster is not None:
            # (It acts on unschedulable pods only, and every bound pod was scheduled: the waiting ones do.)
            pods = [sp.pod for sp in self.cluster.pods.waiting.values()]
            if self.adjuster.adjust(pods, self.cluster.scaling, t):
                self.cluster.touch()

    def _last_plan(self) -> Plan | None:
        return self.controller.last.plan if self.controller.last else None

    def _bound_use(self) -> tuple[float, dict[str, float]]:
        """The GPUs bound pods use, in all and by queue: summed again only once a pod was bound or left."""
        pods = self.cluster.pods
        if self._use[0] != pods.generation:
            used = 0.0
            by_queue: dict[str, float] = dict.fromkeys(self.record.queues, 0.0)
            for sp in pods.values():
                if sp.pod.node_name:
                    used += sp.gpus
                    if sp.queue:
                        by_queue[sp.queue] = by_queue.get(sp.queue, 0) + sp.gpus
            self._use = (pods.generation, used, by_queue)
        return self._use[1], dict(self._use[2])

    def _waiting_reasons(self) -> dict[str, str]:
        """Why the last plan left pods waiting; worked out once per plan, not at every sample."""
        plan = self._last_plan()
        if self._reasons[0] is not plan:
            self._reasons = (plan, waiting_reasons(plan))
        return self._reasons[1]

    def _due(self, t: float) -> bool:
        """Reconcile after the batch window once anything changed, when a scale-down timer expires, and when a
        reservation starts or ends (or its Capacity Block is due to be drained)."""
        if t in self._reservation_times:
            return True
        if self.cluster.version != self._last_version:
            if self._dirty_at is None:
                self._dirty_at = t
            if t - self._dirty_at >= self.config.batch_idle_duration:
                return True
        return self._removal_due(t)

    def _removal_due(self, t: float) -> bool:
        last = self.controller.last
        if last is None or last.plan is None:
            return False
        wait = self.config.scale_down.node_unneeded_duration
        removal = last.plan.removal
        if removal.next_check is not None and removal.next_check <= t:
            return True  # a lifetime ended, a condition lasted, a replacement ran out of time
        return any(since + wait <= t for since in removal.unneeded_since.values())

    def _reconcile(self, t: float, *, window_open: bool = False) -> None:
        rec = self.record
        before = self.provider.live_ids()
        result = self.controller.reconcile_once(window_open=window_open)
        rec.reconciles += 1
        if not window_open:  # the window's own reconcile is still to come
            self._last_version = self.cluster.version
            self._dirty_at = None
        if result.error:
            self._say(f"reconcile error: {result.error}")
        pods = self.cluster.pods
        launched = [o for o in result.launched if o.instance is not None]
        for o in launched:
            assert o.instance is not None
            rec.started.setdefault(o.instance.id, (o.instance, t))
            rec.launches += 1
            rec.launch_pods.append(o.launch.pods)
            rec.launched_for.update(o.launch.pods)
            rec.held_after_launch.update(k for k in o.launch.pods if k in pods and held_by_queue(pods[k].pod))
        if launched:
            kinds: dict[str, int] = {}
            for o in launched:
                assert o.instance is not None
                kinds[o.instance.instance_type] = kinds.get(o.instance.instance_type, 0) + 1
            desc = ", ".join(f"{n}x {k}" for k, n in sorted(kinds.items()))
            self._say(f"launch {desc} for {count(sum(len(o.launch.pods) for o in launched), 'pod')}")
            rec.markers.append((t, LAUNCH, len(launched)))
        after = self.provider.live_ids()
        for gone in sorted(before - after):
            self.record.ended.setdefault(gone, t)
        removed = len(before - after)
        if removed:
            rec.removals += removed
            self._say(f"remove {removed} node(s)")
            rec.markers.append((t, REMOVAL, removed))

    def _cloud_events(self, t: float, interruptions: list[Any], outages: list[Any]) -> None:
        for x in interruptions:
            if x.at == t:
                spot = sorted(
                    (
                        i
                        for i in self.provider.instances()
                        if i.state != InstanceState.TERMINATED and i.capacity_type == CapacityType.SPOT
                    ),
                    key=lambda i: i.id,
                )
                victims = spot[: round(len(spot) * x.fraction)]
                for inst in victims:
                    self.provider.interrupt(inst.id)
                    self.record.ended.setdefault(inst.id, t)
                if victims:
                    self._say(f"spot interruption: {len(victims)} node(s) reclaimed")
                    self.record.markers.append((t, INTERRUPTION, len(victims)))
        for o in outages:
            if o.at == t:
                self.provider.fail_capacity(o.instance_type, o.zone, o.capacity_type)
                self._say(
                    f"capacity outage begins: {o.instance_type or 'any'} {o.capacity_type or ''}".rstrip()
                )
                self.record.markers.append((t, OUTAGE_BEGINS, 0))
            if o.until == t:
                self.provider.restore_capacity(o.instance_type, o.zone, o.capacity_type)
                self._say("capacity outage ends")
                self.record.markers.append((t, OUTAGE_ENDS, 0))

    def _interruptions_due(self, live: Sequence[Instance]) -> dict[str, float]:
        """When each live spot node is interrupted at its type's rate (``spotInterruptionRates``): a moment
        drawn once per node, the same in every run of the scenario."""
        rates = self.scenario.spot_rates
        if rates is None:
            return {}
        scale = 730.0 * 3600.0 / rates.period  # the catalog's rates are a month's share of instances
        for inst in live:
            if inst.capacity_type != CapacityType.SPOT or inst.id in self._interrupt_at:
                continue
            rate = self._spot_rates.get(inst.instance_type, 0.0) * scale  # per hour
            if rate <= 0:
                self._interrupt_at[inst.id] = float("inf")
                continue
            hours = random.Random(f"{rates.seed}:{inst.id}").expovariate(rate)
            self._interrupt_at[inst.id] = inst.created + hours * 3600.0
        return {inst.id: self._interrupt_at[inst.id] for inst in live if inst.id in self._interrupt_at}

    def _rate_interruptions(self, t: float) -> None:
        if self.scenario.spot_rates is None:
            return
        live = [i for i in self.provider.instances() if i.state != InstanceState.TERMINATED]
        victims = sorted(iid for iid, at in self._interruptions_due(live).items() if at <= t)
        for iid in victims:
            self.provider.interrupt(iid)
            self.record.ended.setdefault(iid, t)
        if victims:
            self._say(f"spot interruption: {len(victims)} node(s) reclaimed at their type's rate")
            self.record.markers.append((t, INTERRUPTION, len(victims)))

    def _next(
        self, t: float, i: int, interruptions: list[Any], outages: list[Any], live: list[Instance]
    ) -> float | None:
        """The next moment anything happens after ``t``; ``live`` are the instances not terminated."""
        times: list[float] = []
        if i < len(self.jobs):
            times.append(self.jobs[i].at)
        finish = self.cluster.next_finish()
        if finish is not None:
            times.append(finish)
        delays = (
            LAUNCH_DELAY,
            LAUNCH_DELAY + REGISTRATION_DELAY,
            LAUNCH_DELAY + REGISTRATION_DELAY + GPU_READY_DELAY,
        )
        # The simulated cloud lists instances oldest first: those still coming up are at the end.
        for inst in reversed(live):
            if inst.created + delays[-1] <= t:
                break
            for delay in delays:
                if inst.created + delay > t:
                    times.append(inst.created + delay)
        if self.cluster.version != self._last_version:
            times.append(t + max(self.config.batch_idle_duration, 1.0))
        last = self.controller.last
        if last is not None and last.plan is not None:
            wait = self.config.scale_down.node_unneeded_duration
            times += [s + wait for s in last.plan.removal.unneeded_since.values()]
            if last.plan.removal.next_check is not None:
                times.append(last.plan.removal.next_check)
        if self._removal_due(t):
            times.append(t + self.config.scan_interval)  # removals left for the next periodic reconcile
        if self.adjuster is not None:
            wakeup = self.adjuster.wakeup(t)
            if wakeup is not None and self.cluster.pods.waiting:
                times.append(wakeup)
        times += [x.at for x in interruptions] + [o.at for o in outages] + [o.until for o in outages]
        times += [at for at in self._interruptions_due(live).values() if at != float("inf")]
        times += self._reservation_times
        if self.kueue is not None:
            retry = self.kueue.next_time(t)
            if retry is not None:
                times.append(retry)
            if self.kueue.waiting or any(not w.pods for w in self.kueue.admitted):
                times.append(t + self.config.scan_interval)  # Kueue watches its requests
        future = [x for x in times if x > t]
        return min(future) if future else None

    def _sample(self, t: float) -> list[Instance]:
        """Record the cluster at ``t``; the instances not terminated."""
        rec = self.record
        live = [i for i in self.provider.instances() if i.state != InstanceState.TERMINATED]
        gpus_up = sum(i.gpu_count for i in live)
        spot_gpus = sum(i.gpu_count for i in live if i.capacity_type == CapacityType.SPOT)
        used, by_queue = self._bound_use()
        pending: dict[str, int] = {}
        verdicts = self._waiting_reasons()
        for sp in self.cluster.pods.waiting.values():
            if held_by_queue(sp.pod):
                kind = queue_hold(sp)
                if sp.pod.key in rec.launched_for:
                    # Capacity was bought for a pod its queue will not let run: an over-limit launch.
                    rec.held_after_launch.add(sp.pod.key)
            elif sp.pod.key in verdicts:
                kind = verdicts[sp.pod.key]
            elif sp.pod.key in rec.launched_for:
                kind = "waiting for its new node"
            else:
                kind = "not yet planned"
            pending[kind] = pending.get(kind, 0) + 1
        limit = self.config.cluster_gpu_limit
        if limit is not None and gpus_up > limit:
            rec.gpu_limit_violations += 1
        rec.samples.append(Sample(t, gpus_up, used, limit, pending, self._cost(t), spot_gpus, by_queue))
        return live


def _gpus_of(job: JobSpec) -> str:
    """How much GPU each pod of ``job`` asks for, as a timeline line says it."""
    if job.gpu_fraction:
        return f"{job.gpu_fraction:g}"
    if job.gpu_memory_mib:
        return f"{job.gpu_memory_mib} MiB of a"
    return str(job.gpus)


def _hhmm(t: float) -> str:
    day, rest = divmod(int(t), 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    return f"{'d' + str(day) + ' ' if day else ''}{h:02d}:{m:02d}"
