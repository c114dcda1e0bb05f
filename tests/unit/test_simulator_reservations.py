"""The simulator with capacity bought ahead: a Capacity Block's nodes drained before the cloud ends them,
with the pods' replacement Ready before the end; reservations paid for whether used or not; baselines that
use them as Karpenter and cluster-autoscaler users do."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from autoscaler.sim.run import simulate
from autoscaler.sim.scenario import ScenarioError, load_scenario, parse_scenario

if TYPE_CHECKING:
    from typing import Any

    from autoscaler.sim.run import Outcome
    from autoscaler.sim.scenario import Scenario

HOUR = 3600.0
BLOCK_END = 6 * HOUR


def block_scenario(**jobs_extra: Any) -> Scenario:
    return parse_scenario(
        {
            "name": "block-end",
            "duration": "08:00",
            "config": {
                "cloud": "aws",
                "region": "us-east-1",
                "zones": ["us-east-1a"],
                "capacityTypes": ["reserved", "on-demand"],
                "instanceFamilyInclusions": ["g4dn", "g5"],
            },
            "reservations": [
                {
                    "id": "cb-train",
                    "instanceType": "g5.xlarge",
                    "zone": "us-east-1a",
                    "count": 1,
                    "kind": "capacity-block",
                    "at": "00:00",
                    "until": "06:00",
                }
            ],
            "jobs": [
                {
                    "at": "00:10",
                    "name": "train",
                    "pods": 1,
                    "gpus": 1,
                    "cpu": "3",
                    "memory": "12Gi",
                    "duration": "7h",
                }
            ],
        },
        "block-end.yaml",
    )


@pytest.fixture(scope="module")
def block_end() -> Outcome:
    return simulate(block_scenario(), bound=False)


def test_a_pod_runs_in_the_capacity_block_while_it_lasts(block_end: Outcome) -> None:
    rec = block_end.record
    first = min(rec.started.values(), key=lambda x: x[1])
    assert (first[0].instance_type, first[0].capacity_type, first[0].reservation_id) == (
        "g5.xlarge",
        "reserved",
        "cb-train",
    )


def test_a_block_node_is_drained_before_the_cloud_ends_it_and_its_replacement_is_ready_before_the_end(
    block_end: Outcome,
) -> None:
    rec = block_end.record
    [(block, _)] = [v for v in rec.started.values() if v[0].reservation_id == "cb-train"]
    # Drained 40 minutes before the end: ten minutes before EC2 starts terminating (30 minutes before).
    assert rec.ended[block.id] == BLOCK_END - 40 * 60
    [(replacement, launched_at)] = [v for v in rec.started.values() if v[0].reservation_id == ""]
    assert replacement.capacity_type == "on-demand"
    assert launched_at == BLOCK_END - 40 * 60  # planned in the reconcile that drained the block's node
    [train] = [sp for sp in rec.pods if sp.job == "train"]
    assert train.started is not None and train.started < BLOCK_END - 30 * 60  # Ready before EC2 reclaims
    assert train.pod.node_name == replacement.id
    assert [cut.ended for cut in rec.cut_runs] == [BLOCK_END - 40 * 60]  # the one run the drain moved


def test_reservations_are_paid_for_whether_used_or_not(block_end: Outcome) -> None:
    fee = round(1 * 1.006 * 6, 4)  # one g5.xlarge at the on-demand price for the block's six hours
    cost = block_end.summary["cost"]
    assert cost["reservations"] == fee
    assert cost["total"] == round(cost["instances"] + fee, 4)
    unused = simulate(replace(block_scenario(), jobs=()), bound=False).summary["cost"]
    assert (unused["reservations"], unused["instances"]) == (fee, 0.0)


def test_kai_day_reserved_fills_the_reservation_before_buying_and_counts_its_fee() -> None:
    out = simulate(load_scenario("kai-day-reserved"), bound=False)
    reserved_launches = [v for v in out.record.started.values() if v[0].reservation_id == "cr-kai-day-t4"]
    assert len(reserved_launches) == 4  # never more than the reservation holds
    assert out.summary["cost"]["reservations"] == round(4 * 0.526 * 24, 4)
    assert out.summary["gpuLimitViolations"] == 0


def test_ca_like_keeps_the_reservations_node_group_full_and_karpenter_like_caps_at_its_count() -> None:
    ca = simulate(load_scenario("kai-day-reserved"), policy="ca-like", bound=False).record
    karpenter = simulate(load_scenario("kai-day-reserved"), policy="karpenter-like", bound=False).record
    in_reservation = [v for v in ca.started.values() if v[0].reservation_id == "cr-kai-day-t4"]
    assert len(in_reservation) == 4
    first = min(t for _, t in ca.started.values())
    assert {t for _, t in in_reservation} == {first}  # filled at the first reconcile, whatever the demand
    assert all(ca.ended.get(i.id, ca.end) == ca.end for i, _ in in_reservation)  # never scaled down
    assert len([v for v in karpenter.started.values() if v[0].reservation_id == "cr-kai-day-t4"]) <= 4


def test_a_capacity_block_without_its_window_is_one_clear_line() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(
            {
                "reservations": [
                    {
                        "id": "cb",
                        "instanceType": "g5.xlarge",
                        "zone": "us-east-1a",
                        "count": 1,
                        "kind": "capacity-block",
                    }
                ]
            },
            "s.yaml",
        )
    assert str(caught.value) == "s.yaml: reservations[0]: a capacity-block needs at and until"
