"""What a CreateFleet answer means, and the ClientToken that keeps a launch idempotent."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import CapacityUnavailable, ProviderError, QuotaExceeded, Throttled
from autoscaler.core.model import ON_DEMAND
from autoscaler.core.offering import Offering
from providers.aws.fleet import (
    FleetAttempt,
    capacity_from_message,
    client_token,
    read_fleet_response,
)
from providers.aws.launch_template import TemplateRef

if TYPE_CHECKING:
    from typing import Any

TOKEN = "3b8a1f0e-5d1c-4c1e-9f57-1d3c9b2a7e10"
G5_A = Offering("g5.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 1.006, gpu_count=1)
G5_B = Offering("g5.xlarge", "us-east-1b", ON_DEMAND, 4, 16384, 1.006, gpu_count=1)
G6_A = Offering("g6.xlarge", "us-east-1a", ON_DEMAND, 4, 16384, 0.8048, gpu_count=1)
ATTEMPT = FleetAttempt(
    ON_DEMAND,
    ((TemplateRef("tidal-prod-abc"), ((G6_A, "subnet-a"), (G5_A, "subnet-a"), (G5_B, "subnet-b"))),),
)
ZONES = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}


def error(code: str, instance_type: str | None = None, subnet: str | None = None) -> dict[str, Any]:
    overrides = {k: v for k, v in (("InstanceType", instance_type), ("SubnetId", subnet)) if v}
    return {
        "LaunchTemplateAndOverrides": {"Overrides": overrides} if overrides else {},
        "Lifecycle": "on-demand",
        "ErrorCode": code,
        "ErrorMessage": f"{code} happened",
    }


def test_the_client_token_is_the_launch_token() -> None:
    assert client_token(TOKEN) == TOKEN


def test_after_requests_that_launched_nothing_the_client_token_moves_on() -> None:
    assert client_token(TOKEN, spent=1) == f"{TOKEN}-1"
    assert client_token(TOKEN, spent=2) == f"{TOKEN}-2"


def test_a_token_ec2_cannot_take_is_shortened_the_same_way_every_time() -> None:
    long = "launch-" + "x" * 80
    assert len(client_token(long)) <= 64 and client_token(long) == client_token(long)
    assert client_token(long) != client_token(long[:-1] + "y")
    assert len(client_token(long, spent=12)) <= 64
    assert client_token("lancement-é").isascii()


def test_per_override_capacity_errors_name_exactly_those_offerings() -> None:
    outcome = read_fleet_response(
        {"Instances": [], "Errors": [error("InsufficientInstanceCapacity", "g5.xlarge", "subnet-b")]},
        ATTEMPT,
        ZONES,
    )
    assert outcome.no_capacity == [G5_B]
    with pytest.raises(CapacityUnavailable) as caught:
        outcome.raise_for_failure(ATTEMPT)
    assert caught.value.offerings == (G5_B,)


def test_a_capacity_error_without_an_override_covers_the_whole_request() -> None:
    outcome = read_fleet_response({"Errors": [error("UnfulfillableCapacity")]}, ATTEMPT, ZONES)
    assert outcome.no_capacity == [G6_A, G5_A, G5_B]


def test_a_launched_instance_wins_over_errors_for_other_overrides() -> None:
    answer = {
        "Instances": [
            {
                "InstanceIds": ["i-0abc"],
                "InstanceType": "g5.xlarge",
                "Lifecycle": "on-demand",
                "LaunchTemplateAndOverrides": {
                    "Overrides": {"InstanceType": "g5.xlarge", "SubnetId": "subnet-b"}
                },
            }
        ],
        "Errors": [error("InsufficientInstanceCapacity", "g6.xlarge", "subnet-a")],
    }
    outcome = read_fleet_response(answer, ATTEMPT, ZONES)
    assert (outcome.instance_id, outcome.instance_type, outcome.zone) == ("i-0abc", "g5.xlarge", "us-east-1b")


def test_quota_and_unknown_errors_raise_their_own_kind() -> None:
    quota = read_fleet_response(
        {"Errors": [error("VcpuLimitExceeded", "g5.xlarge", "subnet-a")]}, ATTEMPT, ZONES
    )
    with pytest.raises(QuotaExceeded, match="VcpuLimitExceeded happened"):
        quota.raise_for_failure(ATTEMPT)
    odd = read_fleet_response({"Errors": [error("InvalidFleetConfiguration")]}, ATTEMPT, ZONES)
    with pytest.raises(ProviderError, match="launched nothing: InvalidFleetConfiguration"):
        odd.raise_for_failure(ATTEMPT)


def test_a_throttling_code_among_fleet_errors_is_throttled_not_capacity() -> None:
    outcome = read_fleet_response(
        {
            "Errors": [
                error("RequestLimitExceeded", "g5.xlarge", "subnet-a"),
                error("InsufficientInstanceCapacity", "g6.xlarge", "subnet-a"),
            ]
        },
        ATTEMPT,
        ZONES,
    )
    assert outcome.no_capacity == [G6_A]
    with pytest.raises(Throttled, match="RequestLimitExceeded happened"):
        outcome.raise_for_failure(ATTEMPT)


def test_a_whole_call_capacity_message_names_the_type_and_zone() -> None:
    message = (
        "We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested "
        "(us-east-1b). Our system will be working on provisioning additional capacity."
    )
    assert capacity_from_message(message, [G6_A, G5_A, G5_B]) == [G5_B]
    assert capacity_from_message("Insufficient capacity.", [G6_A, G5_A]) == [G6_A, G5_A]
