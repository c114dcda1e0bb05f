"""The simulator's Kueue (a ProvisioningRequest admission check) and CapacityBuffers, under tidal: workloads
get their pods only once tidal provisioned their capacity whole, and a buffer starts GPU pods on warm nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import Simulation
from autoscaler.sim.run import DEFAULT_CATALOG, Outcome, _provider, simulate
from autoscaler.sim.scenario import ScenarioError, load_scenario, parse_scenario


def kueue_day() -> Simulation:
    scenario = load_scenario("kueue-day")
    config = build_config(
        scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="", overrides_source="test"
    )
    sim = Simulation(scenario, config, _provider)
    sim.run()
    return sim


@pytest.fixture(scope="module")
def day() -> Simulation:
    return kueue_day()


def test_every_workload_gets_its_pods_only_after_its_request_was_provisioned(day: Simulation) -> None:
    assert day.kueue is not None
    workloads = [*day.kueue.admitted, *day.kueue.finished]
    assert sorted(w.job.name for w in workloads) == sorted(j.name for j in day.scenario.jobs)
    history = day.cluster.requests.history
    for w in workloads:
        assert w.provisioned is not None
        provisioned_at = min(
            t for t, name, c in history if name == w.request and c["Provisioned"][0] == "True"
        )
        assert provisioned_at <= w.provisioned


def test_a_workload_over_the_gpu_limit_waits_provisioned_false_and_is_never_launched_for_in_part(
    day: Simulation,
) -> None:
    answers = [c for _, name, c in day.cluster.requests.history if name == "sweep-c-prov-1"]
    assert answers[0]["Provisioned"] == ("False", "CapacityIsNotFound")
    assert answers[-1]["Provisioned"][0] == "True"
    assert day.record.gpu_limit_violations == 0


def test_the_kueue_day_runs_every_pod_within_the_gpu_limit() -> None:
    outcome = simulate(load_scenario("kueue-day"), bound=False)
    assert outcome.summary["gpuLimitViolations"] == 0
    assert outcome.summary["overLimitLaunches"] == 0
    assert outcome.summary["pods"]["ran"] == sum(j.pods for j in load_scenario("kueue-day").jobs)


def test_a_buffer_starts_gpu_pods_on_warm_nodes_and_costs_the_warm_node() -> None:
    scenario = load_scenario("buffer-day")
    warm = simulate(scenario, bound=False)
    cold = simulate(replace(scenario, buffers=()), bound=False)

    def waits(outcome: Outcome) -> list[float]:
        pods = outcome.record.pods
        return [sp.started - sp.submitted for sp in pods if sp.started is not None]

    assert sum(1 for w in waits(warm) if w < 30) >= 9  # all but the second pod of the one 2-pod job
    assert min(waits(cold)) > 60  # every pod waits for a node to come up
    assert warm.summary["cost"]["total"] > cold.summary["cost"]["total"]
    assert warm.summary["gpuLimitViolations"] == 0


def test_a_kueue_section_with_an_unknown_class_is_refused_naming_the_field() -> None:
    doc = {"name": "x", "kueue": {"provisioningClass": "queued-provisioning.gke.io"}, "jobs": []}
    with pytest.raises(ScenarioError, match="provisioningClass"):
        parse_scenario(doc, "x.yaml")
