"""Spot interruption notices read from SQS name the instances whose nodes must be drained now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.offering import LaunchRequest, Offering
from tests.fakes.aws_cloud import (
    aws_config,
    ec2_client,
    make_network,
    make_provider,
    spot_interruption_warning,
)

if TYPE_CHECKING:
    from typing import Any


def test_interrupted_instances_are_this_clusters_live_instances_named_by_a_notice(sqs: Any) -> None:
    queue = sqs.create_queue(QueueName="prod-interruptions")["QueueUrl"]
    network = make_network(ec2_client())
    provider = make_provider(aws_config(network, aws={"spotInterruptionQueue": "prod-interruptions"}))
    spot = Offering("g5.xlarge", "us-east-1a", SPOT, 4, 16384, 0.45, gpu_count=1)
    doomed = provider.launch(LaunchRequest("aaaaaaaa-0000-4000-8000-000000000000", (spot,)))
    calm = provider.launch(
        LaunchRequest(
            "bbbbbbbb-0000-4000-8000-000000000000",
            (Offering("g5.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 1.0),),
        )
    )
    sqs.send_message(QueueUrl=queue, MessageBody=spot_interruption_warning(doomed.id))
    sqs.send_message(
        QueueUrl=queue, MessageBody=spot_interruption_warning("i-0123456789abcdef0")
    )  # not this cluster's
    sqs.send_message(QueueUrl=queue, MessageBody="not an event")

    interrupted = provider.interrupted_instances()

    assert [i.id for i in interrupted] == [doomed.id]
    assert interrupted[0].provider_id == f"aws:///us-east-1a/{doomed.id}"
    assert calm.id not in provider.interruptions()
    assert sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", []) == []
    assert [i.id for i in provider.interrupted_instances()] == [
        doomed.id
    ]  # remembered after the queue emptied


def test_without_a_queue_there_are_no_interruptions(sqs: Any) -> None:
    provider = make_provider(aws_config(make_network(ec2_client())))
    assert provider.interruptions() == []
    assert provider.interrupted_instances() == []
