"""The ``aws:`` configuration section: what is accepted, and every mistake reported at once in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.cloud import ProviderError, load_provider
from autoscaler.config.options import Config, ConfigError, config_from_mapping
from autoscaler.core.model import ON_DEMAND
from autoscaler.core.offering import LaunchRequest, Offering
from providers.aws import AwsConfigError, AwsProvider, load_settings

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"
MANAGED = {
    "amiSsmParameter": "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
    "instanceProfile": "tidal-nodes",
}


def config(aws: dict[str, Any], **top: Any) -> Config:
    return config_from_mapping(
        {"cloud": "aws", "region": "us-east-1", "clusterName": "prod", "aws": aws, **top}
    )


def test_a_minimal_section_gets_the_documented_defaults() -> None:
    settings, fallback = load_settings(
        config(
            {
                "subnetIds": ["subnet-0123456789abcdef0"],
                "securityGroupIds": ["sg-0123456789abcdef0"],
                "managedLaunchTemplate": MANAGED,
            }
        )
    )
    assert settings.spot_allocation_strategy == "price-capacity-optimized"
    assert settings.price_refresh_interval == 3600.0
    assert settings.eks_cluster_name == "prod"
    assert settings.managed_launch_template is not None
    assert settings.managed_launch_template.ami_family == "AL2023"
    assert (settings.architectures, settings.families, settings.current_generation_only) == ((), (), False)
    assert fallback is None


def test_a_subnet_selector_and_a_named_template_are_accepted() -> None:
    settings, _ = load_settings(
        config(
            {
                "subnetSelector": {"karpenter.sh/discovery": "prod", "kubernetes.io/role/internal-elb": "*"},
                "launchTemplate": {"name": "eks-gpu-nodes", "version": 3},
                "spotAllocationStrategy": "capacity-optimized",
                "spotInterruptionQueue": "https://sqs.us-east-1.amazonaws.com/123456789012/prod-interruptions",
                "priceRefreshInterval": "30m",
                "architectures": ["x86_64"],
                "families": ["g5", "p4d"],
                "catalogFallback": str(CATALOG),
            }
        )
    )
    assert dict(settings.subnet_selector)["karpenter.sh/discovery"] == "prod"
    assert settings.launch_template is not None and settings.launch_template.version == "3"
    assert settings.architectures == ("amd64",)
    assert settings.price_refresh_interval == 1800.0


def test_every_problem_is_reported_at_once_in_one_line_naming_key_and_value() -> None:
    bad = {
        "subnetIds": ["subnet-xyz"],
        "securityGroupIds": ["sg-0123456789abcdef0"],
        "managedLaunchTemplate": {
            "amiId": "ami-0123456789abcdef0",
            "amiSsmParameter": "/x",
            "blockDevices": [],
        },
        "spotAllocationStrategy": "cheapest",
        "priceRefreshInterval": "soon",
        "endpointUrl": "localhost:5000",
        "subnetSelectr": {"a": "b"},
    }
    with pytest.raises(ConfigError) as caught:
        AwsProvider(config(bad))
    message = str(caught.value)
    assert "\n" not in message
    for expected in (
        "aws.subnetIds[0]: 'subnet-xyz' is not an id like subnet-0123456789abcdef0",
        "aws.managedLaunchTemplate.instanceProfile: required",
        "aws.managedLaunchTemplate.amiSsmParameter: give amiId or amiSsmParameter, not both",
        "aws.managedLaunchTemplate.blockDevices: [] is not a non-empty list",
        "aws.spotAllocationStrategy: 'cheapest' is not one of price-capacity-optimized, lowest-price, "
        "capacity-optimized",
        "aws.priceRefreshInterval: 'soon' is not a duration",
        "aws.endpointUrl: 'localhost:5000' is not an http:// or https:// URL",
        "aws.subnetSelectr: unknown key (did you mean 'subnetSelector'?)",
    ):
        assert expected in message


def test_subnets_and_a_launch_template_are_required_and_exclusive() -> None:
    with pytest.raises(AwsConfigError) as missing:
        load_settings(config({}))
    assert missing.value.errors == [
        "aws.subnetIds: required (or aws.subnetSelector), the subnets nodes launch in",
        "aws.launchTemplate: required (or aws.managedLaunchTemplate), how nodes boot and join",
    ]
    with pytest.raises(AwsConfigError) as both:
        load_settings(
            config(
                {
                    "subnetIds": ["subnet-0123456789abcdef0"],
                    "subnetSelector": {"a": "b"},
                    "launchTemplate": {"name": "mine"},
                    "managedLaunchTemplate": MANAGED,
                    "securityGroupIds": ["sg-0123456789abcdef0"],
                }
            )
        )
    assert "aws.subnetSelector: give subnetIds or subnetSelector, not both" in both.value.errors
    assert (
        "aws.managedLaunchTemplate: give launchTemplate or managedLaunchTemplate, not both"
        in both.value.errors
    )


def test_a_named_template_brings_its_own_security_groups() -> None:
    with pytest.raises(AwsConfigError, match=r"aws\.securityGroupIds: only used by managedLaunchTemplate"):
        load_settings(
            config(
                {
                    "subnetIds": ["subnet-0123456789abcdef0"],
                    "launchTemplate": {"name": "mine"},
                    "securityGroupIds": ["sg-0123456789abcdef0"],
                }
            )
        )


def test_a_catalog_fallback_must_be_readable_and_price_the_region(tmp_path: Path) -> None:
    section = {"subnetIds": ["subnet-0123456789abcdef0"], "launchTemplate": {"name": "mine"}}
    missing = tmp_path / "nope.csv"
    with pytest.raises(AwsConfigError, match=r"aws\.catalogFallback: .*nope\.csv"):
        load_settings(config({**section, "catalogFallback": str(missing)}))
    with pytest.raises(
        AwsConfigError, match=r"aws\.catalogFallback: .*no rows for cloud 'aws' region 'eu-west-3'"
    ):
        load_settings(config({**section, "catalogFallback": str(CATALOG)}, region="eu-west-3"))


def test_the_provider_is_found_by_its_entry_point_name_without_calling_aws() -> None:
    provider = load_provider(
        "aws",
        config({"subnetIds": ["subnet-0123456789abcdef0"], "launchTemplate": {"name": "mine"}}),
        kube_api_client=None,
    )
    assert isinstance(provider, AwsProvider)
    assert provider.name == "aws"


def test_a_provider_built_to_list_offerings_needs_only_the_region() -> None:
    provider = AwsProvider(config({"families": ["g5"]}))  # as `tidal catalog` builds it
    request = LaunchRequest(
        "3b8a1f0e-5d1c-4c1e-9f57-1d3c9b2a7e10",
        (Offering("g5.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 1.006, gpu_count=1),),
    )
    with pytest.raises(ProviderError) as caught:
        provider.launch(request)
    assert str(caught.value) == (
        "cannot launch: aws.subnetIds: required (or aws.subnetSelector), the subnets nodes launch in; "
        "aws.launchTemplate: required (or aws.managedLaunchTemplate), how nodes boot and join"
    )


def test_the_daemons_provider_refuses_a_section_that_cannot_launch_at_once() -> None:
    with pytest.raises(AwsConfigError, match=r"aws\.subnetIds: required"):
        load_provider("aws", config({"families": ["g5"]}), kube_api_client=object())


def test_a_catalog_file_without_the_region_is_left_unused_when_only_listing_offerings() -> None:
    settings, fallback = load_settings(
        config({"catalogFallback": str(CATALOG)}, region="eu-west-3"), launching=False
    )
    assert fallback is None
    assert settings.catalog_fallback_unused == (
        f"aws.catalogFallback {CATALOG} has no rows for region 'eu-west-3'"
    )


def test_capacity_reservations_are_chosen_by_id_and_by_tags() -> None:
    settings, _ = load_settings(
        config(
            {
                "capacityReservationIds": ["cr-0123456789abcdef0"],
                "capacityReservationSelector": {"team": "ml", "purpose": "*"},
            }
        ),
        launching=False,
    )
    assert settings.capacity_reservation_ids == ("cr-0123456789abcdef0",)
    assert settings.capacity_reservation_selector == {"team": "ml", "purpose": "*"}
    assert settings.selects_reservations


def test_malformed_capacity_reservation_ids_are_named_in_one_line() -> None:
    with pytest.raises(AwsConfigError) as caught:
        load_settings(
            config({"capacityReservationIds": ["cr-12345", "odcr-0123456789abcdef0"]}), launching=False
        )
    message = str(caught.value)
    assert "\n" not in message
    assert "aws.capacityReservationIds[0]: 'cr-12345' is not an id like cr-0123456789abcdef0" in message
    assert "aws.capacityReservationIds[1]: 'odcr-0123456789abcdef0' is not an id like" in message
