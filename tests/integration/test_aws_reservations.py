"""EC2 capacity reservations and Capacity Blocks: found by id or tag, offered as reserved capacity, launched
into by RunInstances, against a moto server with reservations answered at the wire (moto has none)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from structlog.testing import capture_logs

from autoscaler.cloud import Refusal
from autoscaler.config.options import Config
from autoscaler.core.model import ON_DEMAND, RESERVED
from autoscaler.core.offering import LaunchRequest, Offering, ReservationKind
from autoscaler.core.planning.planner import PlanInput, plan
from providers.aws import AwsConfigError, AwsProvider
from tests.builders import INSUFFICIENT_GPU, pod, snapshot
from tests.fakes.aws_cloud import (
    CATALOG,
    Clock,
    aws_config,
    ec2_client,
    make_provider,
    moto_server_url,
    spot_price_hook,
    stub_prices,
)
from tests.fakes.aws_reservations import CapacityReservations

if TYPE_CHECKING:
    from tests.fakes.aws_cloud import Network

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0
OPEN = "cr-0a1b2c3d4e5f60001"
TARGETED = "cr-0a1b2c3d4e5f60002"
BLOCK = "cr-0a1b2c3d4e5f60003"
ELSEWHERE = "cr-0a1b2c3d4e5f60004"
PRICES = {"g5.xlarge": 1.006, "g6.xlarge": 0.8048, "p5.48xlarge": 55.04}
TOKEN = "5e0c7d2a-1b3f-4a6e-8d9c-0f1e2d3c4b5a"


@pytest.fixture
def reservations() -> CapacityReservations:
    found = CapacityReservations()
    found.add(OPEN, "g5.xlarge", "us-east-1a", 2, tags={"team": "ml"})
    found.add(TARGETED, "g6.xlarge", "us-east-1b", 1, match="targeted", tags={"team": "ml"})
    found.add(
        BLOCK,
        "p5.48xlarge",
        "us-east-1a",
        2,
        match="targeted",
        reservation_type="capacity-block",
        start=NOW - HOUR,
        end=NOW + 23 * HOUR,
    )
    found.add(ELSEWHERE, "g5.xlarge", "us-east-1b", 4, tags={"team": "web"})
    return found


@pytest.fixture
def make(server: str, reservations: CapacityReservations) -> Callable[..., AwsProvider]:
    def build(config: Config, *hooks: tuple[str, Callable[..., Any]]) -> AwsProvider:
        provider = make_provider(
            config, *reservations.hooks, spot_price_hook({}), *hooks, clock=Clock(NOW), endpoint_url=server
        )
        stub_prices(provider, PRICES)
        return provider

    return build


def chosen(network: Network, **aws: Any) -> Config:
    section = {
        "families": ["g5", "g6", "p5"],
        "capacityReservationIds": [BLOCK],
        "capacityReservationSelector": {"team": "ml"},
        "catalogFallback": str(CATALOG),
        **aws,
    }
    return aws_config(network, aws=section, capacityTypes=["reserved", "on-demand"])


def reserved_offerings(provider: AwsProvider) -> dict[str, Offering]:
    return {o.reservation.id: o for o in provider.offerings() if o.reservation is not None}


def request(*offerings: Offering, token: str = TOKEN) -> LaunchRequest:
    return LaunchRequest(
        token=token,
        offerings=offerings,
        labels={"tidal.dev/managed": "true", "tidal.dev/cluster": "prod"},
        tags={"tidal.dev/cluster": "prod", "tidal.dev/managed": "true", "tidal.dev/launch-token": token},
    )


def on_demand(provider: AwsProvider, instance_type: str, zone: str = "us-east-1a") -> Offering:
    return next(
        o
        for o in provider.offerings()
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, ON_DEMAND)
    )


def test_reservations_chosen_by_id_or_tag_become_reserved_offerings(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    found = reserved_offerings(make(chosen(network)))
    assert sorted(found) == [OPEN, TARGETED, BLOCK]  # cr-…0004 is tagged team=web: not tidal's
    open_ = found[OPEN]
    assert (open_.instance_type, open_.zone, open_.capacity_type, open_.price) == (
        "g5.xlarge",
        "us-east-1a",
        RESERVED,
        0.0,
    )
    assert open_.gpu_count == 1
    r = open_.reservation
    assert r is not None
    assert (r.kind, r.available, r.total, r.on_demand_price) == (ReservationKind.OPEN, 2, 2, 1.006)
    targeted, block = found[TARGETED].reservation, found[BLOCK].reservation
    assert targeted is not None and block is not None
    assert targeted.kind == ReservationKind.TARGETED
    assert (block.kind, block.start, block.end) == (
        ReservationKind.CAPACITY_BLOCK,
        NOW - HOUR,
        NOW + 23 * HOUR,
    )


def test_only_active_and_scheduled_reservations_are_asked_for(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    make(chosen(network)).offerings()
    [params] = reservations.describe_calls
    assert params["Filter.1.Name"] == ["state"]
    assert sorted(params["Filter.1.Value.1"] + params["Filter.1.Value.2"]) == ["active", "scheduled"]


def test_a_listed_reservation_id_ec2_does_not_list_is_one_warning_line(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    missing = "cr-0ffffffffffffffff"
    provider = make(chosen(network, capacityReservationIds=[BLOCK, missing]))
    with capture_logs() as logs:
        provider.offerings()
        provider.offerings()
    warnings = [e for e in logs if e["event"] == "aws_capacity_reservations_not_found"]
    assert len(warnings) == 1
    assert warnings[0]["ids"] == [missing]
    assert warnings[0]["problem"] == (
        f"aws.capacityReservationIds: {missing} not found among the active or scheduled capacity "
        "reservations of us-east-1"
    )


def test_a_malformed_reservation_id_in_the_config_is_one_clear_line(network: Network) -> None:
    with pytest.raises(AwsConfigError) as caught:
        make_provider(
            chosen(network, capacityReservationIds=["cr-12345", BLOCK]), endpoint_url=moto_server_url()
        )
    assert "\n" not in str(caught.value)
    assert "aws.capacityReservationIds[0]: 'cr-12345' is not an id like cr-0123456789abcdef0" in str(
        caught.value
    )


def test_no_reservation_is_asked_for_when_none_is_chosen(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    offerings = make(
        aws_config(network, aws={"families": ["g5"], "catalogFallback": str(CATALOG)})
    ).offerings()
    assert not [o for o in offerings if o.capacity_type == RESERVED]
    assert reservations.describe_calls == []


def test_a_node_goes_into_its_reservation_by_run_instances_targeting_it(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    provider = make(chosen(network))
    instance = provider.launch(request(reserved_offerings(provider)[OPEN]))
    [params] = reservations.launches
    assert params["CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"] == [
        OPEN
    ]
    assert (params["InstanceType"], params["SubnetId"]) == (["g5.xlarge"], [network.subnets["us-east-1a"]])
    assert "InstanceMarketOptions.MarketType" not in params
    assert (instance.capacity_type, instance.reservation_id) == (RESERVED, OPEN)
    [listed] = [i for i in provider.instances() if i.id == instance.id]
    assert (listed.capacity_type, listed.reservation_id, listed.price) == (RESERVED, OPEN, 0.0)
    tags = {
        t["Key"]: t["Value"]
        for r in ec2_client(moto_server_url()).describe_instances(InstanceIds=[instance.id])["Reservations"]
        for i in r["Instances"]
        for t in i["Tags"]
    }
    assert (tags["tidal.dev/cluster"], tags["tidal.dev/launch-token"]) == ("prod", TOKEN)
    left = reserved_offerings(make(chosen(network)))[OPEN].reservation
    assert left is not None
    assert left.available == 1


def test_a_node_goes_into_a_capacity_block_with_the_capacity_block_market_type(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    provider = make(chosen(network))
    instance = provider.launch(request(reserved_offerings(provider)[BLOCK]))
    [params] = reservations.launches
    assert params["InstanceMarketOptions.MarketType"] == ["capacity-block"]
    assert (instance.instance_type, instance.reservation_id) == ("p5.48xlarge", BLOCK)


def test_a_launch_repeated_with_its_token_returns_the_node_already_in_the_reservation(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(chosen(network))
    first = provider.launch(request(reserved_offerings(provider)[OPEN]))
    again = provider.launch(request(reserved_offerings(provider)[OPEN]))
    assert again.id == first.id


def test_a_full_reservation_is_refused_for_itself_only_and_the_launch_falls_back_to_on_demand(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    provider = make(chosen(network))
    into = reserved_offerings(provider)[OPEN]
    reservations.records[OPEN].total = 0  # taken by instances launched elsewhere since it was listed
    instance = provider.launch(request(into, on_demand(provider, "g5.xlarge")))
    assert (instance.capacity_type, instance.reservation_id) == (ON_DEMAND, "")
    [late] = provider.poll_errors()
    assert (late.attempt.offering.key, late.attempt.refusal) == (into.key, Refusal.NO_CAPACITY)
    assert late.attempt.detail.startswith("ReservationCapacityExceeded:")


def test_a_reservation_cancelled_since_it_was_listed_is_an_invalid_request_for_its_offering(
    network: Network, make: Callable[..., AwsProvider], reservations: CapacityReservations
) -> None:
    provider = make(chosen(network))
    into = reserved_offerings(provider)[OPEN]
    reservations.remove(OPEN)
    instance = provider.launch(request(into, on_demand(provider, "g5.xlarge")))
    assert instance.capacity_type == ON_DEMAND
    [late] = provider.poll_errors()
    assert (late.attempt.offering.key, late.attempt.refusal) == (into.key, Refusal.INVALID)
    assert OPEN not in reserved_offerings(make(chosen(network)))


def test_pods_are_planned_into_the_reservations_the_provider_lists_first(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(chosen(network))
    gpu = [pod(f"infer-{i}", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU) for i in range(3)]
    result = plan(PlanInput(snapshot(*gpu), provider.offerings(), provider.config, NOW))
    keys = sorted(la.offering.key for la in result.launch.launches)
    # The open g5 reservation holds two, then the Capacity Block (tidal launches into it by id); the targeted
    # g6 reservation is not for pods that did not name it.
    assert keys == [
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001",
        "g5.xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60001",
        "p5.48xlarge/us-east-1a/reserved/cr-0a1b2c3d4e5f60003",
    ]
