"""What a managed launch template is made of when config leaves it to AWS: the EKS-optimized AMI from SSM
and the cluster's endpoint, certificate and service range from EKS."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from autoscaler.model import LaunchRequest, Offering
from providers.aws.userdata import BOUNDARY
from tests.fakes.aws_cloud import (
    AMI,
    CREDENTIALS,
    REGION,
    Network,
    aws_config,
    ec2_client,
    make_network,
    make_provider,
)

PARAMETER = "/tidal/test/eks-gpu-ami"


def client(service: str):
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


def test_the_ami_comes_from_ssm_and_the_cluster_from_eks(network):
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
            (Offering("g5.xlarge", "us-east-1a", "on-demand", 4, 16384, 1.0, gpu_count=1),),
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
