"""Launching, finding and terminating EKS nodes with EC2 Fleet, against a moto server.

Faults are injected by ``before-send`` hooks on the provider's clients: the request never reaches the server,
exactly as when EC2 refuses it. (In-process moto would still act on a request a hook answered.)
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber

from autoscaler.cloud import (
    CapacityUnavailable,
    InstanceNotFound,
    ProviderError,
    QuotaExceeded,
    Refusal,
    Throttled,
)
from autoscaler.config.options import Config
from autoscaler.core.model import ON_DEMAND, SPOT, CapacityType, Taint
from autoscaler.core.offering import LaunchRequest, Offering
from providers.aws import AwsProvider, ClientOptions
from providers.aws.userdata import parse_al2023_flags
from tests.fakes.aws_cloud import (
    AMI,
    CREDENTIALS,
    ClientTokens,
    Clock,
    Fault,
    Network,
    aws_config,
    ec2_client,
    ec2_error,
    lagging_describe_instances,
    make_provider,
    moto_server_url,
    overrides_include,
    shared_session,
    spy,
)


@pytest.fixture
def make(server: str) -> Callable[..., AwsProvider]:
    """Build a provider talking to the server: ``make(config, *hooks, clock=None)``."""

    def build(
        config: Config, *hooks: tuple[str, Callable[..., Any]], clock: Clock | None = None
    ) -> AwsProvider:
        return make_provider(config, *hooks, clock=clock, endpoint_url=server)

    return build


def offering(
    instance_type: str,
    zone: str = "us-east-1a",
    capacity_type: CapacityType = ON_DEMAND,
    price: float = 1.0,
    gpus: int = 1,
) -> Offering:
    return Offering(
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        vcpu=4,
        memory_mib=16384,
        price=price,
        gpu_count=gpus,
        gpu_model="A10G" if gpus else "",
        gpu_vendor="NVIDIA" if gpus else "",
        region="us-east-1",
    )


G5 = offering("g5.xlarge", price=1.006)
G6 = offering("g6.xlarge", "us-east-1b", price=1.2)
G5_SPOT = offering("g5.xlarge", capacity_type=SPOT, price=0.45)


TOKEN = "3b8a1f0e-5d1c-4c1e-9f57-1d3c9b2a7e10"


def request(*offerings: Offering, token: str = TOKEN) -> LaunchRequest:
    return LaunchRequest(
        token=token,
        offerings=offerings,
        labels={"tidal.dev/managed": "true", "tidal.dev/cluster": "prod", "tidal.dev/launch-token": token},
        taints=(Taint("nvidia.com/gpu", "true", "NoSchedule"),),
        tags={
            "tidal.dev/cluster": "prod",
            "tidal.dev/managed": "true",
            "tidal.dev/launch-token": token,
            "team": "ml",
        },
    )


def described(instance_id: str) -> dict[str, Any]:
    instance: dict[str, Any] = ec2_client(moto_server_url()).describe_instances(InstanceIds=[instance_id])[
        "Reservations"
    ][0]["Instances"][0]
    return instance


def running() -> list[str]:
    pages = ec2_client(moto_server_url()).describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    return [i["InstanceId"] for r in pages["Reservations"] for i in r["Instances"]]


def test_a_launch_makes_one_tagged_instance_of_the_cheapest_candidate(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network, nodeTags={"cost-center": "42"}))
    instance = provider.launch(request(G5, G6))
    assert (instance.instance_type, instance.zone, instance.capacity_type) == (
        "g5.xlarge",
        "us-east-1a",
        ON_DEMAND,
    )
    assert instance.provider_id == f"aws:///us-east-1a/{instance.id}"
    tags = {t["Key"]: t["Value"] for t in described(instance.id)["Tags"]}
    assert tags["tidal.dev/cluster"] == "prod"
    assert tags["tidal.dev/managed"] == "true"
    assert tags["tidal.dev/launch-token"] == "3b8a1f0e-5d1c-4c1e-9f57-1d3c9b2a7e10"
    assert tags["kubernetes.io/cluster/prod"] == "owned"
    assert tags["Name"] == "tidal-prod"
    assert (tags["team"], tags["cost-center"]) == ("ml", "42")
    assert described(instance.id)["SubnetId"] == network.subnets["us-east-1a"]


def test_the_fleet_request_crosses_candidates_with_their_zones_subnets_and_tags_volumes(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    seen = spy("before-send.ec2.CreateFleet")
    provider = make(aws_config(network), seen.hook)
    provider.launch(request(G5, G6, offering("g6.xlarge", "us-east-1c", price=1.3)))
    params = {k: v[0] for k, v in seen.params[0].items()}
    assert params["Type"] == "instant"
    assert params["TargetCapacitySpecification.TotalTargetCapacity"] == "1"
    assert params["OnDemandOptions.AllocationStrategy"] == "lowest-price"
    overrides = sorted(
        (params[k], params[k.replace("InstanceType", "SubnetId")])
        for k in params
        if k.endswith(".InstanceType")
    )
    # us-east-1c has no configured subnet, so that candidate is not offered to EC2 at all.
    assert overrides == [
        ("g5.xlarge", network.subnets["us-east-1a"]),
        ("g6.xlarge", network.subnets["us-east-1b"]),
    ]
    resources = sorted(v for k, v in params.items() if k.endswith(".ResourceType"))
    assert resources == ["fleet", "instance", "volume"]
    assert params["ClientToken"] == "3b8a1f0e-5d1c-4c1e-9f57-1d3c9b2a7e10"  # the launch token itself


def test_spot_launches_use_the_configured_allocation_strategy(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    seen = spy("before-send.ec2.CreateFleet")
    provider = make(aws_config(network, aws={"spotAllocationStrategy": "capacity-optimized"}), seen.hook)
    instance = provider.launch(request(G5_SPOT))
    assert instance.capacity_type == SPOT
    assert described(instance.id)["InstanceLifecycle"] == "spot"
    assert seen.params[0]["SpotOptions.AllocationStrategy"] == ["capacity-optimized"]
    assert seen.params[0]["TargetCapacitySpecification.DefaultTargetCapacityType"] == ["spot"]


def test_the_managed_template_joins_the_cluster_with_tidals_labels_and_taints(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    instance = provider.launch(request(G5))
    ec2 = ec2_client(moto_server_url())
    templates = ec2.describe_launch_templates(Filters=[{"Name": "tag:tidal.dev/cluster", "Values": ["prod"]}])
    [template] = templates["LaunchTemplates"]
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["ImageId"] == AMI
    assert data["IamInstanceProfile"] == {"Name": "tidal-nodes"}
    assert data["SecurityGroupIds"] == [network.security_group]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 100
    flags = parse_al2023_flags(base64.b64decode(data["UserData"]).decode())
    assert flags == [
        "--node-labels=tidal.dev/cluster=prod,tidal.dev/managed=true",
        "--register-with-taints=nvidia.com/gpu=true:NoSchedule",
    ]
    assert described(instance.id)["ImageId"] == AMI


def test_launches_of_the_same_kind_share_one_managed_template(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    provider.launch(request(G5, token="11111111-0000-4000-8000-000000000000"))
    provider.launch(request(G5, token="22222222-0000-4000-8000-000000000000"))
    templates = ec2_client(moto_server_url()).describe_launch_templates()["LaunchTemplates"]
    assert len(templates) == 1


def test_a_repeated_launch_with_the_same_token_returns_the_same_instance(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    fleets = spy("before-send.ec2.CreateFleet")
    first = make(aws_config(network), fleets.hook).launch(request(G5, G6))
    again = make(aws_config(network), fleets.hook).launch(request(G5, G6))  # e.g. after a restart
    assert again.id == first.id
    assert fleets.sent == 1
    assert running() == [first.id]


def test_the_client_token_is_the_launch_token(network: Network, make: Callable[..., AwsProvider]) -> None:
    fleets = spy("before-send.ec2.CreateFleet")
    make(aws_config(network), fleets.hook).launch(request(G5, G6))
    assert [p["ClientToken"] for p in fleets.params] == [[TOKEN]]


def test_a_retry_with_other_candidates_returns_the_first_instance_and_launches_none(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    ec2_tokens = ClientTokens()
    first = make(aws_config(network), ec2_tokens.hook).launch(request(G5, G6))
    # The retry (after a restart, with G5 benched meanwhile) does not see the instance at first: EC2 refuses
    # the token with other parameters, and the instance launched under it is found and returned.
    again = make(aws_config(network), ec2_tokens.hook, lagging_describe_instances()).launch(request(G6))
    assert again.id == first.id
    assert (ec2_tokens.sent, ec2_tokens.refused) == ([TOKEN, TOKEN], 1)
    assert running() == [first.id]


def test_a_retry_after_a_request_that_launched_nothing_goes_on_under_the_next_client_token(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    ec2_tokens = ClientTokens()
    no_g5 = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error("InsufficientInstanceCapacity", "Insufficient capacity.", 500),
        when=overrides_include("g5.xlarge"),
    )
    with pytest.raises(CapacityUnavailable):
        make(aws_config(network), ec2_tokens.hook, no_g5.hook).launch(request(G5))
    instance = make(aws_config(network), ec2_tokens.hook).launch(request(G6))  # after a restart
    assert instance.instance_type == "g6.xlarge"
    assert ec2_tokens.sent == [TOKEN, TOKEN, f"{TOKEN}-1"]
    assert running() == [instance.id]


def test_a_named_launch_template_is_used_as_it_is(network: Network, make: Callable[..., AwsProvider]) -> None:
    ec2 = ec2_client(moto_server_url())
    ec2.create_launch_template(LaunchTemplateName="eks-gpu-nodes", LaunchTemplateData={"ImageId": AMI})
    config = aws_config(
        network,
        aws={
            "managedLaunchTemplate": None,
            "securityGroupIds": None,
            "launchTemplate": {"name": "eks-gpu-nodes"},
        },
    )
    seen = spy("before-send.ec2.CreateFleet")
    make(config, seen.hook).launch(request(G5))
    params = {k: v[0] for k, v in seen.params[0].items()}
    assert params["LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName"] == "eks-gpu-nodes"
    assert params["LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version"] == "$Default"
    assert len(ec2.describe_launch_templates()["LaunchTemplates"]) == 1  # tidal wrote none of its own


def test_fleet_errors_name_exactly_the_offerings_without_capacity(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    stubber = Stubber(provider.clients.client("ec2", launch=True))
    stubber.add_response(
        "create_fleet",
        {
            "FleetId": "fleet-1",
            "Instances": [],
            "Errors": [
                {
                    "LaunchTemplateAndOverrides": {
                        "Overrides": {"InstanceType": "g5.xlarge", "SubnetId": network.subnets["us-east-1a"]}
                    },
                    "Lifecycle": "on-demand",
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": "We currently do not have sufficient g5.xlarge capacity in us-east-1a.",
                }
            ],
        },
    )
    with stubber, pytest.raises(CapacityUnavailable) as caught:
        provider.launch(request(G5, G6))
    assert [o.key for o in caught.value.offerings] == ["g5.xlarge/us-east-1a/on-demand"]


def test_an_ice_error_for_the_whole_call_names_the_offering_in_its_message(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    ice = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "InsufficientInstanceCapacity",
            "We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested "
            "(us-east-1a). Our system will be working on provisioning additional capacity.",
            500,
        ),
    )
    provider = make(aws_config(network), ice.hook)
    with pytest.raises(CapacityUnavailable) as caught:
        provider.launch(request(G5, G6))
    assert [o.key for o in caught.value.offerings] == ["g5.xlarge/us-east-1a/on-demand"]
    assert ice.seen == 1


def test_with_the_default_retry_settings_a_capacity_error_is_not_retried_by_the_sdk(
    network: Network, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")  # reads may retry; launches still go once
    ice = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error("InsufficientInstanceCapacity", "Insufficient capacity.", 500),
    )
    provider = AwsProvider(
        aws_config(network),
        client_options=ClientOptions(endpoint_url=server, credentials=CREDENTIALS, event_hooks=(ice.hook,)),
        session_factory=shared_session,
    )
    with pytest.raises(CapacityUnavailable):
        provider.launch(request(G5))
    assert ice.seen == 1
    assert provider.clients.client("ec2", launch=True).meta.config.retries["total_max_attempts"] == 1


def test_spot_without_capacity_falls_back_to_on_demand_in_the_same_launch(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    no_spot = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error("InsufficientInstanceCapacity", "There is no Spot capacity available.", 500),
        when=lambda params: params.get("TargetCapacitySpecification.DefaultTargetCapacityType") == ["spot"],
    )
    provider = make(aws_config(network), no_spot.hook)
    instance = provider.launch(request(G5_SPOT, G5))
    assert instance.capacity_type == ON_DEMAND
    assert (no_spot.failed, no_spot.sent) == (1, 1)
    # The spot request launched nothing, so the on-demand one goes under the next client token.
    assert [p["ClientToken"] for p in no_spot.params] == [[TOKEN], [f"{TOKEN}-1"]]


def no_spot_capacity() -> Fault:
    return Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error("InsufficientInstanceCapacity", "There is no Spot capacity available.", 500),
        when=lambda params: params.get("TargetCapacitySpecification.DefaultTargetCapacityType") == ["spot"],
    )


def on_demand_refused(code: str, message: str, status: int) -> Fault:
    return Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(code, message, status),
        when=lambda params: (
            params.get("TargetCapacitySpecification.DefaultTargetCapacityType") == ["on-demand"]
        ),
    )


def test_a_quota_on_the_on_demand_fallback_is_a_quota_error_naming_the_spot_offerings_without_capacity(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    quota = on_demand_refused("VcpuLimitExceeded", "You have requested more vCPU capacity than allowed.", 400)
    provider = make(aws_config(network), no_spot_capacity().hook, quota.hook)
    with pytest.raises(QuotaExceeded, match="VcpuLimitExceeded") as caught:
        provider.launch(request(G5_SPOT, G5))
    assert not isinstance(caught.value, CapacityUnavailable)
    assert [(a.offering.key, a.refusal) for a in caught.value.attempts] == [
        ("g5.xlarge/us-east-1a/spot", Refusal.NO_CAPACITY),
        ("g5.xlarge/us-east-1a/on-demand", Refusal.QUOTA),
    ]
    scope = caught.value.scope
    assert scope is not None and (scope.kind, scope.families, scope.capacity_type) == (
        "family",
        frozenset({"g5"}),
        "on-demand",
    )
    assert running() == []


def test_throttling_on_the_on_demand_fallback_is_throttled_naming_the_spot_offerings_without_capacity(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    throttled = on_demand_refused("RequestLimitExceeded", "Request limit exceeded.", 503)
    provider = make(aws_config(network), no_spot_capacity().hook, throttled.hook, clock=Clock())
    with pytest.raises(Throttled) as caught:
        provider.launch(request(G5_SPOT, G5))
    assert not isinstance(caught.value, CapacityUnavailable)
    assert 0.5 <= caught.value.retry_after <= 1.0
    assert [(a.offering.key, a.refusal) for a in caught.value.attempts] == [
        ("g5.xlarge/us-east-1a/spot", Refusal.NO_CAPACITY),
        ("g5.xlarge/us-east-1a/on-demand", Refusal.THROTTLED),
    ]


def test_a_candidate_without_a_subnet_in_its_zone_is_not_reported_as_without_capacity(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    ice = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "InsufficientInstanceCapacity",
            "We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested "
            "(us-east-1a).",
            500,
        ),
    )
    nowhere = offering("g5.xlarge", "us-east-1c", price=0.9)  # no configured subnet in us-east-1c
    with pytest.raises(CapacityUnavailable) as caught:
        make(aws_config(network), ice.hook).launch(request(nowhere, G5))
    assert [o.key for o in caught.value.offerings] == ["g5.xlarge/us-east-1a/on-demand"]


def test_a_launch_with_no_candidate_in_a_subnets_zone_is_an_error_not_a_capacity_shortage(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    fleets = spy("before-send.ec2.CreateFleet")
    nowhere = offering("g5.xlarge", "us-east-1c", price=0.9)
    with pytest.raises(
        ProviderError, match="no candidate offering is in a zone with a configured subnet"
    ) as e:
        make(aws_config(network), fleets.hook).launch(request(nowhere))
    assert not isinstance(e.value, CapacityUnavailable)
    assert fleets.seen == 0


def fleet_error_answer(network: Network, code: str, lifecycle: str = "on-demand") -> dict[str, Any]:
    return {
        "FleetId": "fleet-0123456789abcdef0",
        "Instances": [],
        "Errors": [
            {
                "LaunchTemplateAndOverrides": {
                    "Overrides": {"InstanceType": "g5.xlarge", "SubnetId": network.subnets["us-east-1a"]}
                },
                "Lifecycle": lifecycle,
                "ErrorCode": code,
                "ErrorMessage": f"{code} for g5.xlarge.",
            }
        ],
    }


def test_throttling_inside_fleet_errors_is_throttled_and_backs_off(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    clock = Clock()
    provider = make(aws_config(network), clock=clock)
    stubber = Stubber(provider.clients.client("ec2", launch=True))
    stubber.add_response("create_fleet", fleet_error_answer(network, "RequestLimitExceeded"))
    with stubber:
        with pytest.raises(Throttled) as caught:
            provider.launch(request(G5))
        assert not isinstance(caught.value, CapacityUnavailable)
        with pytest.raises(Throttled, match="backing off"):
            provider.launch(request(G5))  # refused without calling EC2: the Stubber has no second answer
    stubber.assert_no_pending_responses()


def test_unfulfillable_capacity_in_fleet_errors_names_that_offering(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    stubber = Stubber(provider.clients.client("ec2", launch=True))
    stubber.add_response("create_fleet", fleet_error_answer(network, "UnfulfillableCapacity"))
    with stubber, pytest.raises(CapacityUnavailable) as caught:
        provider.launch(request(G5, G6))
    assert [o.key for o in caught.value.offerings] == ["g5.xlarge/us-east-1a/on-demand"]


def test_too_many_spot_instances_is_a_quota_on_every_spot_offering_of_the_region(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    limit = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded for this account.", 400
        ),
    )
    spot_g6 = offering("g6.xlarge", "us-east-1b", SPOT, price=0.5)
    with pytest.raises(QuotaExceeded) as caught:
        make(aws_config(network), limit.hook).launch(request(G5_SPOT, spot_g6))
    # EC2 names no override in a whole-call error: the quota is laid on the first candidate, and its scope
    # (every spot offering of the region) covers the other as well.
    assert [a.offering.key for a in caught.value.attempts] == ["g5.xlarge/us-east-1a/spot"]
    scope = caught.value.scope
    assert scope is not None and scope.covers(spot_g6)
    assert scope is not None and (scope.kind, scope.region, scope.capacity_type) == (
        "region",
        "us-east-1",
        "spot",
    )
    assert not scope.covers(G5) and scope.covers(
        offering("m6i.large", "us-east-1a", SPOT, price=0.04, gpus=0)
    )


def test_at_most_60_candidates_are_offered_to_ec2(network: Network, make: Callable[..., AwsProvider]) -> None:
    fleets = spy("before-send.ec2.CreateFleet")
    candidates = [
        offering(f"{family}.{size}", zone, price=0.05 * (i + 1), gpus=0)
        for i, (family, size, zone) in enumerate(
            (family, size, zone)
            for family in ("m6i", "m5", "c6i", "r6i", "m7i", "c5")
            for size in ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge")
            for zone in ("us-east-1a", "us-east-1b")
        )
    ]
    assert len(candidates) == 72
    make(aws_config(network), fleets.hook).launch(request(*candidates))
    [params] = fleets.params
    offered = sorted(
        (params[k][0], params[k.replace("InstanceType", "SubnetId")][0])
        for k in params
        if k.endswith(".InstanceType")
    )
    # The 60 cheapest (the request lists them cheapest first), each in its zone's subnet.
    assert offered == sorted((o.instance_type, network.subnets[o.zone]) for o in candidates[:60])


def test_an_account_limit_is_a_quota_error(network: Network, make: Callable[..., AwsProvider]) -> None:
    limit = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "VcpuLimitExceeded", "You have requested more vCPU capacity than your current limit.", 400
        ),
    )
    with pytest.raises(QuotaExceeded, match="VcpuLimitExceeded"):
        make(aws_config(network), limit.hook).launch(request(G5))


def test_an_unknown_error_is_one_line_naming_the_action(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    broken = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "InvalidParameterValue", "Value (x) for parameter iamInstanceProfile.name is invalid.", 400
        ),
    )
    with pytest.raises(ProviderError) as caught:
        make(aws_config(network), broken.hook).launch(request(G5))
    assert str(caught.value) == (
        "ec2:CreateFleet failed: InvalidParameterValue: Value (x) for parameter iamInstanceProfile.name is invalid."
    )
    assert not isinstance(caught.value, CapacityUnavailable | QuotaExceeded | Throttled)


def test_throttling_backs_off_with_jitter_for_that_operation_only(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    clock = Clock()
    throttled = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error("RequestLimitExceeded", "Request limit exceeded.", 503),
        times=2,
    )
    provider = make(aws_config(network), throttled.hook, clock=clock)
    with pytest.raises(Throttled) as first:
        provider.launch(request(G5))
    assert 0.5 <= first.value.retry_after <= 1.0
    with pytest.raises(Throttled):
        provider.launch(request(G5))  # still backing off: refused without calling EC2
    assert throttled.seen == 1
    assert provider.instances() == []  # other operations are not held back
    clock.tick(first.value.retry_after)
    with pytest.raises(Throttled) as second:
        provider.launch(request(G5))
    assert 1.0 <= second.value.retry_after <= 2.0  # the delay doubles per consecutive throttle
    clock.tick(second.value.retry_after)
    assert provider.launch(request(G5)).instance_type == "g5.xlarge"
    assert throttled.seen == 3


def test_restart_finds_owned_instances_by_tag_in_every_state(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    before = make(aws_config(network))
    kept = before.launch(request(G5, token="aaaaaaaa-0000-4000-8000-000000000000"))
    ended = before.launch(request(G6, token="bbbbbbbb-0000-4000-8000-000000000000"))
    before.terminate(ended)
    other = make(aws_config(network, clusterName="staging"))
    other.launch(request(G5, token="cccccccc-0000-4000-8000-000000000000"))
    ec2_client(moto_server_url()).run_instances(
        ImageId=AMI, InstanceType="m6i.large", MinCount=1, MaxCount=1
    )  # not tidal's

    after = make(aws_config(network))
    found = {i.id: i for i in after.instances()}
    assert set(found) == {kept.id, ended.id}
    assert (found[kept.id].state, found[ended.id].state) == ("running", "terminated")
    assert found[kept.id].launch_token == "aaaaaaaa-0000-4000-8000-000000000000"
    assert found[kept.id].provider_id == f"aws:///us-east-1a/{kept.id}"
    assert found[ended.id].provider_id == f"aws:///us-east-1b/{ended.id}"
    assert found[kept.id].created > 0


def test_terminate_is_idempotent_says_when_an_instance_is_unknown_and_spares_other_clusters(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    instance = provider.launch(request(G5))
    provider.terminate(instance)
    provider.terminate(instance)  # EC2 still lists it, terminated: harmless
    with pytest.raises(InstanceNotFound):  # never existed, or long forgotten: the typed not-found
        provider.terminate(replace(instance, id="i-0123456789abcdef0"))
    assert instance.id not in running()
    staging = make(aws_config(network, clusterName="staging"))
    foreign = staging.launch(request(G6, token="dddddddd-0000-4000-8000-000000000000"))
    with pytest.raises(ProviderError, match="belongs to cluster 'staging'"):
        provider.terminate(foreign)
    assert foreign.id in running()


def test_the_instances_volumes_carry_the_cluster_tags(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    instance = make(aws_config(network, nodeTags={"cost-center": "42"})).launch(request(G5))
    volumes = ec2_client(moto_server_url()).describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance.id]}]
    )["Volumes"]
    assert volumes
    for volume in volumes:
        tags = {t["Key"]: t["Value"] for t in volume.get("Tags", [])}
        assert tags["tidal.dev/cluster"] == "prod"
        assert tags["kubernetes.io/cluster/prod"] == "owned"
        assert tags["cost-center"] == "42"
