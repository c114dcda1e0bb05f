"""The lower bound: exact for steady demand, below what any simulated policy paid, and aware of outages."""

from __future__ import annotations

import pytest

from autoscaler.sim.cluster import SimPod
from autoscaler.sim.engine import build_config
from autoscaler.sim.lower_bound import lower_bound
from autoscaler.sim.run import DEFAULT_CATALOG, _provider, simulate
from autoscaler.sim.scenario import Outage, load_scenario, parse_scenario
from tests.builders import pod, snapshot

pytest.importorskip("scipy")

SCENARIO = parse_scenario(
    {
        "name": "steady",
        "config": {
            "cloud": "aws",
            "region": "us-east-1",
            "zones": ["us-east-1a"],
            "capacityTypes": ["on-demand"],
            "instanceFamilyInclusions": ["g4dn", "m6i"],
        },
    },
    "steady.yaml",
)


@pytest.fixture(scope="module")
def world():
    config = build_config(SCENARIO, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    offerings = _provider(config, clock=lambda: 0.0, kube=None).offerings()
    return config, [o for o in offerings if o.instance_type.split(".")[0] in ("g4dn", "m6i")]


def _runs(n: int, start: float, end: float, **kwargs) -> list[SimPod]:
    pods = snapshot(*(pod(f"infer-{i}", message=None, **kwargs) for i in range(n))).pods
    return [SimPod(p, "infer", "", "", end - start, True, start, started=start, ended=end) for p in pods]


def test_steady_demand_costs_exactly_the_cheapest_fractional_packing(world):
    config, offerings = world
    runs = _runs(6, 0.0, 7200.0, gpu=1, cpu="3", memory="12Gi")
    # A g4dn.xlarge (1 GPU, $0.526/h on demand) holds one such pod; no g4dn is cheaper per GPU.
    per_pod = min(o.price / o.gpu_count for o in offerings if o.gpu_count and o.capacity_type == "on-demand")
    assert per_pod == pytest.approx(0.526)
    bound = lower_bound(runs, offerings, config, end=7200.0)
    assert bound["cost"] == pytest.approx(6 * per_pod * 2, rel=1e-6)


def test_demand_that_changes_is_integrated_between_starts_and_ends(world):
    config, offerings = world
    one_gpu = {"gpu": 1, "cpu": "3", "memory": "12Gi"}
    runs = _runs(2, 0.0, 3600.0, **one_gpu) + _runs(1, 1800.0, 5400.0, **one_gpu)
    bound = lower_bound(runs, offerings, config, end=7200.0)
    assert bound["cost"] == pytest.approx(0.526 * (2 * 1.0 + 1 * 1.0), rel=1e-6)


def test_a_run_started_during_an_outage_of_the_cheapest_offering_is_bounded_by_the_next(world):
    config, offerings = world
    runs = _runs(1, 600.0, 4200.0, gpu=1, cpu="3", memory="12Gi")
    free = lower_bound(runs, offerings, config, end=7200.0)["cost"]
    outage = Outage(at=0.0, until=1200.0, instance_type="g4dn.xlarge")
    out = lower_bound(runs, offerings, config, end=7200.0, outages=[outage])["cost"]
    assert free == pytest.approx(0.526)
    assert out == pytest.approx(0.752)  # g4dn.2xlarge, the next cheapest node with a GPU


@pytest.mark.parametrize("name", ["kai-day", "spot-storm"])
@pytest.mark.parametrize("policy", ["tidal", "karpenter-like"])
def test_no_policy_pays_less_than_the_bound(name, policy):
    doc = simulate(load_scenario(name), policy=policy).summary
    assert 0 < doc["lowerBound"]["cost"] <= doc["cost"]["total"]
