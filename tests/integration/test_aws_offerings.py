"""AWS offerings against moto's real instance-type catalogue: shapes, GPUs, zones, prices and their sources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from autoscaler.cloud import ProviderError
from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.spot_risk import bucket_rate
from providers.aws import AwsProvider
from tests.builders import INSUFFICIENT_GPU, pod, snapshot
from tests.fakes.aws_cloud import (
    CATALOG,
    CREDENTIALS,
    Clock,
    Fault,
    Network,
    aws_config,
    ec2_client,
    ec2_error,
    make_network,
    make_provider,
    price_list_item,
    price_list_query,
    pricing_denied,
    spot_price_hook,
    stub_prices,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.core.offering import Offering

ON_DEMAND_PRICES = {"g5.xlarge": 1.006, "g6.xlarge": 0.8048, "p4d.24xlarge": 21.957642, "p5.48xlarge": 55.04}


@pytest.fixture
def network() -> Iterator[Network]:
    with mock_aws():
        yield make_network(ec2_client())


def gpu_provider(
    network: Network,
    *hooks: tuple[str, Callable[..., Any]],
    clock: Callable[[], float] | None = None,
    **aws: Any,
) -> AwsProvider:
    config = aws_config(network, aws={"families": ["g5", "g6", "p4d", "p5"], **aws})
    return make_provider(config, *hooks, clock=clock)


def find(
    offerings: list[Offering], instance_type: str, zone: str = "us-east-1a", capacity_type: str = ON_DEMAND
) -> Offering:
    return next(
        o
        for o in offerings
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, capacity_type)
    )


def test_gpu_offerings_carry_model_count_memory_and_eks_max_pods(network: Network) -> None:
    provider = gpu_provider(network, spot_price_hook({}))
    stub_prices(provider, ON_DEMAND_PRICES)
    offerings = provider.offerings()
    shapes = {
        t: (o.gpu_count, o.gpu_model, o.gpu_vendor, o.gpu_memory_mib, o.vcpu, o.max_pods)
        for t in ON_DEMAND_PRICES
        for o in [find(offerings, t)]
    }
    assert shapes == {
        "g5.xlarge": (1, "A10G", "NVIDIA", 22888, 4, 58),
        "g6.xlarge": (1, "L4", "NVIDIA", 22888, 4, 58),
        "p4d.24xlarge": (8, "A100", "NVIDIA", 40960, 96, 250),
        "p5.48xlarge": (8, "H100", "NVIDIA", 81920, 192, 100),
    }


def test_on_demand_prices_come_from_the_price_list_and_spot_prices_from_the_history(network: Network) -> None:
    spot = {("g5.xlarge", "us-east-1a"): 0.45, ("g5.xlarge", "us-east-1b"): 0.39}
    provider = gpu_provider(network, spot_price_hook(spot))
    stub_prices(provider, ON_DEMAND_PRICES)
    offerings = provider.offerings()
    on_demand = find(offerings, "g5.xlarge")
    assert (on_demand.price, on_demand.price_source) == (1.006, "aws price list api")
    in_b = find(offerings, "g5.xlarge", "us-east-1b", SPOT)
    assert (in_b.price, in_b.price_source) == (0.39, "aws spot price history")
    # Without a spot price in the history a type is not offered as spot; without a list price, not at all.
    assert not [o for o in offerings if o.instance_type == "g6.xlarge" and o.capacity_type == SPOT]
    assert not [o for o in offerings if o.instance_type == "g5.2xlarge"]


def test_on_demand_prices_are_asked_for_linux_on_shared_tenancy_in_the_clusters_region() -> None:
    with mock_aws():
        ec2 = boto3.client(
            "ec2",
            region_name="eu-west-1",
            aws_access_key_id=CREDENTIALS.access_key_id,
            aws_secret_access_key=CREDENTIALS.secret_access_key,
        )
        network = make_network(ec2, zones=("eu-west-1a",))
        provider = make_provider(
            aws_config(network, region="eu-west-1", aws={"families": ["g5"]}), spot_price_hook({})
        )
        # The Stubber refuses any other query: another region, OS, tenancy or pre-installed software.
        stubber = stub_prices(provider, {"g5.xlarge": 1.258}, region="eu-west-1")
        g5 = find(provider.offerings(), "g5.xlarge", "eu-west-1a")
        assert (g5.price, g5.price_source) == (1.258, "aws price list api")
        stubber.assert_no_pending_responses()
        assert provider.clients.client("pricing").meta.region_name == "us-east-1"  # where the API is served


def test_offerings_are_only_in_zones_with_a_configured_subnet(network: Network) -> None:
    provider = gpu_provider(network, spot_price_hook({}))
    stub_prices(provider, ON_DEMAND_PRICES)
    assert {o.zone for o in provider.offerings()} == {"us-east-1a", "us-east-1b"}


def test_a_subnet_selector_finds_the_tagged_subnets_in_the_configured_zones(network: Network) -> None:
    selector = {"subnetIds": None, "subnetSelector": {"karpenter.sh/discovery": "e2e"}, "families": ["g5"]}
    config = aws_config(network, aws=selector, zones=["us-east-1b"])
    provider = make_provider(config, spot_price_hook({}))
    stub_prices(provider, ON_DEMAND_PRICES)
    assert {o.zone for o in provider.offerings()} == {"us-east-1b"}


@pytest.mark.parametrize(
    ("spot_price", "chosen"),
    [(0.40, SPOT), (1.20, ON_DEMAND)],
    ids=["spot-cheaper", "spot-dearer-than-on-demand"],
)
def test_the_plan_takes_spot_or_on_demand_by_price(network: Network, spot_price: float, chosen: str) -> None:
    spot = {("g6.xlarge", z): spot_price for z in ("us-east-1a", "us-east-1b")}
    provider = gpu_provider(network, spot_price_hook(spot), families=["g6"])
    stub_prices(provider, {"g6.xlarge": 0.8048})
    config = aws_config(network, zones=["us-east-1a"])
    decided = plan(
        PlanInput(
            snapshot(pod("infer-0", gpu=1, message=INSUFFICIENT_GPU)), provider.offerings(), config, 0.0
        )
    )
    launch = decided.launch.launches[0].offering
    assert (launch.instance_type, launch.capacity_type) == ("g6.xlarge", chosen)


def test_prices_are_refreshed_only_after_the_price_refresh_interval(network: Network) -> None:
    clock = Clock()
    provider = gpu_provider(network, spot_price_hook({}), clock=clock, priceRefreshInterval="1h")
    stubber = stub_prices(provider, {"g5.xlarge": 1.006})
    assert find(provider.offerings(), "g5.xlarge").price == 1.006
    clock.tick(1800)
    assert find(provider.offerings(), "g5.xlarge").price == 1.006  # cached: the Stubber has no second answer
    stubber.add_response(
        "get_products",
        {"PriceList": [price_list_item("g5.xlarge", 0.95)], "FormatVersion": "aws_v1"},
        expected_params=price_list_query(),
    )
    clock.tick(1801)
    assert find(provider.offerings(), "g5.xlarge").price == 0.95
    stubber.assert_no_pending_responses()


def test_pricing_not_permitted_falls_back_to_the_catalog_file_and_says_so(network: Network) -> None:
    provider = gpu_provider(network, pricing_denied(), spot_price_hook({}), catalogFallback=str(CATALOG))
    g5 = find(provider.offerings(), "g5.xlarge")
    assert (g5.price, g5.price_source) == (1.006, "catalog file aws-us-east-1.csv")
    assert g5.gpu_model == "A10G" and g5.max_pods == 58  # the shape still comes from EC2


def test_spot_offerings_priced_by_ec2_take_their_interruption_rate_from_the_catalog_file(
    network: Network,
) -> None:
    spot = {("g5.xlarge", "us-east-1a"): 0.45}
    provider = gpu_provider(network, spot_price_hook(spot), catalogFallback=str(CATALOG))
    stub_prices(provider, ON_DEMAND_PRICES)
    offerings = provider.offerings()
    g5 = find(offerings, "g5.xlarge", capacity_type=SPOT)
    assert (g5.price, g5.price_source) == (0.45, "aws spot price history")
    assert g5.interruption_rate == bucket_rate(4)  # the catalog's Spot Advisor bucket for g5.xlarge
    assert find(offerings, "g5.xlarge").interruption_rate == 0.0  # on-demand is never interrupted


def test_ec2_not_permitted_uses_the_whole_catalog_file(network: Network) -> None:
    denied = Fault(
        "before-send.ec2.DescribeInstanceTypes",
        lambda: ec2_error("UnauthorizedOperation", "You are not authorized to perform this operation.", 403),
    )
    provider = gpu_provider(network, denied.hook, pricing_denied(), catalogFallback=str(CATALOG))
    offerings = provider.offerings()
    assert {o.price_source for o in offerings} == {"catalog file aws-us-east-1.csv"}
    assert {o.zone for o in offerings} == {"us-east-1a", "us-east-1b"}  # the subnets' zones
    assert {o.family for o in offerings} <= {"g5", "g6", "p4d", "p5"}
    assert find(offerings, "p5.48xlarge", "us-east-1a", SPOT).price == 26.4192
    assert not [o for o in offerings if o.instance_type == "p5.48xlarge" and o.zone == "us-east-1b"]


def test_without_prices_or_a_catalog_file_offerings_fail_with_one_clear_line(network: Network) -> None:
    provider = gpu_provider(network, pricing_denied(), spot_price_hook({}))
    with pytest.raises(ProviderError) as caught:
        provider.offerings()
    message = str(caught.value)
    assert message.startswith("cannot build EC2 offerings (")
    assert "AccessDeniedException" in message and "aws.catalogFallback is not set" in message
    assert "\n" not in message
