"""The simulator's spot interruptions at each type's published rate (``spotInterruptionRates``): the rate the
catalog's Spot Advisor bucket gives, the share counted over the scenario's period, the same in every run."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.sim.record import INTERRUPTION
from autoscaler.sim.run import simulate
from autoscaler.sim.scenario import ScenarioError, load_scenario, parse_scenario

# m6i.4xlarge spot: bucket 4 in the demo catalog (over 20% of instances a month, counted as 30%).
ETL = {"at": "01:00", "name": "etl", "pods": 4, "cpu": "14", "memory": "56Gi", "duration": "10h"}


def scenario(period: str, seed: int = 0) -> dict[str, Any]:
    return {
        "name": "rates",
        "duration": "24:00",
        "config": {
            "cloud": "aws",
            "region": "us-east-1",
            "zones": ["us-east-1a"],
            "capacityTypes": ["spot"],
            "instanceFamilyInclusions": ["m6i"],
        },
        "spotInterruptionRates": {"period": period, "seed": seed},
        "jobs": [ETL],
    }


def interruptions(doc: dict[str, Any]) -> int:
    out = simulate(parse_scenario(doc, "rates.yaml"), bound=False)
    assert out.summary["podsNeverServed"] == 0
    return sum(n for _, kind, n in out.record.markers if kind == INTERRUPTION)


def test_spot_nodes_whose_type_loses_30_percent_an_hour_are_interrupted_and_their_pods_run_again() -> None:
    out = simulate(parse_scenario(scenario("1h"), "rates.yaml"), bound=False)
    assert sum(n for _, kind, n in out.record.markers if kind == INTERRUPTION) > 0
    assert out.record.cut_runs  # the interrupted pods' runs were cut short, and they ran again
    assert out.summary["podsNeverServed"] == 0


def test_a_months_share_over_a_month_leaves_a_ten_hour_job_almost_never_interrupted() -> None:
    assert interruptions(scenario("730h")) == 0


def test_the_same_seed_interrupts_the_same_nodes_at_the_same_times() -> None:
    first = simulate(parse_scenario(scenario("2h", seed=3), "rates.yaml"), bound=False).record.markers
    again = simulate(parse_scenario(scenario("2h", seed=3), "rates.yaml"), bound=False).record.markers
    assert first == again


def test_a_period_of_no_time_is_one_clear_error() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({**scenario("0s"), "jobs": []}, "rates.yaml")
    assert str(caught.value) == "rates.yaml: spotInterruptionRates.period: '0s' is not longer than 0s"


def test_the_spot_risk_scenario_loads_with_its_rates_and_its_jobs_tolerances() -> None:
    loaded = load_scenario("spot-risk")
    assert loaded.spot_rates is not None and loaded.spot_rates.period == 6 * 3600.0
    assert {j.name: j.interruption_cost for j in loaded.jobs}["web"] == "0"
