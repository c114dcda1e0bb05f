"""A moto-backed AWS for tests: the server, a VPC to launch into, fault hooks and price fixtures.

Everything here reaches the provider through its client factory's inputs (endpoint, credentials, retries,
event hooks); the SDK itself runs unmodified.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

# Instance types must be real ones, as in EC2 (the moto server in this process reads the same setting).
os.environ["MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION"] = "true"

import boto3
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from moto import settings as moto_settings
from moto.server import ThreadedMotoServer

from autoscaler.config.options import Config, config_from_mapping
from providers.aws import AwsProvider, ClientOptions, Credentials

# moto reads the variable when first imported; a test module that imported moto earlier gets the same setting.
moto_settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = True

REGION = "us-east-1"
CREDENTIALS = Credentials("testing", "testing")
# A public AMI moto knows; CreateFleet refuses unknown image ids.
AMI = "ami-12c6146b"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCnRpZGFsCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"

_server: ThreadedMotoServer | None = None
_server_url = ""
_server_lock = threading.Lock()


def moto_server_url() -> str:
    """The URL of one moto server per test process, started on first use (its catalogue loads once)."""
    global _server, _server_url
    with _server_lock:
        if _server is None:
            _server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            _server.start()
            host, port = _server.get_host_and_port()
            _server_url = f"http://{host}:{port}"
            atexit.register(_server.stop)
        return _server_url


def reset_moto_server(url: str) -> None:
    """Forget every resource the server holds (the catalogue stays loaded)."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10).read()


def client_options(*hooks: tuple[str, Callable[..., Any]], endpoint_url: str | None = None) -> ClientOptions:
    """Fixed credentials, no SDK retries for reads (faults are seen once), launch clients as configured by
    default, and the given event hooks."""
    return ClientOptions(
        endpoint_url=endpoint_url,
        credentials=CREDENTIALS,
        max_attempts=1,
        event_hooks=tuple(hooks),
    )


_session: boto3.session.Session | None = None
_ec2_clients: dict[str | None, Any] = {}


def shared_session() -> boto3.session.Session:
    """One boto3 session for every provider a test builds: service models are loaded once per process."""
    global _session
    if _session is None:
        _session = boto3.session.Session()
    return _session


def ec2_client(endpoint_url: str | None = None) -> Any:
    """A plain EC2 client for arranging and checking the fake cloud (not the provider's own)."""
    if endpoint_url not in _ec2_clients:
        _ec2_clients[endpoint_url] = shared_session().client(
            "ec2",
            region_name=REGION,
            endpoint_url=endpoint_url,
            aws_access_key_id=CREDENTIALS.access_key_id,
            aws_secret_access_key=CREDENTIALS.secret_access_key,
        )
    return _ec2_clients[endpoint_url]


def make_provider(
    config: Config,
    *hooks: tuple[str, Callable[..., Any]],
    clock: Callable[[], float] | None = None,
    endpoint_url: str | None = None,
) -> AwsProvider:
    """An AwsProvider whose clients carry ``hooks``, retry nothing, and share the test session."""
    return AwsProvider(
        config,
        client_options=client_options(*hooks, endpoint_url=endpoint_url),
        session_factory=shared_session,
        clock=clock or Clock(),
    )


@dataclass(frozen=True)
class Network:
    vpc: str
    subnets: Mapping[str, str]  # zone -> subnet id
    security_group: str


