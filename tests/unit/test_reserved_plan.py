"""Reserved capacity in a plan: used first, never past its free count, targeted only on request, Capacity
Blocks only inside their window."""

from __future__ import annotations

import csv
import io
from collections import Counter
from typing import TYPE_CHECKING

from autoscaler.cli.render import plan_to_json, plan_to_table
from autoscaler.core.demand import Reason
from autoscaler.core.fit import node_labels
from autoscaler.core.offering import ReservationKind
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.reserved import InFlight
from autoscaler.runtime.catalog import offerings_from_rows, write_catalog_csv
from autoscaler.runtime.fleet import Fleet
from tests.builders import INSUFFICIENT_GPU, aws_offerings, pod, podgroup, reserved, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z
HOUR = 3600.0
RESERVED_FIRST = {"capacityTypes": ["reserved", "on-demand"]}


def base(instance_type: str, zone: str = "us-east-1a") -> Offering:
    return next(
        o
        for o in aws_offerings(zones=("us-east-1a", "us-east-1b"))
        if o.instance_type == instance_type and o.zone == zone and o.capacity_type == "on-demand"
    )


def g5_reservation(rid: str = "cr-0a1b2c3d4e5f60001", **kw: Any) -> Offering:
    return reserved(base("g5.xlarge"), rid, **kw)


def launched(result: Plan) -> Counter[str]:
    return Counter(la.offering.key for la in result.launch.launches)


def gpu_pod(name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)


def run(
    make_config: Callable[..., Config],
    *objs: dict[str, Any],
    extra: Sequence[Offering] = (),
    now: float = NOW,
    **cfg: Any,
) -> Plan:
    offerings = [*aws_offerings(), *extra]
    return plan(PlanInput(snapshot(*objs), offerings, make_config(**{**RESERVED_FIRST, **cfg}), now))


def reasons(result: Plan) -> dict[str, str]:
    return {u.pod: u.reason for u in result.launch.unplaced}


def test_reserved_capacity_that_fits_is_used_before_cheaper_on_demand(
    make_config: Callable[..., Config],
) -> None:
    # g4dn.xlarge is the cheapest on-demand GPU node, but the g5.xlarge reservation is already paid for.
    result = run(make_config, gpu_pod("infer-1"), extra=[g5_reservation(available=2)])
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}
    assert result.launch.cost_per_hour == 0.0


def test_a_reservation_is_never_planned_past_its_free_count(make_config: Callable[..., Config]) -> None:
    pods = [gpu_pod(f"infer-{i}") for i in range(5)]
    result = run(make_config, *pods, extra=[g5_reservation(available=2, total=4)])
    assert launched(result) == {
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 2,
        "g4dn.xlarge/us-east-1a/on-demand": 3,
    }


def test_a_node_planned_into_a_reservation_falls_back_to_on_demand_never_to_another_reservation(
    make_config: Callable[..., Config],
) -> None:
    other = reserved(base("g5.xlarge", "us-east-1b"), "cr-0a1b2c3d4e5f60002", available=1)
    result = run(make_config, gpu_pod("infer-1"), extra=[g5_reservation(available=1), other])
    (la,) = result.launch.launches
    assert la.offering.reservation is not None
    assert la.alternatives
    assert all(o.reservation is None for o in la.alternatives)


def test_nodes_planned_as_on_demand_never_fall_back_into_a_reservation(
    make_config: Callable[..., Config],
) -> None:
    pods = [gpu_pod(f"infer-{i}") for i in range(2)]
    result = run(make_config, *pods, extra=[g5_reservation(available=1)])
    on_demand = [la for la in result.launch.launches if la.offering.reservation is None]
    assert len(on_demand) == 1
    assert all(o.reservation is None for o in on_demand[0].alternatives)


def test_two_reservations_of_one_type_in_one_zone_are_counted_apart(
    make_config: Callable[..., Config],
) -> None:
    first = g5_reservation("cr-0a1b2c3d4e5f60001", available=1)
    second = g5_reservation("cr-0a1b2c3d4e5f60002", available=1)
    assert first.key != second.key
    result = run(make_config, *[gpu_pod(f"infer-{i}") for i in range(3)], extra=[first, second])
    assert launched(result) == {
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1,
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60002": 1,
        "g4dn.xlarge/us-east-1a/on-demand": 1,
    }


