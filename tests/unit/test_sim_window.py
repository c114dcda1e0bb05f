"""The simulator reconciles as tidal's daemon does while a batch window is open: a job whose pods fill their
nodes is launched for when it arrives, other jobs when the window closes; the baselines wait for it."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.sim.run import simulate
from autoscaler.sim.scenario import JobSpec, load_scenario

GIB = 1024**3 * 1000  # memory in milli-bytes, as scenarios give it


def started(policy: str) -> dict[str, float]:
    jobs = (
        JobSpec(600.0, "train", 1, 1, 4000, 16 * GIB, 1800.0),
        JobSpec(600.0, "web", 1, 0, 1000, 2 * GIB, 1800.0),
    )
    scenario = replace(load_scenario("kai-day"), jobs=jobs, interruptions=(), outages=(), duration=3600.0)
    out = simulate(scenario, policy=policy, bound=False)
    return {("gpu" if i.gpu_count else "cpu"): t for i, t in out.record.started.values()}


def test_tidal_launches_a_gpu_job_as_it_arrives_and_a_cpu_job_when_the_window_closes() -> None:
    assert started("tidal") == {"gpu": 600.0, "cpu": 601.0}


def test_a_baseline_launches_both_when_the_window_closes() -> None:
    assert started("karpenter-like") == {"gpu": 601.0, "cpu": 601.0}
