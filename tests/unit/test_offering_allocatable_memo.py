"""The offering index remembers a new node's allocatable per node size: the answer must be the one worked out
for each offering alone, including when a DaemonSet runs only on some capacity types."""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.config.options import Config
from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import LABEL_CAPACITY_TYPE
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.resources import Resources
from tests.builders import aws_offerings, daemonset, snapshot

ZONES = ("us-east-1a", "us-east-1b")


def _uncached(index: OfferingIndex) -> dict[str, Resources]:
    return {
        o.key: node_allocatable(o, reserved=index.config.kube_reserved, overhead=index.overhead(o))
        for o in index.offerings
    }


def test_allocatable_shared_across_zones_and_capacity_types_is_each_offerings_own(
    make_config: Callable[..., Config],
) -> None:
    index = OfferingIndex(aws_offerings(ZONES), make_config(zones=list(ZONES)))

    assert {o.key: index.allocatable(o) for o in index.offerings} == _uncached(index)


def test_allocatable_counts_a_daemonset_only_on_the_capacity_type_it_selects(
    make_config: Callable[..., Config],
) -> None:
    spot_agent = daemonset("spot-agent", cpu="1", memory="1Gi", node_selector={LABEL_CAPACITY_TYPE: "spot"})
    index = OfferingIndex(
        aws_offerings(ZONES), make_config(zones=list(ZONES)), snapshot(spot_agent).daemonsets
    )

    remembered = {o.key: index.allocatable(o) for o in index.offerings}

    assert remembered == _uncached(index)
    spot, on_demand = (
        next(o for o in index.offerings if o.instance_type == "m6i.large" and o.capacity_type == kind)
        for kind in ("spot", "on-demand")
    )
    assert remembered[on_demand.key].cpu - remembered[spot.key].cpu == 1000
