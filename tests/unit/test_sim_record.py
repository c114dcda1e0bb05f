"""What a simulation run gathers: the cost of its instances up to each sample, kept as the run goes, is the
cost added up over every instance at that time (to far below a cent: the same sum in another order)."""

from __future__ import annotations

import random

import pytest

from autoscaler.core.model import CapacityType, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.sim.record import CostSoFar, Record, cost_so_far

PRICES = (0.096, 0.526, 1.006, 3.912, 21.9576)


def _launch(rec: Record, n: int, at: float, rng: random.Random) -> str:
    iid = f"i-{n:05d}"
    price = rng.choice(PRICES)
    inst = Instance(
        iid, f"aws:///us-east-1a/{iid}", "m6i.large", "us-east-1a", CapacityType.ON_DEMAND,
        InstanceState.RUNNING, created=at, price=price,
    )  # fmt: skip
    rec.started.setdefault(iid, (inst, at))
    return iid


def test_the_cost_kept_as_a_run_goes_is_the_cost_added_up_over_every_instance() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        rec = Record("tidal", "burst")
        kept = CostSoFar(rec)
        live: list[str] = []
        t = 0.0
        for n in range(300):
            t += rng.choice([0.0, 1.0, 7.5, 60.0, 613.0])
            if rng.random() < 0.6:
                live.append(_launch(rec, n, t, rng))
            if live and rng.random() < 0.5:
                # Nodes end in any order, and some at the very moment they started.
                rec.ended.setdefault(live.pop(rng.randrange(len(live))), t)
            assert kept(t) == pytest.approx(cost_so_far(rec, t), rel=1e-12, abs=1e-9), (seed, n)
        assert kept(t + 3600.0) == pytest.approx(cost_so_far(rec, t + 3600.0), rel=1e-12, abs=1e-9)
