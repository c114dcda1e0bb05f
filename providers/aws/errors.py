"""AWS error codes mapped onto the provider contract's errors, and the per-operation throttling back-off.

EC2 rate-limits each API action separately, so one throttled operation (say CreateFleet) must not stop others
(DescribeInstances) from being called; each operation backs off on its own, with jitter so that replicas and
threads do not retry in lockstep.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import botocore.exceptions

from autoscaler.cloud import Attempt, ProviderError, QuotaScope, Refusal, Throttled
from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.offering import Offering

__all__ = [
    "AUTH_CODES",
    "CAPACITY_CODES",
    "INVALID_CODES",
    "QUOTA_CODES",
    "THROTTLE_CODES",
    "ApiGuard",
    "describe",
    "error_code",
    "provider_error",
    "refusal",
]

# No capacity for these offerings right now: bench them and fall back to others.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "InsufficientFreeAddressesInSubnet",  # the zone's subnet is full: no room there for now
    }
)
# An account limit, with what it covers (see quota_scope): every offering in its scope is benched.
QUOTA_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "MaxSpotFleetRequestCountExceeded",
        "MaxFleetCountExceeded",
        "ResourceLimitExceeded",
        "VolumeLimitExceeded",
        "NetworkInterfaceLimitExceeded",
    }
)
# This offering cannot be launched as asked (an instance type the zone does not support): bench it.
INVALID_CODES = frozenset({"Unsupported", "UnsupportedOperation", "InvalidFleetConfiguration"})
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
    }
)
# The call is not permitted (or the credentials are wrong): use the catalog fallback where there is one.
AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "AuthFailure",
        "OptInRequired",
        "ExpiredToken",
        "ExpiredTokenException",
    }
)
_MESSAGE_LIMIT = 240


def quota_scope(code: str, offering: Offering) -> QuotaScope:
    """What the quota behind ``code`` covers, for a refusal of ``offering``.

    - ``VcpuLimitExceeded``: the vCPU quota of the instance's bucket (on-demand and spot apart). A bucket
      ("Running On-Demand G and VT instances") holds several families, but a vCPU count that refuses one
      size may still take a smaller one of another family; so the family is benched, and the bucket's other
      families are benched in turn only when EC2 refuses them too.
    - ``MaxSpotInstanceCountExceeded``: every spot offering of the region; ``InstanceLimitExceeded``: every
      on-demand one.
    - the fleet, volume and network-interface limits: every offering of the region.
    """
    region = offering.region
    if code == "VcpuLimitExceeded":
        return QuotaScope(
            "family", offering.family, region, offering.capacity_type, families=frozenset({offering.family})
        )
    if code == "MaxSpotInstanceCountExceeded":
        return QuotaScope("region", region or "region", region, SPOT)
    if code == "InstanceLimitExceeded":
        return QuotaScope("region", region or "region", region, ON_DEMAND)
    return QuotaScope("region", region or "region", region)


def refusal(code: str, detail: str, offering: Offering, retry_after: float | None = None) -> Attempt:
    """The contract's refusal for an EC2 error code about ``offering`` (unknown codes are OTHER)."""
    if code in CAPACITY_CODES:
        return Attempt(offering, Refusal.NO_CAPACITY, detail)
    if code in QUOTA_CODES:
        return Attempt(offering, Refusal.QUOTA, detail, quota_scope(code, offering))
    if code in THROTTLE_CODES:
        return Attempt(offering, Refusal.THROTTLED, detail, retry_after=retry_after)
    if code in INVALID_CODES:
        return Attempt(offering, Refusal.INVALID, detail)
    return Attempt(offering, Refusal.OTHER, detail)


def error_code(err: BaseException) -> str:
    """The AWS error code of a ClientError (``""`` for transport errors)."""
    if isinstance(err, botocore.exceptions.ClientError):
        return str(err.response.get("Error", {}).get("Code", ""))
    return ""


def describe(err: BaseException) -> str:
    """One short line for logs and errors: the code and message, never the whole response."""
    if isinstance(err, botocore.exceptions.ClientError):
        error = err.response.get("Error", {})
        text = f"{error.get('Code', 'Error')}: {error.get('Message', '')}".strip().rstrip(":")
    else:
        text = f"{type(err).__name__}: {err}"
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


def provider_error(action: str, err: BaseException) -> ProviderError:
    """A ProviderError naming the IAM action that failed and why, in one line."""
    return ProviderError(f"{action} failed: {describe(err)}")


class ApiGuard:
    """Per-operation exponential back-off after throttling, with jitter.

    While an operation is backing off, calls to it raise :class:`Throttled` at once without reaching AWS, so
    tidal does not deepen the throttling it is being told about.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        base: float = 1.0,
        cap: float = 60.0,
    ) -> None:
        self.clock = clock
        self.rng = rng or random.Random()
        self.base = base
        self.cap = cap
        self._until: dict[str, float] = {}
        self._strikes: dict[str, int] = {}
        self._lock = threading.Lock()

    def check(self, operation: str) -> None:
        """Raise :class:`Throttled` while ``operation`` is backing off."""
        with self._lock:
            remaining = self._until.get(operation, 0.0) - self.clock()
        if remaining > 0:
            raise Throttled(
                remaining, f"{operation} is backing off after throttling; retry in {remaining:.1f}s"
            )

    def throttled(self, operation: str, err: BaseException | str) -> Throttled:
        """Record a throttling error (an exception, or the line describing it) and return the
        :class:`Throttled` to raise (the delay doubles per strike)."""
        with self._lock:
            strikes = self._strikes[operation] = self._strikes.get(operation, 0) + 1
            ceiling = min(self.cap, self.base * 2 ** (strikes - 1))
            delay = ceiling * self.rng.uniform(0.5, 1.0)
            self._until[operation] = self.clock() + delay
        detail = err if isinstance(err, str) else describe(err)
        return Throttled(delay, f"{operation} throttled ({detail}); retry in {delay:.1f}s")

    def succeeded(self, operation: str) -> None:
        """A call went through: the next throttle of ``operation`` starts from the shortest delay again."""
        with self._lock:
            self._strikes.pop(operation, None)
            self._until.pop(operation, None)

    @contextmanager
    def call(self, operation: str) -> Iterator[None]:
        """Guard one AWS call: refuse it while backing off, turn throttling into :class:`Throttled`.

        Other errors pass through unchanged for the caller to classify.
        """
        self.check(operation)
        try:
            yield
        except botocore.exceptions.ClientError as err:
            if error_code(err) in THROTTLE_CODES:
                raise self.throttled(operation, err) from None
            raise
        self.succeeded(operation)