def test_reserved_nodes_still_count_toward_the_cluster_gpu_limit(make_config: Callable[..., Config]) -> None:
    pods = [gpu_pod(f"infer-{i}") for i in range(2)]
    result = run(make_config, *pods, extra=[g5_reservation(available=4)], clusterGPULimit=1)
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}
    (waiting,) = result.launch.unplaced
    assert waiting.limited
    assert waiting.reason.startswith("clusterGPULimit 1 reached")


def test_a_small_pod_takes_the_smallest_free_reservation(make_config: Callable[..., Config]) -> None:
    p5 = reserved(base("p5.48xlarge"), "cr-0a1b2c3d4e5f60009", available=2)
    result = run(make_config, gpu_pod("infer-1"), extra=[p5, g5_reservation(available=2)])
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}


def test_reserved_capacity_is_not_used_unless_the_pod_may_get_it(make_config: Callable[..., Config]) -> None:
    result = run(
        make_config, gpu_pod("infer-1"), extra=[g5_reservation(available=2)], capacityTypes=["on-demand"]
    )
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}


def test_a_pod_opts_out_of_reserved_capacity_with_its_offerings_annotation(
    make_config: Callable[..., Config],
) -> None:
    opted_out = gpu_pod("infer-1", annotations={"node.elotl.co/instance-offerings": "on-demand"})
    result = run(make_config, opted_out, extra=[g5_reservation(available=2)])
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}


def test_a_pod_that_requires_reserved_capacity_waits_when_every_reservation_is_full(
    make_config: Callable[..., Config],
) -> None:
    required = gpu_pod("train-1", annotations={"tidal.dev/instance-offerings": "reserved"})
    result = run(make_config, required, extra=[g5_reservation(available=0, total=4)])
    assert launched(result) == {}
    assert reasons(result) == {
        "default/train-1": "reservation cr-0a1b2c3d4e5f60001 (4 x g5.xlarge in us-east-1a) has no free instance left"
    }
    assert not result.launch.unplaced[0].limited


def test_a_targeted_reservation_is_never_used_by_pods_that_did_not_ask_for_it(
    make_config: Callable[..., Config],
) -> None:
    targeted = g5_reservation(available=3, kind=ReservationKind.TARGETED)
    anyone = gpu_pod("infer-1")
    requires = gpu_pod("infer-2", annotations={"tidal.dev/instance-offerings": "reserved"})
    result = run(make_config, anyone, requires, extra=[targeted])
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}
    assert result.launch.launches[0].pods == ("default/infer-1",)
    assert reasons(result) == {
        "default/infer-2": "the reservations that fit are targeted: only pods that name one in "
        "tidal.dev/capacity-reservation use them"
    }


def test_a_pod_that_names_a_targeted_reservation_gets_it(make_config: Callable[..., Config]) -> None:
    targeted = g5_reservation(available=3, kind=ReservationKind.TARGETED)
    named = gpu_pod("infer-1", annotations={"tidal.dev/capacity-reservation": "cr-0a1b2c3d4e5f60001"})
    result = run(make_config, named, extra=[targeted], capacityTypes=["on-demand"])
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}


def test_a_pod_that_selects_the_reservation_label_may_use_a_targeted_reservation(
    make_config: Callable[..., Config],
) -> None:
    targeted = g5_reservation(available=3, kind=ReservationKind.TARGETED)
    selecting = gpu_pod("infer-1", node_selector={"tidal.dev/reservation-id": "cr-0a1b2c3d4e5f60001"})
    result = run(make_config, selecting, extra=[targeted])
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}


