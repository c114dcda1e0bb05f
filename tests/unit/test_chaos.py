"""The chaos benchmark in small: a few seeds keep every promise, one seed is one run, and the checks catch a
tidal that breaks a promise (the 1,000-seed run is bench/chaos.py)."""

from __future__ import annotations

import pytest

import autoscaler.runtime.disrupting
import autoscaler.sim.engine
from autoscaler.runtime.kube.actions import EvictionResult
from autoscaler.sim.chaos import run_seed, summarize
from autoscaler.sim.chaos_world import KILLED, PARTIAL_GANG, PROTECTED, ChaosCluster, Ledger
from autoscaler.sim.engine import VirtualClock
from autoscaler.sim.scenario import JobSpec
from tests.builders import node

SEEDS = (12, 15, 25)  # among the first seeds that each found a bug, since fixed


def test_a_few_seeds_of_chaos_break_no_promise() -> None:
    results = [run_seed(seed) for seed in SEEDS]
    summary = summarize(results)
    assert summary["violations"] == dict.fromkeys(summary["violations"], 0), [r.violations for r in results]
    assert summary["reconcileErrors"] == 0
    assert summary["evictions"] > 0 and summary["launches"] > 0
    assert len(summary["faultsInjected"]) >= 8  # the seeds met most kinds of fault between them


def test_a_seed_is_one_run() -> None:
    first, again = run_seed(15, duration=3600.0), run_seed(15, duration=3600.0)
    assert (first.launches, first.evictions, first.reconciles, first.faults) == (
        again.launches,
        again.evictions,
        again.reconciles,
        again.faults,
    )


def test_a_tidal_that_deleted_nodes_without_a_fresh_look_would_be_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def blind(actions: object, node: str, evicted: object) -> tuple[list[str], list[str]]:
        return [], []  # what trusting the informer cache amounts to while its watch is broken

    for module in (autoscaler.runtime.disrupting, autoscaler.sim.engine):
        monkeypatch.setattr(module, "last_look", blind)
    result = run_seed(12)
    assert [v.kind for v in result.violations] == [KILLED]


@pytest.fixture
def cluster() -> ChaosCluster:
    c = ChaosCluster(VirtualClock(), Ledger(VirtualClock()))
    c.create(node("gpu-a", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True))
    c.create(node("gpu-b", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True))
    return c


def test_a_node_deleted_with_pods_on_it_is_a_pod_killed(cluster: ChaosCluster) -> None:
    cluster.submit(JobSpec(0.0, "web", 1, 0, 500, 10**12, 3600.0), 0.0)
    cluster.schedule(0.0)
    cluster.delete_node(next(sp.pod.node_name for sp in cluster.pods.values()))
    assert [v.kind for v in cluster.ledger.violations] == [KILLED]


def test_evicting_a_do_not_evict_pod_is_a_broken_promise(cluster: ChaosCluster) -> None:
    from dataclasses import replace

    [key] = cluster.submit(JobSpec(0.0, "db", 1, 0, 500, 10**12, 3600.0), 0.0)
    cluster.pods[key].pod = replace(cluster.pods[key].pod, annotations={"tidal.dev/do-not-evict": "true"})
    cluster.schedule(0.0)
    assert cluster.evict("default", "db-0") == EvictionResult.EVICTED
    assert [v.kind for v in cluster.ledger.violations] == [PROTECTED]


def test_evicting_part_of_a_running_gang_is_a_broken_promise(cluster: ChaosCluster) -> None:
    cluster.submit(JobSpec(0.0, "train", 2, 1, 500, 10**12, 3600.0, gang=True), 0.0)
    cluster.schedule(0.0)
    cluster.evict("default", "train-0")
    cluster.check_gangs()
    assert [v.kind for v in cluster.ledger.violations] == [PARTIAL_GANG]
