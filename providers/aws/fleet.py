"""One EC2 Fleet request of type ``instant`` per node, and what its answer means for the provider contract.

The candidates (cheapest first, at most 60) are crossed with the configured subnets of each candidate's zone;
AWS picks the override by allocation strategy. Failures come back either as a whole-call error or, for an
instant fleet, inside ``Errors[]`` per override, and each becomes the contract's refusal for exactly the
offerings it names: InsufficientInstanceCapacity no capacity, VcpuLimitExceeded a quota of the family,
MaxSpotInstanceCountExceeded a quota of every spot offering, Unsupported an invalid request, a throttling
code throttled (see ``errors.refusal``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.cloud import Attempt, ProviderError, Refusal, Throttled, launch_failure
from autoscaler.core.model import SPOT
from autoscaler.core.offering import Instance, Offering
from providers.aws.errors import CAPACITY_CODES, ApiGuard, refusal
from providers.aws.launch_template import TemplateRef

__all__ = [
    "FLEET_TAGGED_RESOURCES",
    "MAX_CANDIDATES",
    "MAX_OVERRIDES",
    "FleetAttempt",
    "FleetOutcome",
    "capacity_from_message",
    "client_token",
    "fleet_request",
    "offerings_named",
    "plan_attempts",
    "read_fleet_response",
]

MAX_CANDIDATES = 60
MAX_OVERRIDES = 300  # EC2 Fleet's limit on launch template overrides per request
_CLIENT_TOKEN_LIMIT = 64
# What an instant fleet request tags itself. The API reference names fleet and instance; EC2 takes volume as
# well (tags for the instance's EBS volumes). Network interfaces and spot requests can only be tagged by the
# launch template.
FLEET_TAGGED_RESOURCES = ("fleet", "instance", "volume")
_UNSUPPORTED_MESSAGE = re.compile(
    r"instance type \((?P<type>[a-z0-9-]+\.[a-z0-9-]+)\) is not supported in your requested Availability Zone "
    r"\((?P<zone>[a-z0-9-]+)\)"
)
_ICE_MESSAGE = re.compile(
    r"sufficient (?P<type>[a-z0-9-]+\.[a-z0-9-]+) capacity in the Availability Zone you requested \((?P<zone>[a-z0-9-]+)\)"
)


@dataclass(frozen=True, slots=True)
class FleetAttempt:
    """One CreateFleet call: offerings of one capacity type, with their templates and subnets."""

    capacity_type: str
    configs: tuple[
        tuple[TemplateRef, tuple[tuple[Offering, str], ...]], ...
    ]  # template -> (offering, subnet)

    @property
    def offerings(self) -> list[Offering]:
        """The distinct offerings this attempt asks for, in order."""
        seen: dict[str, Offering] = {}
        for _, pairs in self.configs:
            for o, _ in pairs:
                seen.setdefault(o.key, o)
        return list(seen.values())


@dataclass(slots=True)
class FleetOutcome:
    """What a CreateFleet answer says: the instance launched, or why not."""

    instance_id: str = ""
    existing: Instance | None = None  # launched earlier under the same token (found after a token mismatch)
    instance_type: str = ""
    zone: str = ""
    capacity_type: str = ""
    attempts: list[Attempt] = field(default_factory=list)  # EC2's answer for each offering it refused

    @property
    def no_capacity(self) -> list[Offering]:
        """The offerings EC2 had no capacity for."""
        return [a.offering for a in self.attempts if a.refusal == Refusal.NO_CAPACITY]

    @property
    def throttled(self) -> bool:
        """Whether EC2 throttled any part of the request."""
        return any(a.refusal == Refusal.THROTTLED for a in self.attempts)

    def raise_for_failure(self, attempt: FleetAttempt, guard: ApiGuard | None = None) -> None:
        """Raise the contract error this failed answer stands for (throttling backs off through ``guard``)."""
        what = f"CreateFleet ({attempt.capacity_type}) launched nothing"
        if self.throttled:
            first = next(a for a in self.attempts if a.refusal == Refusal.THROTTLED)
            err = (
                guard.throttled("CreateFleet", first.detail)
                if guard is not None
                else Throttled(1.0, f"CreateFleet throttled ({first.detail})")
            )
            attempts = [
                replace(a, retry_after=err.retry_after) if a.refusal == Refusal.THROTTLED else a
                for a in self.attempts
            ]
            raise Throttled(err.retry_after, f"{what}: {err}", attempts)
        if self.attempts:
            details = list(dict.fromkeys(a.detail for a in self.attempts))
            raise launch_failure(self.attempts, f"{what}: {'; '.join(details)}")
        raise ProviderError(f"{what}: no instance and no error in the answer")


def client_token(token: str, spent: int = 0) -> str:
    """The CreateFleet ClientToken for a launch: the request token itself, while no request under it has come
    back having launched nothing.

    EC2 answers a repeated ClientToken with the first request's outcome, and refuses one whose parameters
    differ (IdempotentParameterMismatch). Once a request under the token is known to have launched nothing
    (``spent`` such requests), the launch goes on under ``<token>-<spent>``; a retry after an answer that never
    arrived keeps the same ClientToken, so it can never start a second instance. EC2 takes at most 64 ASCII
    characters: a token that does not fit (tidal's are UUIDs, which do) is shortened with a digest.
    """
    base = token
    if len(token) > _CLIENT_TOKEN_LIMIT or not token.isascii() or not token.isprintable():
        digest = hashlib.sha256(token.encode()).hexdigest()[:16]
        base = f"{token.encode('ascii', 'ignore').decode()[:40]}-{digest}"
    if not spent:
        return base
    suffix = f"-{spent}"
    return base[: _CLIENT_TOKEN_LIMIT - len(suffix)] + suffix


def fleet_request(attempt: FleetAttempt, *, spot_strategy: str, tags: Mapping[str, str]) -> dict[str, Any]:
    """The CreateFleet parameters (without ClientToken, see :func:`client_token`) for one attempt."""
    configs = []
    for template, pairs in attempt.configs:
        overrides = [
            {"InstanceType": o.instance_type, "SubnetId": subnet, "AvailabilityZone": o.zone}
            for o, subnet in pairs
        ]
        configs.append({"LaunchTemplateSpecification": template.specification(), "Overrides": overrides})
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    request: dict[str, Any] = {
        "Type": "instant",
        "LaunchTemplateConfigs": configs,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": str(attempt.capacity_type),  # a plain str on the wire
        },
        # Every resource the IAM policy conditions on tidal's cluster tag is tagged in the request itself, so a
        # launch template tidal does not manage cannot make the launch fail the policy.
        "TagSpecifications": [
            {"ResourceType": resource, "Tags": tag_list} for resource in FLEET_TAGGED_RESOURCES
        ],
    }
    if attempt.capacity_type == SPOT:
        request["SpotOptions"] = {"AllocationStrategy": spot_strategy}
    else:
        request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    return request


def plan_attempts(
    groups: Iterable[tuple[str, Sequence[tuple[TemplateRef, Sequence[Offering]]]]],
    subnets_by_zone: Mapping[str, Sequence[str]],
) -> tuple[list[FleetAttempt], list[Offering]]:
    """Attempts per capacity type (at most :data:`MAX_OVERRIDES` overrides each), and the candidates that
    have no subnet in their zone (they cannot be launched here)."""
    attempts, unplaceable = [], []
    for capacity_type, templates in groups:
        budget = MAX_OVERRIDES
        configs = []
        for template, offerings in templates:
            pairs = []
            for o in offerings:
                subnets = list(subnets_by_zone.get(o.zone, ()))
                if not subnets:
                    unplaceable.append(o)
                    continue
                take = subnets[: max(0, budget)]
                budget -= len(take)
                pairs += [(o, s) for s in take]
            if pairs:
                configs.append((template, tuple(pairs)))
        if configs:
            attempts.append(FleetAttempt(capacity_type, tuple(configs)))
    return attempts, unplaceable


def capacity_from_message(message: str, offerings: Sequence[Offering]) -> list[Offering]:
    """The offerings a whole-call capacity error names ("…sufficient p4d.24xlarge capacity in … (us-east-1a)"),
    or all of them when the message names none of them."""
    for pattern in (_ICE_MESSAGE, _UNSUPPORTED_MESSAGE):
        match = pattern.search(message)
        if match:
            named = [o for o in offerings if o.instance_type == match["type"] and o.zone == match["zone"]]
            if named:
                return named
    return list(offerings)


def offerings_named(code: str, message: str, offerings: Sequence[Offering]) -> list[Offering]:
    """The offerings a whole-call error is about. EC2 names no override then: a capacity or Unsupported
    message may name the type and zone; otherwise a stockout is taken to cover every offering asked for, and
    any other refusal (a quota) the first one only, which the allocation strategy tried first. Blaming them
    all would bench every family of the request for one family's vCPU quota; the re-plan tries the others,
    and each is benched in turn if EC2 refuses it too."""
    named = capacity_from_message(message, offerings)
    if len(named) < len(offerings) or code in CAPACITY_CODES:
        return named
    return list(offerings[:1])


def _matching(error: Mapping[str, Any], attempt: FleetAttempt, zone_of: Mapping[str, str]) -> list[Offering]:
    override = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    if not override:  # an error about the whole request covers every offering in it
        return attempt.offerings
    instance_type = override.get("InstanceType")
    zone = override.get("AvailabilityZone") or zone_of.get(str(override.get("SubnetId") or ""))
    capacity_type = (
        "spot" if error.get("Lifecycle") == "spot" else ("on-demand" if error.get("Lifecycle") else None)
    )
    return [
        o
        for o in attempt.offerings
        if (instance_type is None or o.instance_type == instance_type)
        and (zone is None or o.zone == zone)
        and (capacity_type is None or o.capacity_type == capacity_type)
    ]


def read_fleet_response(
    response: Mapping[str, Any], attempt: FleetAttempt, zone_of: Mapping[str, str]
) -> FleetOutcome:
    """Interpret a CreateFleet answer: the launched instance, else the errors sorted by what they mean."""
    outcome = FleetOutcome()
    for launched in response.get("Instances") or []:
        ids = launched.get("InstanceIds") or []
        if not ids:
            continue
        override = (launched.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        outcome.instance_id = str(ids[0])
        outcome.instance_type = str(launched.get("InstanceType") or override.get("InstanceType") or "")
        outcome.zone = str(
            override.get("AvailabilityZone") or zone_of.get(str(override.get("SubnetId") or ""), "")
        )
        outcome.capacity_type = "spot" if launched.get("Lifecycle") == "spot" else "on-demand"
        return outcome
    seen: set[tuple[str, Refusal]] = set()
    for error in response.get("Errors") or []:
        code = str(error.get("ErrorCode") or "")
        line = f"{code}: {' '.join(str(error.get('ErrorMessage') or '').split())}"[:240]
        for o in _matching(error, attempt, zone_of):
            refused = refusal(code, line, o)
            if (o.key, refused.refusal) not in seen:
                seen.add((o.key, refused.refusal))
                outcome.attempts.append(refused)
    return outcome