def test_a_pod_that_names_one_reservation_uses_no_other(make_config: Callable[..., Config]) -> None:
    mine = g5_reservation("cr-0a1b2c3d4e5f60001", available=0)
    theirs = g5_reservation("cr-0a1b2c3d4e5f60002", available=5)
    named = gpu_pod(
        "train-1",
        annotations={
            "tidal.dev/capacity-reservation": "cr-0a1b2c3d4e5f60001",
            "tidal.dev/instance-offerings": "reserved",
        },
    )
    result = run(make_config, named, extra=[mine, theirs])
    assert launched(result) == {}
    assert "cr-0a1b2c3d4e5f60001" in reasons(result)["default/train-1"]


def test_a_capacity_block_not_yet_started_makes_pods_that_only_it_holds_wait_naming_its_start(
    make_config: Callable[..., Config],
) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW + 2 * HOUR, end=NOW + 26 * HOUR
    )
    required = gpu_pod("train-1", annotations={"tidal.dev/instance-offerings": "reserved"})
    result = run(make_config, required, extra=[block])
    assert launched(result) == {}
    assert reasons(result) == {
        "default/train-1": "waits for Capacity Block cr-0a1b2c3d4e5f60001, which starts at 2026-11-20T12:00:00Z"
    }


def test_pods_that_may_buy_on_demand_do_not_wait_for_a_capacity_block(
    make_config: Callable[..., Config],
) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW + 2 * HOUR, end=NOW + 26 * HOUR
    )
    result = run(make_config, gpu_pod("infer-1"), extra=[block])
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}


def test_before_block_start_on_demand_buys_on_demand_meanwhile(make_config: Callable[..., Config]) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW + 2 * HOUR, end=NOW + 26 * HOUR
    )
    required = gpu_pod("train-1", annotations={"tidal.dev/instance-offerings": "reserved"})
    result = run(make_config, required, extra=[block], reservations={"beforeBlockStart": "on-demand"})
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}


def test_a_capacity_block_is_used_once_it_has_started(make_config: Callable[..., Config]) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW - HOUR, end=NOW + 23 * HOUR
    )
    result = run(make_config, gpu_pod("infer-1"), extra=[block])
    assert launched(result) == {"g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1}


def test_no_node_goes_into_a_capacity_block_within_the_drain_lead_of_its_end(
    make_config: Callable[..., Config],
) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW - 23 * HOUR, end=NOW + 30 * 60
    )
    result = run(make_config, gpu_pod("infer-1"), extra=[block])
    assert launched(result) == {"g4dn.xlarge/us-east-1a/on-demand": 1}


def test_a_gang_larger_than_the_reservation_it_requires_is_not_placed_at_all(
    make_config: Callable[..., Config],
) -> None:
    members = [
        gpu_pod(
            f"train-{i}",
            labels={"app": "train"},
            annotations={"tidal.dev/instance-offerings": "reserved", "pod-group-name": "train"},
            scheduler="kai-scheduler",
        )
        for i in range(3)
    ]
    group = podgroup("train", min_member=3, queue="research")
    result = run(make_config, group, *members, extra=[g5_reservation(available=2)])
    assert launched(result) == {}
    assert set(reasons(result).values()) == {
        "gang default/train (3 pods) cannot be placed whole: reservation cr-0a1b2c3d4e5f60001 "
        "(2 x g5.xlarge in us-east-1a) has no free instance left"
    }


def test_a_bad_capacity_type_in_the_offerings_annotation_is_one_clear_line(
    make_config: Callable[..., Config],
) -> None:
    bad = gpu_pod("infer-1", annotations={"tidal.dev/instance-offerings": "reserved,cheap"})
    result = run(make_config, bad, extra=[g5_reservation(available=2)])
    (ignored,) = [i for i in result.demand.ignored if i.pod == "default/infer-1"]
    assert ignored.reason == Reason.BAD_ANNOTATION
    assert ignored.detail == (
        "annotation tidal.dev/instance-offerings: 'reserved,cheap' is not a list of spot, on-demand, reserved "
        "(e.g. reserved,spot,on-demand)"
    )


