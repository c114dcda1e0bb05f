"""The one factory every boto3 client comes from: endpoint, region, credentials, retries, hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.exceptions import ClientError

from autoscaler.core.model import Arch
from providers.aws import ClientFactory, ClientOptions, Credentials
from providers.aws.launch_template import default_ami_parameter
from tests.fakes.aws_cloud import ec2_error

if TYPE_CHECKING:
    from typing import Any

    from botocore.awsrequest import AWSResponse

SESSION = boto3.session.Session()
CREDS = Credentials("AKIDEXAMPLE", "secret")


def factory(
    region: str = "eu-west-1", options: ClientOptions | None = None, endpoint: str | None = None
) -> ClientFactory:
    return ClientFactory(
        region,
        options or ClientOptions(credentials=CREDS),
        endpoint_url=endpoint,
        session_factory=lambda: SESSION,
    )


def attempts(client: Any) -> int:
    total: int = client.meta.config.retries["total_max_attempts"]
    return total


def test_launch_calls_are_sent_once_so_capacity_fallback_is_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    clients = factory()
    assert attempts(clients.client("ec2")) == 3
    assert attempts(clients.client("ec2", launch=True)) == 1
    assert clients.client("ec2") is clients.client("ec2")  # one client per purpose, reused


def test_the_standard_max_attempts_variable_is_honoured_but_not_for_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    clients = factory()
    assert attempts(clients.client("ec2")) == 5
    assert attempts(clients.client("ec2", launch=True)) == 1


def test_the_price_list_is_asked_in_its_own_region_and_ec2_in_the_clusters() -> None:
    clients = factory("eu-west-1")
    assert clients.client("pricing").meta.region_name == "us-east-1"
    assert clients.client("ec2").meta.region_name == "eu-west-1"


def test_endpoints_follow_options_then_per_service_variable_then_config_then_global(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://global:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://pricing:2")
    assert factory().endpoint("ec2") == "http://global:1"
    assert factory(endpoint="http://config:3").endpoint("ec2") == "http://config:3"
    assert factory(endpoint="http://config:3").endpoint("pricing") == "http://pricing:2"
    explicit = ClientOptions(endpoint_url="http://test:4", credentials=CREDS)
    assert factory(options=explicit, endpoint="http://config:3").endpoint("pricing") == "http://test:4"
    assert factory(endpoint="http://config:3").client("ec2").meta.endpoint_url == "http://config:3"


def test_event_hooks_are_registered_on_every_client() -> None:
    seen = []

    def refuse(request: Any, **_: Any) -> AWSResponse:
        seen.append(request.url)
        return ec2_error("UnauthorizedOperation", "not here", 403)

    options = ClientOptions(credentials=CREDS, event_hooks=(("before-send.ec2.DescribeInstances", refuse),))
    with pytest.raises(ClientError):  # answered by the hook: nothing leaves the machine
        factory(options=options).client("ec2").describe_instances()
    assert seen == ["https://ec2.eu-west-1.amazonaws.com/"]


def test_credentials_never_show_in_their_repr() -> None:
    assert "secret" not in repr(CREDS)


@pytest.mark.parametrize(
    ("family", "arch", "nvidia", "parameter"),
    [
        (
            "AL2023",
            Arch.AMD64,
            True,
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
        ),
        (
            "AL2023",
            Arch.ARM64,
            False,
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id",
        ),
        (
            "Bottlerocket",
            Arch.AMD64,
            True,
            "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id",
        ),
    ],
)
def test_the_eks_optimized_ami_is_found_by_its_public_ssm_parameter(
    family: str, arch: Arch, nvidia: bool, parameter: str
) -> None:
    assert default_ami_parameter(family, "1.31", arch, nvidia) == parameter
