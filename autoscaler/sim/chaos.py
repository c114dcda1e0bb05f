"""Chaos runs: one seed, one randomized scenario, the real controller (two replicas of it) on a virtual clock
against a cloud and a cluster that fail in every way tidal must survive, and the promises it must keep checked
from what they recorded (:mod:`autoscaler.sim.chaos_world`).

A seed draws the limits, the capacity types and the disruption settings, a workload (single GPU and CPU jobs,
gangs, pods with PodDisruptionBudgets, do-not-evict pods, pods tidal cannot fully read), and faults at random
times: spot waves (a notice, then the reclaim), capacity outages, a GPU quota, launch throttling, cloud API
errors, Kubernetes API errors, broken watches (a stale cache), restarts of the leader right after it launched,
leader failover between the two replicas, a node condition that makes a node unhealthy, and a configuration
change that makes nodes drift. Same seed, same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoscaler.cloud import ProviderError
from autoscaler.config.values import Config
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.observability.events import EventRecorder
from autoscaler.sim.chaos_world import (
    KINDS,
    ChaosCloud,
    ChaosCluster,
    FlakyActions,
    Ledger,
    StaleView,
    Violation,
    mark_pods,
)
from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import SyncDrainer, VirtualClock
from autoscaler.sim.run import DEFAULT_CATALOG
from autoscaler.sim.scenario import JobSpec, parse_scenario

__all__ = ["ChaosResult", "run_seed"]

GIB = 1024**3 * 1000
STEP = 30.0
GPU_LOST = "GpuLost"


@dataclass(slots=True)
class ChaosResult:
    """What one seed did and broke."""

    seed: int
    violations: list[Violation] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    launches: int = 0
    evictions: int = 0
    reconciles: int = 0
    errors: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


@dataclass(slots=True)
class _Fault:
    at: float
    kind: str
    until: float = 0.0
    arg: Any = None


def _config(rng: random.Random, seed: int, duration: float) -> Config:
    settings: dict[str, Any] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zones": ["us-east-1a", "us-east-1b"],
        "clusterName": "chaos",
        "instanceTypeRegexp": r"(g4dn|g5|g6|m6i|c6i)\..*",
        "capacityTypes": rng.choice([["on-demand"], ["spot", "on-demand"]]),
        "clusterGPULimit": rng.choice([None, 4, 6, 8, 12, 16]),
        "maxNodes": rng.choice([None, None, 6, 10]),
        "newNodeGracePeriod": "60s",
        "scanInterval": "30s",
        "offeringUnavailableDuration": "3m",
        "gangLaunchTimeout": "10m",
        "registrationTimeout": "10m",
        "gpuReadinessTimeout": "8m",
        "scaleDown": {
            "nodeUnneededDuration": rng.choice(["60s", "120s", "300s"]),
            "replaceSavings": rng.choice([0.3, 0.5, 1]),
        },
        "disruption": {
            "nodeMaxLifetime": rng.choice(["0s", "0s", "45m", "90m"]),
            "replacementTimeout": "10m",
            "budgets": rng.choice([[], [{"nodes": 1}], [{"nodes": "50%"}], [{"nodes": "20%"}]]),
            "unhealthyConditions": [{"type": GPU_LOST, "status": "True", "duration": "5m"}],
        },
    }
    scenario = parse_scenario(
        {"name": f"chaos-{seed}", "duration": f"{int(duration // 3600):02d}:00", "config": settings},
        "chaos",
    )
    return build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")


def _jobs(rng: random.Random, duration: float) -> list[tuple[JobSpec, dict[str, str], bool, int | None]]:
    """(job, pod annotations, unreadable, PodDisruptionBudget minAvailable) for each job of the workload."""
    out: list[tuple[JobSpec, dict[str, str], bool, int | None]] = []
    t = 0.0
    i = 0
    while True:
        t += rng.expovariate(1 / 240.0)
        if t > duration * 0.75:
            return out
        i += 1
        kind = rng.random()
        if kind < 0.45:
            job = JobSpec(t, f"gpu{i}", rng.randint(1, 3), rng.choice([1, 1, 2, 4]), 2000, 8 * GIB, 0.0)
        elif kind < 0.75:
            job = JobSpec(t, f"cpu{i}", rng.randint(1, 6), 0, rng.choice([500, 1000, 3000]), 2 * GIB, 0.0)
        else:
            job = JobSpec(t, f"gang{i}", rng.randint(2, 4), 1, 2000, 8 * GIB, 0.0, gang=True)
        job = dataclasses.replace(job, duration=rng.uniform(600, 5400))
        annotations = {"tidal.dev/do-not-evict": "true"} if rng.random() < 0.1 else {}
        unreadable = rng.random() < 0.05
        budget = rng.choice([job.pods, max(0, job.pods - 1)]) if rng.random() < 0.15 else None
        out.append((job, annotations, unreadable, budget))


def _faults(rng: random.Random, duration: float) -> list[_Fault]:
    kinds = [
        "spot_wave",
        "capacity_outage",
        "gpu_quota",
        "throttle",
        "cloud_api_error",
        "kube_api_errors",
        "broken_watch",
        "restart_mid_launch",
        "failover",
        "gpu_lost",
        "drift",
    ]
    out = []
    for kind in kinds:
        for _ in range(rng.randint(0, 2)):
            at = round(rng.uniform(600, duration - 600) / STEP) * STEP
            out.append(_Fault(at, kind, at + rng.choice([120, 300, 900, 1800])))
    return sorted(out, key=lambda f: (f.at, f.kind))


class _Replica:
    """One tidal process: a name in the lease, and the incarnation it is now (a restart is a new one)."""

    def __init__(self, run: _Run, name: str) -> None:
        self.run = run
        self.name = name
        self.incarnation = 0
        self.controller = self._new()

    def _new(self) -> Controller:
        run = self.run
        self.incarnation += 1
        self.view = StaleView(run.cluster)  # a new process lists afresh: its cache is its own
        events = EventRecorder(
            lambda pod, reason, message, event_type: run.cluster.pod_event(
                pod, reason=reason, message=message
            ),
            node_sink=lambda node, reason, message, event_type: run.cluster.node_event(
                node, reason=reason, message=message
            ),
            clock=run.clock,
        )
        return Controller(
            config=lambda: run.config,
            cluster=self.view,
            provider=run.cloud,
            actions=run.actions,
            events=events,
            clock=run.clock,
            leader=lambda: run.leader == self.name,
            drainer=SyncDrainer(run.actions, run.cloud, lambda _: None),  # type: ignore[arg-type]
            rng=random.Random(run.seed * 7 + self.incarnation),
        )

    def restart(self) -> None:
        self.controller = self._new()

    @property
    def caller(self) -> str:
        return f"{self.name}#{self.incarnation}"


class _Run:
    def __init__(self, seed: int, duration: float) -> None:
        self.seed = seed
        self.duration = duration
        rng = random.Random(seed)
        self.rng = rng
        self.clock = VirtualClock()
        self.ledger = Ledger(self.clock)
        self.config = _config(rng, seed, duration)
        self.cluster = ChaosCluster(self.clock, self.ledger)
        self.cloud = ChaosCloud(
            self.config, clock=self.clock, kube=self.cluster, seed=seed, ledger=self.ledger
        )
        self.actions = FlakyActions(self.cluster, random.Random(seed + 1), self.ledger)
        self.jobs = _jobs(rng, duration)
        self.faults = _faults(rng, duration)
        self.leader = "tidal-a"
        self.replicas = [_Replica(self, "tidal-a"), _Replica(self, "tidal-b")]
        self.restart_pending = False
        self.result = ChaosResult(seed)

    # -- faults -----------------------------------------------------------------------------------------

    def _begin(self, f: _Fault) -> None:
        cloud, rng = self.cloud, self.rng
        self.ledger.faults[f.kind] += 1
        live = cloud.live()
        if f.kind == "spot_wave":
            spot = [i for i in live if i.capacity_type == "spot"]
            f.arg = rng.sample(spot, k=max(0, round(len(spot) * rng.uniform(0.3, 1.0))))
            for inst in f.arg:
                cloud.warn_interruption(inst.id)
            f.until = f.at + 120  # the reclaim, a two-minute notice later
        elif f.kind == "capacity_outage":
            f.arg = rng.choice(["g4dn.xlarge", "g5.xlarge", "g6.xlarge", None])
            cloud.fail_capacity(f.arg, rng.choice(["us-east-1a", None]), rng.choice(["spot", None]))
        elif f.kind == "gpu_quota":
            used = sum(i.gpu_count for i in live)
            cloud.settings = dataclasses.replace(cloud.settings, quota_gpus=used + rng.randint(0, 2))
        elif f.kind == "throttle":
            cloud.throttle_next = rng.randint(1, 3)
        elif f.kind == "cloud_api_error":
            for method in ("instances", "terminate", "offerings"):
                cloud.inject_error(
                    method, ProviderError("injected: the cloud API answered 503"), rng.randint(1, 3)
                )
        elif f.kind == "kube_api_errors":
            self.actions.rate = rng.choice([0.1, 0.3])
        elif f.kind == "broken_watch":
            f.arg = self._leading()
            f.arg.view.freeze()
        elif f.kind == "restart_mid_launch":
            self.restart_pending = True
        elif f.kind == "failover":
            self.leader = "tidal-b" if self.leader == "tidal-a" else "tidal-a"
            if rng.random() < 0.5:
                self.replicas[0 if self.leader == "tidal-b" else 1].restart()  # the old leader had crashed
        elif f.kind == "gpu_lost":
            gpu = sorted(n for n, node in self.cluster.nodes.items() if node.gpus)
            if gpu:
                self.cluster.set_condition(rng.choice(gpu), GPU_LOST, "True", self.clock.now)
        elif f.kind == "drift":
            labels = {**self.config.node_labels, "chaos.example/epoch": str(self.seed % 7 + int(f.at))}
            self.config = dataclasses.replace(self.config, node_labels=labels)

    def _end(self, f: _Fault) -> None:
        cloud = self.cloud
        if f.kind == "spot_wave":
            for inst in f.arg or ():
                cloud.interrupt(inst.id)
        elif f.kind == "capacity_outage":
            cloud.restore_capacity()
        elif f.kind == "gpu_quota":
            cloud.settings = dataclasses.replace(cloud.settings, quota_gpus=None)
        elif f.kind == "kube_api_errors":
            self.actions.rate = 0.0
        elif f.kind == "broken_watch":
            f.arg.view.thaw()

    def _leading(self) -> _Replica:
        return next(r for r in self.replicas if r.name == self.leader)

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self) -> ChaosResult:
        started = time.perf_counter()
        jobs = list(self.jobs)
        pending_faults = list(self.faults)
        active: list[_Fault] = []
        t = 0.0
        step = 0
        while t <= self.duration:
            self.clock.now = t
            while jobs and jobs[0][0].at <= t:
                job, annotations, unreadable, budget = jobs.pop(0)
                keys = self.cluster.submit(job, t)
                if annotations or unreadable:
                    mark_pods(self.cluster, keys, annotations, unreadable)
                if budget is not None:
                    self.cluster.add_pdb(job.name, {"app": job.name}, budget)
            while pending_faults and pending_faults[0].at <= t:
                fault = pending_faults.pop(0)
                self._begin(fault)
                active.append(fault)
            for fault in [f for f in active if f.until <= t]:
                self._end(fault)
                active.remove(fault)
            self.cluster.finish_due(t)
            self._advance(t)
            for i, replica in enumerate(self.replicas):
                leading = replica.name == self.leader
                if leading or step % 4 == i:
                    self._reconcile(replica)
            self._advance(t)
            t += STEP
            step += 1
        self.result.violations = list(self.ledger.violations)
        self.result.faults = dict(self.ledger.faults)
        self.result.launches = self.cloud.launched
        self.result.wall_seconds = time.perf_counter() - started
        return self.result

    def _advance(self, t: float) -> None:
        with contextlib.suppress(ProviderError):  # an injected error; the next advance catches up
            self.cloud.advance()
        self.cluster.schedule(t)

    def _reconcile(self, replica: _Replica) -> None:
        self.cloud.caller = replica.caller
        evictions_before = len(self.cluster.evicted)
        result = replica.controller.reconcile_once()
        self.result.reconciles += 1
        self.result.evictions += len(self.cluster.evicted) - evictions_before
        if result.error and not result.error.startswith("ProviderError"):
            self.result.errors.append(f"t={self.clock.now:.0f} {replica.caller}: {result.error}")
        self.cluster.check_gangs()
        launched = any(o.instance is not None for o in result.launched)
        if self.restart_pending and launched and replica.name == self.leader:
            self.restart_pending = False
            replica.restart()


def run_seed(seed: int, *, duration: float = 2 * 3600.0) -> ChaosResult:
    """Run one seed's scenario to its end and return what it broke."""
    return _Run(seed, duration).run()


def summarize(results: list[ChaosResult]) -> dict[str, Any]:
    """Totals over seeds: violations by kind (every kind listed), faults injected, work done."""
    violations = dict.fromkeys(KINDS, 0)
    faults: dict[str, int] = {}
    for r in results:
        for v in r.violations:
            violations[v.kind] += 1
        for k, n in r.faults.items():
            faults[k] = faults.get(k, 0) + n
    return {
        "seeds": len(results),
        "violations": violations,
        "seedsWithViolations": sorted(r.seed for r in results if r.violations),
        "faultsInjected": dict(sorted(faults.items())),
        "launches": sum(r.launches for r in results),
        "evictions": sum(r.evictions for r in results),
        "reconciles": sum(r.reconciles for r in results),
        "reconcileErrors": sum(len(r.errors) for r in results),
    }


Runner = Callable[[int], ChaosResult]