def make_network(ec2: Any, zones: Iterable[str] = ("us-east-1a", "us-east-1b"), tag: str = "e2e") -> Network:
    """A VPC with one subnet per zone (tagged ``karpenter.sh/discovery=<tag>``) and a security group."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for i, zone in enumerate(zones):
        subnets[zone] = ec2.create_subnet(
            VpcId=vpc,
            CidrBlock=f"10.0.{i + 1}.0/24",
            AvailabilityZone=zone,
            TagSpecifications=[
                {"ResourceType": "subnet", "Tags": [{"Key": "karpenter.sh/discovery", "Value": tag}]}
            ],
        )["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="nodes", Description="tidal nodes", VpcId=vpc)["GroupId"]
    return Network(vpc, subnets, group)


def managed_template(**extra: Any) -> dict[str, Any]:
    """A managed launch template section that needs no EKS or SSM lookups."""
    return {
        "amiId": AMI,
        "instanceProfile": "tidal-nodes",
        "clusterEndpoint": "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com",
        "clusterCertificateAuthority": CA,
        "clusterServiceCidr": "10.100.0.0/16",
        **extra,
    }


# --- faults -------------------------------------------------------------------------------------------


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterable[bytes]:
        yield self._body


def ec2_error(code: str, message: str, status: int) -> AWSResponse:
    """An EC2 (query protocol) error response."""
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        f"<RequestID>fault</RequestID></Response>"
    ).encode()
    return AWSResponse("https://ec2.fault", status, {"Content-Type": "text/xml"}, _Body(body))


def json_error(code: str, message: str, status: int) -> AWSResponse:
    """A JSON-protocol (Price List, SSM, SQS) error response."""
    body = json.dumps({"__type": code, "message": message}).encode()
    return AWSResponse(
        "https://json.fault", status, {"Content-Type": "application/x-amz-json-1.1"}, _Body(body)
    )


@dataclass
class Fault:
    """A ``before-send`` hook: answers matching requests with an error instead of sending them.

    ``when`` sees the request's parameters (the query form of EC2 calls) and decides; ``times`` limits how many
    requests fail (None: all). ``seen`` counts every request the hook saw, failed or sent.
    """

    event: str
    response: Callable[[], AWSResponse]
    when: Callable[[Mapping[str, list[str]]], bool] = lambda _: True
    times: int | None = None
    seen: int = 0
    failed: int = 0
    sent: int = 0
    params: list[Mapping[str, list[str]]] = field(default_factory=list)

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body
        text = body.decode() if isinstance(body, bytes) else str(body or "")
        params = parse_qs(text)
        self.seen += 1
        self.params.append(params)
        if (self.times is None or self.failed < self.times) and self.when(params):
            self.failed += 1
            return self.response()
        self.sent += 1
        return None

    @property
    def hook(self) -> tuple[str, Callable[..., Any]]:
        return (self.event, self)


def spy(event: str) -> Fault:
    """A hook that only records the requests it sees (``params``, ``sent``) and lets them all through."""
    return Fault(event, lambda: ec2_error("Unused", "", 500), when=lambda _: False)


def overrides_include(instance_type: str) -> Callable[[Mapping[str, list[str]]], bool]:
    """True for a CreateFleet request that lists ``instance_type`` among its overrides."""
    return lambda params: any(k.endswith(".InstanceType") and instance_type in v for k, v in params.items())


class ClientTokens:
    """EC2's ClientToken check, which moto lacks: a CreateFleet that repeats a ClientToken with other
    parameters is refused with IdempotentParameterMismatch (a ``before-send`` hook; list it before fault
    hooks so that it sees every request). One instance stands for one EC2 account, shared by providers."""

    def __init__(self) -> None:
        self.first: dict[str, dict[str, list[str]]] = {}
        self.sent: list[str] = []
        self.refused = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body
        params = parse_qs(body.decode() if isinstance(body, bytes) else str(body or ""))
        token = params.pop("ClientToken", [""])[0]
        self.sent.append(token)
        if self.first.setdefault(token, params) != params:
            self.refused += 1
            return ec2_error(
                "IdempotentParameterMismatch",
                "The client token you have provided is associated with a resource that is already deleted "
                "or has different parameters.",
                400,
            )
        return None

    @property
    def hook(self) -> tuple[str, Callable[..., Any]]:
        return ("before-send.ec2.CreateFleet", self)


def lagging_describe_instances(times: int = 1) -> tuple[str, Callable[..., Any]]:
    """DescribeInstances answering "nothing" the first ``times`` calls, as EC2 may just after a launch (its
    API is eventually consistent), through a ``before-call`` hook."""
    left = [times]

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if left[0] <= 0:
            return None
        left[0] -= 1
        return AWSResponse("https://ec2.fixture", 200, {}, _Body(b"")), {"Reservations": []}

    return ("before-call.ec2.DescribeInstances", answer)


# --- prices -------------------------------------------------------------------------------------------


def price_list_item(instance_type: str, usd: float, region: str = REGION) -> str:
    """One Price List product document, as GetProducts returns it (a JSON string)."""
    sku = f"SKU{abs(hash(instance_type)) % 10**8:08d}"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": f"{usd:.10f}"},
                            }
                        }
                    }
                }
            },
        }
    )


def spot_price_hook(prices: Mapping[tuple[str, str], float]) -> tuple[str, Callable[..., Any]]:
    """A ``before-call`` hook answering DescribeSpotPriceHistory with these (type, zone) prices."""

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        now = datetime.now(UTC)
        rows = [
            {
                "InstanceType": t,
                "AvailabilityZone": z,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{p:.6f}",
                "Timestamp": now,
            }
            for (t, z), p in prices.items()
        ]
        ok = AWSResponse("https://ec2.fixture", 200, {}, _Body(b""))
        return ok, {"SpotPriceHistory": rows, "NextToken": ""}

    return ("before-call.ec2.DescribeSpotPriceHistory", answer)


def pricing_denied() -> tuple[str, Callable[..., Any]]:
    """Price List calls refused, as for a role without ``pricing:GetProducts``."""
    fault = Fault(
        "before-send.pricing.GetProducts",
        lambda: json_error(
            "AccessDeniedException", "User is not authorized to perform: pricing:GetProducts", 400
        ),
    )
    return fault.hook


# --- configuration ------------------------------------------------------------------------------------

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"


def aws_section(network: Network, **extra: Any) -> dict[str, Any]:
    """An ``aws:`` section launching into ``network`` with a managed launch template; a key given as None is
    left out."""
    section = {
        "subnetIds": sorted(network.subnets.values()),
        "securityGroupIds": [network.security_group],
        "managedLaunchTemplate": managed_template(),
        "families": ["g4dn", "g5", "g6", "p4d", "p5", "m6i"],
        **extra,
    }
    return {k: v for k, v in section.items() if v is not None}


def aws_config(network: Network, *, aws: Mapping[str, Any] | None = None, **top: Any) -> Config:
    """A Config for ``cloud: aws`` in us-east-1 with the given ``aws:`` overrides and top-level keys."""
    data = {
        "cloud": "aws",
        "region": REGION,
        "clusterName": "prod",
        "capacityTypes": ["spot", "on-demand"],
        "aws": aws_section(network, **(aws or {})),
        **top,
    }
    return config_from_mapping(data, source="test")


def price_list_query(region: str = REGION) -> dict[str, Any]:
    """The GetProducts parameters of a query for Linux, shared-tenancy, on-demand EC2 prices in ``region``."""
    terms = {
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
    }
    return {
        "ServiceCode": "AmazonEC2",
        "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }


def stub_prices(provider: Any, prices: Mapping[str, float], region: str = REGION) -> Stubber:
    """Answer the provider's next Price List query with these on-demand prices (activated Stubber); the
    query must be the one for Linux, shared tenancy and ``region``, or the Stubber refuses it."""
    stubber = Stubber(provider.clients.client("pricing"))
    stubber.add_response(
        "get_products",
        {"PriceList": [price_list_item(t, p, region) for t, p in prices.items()], "FormatVersion": "aws_v1"},
        expected_params=price_list_query(region),
    )
    stubber.activate()
    return stubber


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


def spot_interruption_warning(instance_id: str) -> str:
    """An EventBridge "EC2 Spot Instance Interruption Warning" as it arrives in the SQS queue."""
    return json.dumps(
        {
            "version": "0",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}a:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def sqs_client() -> Any:
    """An SQS client in the test region with the fake credentials (moto must be active)."""
    return boto3.client(
        "sqs",
        region_name=REGION,
        aws_access_key_id=CREDENTIALS.access_key_id,
        aws_secret_access_key=CREDENTIALS.secret_access_key,
    )
