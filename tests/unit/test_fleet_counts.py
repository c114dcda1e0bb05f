"""The fleet's members by state, as the status ConfigMap and the tidal_fleet_nodes metric show them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.runtime.fleet import Fleet, Member, State
from tests.builders import aws_offerings

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config

G4DN = next(o for o in aws_offerings() if o.instance_type == "g4dn.xlarge" and o.capacity_type == "on-demand")


def test_counts_name_every_state_but_gone_in_lifecycle_order_with_zeros(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    states = [State.IDLE, State.READY, State.IDLE, State.GONE, State.DRAINING, State.IDLE]
    fleet.members = {f"m{i}": Member(f"m{i}", s, offering=G4DN) for i, s in enumerate(states)}

    assert list(fleet.counts().items()) == [
        ("launching", 0),
        ("registered", 0),
        ("ready", 1),
        ("idle", 3),
        ("draining", 1),
    ]


def test_an_empty_fleet_counts_zero_of_each_state(make_config: Callable[..., Config]) -> None:
    assert Fleet(make_config()).counts() == dict.fromkeys(
        ["launching", "registered", "ready", "idle", "draining"], 0
    )
