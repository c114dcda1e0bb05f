"""The controller and the AWS provider together: no capacity for the cheapest offering means the next one is
launched in the same reconcile (against a moto server, the capacity error injected before it is sent)."""

from __future__ import annotations

from autoscaler.controller import Controller
from tests.builders import INSUFFICIENT_GPU, pod, snapshot
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


def test_no_capacity_for_the_cheapest_offering_falls_back_to_the_next_in_the_same_reconcile(server):
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
