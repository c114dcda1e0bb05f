"""Spot interruption risk as a price: what a spot offering is expected to cost per hour once the work its
pods lose to interruptions is counted.

The cloud publishes how often it reclaims each spot instance type (the AWS Spot Instance Advisor's
"frequency of interruption" buckets: 0 = under 5%, 1 = 5-10%, 2 = 10-15%, 3 = 15-20%, 4 = over 20% of
instances in a month). Read as the share of instances reclaimed within a month of running, a bucket is an
hourly interruption rate; an interruption costs the node's price for the hours of work its pods lose (since
their last checkpoint) plus the time to boot a replacement and restart them. So, per hour:

    expected price = price + rate x price x (hours lost + restart hours)

The planner ranks offerings by it (never filters by it: which capacity types a pod may get is up to the pod
and ``capacityTypes``), and ``tidal plan`` shows it for a chosen spot offering. Pods say how much they lose
with ``tidal.dev/interruption-cost`` (a duration, ``0`` for pods that lose nothing); the others lose
``spot.interruptionCostHours``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.config.schema import ConfigError, parse_duration
from autoscaler.core import annotations as ann
from autoscaler.core.offering import Offering

HOURS_PER_MONTH = 730.0

# The share of instances interrupted in a month of running for each Spot Advisor bucket: the top of each
# bucket's range (the planner should not be optimistic), and 30% for "over 20%", whose top is not published.
BUCKET_MONTHLY_SHARE: tuple[float, ...] = (0.05, 0.10, 0.15, 0.20, 0.30)


def bucket_rate(bucket: int) -> float:
    """Interruptions per instance-hour of a Spot Advisor bucket (0 to 4): the constant hourly rate at which
    the bucket's share of instances is interrupted within a month."""
    if not 0 <= bucket < len(BUCKET_MONTHLY_SHARE):
        raise ValueError(f"{bucket} is not a spot interruption bucket (0 to {len(BUCKET_MONTHLY_SHARE) - 1})")
    return -math.log1p(-BUCKET_MONTHLY_SHARE[bucket]) / HOURS_PER_MONTH


def rate_bucket(rate: float) -> int | None:
    """The bucket whose rate ``rate`` is (None for a rate no bucket gives, 0 included: unknown)."""
    for bucket in range(len(BUCKET_MONTHLY_SHARE)):
        if rate > 0 and math.isclose(rate, bucket_rate(bucket), rel_tol=1e-9):
            return bucket
    return None


def pod_interruption_hours(
    annotations: Mapping[str, str], default_hours: float, restart_seconds: float
) -> float:
    """Hours of a node's price one interruption costs a pod: the work it loses (``tidal.dev/interruption-cost``,
    a duration with its unit or 0; else ``default_hours``) plus the restart. ValueError names a bad value."""
    found = ann.lookup(annotations, ann.INTERRUPTION_COST)
    lost = default_hours
    if found:
        name, value = found
        text = value.strip()
        try:
            seconds = parse_duration(text, field=name)
        except ConfigError:
            seconds = -1.0
        if seconds < 0 or (seconds > 0 and text.replace(".", "", 1).isdigit()):
            raise ValueError(
                f"annotation {name}: {value!r} is not the work an interruption loses as a duration "
                "(e.g. 45m, 6h, 0)"
            )
        lost = seconds / 3600.0
    return lost + restart_seconds / 3600.0


def expected_interruption_cost(o: Offering, hours: float) -> float:
    """USD per hour a node of ``o`` is expected to lose to interruptions when each costs ``hours`` of its
    price (0 for on-demand, reserved, and spot offerings whose risk the cloud does not publish)."""
    return o.price * o.interruption_rate * hours


def risk_price(o: Offering, hours: float) -> float:
    """What the planner ranks ``o`` by for pods whose interruption costs ``hours`` of the node's price."""
    return o.price * (1.0 + o.interruption_rate * hours)


def node_hours(hours: Iterable[float]) -> float:
    """What an interruption of a node costs, in hours of its price, given each of its pod classes' cost: the
    most any of them loses (the node's price pays for all of them at once)."""
    return max(hours, default=0.0)


@dataclass(frozen=True, slots=True)
class InterruptionRisk:
    """A chosen spot offering's interruption risk, for explanations: its rate, what one interruption costs
    (in hours of its price), and the expected USD per hour that adds."""

    rate: float  # interruptions per hour
    hours: float  # hours of the node's price one interruption costs (work lost + restart)
    expected: float  # USD per hour: price x rate x hours
    period: float = HOURS_PER_MONTH  # hours of running in which the published share is interrupted

    @property
    def share(self) -> float:
        """The share of such nodes interrupted within ``period`` hours of running."""
        return -math.expm1(-self.rate * self.period)


def interruption_risk(o: Offering, hours: float, scale: float = 1.0) -> InterruptionRisk | None:
    """The risk to show for a node of ``o`` whose interruption costs ``hours`` at the catalog's rate times
    ``scale`` (``spot.bucketPeriod``'s; None when it has none)."""
    if o.interruption_rate <= 0:
        return None
    return InterruptionRisk(
        o.interruption_rate * scale,
        hours / scale,
        expected_interruption_cost(o, hours),
        HOURS_PER_MONTH / scale,
    )
