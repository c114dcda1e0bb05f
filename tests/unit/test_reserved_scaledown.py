"""Scale-down and reserved nodes: a node in a reservation that lasts is kept (removing it saves nothing),
unless ``reservations.reservedNodes`` is release; a node whose reservation is gone is a node like any other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.fit import node_labels
from autoscaler.core.offering import ReservationKind
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, node, reserved, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering

T0 = 1_795_168_800.0  # when the test nodes were created
NOW = T0 + 6 * 3600
RID = "cr-0a1b2c3d4e5f60001"


def g5() -> Offering:
    return next(
        o for o in aws_offerings() if o.instance_type == "g5.xlarge" and o.capacity_type == "on-demand"
    )


def reserved_node(make_config: Callable[..., Config], name: str, offering: Offering) -> dict[str, Any]:
    labels = node_labels(offering, make_config())
    return node(name, instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True, labels=labels)


def removals(
    make_config: Callable[..., Config], *objs: dict[str, Any], offerings: list[Offering], **cfg: Any
) -> tuple[list[str], dict[str, str]]:
    result = plan(
        PlanInput(
            snapshot(*objs),
            offerings,
            make_config(capacityTypes=["reserved", "on-demand"], **cfg),
            NOW,
            unneeded_since={"gpu-1": NOW - 3600},
        )
    )
    return [r.node for r in result.removal.removals], {b.node: b.reason for b in result.removal.blocked}


def test_an_empty_node_in_a_reservation_that_lasts_is_kept(make_config: Callable[..., Config]) -> None:
    offering = reserved(g5(), RID, available=1, total=2)
    removed, blocked = removals(
        make_config, reserved_node(make_config, "gpu-1", offering), offerings=[*aws_offerings(), offering]
    )
    assert removed == []
    assert blocked["gpu-1"] == (
        f"runs in reservation {RID}, paid for whether used or not: removing it saves nothing "
        "(reservations.reservedNodes: release removes such nodes)"
    )


def test_reserved_nodes_release_removes_an_empty_reserved_node_like_any_other(
    make_config: Callable[..., Config],
) -> None:
    offering = reserved(g5(), RID, available=1, total=2)
    removed, _ = removals(
        make_config,
        reserved_node(make_config, "gpu-1", offering),
        offerings=[*aws_offerings(), offering],
        reservations={"reservedNodes": "release"},
    )
    assert removed == ["gpu-1"]


def test_a_node_whose_reservation_is_gone_is_removed_like_any_other(
    make_config: Callable[..., Config],
) -> None:
    offering = reserved(g5(), RID, available=1, total=2)
    # The provider no longer lists the reservation (cancelled, or expired): the node costs what any node does.
    removed, _ = removals(
        make_config, reserved_node(make_config, "gpu-1", offering), offerings=aws_offerings()
    )
    assert removed == ["gpu-1"]


def test_a_node_on_a_capacity_block_that_is_ending_is_not_kept_for_it(
    make_config: Callable[..., Config],
) -> None:
    block = reserved(
        g5(),
        RID,
        available=0,
        total=1,
        kind=ReservationKind.CAPACITY_BLOCK,
        start=NOW - 23 * 3600,
        end=NOW + 1200,
    )
    removed, _ = removals(
        make_config, reserved_node(make_config, "gpu-1", block), offerings=[*aws_offerings(), block]
    )
    assert removed == ["gpu-1"]
