"""What a simulation run gathers as it goes: samples of the cluster over time, the timeline's lines and
markers, every instance's start and end, and the pods; and the cost and launch counts read from them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from autoscaler.core.offering import Instance
from autoscaler.sim.pods import SimPod

__all__ = [
    "INTERRUPTION",
    "LAUNCH",
    "OUTAGE_BEGINS",
    "OUTAGE_ENDS",
    "REMOVAL",
    "CostSoFar",
    "Record",
    "Sample",
    "cost_so_far",
    "over_limit_launches",
]


@dataclass(slots=True)
class Sample:
    t: float
    gpus_up: int
    gpus_used: float  # a share of a GPU counts as its part
    gpu_limit: int | None
    pending: dict[str, int]
    cost: float
    spot_gpus: int = 0  # of gpus_up, on spot instances
    queue_gpus: dict[str, float] = field(default_factory=dict)  # GPUs of running pods, by KAI queue


# Kinds of Record.markers: what the timeline marks on its time axis.
LAUNCH, REMOVAL, INTERRUPTION, OUTAGE_BEGINS, OUTAGE_ENDS = (
    "launch",
    "removal",
    "interruption",
    "outage begins",
    "outage ends",
)


@dataclass(slots=True)
class Record:
    """Everything the report needs, gathered as the simulation runs."""

    policy: str
    scenario: str
    samples: list[Sample] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)
    started: dict[str, tuple[Instance, float]] = field(default_factory=dict)  # id -> (instance, start)
    ended: dict[str, float] = field(default_factory=dict)
    launch_pods: list[tuple[str, ...]] = field(default_factory=list)
    launched_for: set[str] = field(default_factory=set)
    held_after_launch: set[str] = field(default_factory=set)
    gpu_limit_violations: int = 0
    launches: int = 0
    removals: int = 0
    reconciles: int = 0
    pods: list[SimPod] = field(default_factory=list)
    cut_runs: list[SimPod] = field(default_factory=list)  # runs an eviction or a lost node ended early
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: what the run cost on a machine shared with others
    end: float = 0.0
    gpu_nodes_at_end: int = 0
    # Why each pod still waiting at the end waited: the last plan's verdict on it.
    waiting: dict[str, str] = field(default_factory=dict)
    markers: list[tuple[float, str, int]] = field(default_factory=list)  # (time, kind, nodes)
    queues: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # name -> (quota, limit)
    scaling_pods: int = 0  # created by KAI's node-scale-adjuster (baselines only)


def over_limit_launches(rec: Record) -> int:
    """Launches made (at least partly) for pods that their KAI queue held back over quota or limit."""
    return sum(1 for pods in rec.launch_pods if any(k in rec.held_after_launch for k in pods))


def cost_so_far(rec: Record, t: float) -> float:
    """USD spent on instances up to ``t``."""
    total = 0.0
    for iid, (inst, start) in rec.started.items():
        end = min(rec.ended.get(iid, t), t)
        if end > start:
            total += inst.price * (end - start) / 3600
    return total


class CostSoFar:
    """:func:`cost_so_far` for a run asked at later and later times, without going over every instance ever
    started each time: what an instance that has ended cost is added once, to a sum kept for the ended ones,
    and each call adds up only the instances still running. (The same sum in another order: equal to
    :func:`cost_so_far` within a few units of the last place, far below the cent the timeline shows; the
    summary's cost is :func:`cost_so_far`'s own.)"""

    def __init__(self, rec: Record) -> None:
        self.rec = rec
        self._seen = 0  # how many of rec.started have been looked at
        self._running: dict[str, tuple[float, float]] = {}  # id -> (price, start), not ended by the last call
        self._ended = 0.0  # what the instances that had ended by the last call cost
        self._at = float("-inf")

    def __call__(self, t: float) -> float:
        """USD spent on instances up to ``t`` (never earlier than the last time asked)."""
        assert t >= self._at, "asked about an earlier time"
        self._at = t
        rec = self.rec
        if len(rec.started) > self._seen:
            for iid, (inst, start) in itertools.islice(rec.started.items(), self._seen, None):
                self._running[iid] = (inst.price, start)
            self._seen = len(rec.started)
        total = 0.0
        for iid, (price, start) in list(self._running.items()):
            ended = rec.ended.get(iid)
            if ended is not None and ended <= t:  # what it cost will not change again
                del self._running[iid]
                if ended > start:
                    self._ended += price * (ended - start) / 3600
            else:
                end = min(ended, t) if ended is not None else t
                if end > start:
                    total += price * (end - start) / 3600
        return self._ended + total
