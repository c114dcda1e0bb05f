"""The IAM policy and the launch requests agree: every resource a launch creates that
deploy/aws/iam-policy.json allows only with tidal's cluster tag carries that tag in the requests tidal sends.

The requests are read as they leave the SDK for a moto server (``before-send`` hooks on the provider's own
clients), for managed and named launch templates, spot and on-demand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.options import Config
from autoscaler.core.model import ON_DEMAND, SPOT, CapacityType
from autoscaler.core.offering import LaunchRequest, Offering
from providers.aws import AwsProvider
from tests.fakes.aws_cloud import (
    AMI,
    Network,
    aws_config,
    ec2_client,
    make_provider,
    moto_server_url,
    spy,
)

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "aws" / "iam-policy.json"
TOKEN = "5f0c1c56-8a55-4b8e-9d0e-2b8f4e1d7a31"
# What one instant-fleet launch of one node creates besides itself (the fleet).
CREATED = {
    ON_DEMAND: {"fleet", "instance", "volume", "network-interface"},
    SPOT: {"fleet", "instance", "volume", "network-interface", "spot-instances-request"},
}


def tag_conditioned_resource_types() -> set[str]:
    """Resource types CreateFleet/RunInstances may create only with ``aws:RequestTag/tidal.dev/cluster``."""
    found = set()
    for s in json.loads(POLICY.read_text())["Statement"]:
        actions = {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
        condition = s.get("Condition", {}).get("StringEquals", {})
        if (
            actions & {"ec2:CreateFleet", "ec2:RunInstances"}
            and "aws:RequestTag/tidal.dev/cluster" in condition
        ):
            resources = [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
            found |= {r.rsplit(":", 1)[-1].split("/")[0] for r in resources}
    return found


def tag_specifications(params: Mapping[str, list[str]], prefix: str = "") -> dict[str, dict[str, str]]:
    """Tags by resource type from a query-protocol request (``TagSpecification.N.Tag.M.Key`` …)."""
    pattern = re.compile(rf"^{re.escape(prefix)}TagSpecification\.(\d+)\.ResourceType$")
    out: dict[str, dict[str, str]] = {}
    for key, values in params.items():
        match = pattern.match(key)
        if not match:
            continue
        base = f"{prefix}TagSpecification.{match[1]}.Tag"
        tags, i = {}, 1
        while f"{base}.{i}.Key" in params:
            tags[params[f"{base}.{i}.Key"][0]] = params.get(f"{base}.{i}.Value", [""])[0]
            i += 1
        out.setdefault(values[0], {}).update(tags)
    return out


def offering(capacity_type: CapacityType) -> Offering:
    return Offering(
        "g5.xlarge",
        "us-east-1a",
        capacity_type,
        4,
        16384,
        0.45 if capacity_type == SPOT else 1.006,
        gpu_count=1,
        gpu_model="A10G",
        gpu_vendor="NVIDIA",
        region="us-east-1",
    )


def request(capacity_type: CapacityType) -> LaunchRequest:
    return LaunchRequest(
        TOKEN,
        (offering(capacity_type),),
        labels={"tidal.dev/managed": "true"},
        tags={"tidal.dev/cluster": "prod", "tidal.dev/managed": "true", "tidal.dev/launch-token": TOKEN},
    )


@pytest.fixture
def make(server: str) -> Callable[..., AwsProvider]:
    def build(config: Config, *hooks: tuple[str, Callable[..., Any]]) -> AwsProvider:
        return make_provider(config, *hooks, endpoint_url=server)

    return build


def named_template_config(network: Network) -> Config:
    ec2_client(moto_server_url()).create_launch_template(
        LaunchTemplateName="eks-gpu-nodes", LaunchTemplateData={"ImageId": AMI}
    )
    return aws_config(
        network,
        aws={
            "managedLaunchTemplate": None,
            "securityGroupIds": None,
            "launchTemplate": {"name": "eks-gpu-nodes"},
        },
    )


@pytest.mark.parametrize("capacity_type", [ON_DEMAND, SPOT])
@pytest.mark.parametrize("template", ["managed", "named"])
def test_every_resource_the_policy_conditions_on_the_cluster_tag_is_tagged_in_the_requests(
    network: Network, make: Callable[..., AwsProvider], template: str, capacity_type: CapacityType
) -> None:
    fleets = spy("before-send.ec2.CreateFleet")
    templates = spy("before-send.ec2.CreateLaunchTemplate")
    config = aws_config(network) if template == "managed" else named_template_config(network)
    make(config, fleets.hook, templates.hook).launch(request(capacity_type))

    [fleet] = fleets.params
    tagged = tag_specifications(fleet)
    for written in templates.params:  # the managed template tags what it launches
        for resource, tags in tag_specifications(written, prefix="LaunchTemplateData.").items():
            tagged.setdefault(resource, {}).update(tags)
    needed = tag_conditioned_resource_types() & CREATED[capacity_type]
    assert needed >= {"fleet", "instance", "volume"}
    untagged = sorted(r for r in needed if tagged.get(r, {}).get("tidal.dev/cluster") != "prod")
    assert untagged == [], f"the policy would refuse this launch: {untagged} carry no tidal.dev/cluster tag"


@pytest.mark.parametrize(
    ("capacity_type", "resources"),
    [
        (ON_DEMAND, ["instance", "network-interface", "volume"]),
        (SPOT, ["instance", "network-interface", "spot-instances-request", "volume"]),
    ],
)
def test_a_managed_template_tags_a_spot_request_only_for_spot_launches(
    network: Network, make: Callable[..., AwsProvider], capacity_type: CapacityType, resources: list[str]
) -> None:
    # EC2 refuses a launch whose template tags a spot request when it makes none.
    templates = spy("before-send.ec2.CreateLaunchTemplate")
    make(aws_config(network), templates.hook).launch(request(capacity_type))
    [written] = templates.params
    specs = tag_specifications(written, prefix="LaunchTemplateData.")
    assert sorted(specs) == resources
    assert all(tags["tidal.dev/cluster"] == "prod" for tags in specs.values())
    assert "tidal.dev/launch-token" not in specs["instance"]  # per launch: only in the CreateFleet request
    assert tag_specifications(written) == {
        "launch-template": {"tidal.dev/cluster": "prod", "tidal.dev/managed": "true"}
    }


def test_spot_and_on_demand_launches_use_templates_of_their_own(
    network: Network, make: Callable[..., AwsProvider]
) -> None:
    provider = make(aws_config(network))
    provider.launch(request(SPOT))
    provider.launch(
        LaunchRequest(
            "6a1d2b3c-0000-4000-8000-000000000000",
            (offering(ON_DEMAND),),
            labels={"tidal.dev/managed": "true"},
        )
    )
    names = [
        t["LaunchTemplateName"]
        for t in ec2_client(moto_server_url()).describe_launch_templates()["LaunchTemplates"]
    ]
    assert len(names) == 2
