"""The controller and the AWS provider together: an EC2 spot interruption warning read from SQS drains the
node of the instance it names and launches a replacement for that node's pods, in one reconcile (EC2 and SQS
in moto, the cluster a fixed snapshot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.model import SPOT
from autoscaler.core.offering import LaunchRequest, Offering
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.drain import DrainJob
from tests.builders import node, pod, snapshot
from tests.fakes.aws_cloud import (
    CATALOG,
    Clock,
    aws_config,
    ec2_client,
    make_network,
    make_provider,
    pricing_denied,
    spot_interruption_warning,
    spot_price_hook,
)
from tests.fakes.reconcile import CallRecorder, StaticCluster

if TYPE_CHECKING:
    from typing import Any

QUEUE = "prod-interruptions"


class Drains:
    """Drains, remembered instead of run (the real runner cordons and evicts through the API server)."""

    def __init__(self) -> None:
        self.jobs: list[DrainJob] = []

    def active(self) -> set[str]:
        return {job.node for job in self.jobs}

    def submit(self, job: DrainJob) -> bool:
        if job.node in self.active():
            return False
        self.jobs.append(job)
        return True

    def shutdown(self) -> None:
        pass


def test_an_interruption_warning_drains_the_node_and_launches_for_its_pods_in_one_reconcile(sqs: Any) -> None:
    queue = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
    network = make_network(ec2_client(), zones=("us-east-1a",))
    config = aws_config(
        network,
        aws={"families": ["g5"], "catalogFallback": str(CATALOG), "spotInterruptionQueue": QUEUE},
        zones=["us-east-1a"],
    )
    clock = Clock()
    provider = make_provider(
        config, pricing_denied(), spot_price_hook({("g5.xlarge", "us-east-1a"): 0.45}), clock=clock
    )
    # A spot node tidal launched earlier, running one training pod.
    spot = Offering("g5.xlarge", "us-east-1a", SPOT, 4, 16384, 0.45, gpu_count=1, gpu_model="A10G")
    doomed = provider.launch(
        LaunchRequest(
            "aaaaaaaa-0000-4000-8000-000000000000",
            (spot,),
            tags={"tidal.dev/cluster": "prod", "tidal.dev/managed": "true"},
        )
    )
    gpu_node = node(
        "ip-10-0-1-17.ec2.internal",
        instance_type="g5.xlarge",
        cpu="4",
        memory="16Gi",
        gpu=1,
        managed=True,
        capacity_type=SPOT,
        labels={
            "tidal.dev/cluster": "prod",
            "tidal.dev/launch-token": "aaaaaaaa-0000-4000-8000-000000000000",
        },
    )
    gpu_node["spec"]["providerID"] = doomed.provider_id
    training = pod(
        "train-0",
        cpu="2",
        memory="8Gi",
        gpu=1,
        node_name="ip-10-0-1-17.ec2.internal",
        phase="Running",
        message=None,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    sqs.send_message(QueueUrl=queue, MessageBody=spot_interruption_warning(doomed.id))
    drains, events = Drains(), CallRecorder()
    controller = Controller(
        config=lambda: config,
        cluster=StaticCluster(snapshot(gpu_node, training)),
        provider=provider,
        actions=CallRecorder(),
        events=events,
        clock=clock,
        drainer=drains,
    )

    result = controller.reconcile_once()

    assert not result.error
    assert result.drains_started == ["ip-10-0-1-17.ec2.internal"]
    [job] = drains.jobs
    assert [p.name for p in job.pods] == ["train-0"]
    assert job.instance is not None and job.instance.id == doomed.id
    assert (
        "node",
        ("ip-10-0-1-17.ec2.internal", "SpotInterrupted", "the cloud is reclaiming this node; draining now"),
    ) in events.calls
    [replacement] = [o for o in result.launched if o.instance is not None]
    assert replacement.launch.pods == ("default/train-0",)
    assert replacement.instance is not None
    assert replacement.instance.id != doomed.id
    assert replacement.token != "aaaaaaaa-0000-4000-8000-000000000000"  # a new launch, not the doomed one
    live = {i.id for i in provider.instances() if i.state in ("pending", "running")}
    assert live == {doomed.id, replacement.instance.id}