def test_a_reserved_node_is_labelled_with_its_reservation(make_config: Callable[..., Config]) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW - HOUR, end=NOW + 23 * HOUR
    )
    labels = node_labels(block, make_config())
    assert labels["tidal.dev/capacity-type"] == "reserved"
    assert labels["tidal.dev/reservation-id"] == "cr-0a1b2c3d4e5f60001"
    assert labels["tidal.dev/reservation-type"] == "capacity-block"
    assert labels["tidal.dev/reservation-end"] == str(int(NOW + 23 * HOUR))
    assert labels["karpenter.sh/capacity-type"] == "reserved"
    assert labels["karpenter.k8s.aws/capacity-reservation-id"] == "cr-0a1b2c3d4e5f60001"
    assert labels["karpenter.k8s.aws/capacity-reservation-type"] == "capacity-block"
    assert labels["eks.amazonaws.com/capacityType"] == "CAPACITY_BLOCK"


def test_nodes_launched_into_a_reservation_since_it_was_counted_are_taken_off_its_free_count(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config(**RESERVED_FIRST)
    offerings = [*aws_offerings(), g5_reservation(available=2)]
    fleet = Fleet(cfg)
    counted_at = NOW - 60  # the provider listed the reservation a minute ago, with 2 free
    fleet.record_launch("token-a", offerings[-1], ("default/infer-0",), None, NOW - 120)  # counted already
    fleet.record_launch("token-b", offerings[-1], ("default/infer-1",), None, NOW - 30)  # since
    view = InFlight().apply(offerings, fleet.launched_into_reservations(counted_at))

    result = plan(PlanInput(snapshot(*[gpu_pod(f"infer-{i}") for i in range(2, 5)]), view, cfg, NOW))

    assert launched(result) == {
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001": 1,
        "g4dn.xlarge/us-east-1a/on-demand": 2,
    }


def test_offerings_are_the_very_same_list_while_nothing_was_launched_into_a_reservation_since() -> None:
    offerings = [*aws_offerings(), g5_reservation(available=2)]
    in_flight = InFlight()
    assert in_flight.apply(offerings, {}) is offerings
    assert in_flight.apply(offerings, {"cr-elsewhere": 3}) is offerings
    spent = in_flight.apply(offerings, {"cr-0a1b2c3d4e5f60001": 1})
    assert in_flight.apply(offerings, {"cr-0a1b2c3d4e5f60001": 1}) is spent


def test_the_plan_output_names_the_reservation_a_node_goes_into(make_config: Callable[..., Config]) -> None:
    block = g5_reservation(
        available=4, kind=ReservationKind.CAPACITY_BLOCK, start=NOW - HOUR, end=NOW + 23 * HOUR
    )
    result = run(make_config, gpu_pod("infer-1"), extra=[block])
    [launch] = plan_to_json(result)["launches"]
    assert (launch["capacityType"], launch["pricePerHour"]) == ("reserved", 0.0)
    assert (launch["reservation"], launch["reservationType"], launch["onDemandPrice"]) == (
        "cr-0a1b2c3d4e5f60001",
        "capacity-block",
        1.006,
    )
    assert launch["reservationEnd"] == NOW + 23 * HOUR
    assert "reserved cr-0a1b2c3d4e5f60001" in plan_to_table(result, make_config(**RESERVED_FIRST))


def test_a_catalog_file_written_from_offerings_leaves_reservations_out() -> None:
    offerings = [*aws_offerings(), g5_reservation(available=2)]
    out = io.StringIO()
    write_catalog_csv(offerings, out, cloud="aws", region="us-east-1")
    back = offerings_from_rows(csv.DictReader(io.StringIO(out.getvalue())), cloud="aws", region="us-east-1")
    g5 = [o for o in back if o.instance_type == "g5.xlarge" and o.capacity_type == "on-demand"]
    assert [o.price for o in g5] == [1.006]  # not the reservation's 0
    assert not [o for o in back if o.capacity_type == "reserved"]


def test_offerings_without_a_reservation_reserve_nothing_and_come_back_as_they_are() -> None:
    offerings = aws_offerings()
    in_flight = InFlight()
    assert not in_flight.reserves(offerings)
    assert in_flight.apply(offerings, {"cr-0a1b2c3d4e5f60001": 3}) is offerings
    assert in_flight.reserves([*offerings, g5_reservation(available=2)])
