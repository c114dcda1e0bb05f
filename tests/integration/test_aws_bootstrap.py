"""What a managed launch template is made of when config leaves it to AWS: the EKS-optimized AMI from SSM
and the cluster's endpoint, certificate and service range from EKS."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from autoscaler.core.model import ON_DEMAND
from autoscaler.core.offering import LaunchRequest, Offering
from providers.aws.userdata import BOUNDARY
from tests.fakes.aws_cloud import (
    AMI,
    CREDENTIALS,
    REGION,
    Clock,
    Fault,
    Network,
    aws_config,
    ec2_client,
    json_error,
    make_network,
    make_provider,
)

if TYPE_CHECKING:
    from providers.aws import AwsProvider

PARAMETER = "/tidal/test/eks-gpu-ami"
NEWER_AMI = "ami-1812c061"  # another image moto knows


def client(service: str) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS.access_key_id,
        aws_secret_access_key=CREDENTIALS.secret_access_key,
    )


@pytest.fixture
def network() -> Iterator[Network]:
    with mock_aws():
        yield make_network(ec2_client())


def test_the_ami_comes_from_ssm_and_the_cluster_from_eks(network: Network) -> None:
    client("ssm").put_parameter(Name=PARAMETER, Value=AMI, Type="String")
    eks = client("eks")
    eks.create_cluster(
        name="prod-eks",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": list(network.subnets.values())},
    )
    cluster = eks.describe_cluster(name="prod-eks")["cluster"]
    config = aws_config(
        network,
        aws={
            "eksClusterName": "prod-eks",
            "managedLaunchTemplate": {
                "amiSsmParameter": PARAMETER,
                "instanceProfile": "arn:aws:iam::123456789012:instance-profile/nodes",
            },
        },
    )
    provider = make_provider(config)
    instance = provider.launch(
        LaunchRequest(
            "aaaaaaaa-0000-4000-8000-000000000000",
            (Offering("g5.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 1.0, gpu_count=1),),
        )
    )
    ec2 = ec2_client()
    [template] = ec2.describe_launch_templates()["LaunchTemplates"]
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    user_data = base64.b64decode(data["UserData"]).decode()
    assert data["ImageId"] == AMI
    assert data["IamInstanceProfile"] == {"Arn": "arn:aws:iam::123456789012:instance-profile/nodes"}
    assert f"--{BOUNDARY}" in user_data
    assert f"apiServerEndpoint: {cluster['endpoint']}" in user_data
    assert "name: prod-eks" in user_data
    assert "cidr: 172.20.0.0/16" in user_data
    tags = {
        t["Key"]: t["Value"]
        for t in ec2.describe_instances(InstanceIds=[instance.id])["Reservations"][0]["Instances"][0]["Tags"]
    }
    assert tags["kubernetes.io/cluster/prod-eks"] == "owned"


def launch(provider: AwsProvider, token: str) -> Any:
    return provider.launch(
        LaunchRequest(token, (Offering("g5.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 1.0, gpu_count=1),))
    )


def image_of(instance_id: str) -> str:
    found = ec2_client().describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return str(found["ImageId"])


def public_parameters(values: dict[str, str], asked: list[str]) -> tuple[str, Callable[..., Any]]:
    """AWS's public SSM parameters (``/aws/service/...``), which moto neither ships for EKS nor lets anyone
    store: a ``before-call`` hook answers GetParameter for them; other names go to moto."""

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        body = params.get("body") or b"{}"
        name = json.loads(body.decode() if isinstance(body, bytes) else body)["Name"]
        if name not in values:
            return None
        asked.append(name)
        parameter = {"Name": name, "Type": "String", "Value": values[name], "Version": 1}
        return AWSResponse("https://ssm.fixture", 200, {}, None), {"Parameter": parameter}

    return ("before-call.ssm.GetParameter", answer)


def create_eks_cluster(network: Network, version: str = "1.31") -> dict[str, Any]:
    eks = client("eks")
    eks.create_cluster(
        name="prod-eks",
        version=version,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": list(network.subnets.values())},
    )
    cluster: dict[str, Any] = eks.describe_cluster(name="prod-eks")["cluster"]
    return cluster


def test_by_default_the_ami_is_the_eks_optimized_one_for_the_clusters_version_and_node_kind(
    network: Network,
) -> None:
    create_eks_cluster(network, version="1.31")
    recommended = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
    asked: list[str] = []
    config = aws_config(
        network,
        aws={"eksClusterName": "prod-eks", "managedLaunchTemplate": {"instanceProfile": "tidal-nodes"}},
    )
    provider = make_provider(config, public_parameters({recommended: AMI}, asked))
    instance = launch(provider, "aaaaaaaa-0000-4000-8000-000000000000")
    assert asked == [recommended]  # the GPU (nvidia) variant, for the version EKS reports
    assert image_of(instance.id) == AMI


def test_a_new_recommended_ami_is_used_after_the_refresh_interval_without_a_restart(network: Network) -> None:
    ssm = client("ssm")
    ssm.put_parameter(Name=PARAMETER, Value=AMI, Type="String")
    create_eks_cluster(network)
    clock = Clock()
    config = aws_config(
        network,
        aws={
            "eksClusterName": "prod-eks",
            "priceRefreshInterval": "1h",
            "managedLaunchTemplate": {"amiSsmParameter": PARAMETER, "instanceProfile": "tidal-nodes"},
        },
    )
    provider = make_provider(config, clock=clock)
    first = launch(provider, "aaaaaaaa-0000-4000-8000-000000000000")
    ssm.put_parameter(Name=PARAMETER, Value=NEWER_AMI, Type="String", Overwrite=True)
    clock.tick(1800)
    cached = launch(provider, "bbbbbbbb-0000-4000-8000-000000000000")
    clock.tick(1801)
    refreshed = launch(provider, "cccccccc-0000-4000-8000-000000000000")
    assert [image_of(i.id) for i in (first, cached, refreshed)] == [AMI, AMI, NEWER_AMI]
    assert len(ec2_client().describe_launch_templates()["LaunchTemplates"]) == 2  # one per AMI


def test_when_ssm_cannot_be_read_the_last_ami_is_kept(network: Network) -> None:
    client("ssm").put_parameter(Name=PARAMETER, Value=AMI, Type="String")
    create_eks_cluster(network)
    clock = Clock()
    denied = Fault(
        "before-send.ssm.GetParameter",
        lambda: json_error("AccessDeniedException", "not authorized to perform: ssm:GetParameter", 400),
        when=lambda _: clock.now > 1_800_000_000.0,
    )
    config = aws_config(
        network,
        aws={
            "eksClusterName": "prod-eks",
            "managedLaunchTemplate": {"amiSsmParameter": PARAMETER, "instanceProfile": "tidal-nodes"},
        },
    )
    provider = make_provider(config, denied.hook, clock=clock)
    launch(provider, "aaaaaaaa-0000-4000-8000-000000000000")
    clock.tick(7200)
    later = launch(provider, "bbbbbbbb-0000-4000-8000-000000000000")
    assert image_of(later.id) == AMI
    assert denied.failed == 1
