"""The controller and the AWS provider together: no capacity for the cheapest offering means the next one is
launched in the same reconcile (against a moto server, the capacity error injected before it is sent)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.awsrequest import AWSResponse

from autoscaler.runtime.controller import Controller
from tests.builders import INSUFFICIENT_GPU, pod, podgroup, snapshot
from tests.fakes.aws_cloud import (
    CATALOG,
    Clock,
    Fault,
    aws_config,
    ec2_client,
    ec2_error,
    make_network,
    make_provider,
    overrides_include,
    pricing_denied,
    reset_moto_server,
)
from tests.fakes.reconcile import CallRecorder, StaticCluster

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from autoscaler.config.options import Config
    from providers.aws import AwsProvider


def test_no_capacity_for_the_cheapest_offering_falls_back_to_the_next_in_the_same_reconcile(
    server: str,
) -> None:
    reset_moto_server(server)
    network = make_network(ec2_client(server), zones=("us-east-1a",))
    config = aws_config(
        network,
        aws={"families": ["g4dn", "g5", "g6"], "catalogFallback": str(CATALOG)},
        capacityTypes=["on-demand"],
        zones=["us-east-1a"],
    )
    no_g4dn = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "InsufficientInstanceCapacity",
            "We currently do not have sufficient g4dn.xlarge capacity in the Availability Zone you requested "
            "(us-east-1a).",
            500,
        ),
        when=overrides_include("g4dn.xlarge"),
    )
    clock = Clock()
    provider = make_provider(config, no_g4dn.hook, pricing_denied(), clock=clock, endpoint_url=server)
    controller = Controller(
        config=lambda: config,
        cluster=StaticCluster(
            snapshot(pod("infer-0", cpu="1", memory="4Gi", gpu=1, message=INSUFFICIENT_GPU))
        ),
        provider=provider,
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=clock,
    )
    result = controller.reconcile_once()
    assert not result.error
    assert result.plan is not None
    # g4dn.xlarge is the cheapest T4 node; g4dn.2xlarge is the next cheapest offering that fits.
    assert [o.launch.offering.instance_type for o in result.launched] == ["g4dn.xlarge", "g4dn.2xlarge"]
    assert [o.instance is not None for o in result.launched] == [False, True]
    assert (no_g4dn.failed, no_g4dn.sent) == (1, 1)
    launched = [i for i in provider.instances() if i.state != "terminated"]
    assert [i.instance_type for i in launched] == ["g4dn.2xlarge"]
    assert controller.availability.benched(clock()) == ["g4dn.xlarge/us-east-1a/on-demand"]


def aws_controller(config: Config, provider: AwsProvider, clock: Clock, *pods: dict[str, Any]) -> Controller:
    return Controller(
        config=lambda: config,
        cluster=StaticCluster(snapshot(*pods)),
        provider=provider,
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=clock,
    )


def test_a_g4dn_vcpu_quota_falls_back_to_g5_in_the_same_reconcile(server: str) -> None:
    """The reproduction: VcpuLimitExceeded for g4dn was logged and retried on every reconcile, never g5."""
    reset_moto_server(server)
    network = make_network(ec2_client(server), zones=("us-east-1a",))
    config = aws_config(
        network,
        aws={"families": ["g4dn", "g5"], "catalogFallback": str(CATALOG)},
        capacityTypes=["on-demand"],
        zones=["us-east-1a"],
    )
    no_g4dn_quota = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "VcpuLimitExceeded",
            "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance "
            "bucket that the specified instance type belongs to. Please visit "
            "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
            400,
        ),
        when=lambda params: any(
            k.endswith(".InstanceType") and v[0].startswith("g4dn.") for k, v in params.items()
        ),
    )
    clock = Clock()
    provider = make_provider(config, no_g4dn_quota.hook, pricing_denied(), clock=clock, endpoint_url=server)
    pod_ = pod("infer-0", cpu="1", memory="4Gi", gpu=1, message=INSUFFICIENT_GPU)
    controller = aws_controller(config, provider, clock, pod_)

    result = controller.reconcile_once()

    assert not result.error
    assert [(o.launch.offering.instance_type, o.instance is not None) for o in result.launched] == [
        ("g4dn.xlarge", False),
        ("g5.xlarge", True),
    ]
    assert [i.instance_type for i in provider.instances() if i.state != "terminated"] == ["g5.xlarge"]
    assert no_g4dn_quota.failed == 1  # the g4dn family was asked once, then benched as a whole
    assert controller.availability.benched(clock()) == ["quota family/g4dn/us-east-1/on-demand"]


def test_a_vcpu_quota_inside_the_fleets_errors_falls_back_in_the_same_reconcile(server: str) -> None:
    """EC2 Fleet reports a refused override in Errors[] of a 200 answer. moto never fills Errors[]: a
    before-call hook answers the first CreateFleet as EC2 would (the parsed answer, as a Stubber gives it);
    the fallback request reaches moto."""
    reset_moto_server(server)
    network = make_network(ec2_client(server), zones=("us-east-1a",))
    config = aws_config(
        network,
        aws={"families": ["g4dn", "g5"], "catalogFallback": str(CATALOG)},
        capacityTypes=["on-demand"],
        zones=["us-east-1a"],
    )
    clock = Clock()
    provider = make_provider(config, pricing_denied(), clock=clock, endpoint_url=server)
    ec2 = provider.clients.client("ec2", launch=True)
    subnet = network.subnets["us-east-1a"]
    refused = {
        "FleetId": "fleet-0123456789abcdef0",
        "Instances": [],
        "Errors": [
            {
                "LaunchTemplateAndOverrides": {
                    "Overrides": {"InstanceType": t, "SubnetId": subnet, "AvailabilityZone": "us-east-1a"}
                },
                "Lifecycle": "on-demand",
                "ErrorCode": "VcpuLimitExceeded",
                "ErrorMessage": "You have requested more vCPU capacity than your current vCPU limit of 0 allows.",
            }
            for t in ("g4dn.xlarge", "g4dn.2xlarge")
        ],
    }
    answered: list[str] = []

    def answer_first_as_ec2(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if answered:
            return None  # the fallback request goes to moto
        answered.append("CreateFleet")
        return AWSResponse("https://ec2.us-east-1.amazonaws.com/", 200, {}, None), refused

    ec2.meta.events.register_first(
        "before-call.ec2.CreateFleet", lambda params, **kw: answer_first_as_ec2(params)
    )
    controller = aws_controller(
        config, provider, clock, pod("infer-0", cpu="1", memory="4Gi", gpu=1, message=INSUFFICIENT_GPU)
    )

    result = controller.reconcile_once()

    assert not result.error
    [first, second] = result.launched
    assert {(a.offering.instance_type, a.refusal.value) for a in first.refusals} == {
        ("g4dn.xlarge", "quota"),
        ("g4dn.2xlarge", "quota"),
    }
    assert second.instance is not None and second.instance.instance_type == "g5.xlarge"


def test_a_gang_whose_second_node_ec2_has_no_capacity_for_is_terminated_after_the_gang_launch_timeout(
    server: str,
) -> None:
    """Both nodes of a two-pod gang are asked for in one reconcile; EC2 launches the first and has no
    capacity for the second, nor for any fallback. Once gangLaunchTimeout passes, the first is terminated
    rather than left holding half a gang."""
    reset_moto_server(server)
    network = make_network(ec2_client(server), zones=("us-east-1a",))
    config = aws_config(
        network,
        aws={"families": ["g4dn"], "catalogFallback": str(CATALOG)},
        capacityTypes=["on-demand"],
        zones=["us-east-1a"],
        maxParallelLaunches=1,
        gangLaunchTimeout="5m",
    )
    fleets = {"sent": 0}

    def after_the_first(params: Mapping[str, list[str]]) -> bool:
        fleets["sent"] += 1
        return fleets["sent"] > 1  # EC2 had room for one g4dn, then none

    no_more = Fault(
        "before-send.ec2.CreateFleet",
        lambda: ec2_error(
            "InsufficientInstanceCapacity", "There is no g4dn capacity available at the moment.", 500
        ),
        when=after_the_first,
    )
    clock = Clock()
    provider = make_provider(config, no_more.hook, pricing_denied(), clock=clock, endpoint_url=server)
    members = [podgroup("train", min_member=2, queue="research")] + [
        pod(
            f"train-{i}",
            cpu="2",
            memory="8Gi",
            gpu=1,
            message=INSUFFICIENT_GPU,
            annotations={"pod-group-name": "train"},
        )
        for i in range(2)
    ]
    controller = aws_controller(config, provider, clock, *members)

    first = controller.reconcile_once()
    launched = [o.instance for o in first.launched if o.instance is not None]
    assert len(launched) == 1 and {o.launch.gang for o in first.launched} == {"default/train"}
    assert first.rolled_back == []

    clock.now += 5 * 60
    done = controller.reconcile_once()

    assert done.rolled_back == ["default/train"]
    states = {i.id: i.state for i in provider.instances()}
    assert states[launched[0].id] == "terminated"
    assert all(state == "terminated" for state in states.values())
