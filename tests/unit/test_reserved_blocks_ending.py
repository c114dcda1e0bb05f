"""Which managed nodes run on a Capacity Block that ends soon: by the provider's listing while it lists the
block, by the node's own labels once it does not; nodes of no block are never taken for one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.model import LABEL_RESERVATION_END, LABEL_RESERVATION_ID, LABEL_RESERVATION_TYPE
from autoscaler.core.offering import ReservationKind
from autoscaler.core.planning.reserved import ending_blocks
from tests.builders import aws_offerings, node, reserved, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering

NOW = 1_795_168_800.0
HOUR = 3600.0
BLOCK = "cr-0a1b2c3d4e5f60001"
G5 = next(o for o in aws_offerings() if o.instance_type == "g5.xlarge" and o.capacity_type == "on-demand")


def block(end: float) -> Offering:
    return reserved(G5, BLOCK, available=0, kind=ReservationKind.CAPACITY_BLOCK, start=NOW - HOUR, end=end)


def gpu_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return node(name, instance_type="g5.xlarge", gpu=1, managed=True, labels=labels)


def test_a_node_in_a_listed_block_that_ends_soon_is_found_without_the_blocks_type_label(
    make_config: Callable[..., Config],
) -> None:
    nodes = snapshot(gpu_node("gpu-a", {LABEL_RESERVATION_ID: BLOCK}), gpu_node("gpu-b", {})).nodes
    ending = ending_blocks(nodes, [G5, block(end=NOW + 600)], make_config(), NOW)
    assert [(e.node, e.reservation, e.end) for e in ending] == [("gpu-a", BLOCK, NOW + 600)]


def test_a_node_labelled_with_a_block_no_longer_listed_is_found_by_its_labels(
    make_config: Callable[..., Config],
) -> None:
    labels = {
        LABEL_RESERVATION_ID: BLOCK,
        LABEL_RESERVATION_TYPE: ReservationKind.CAPACITY_BLOCK.value,
        LABEL_RESERVATION_END: str(int(NOW + 600)),
    }
    nodes = snapshot(gpu_node("gpu-a", labels), gpu_node("gpu-b", {})).nodes
    ending = ending_blocks(nodes, [G5], make_config(), NOW)
    assert [(e.node, e.end) for e in ending] == [("gpu-a", NOW + 600)]


def test_nodes_of_no_block_and_of_a_block_far_from_its_end_are_not_drained(
    make_config: Callable[..., Config],
) -> None:
    nodes = snapshot(gpu_node("gpu-a", {LABEL_RESERVATION_ID: BLOCK}), gpu_node("gpu-b", {})).nodes
    assert ending_blocks(nodes, [G5, block(end=NOW + 10 * HOUR)], make_config(), NOW) == []
    assert ending_blocks(nodes, [G5], make_config(), NOW) == []
