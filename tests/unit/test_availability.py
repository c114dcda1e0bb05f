"""The availability store: what a refusal benches, for how long, and what the planner is shown."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from autoscaler.cloud import Attempt, QuotaScope, Refusal
from autoscaler.runtime.availability import Availability
from tests.builders import aws_offerings

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from autoscaler.core.offering import Offering

T0 = 1_795_168_800.0


def offerings_by_key() -> dict[str, Offering]:
    return {o.key: o for o in aws_offerings(zones=("us-east-1a", "us-east-1b"))}


def store(**kw: Any) -> Availability:
    return Availability(unavailable_for=180.0, rng=random.Random(7), **kw)


def unavailable(view: Iterable[Offering]) -> list[str]:
    return sorted(o.key for o in view if not o.available)


def test_no_capacity_benches_that_offering_only() -> None:
    by_key = offerings_by_key()
    a = store()
    a.refused([Attempt(by_key["g4dn.xlarge/us-east-1a/on-demand"], Refusal.NO_CAPACITY)], T0)
    assert unavailable(a.apply(list(by_key.values()), T0 + 1)) == ["g4dn.xlarge/us-east-1a/on-demand"]


def test_a_bench_lasts_at_least_the_configured_duration_and_at_most_its_jitter_more() -> None:
    by_key = offerings_by_key()
    a = store(jitter=0.2)
    [bench] = a.refused([Attempt(by_key["g5.xlarge/us-east-1a/spot"], Refusal.NO_CAPACITY)], T0)
    assert 180.0 <= bench.until - T0 <= 216.0
    offerings = list(by_key.values())
    assert unavailable(a.apply(offerings, T0 + 179.9)) == ["g5.xlarge/us-east-1a/spot"]
    assert a.apply(offerings, bench.until) is offerings


def test_a_family_quota_benches_every_offering_of_the_family_and_capacity_type_in_every_zone() -> None:
    by_key = offerings_by_key()
    scope = QuotaScope(
        "family", "g4dn", region="us-east-1", capacity_type="on-demand", families=frozenset({"g4dn"})
    )
    a = store()
    a.refused(
        [Attempt(by_key["g4dn.xlarge/us-east-1a/on-demand"], Refusal.QUOTA, "VcpuLimitExceeded", scope)], T0
    )
    assert unavailable(a.apply(list(by_key.values()), T0)) == [
        "g4dn.xlarge/us-east-1a/on-demand",
        "g4dn.xlarge/us-east-1b/on-demand",
    ]
    assert a.benched(T0) == ["quota family/g4dn/us-east-1/on-demand"]


def test_a_gpu_type_quota_benches_that_gpu_model_and_nothing_else() -> None:
    by_key = offerings_by_key()
    scope = QuotaScope("gpu", "NVIDIA_A10G_GPUS", region="us-east-1", gpu_models=frozenset({"A10G"}))
    a = store()
    a.refused([Attempt(by_key["g5.xlarge/us-east-1a/spot"], Refusal.QUOTA, "", scope)], T0)
    assert {k.split("/")[0] for k in unavailable(a.apply(list(by_key.values()), T0))} == {
        "g5.xlarge",
        "g5.12xlarge",
    }


def test_a_region_quota_for_spot_leaves_on_demand_available() -> None:
    by_key = offerings_by_key()
    scope = QuotaScope("region", "us-east-1", region="us-east-1", capacity_type="spot")
    a = store()
    a.refused(
        [Attempt(by_key["m6i.large/us-east-1a/spot"], Refusal.QUOTA, "MaxSpotInstanceCountExceeded", scope)],
        T0,
    )
    view = a.apply(list(by_key.values()), T0)
    assert all(not o.available for o in view if o.capacity_type == "spot")
    assert all(o.available for o in view if o.capacity_type == "on-demand")


def test_refusals_of_the_same_offering_back_off_exponentially_up_to_the_cap() -> None:
    by_key = offerings_by_key()
    t4 = by_key["g4dn.xlarge/us-east-1a/on-demand"]
    a = store(jitter=0.0, cap_factor=4.0)
    now, lengths = T0, []
    for _ in range(4):
        [bench] = a.refused([Attempt(t4, Refusal.NO_CAPACITY)], now)
        lengths.append(bench.until - now)
        now = bench.until + 1  # tried again once the bench was over, and refused again
    assert lengths == [180.0, 360.0, 720.0, 720.0]


def test_a_success_clears_the_strikes_so_the_next_refusal_starts_short_again() -> None:
    t4 = offerings_by_key()["g4dn.xlarge/us-east-1a/on-demand"]
    a = store(jitter=0.0)
    [first] = a.refused([Attempt(t4, Refusal.NO_CAPACITY)], T0)
    [second] = a.refused([Attempt(t4, Refusal.NO_CAPACITY)], first.until + 1)
    assert second.until - (first.until + 1) == 360.0
    a.succeeded(t4)
    [third] = a.refused([Attempt(t4, Refusal.NO_CAPACITY)], second.until + 1)
    assert third.until - (second.until + 1) == 180.0


def test_parallel_refusals_of_one_offering_in_one_reconcile_count_as_one_strike() -> None:
    t4 = offerings_by_key()["g4dn.xlarge/us-east-1a/on-demand"]
    a = store(jitter=0.0)
    benches = a.refused([Attempt(t4, Refusal.NO_CAPACITY)] * 5, T0)
    assert {b.until - T0 for b in benches} == {180.0}


def test_throttling_holds_back_launches_for_at_least_retry_after() -> None:
    m6i = offerings_by_key()["m6i.large/us-east-1a/on-demand"]
    a = store()
    a.refused([Attempt(m6i, Refusal.THROTTLED, "RequestLimitExceeded", retry_after=12.0)], T0)
    assert 12.0 <= a.launch_backoff(T0) <= 12.0 * 1.2
    assert a.launch_backoff(T0 + 12.0 * 1.2) == 0.0
    # Throttling is no fault of the offering: it stays available to plan with.
    assert m6i.key not in unavailable(a.apply(list(offerings_by_key().values()), T0))


def test_repeated_throttling_backs_off_exponentially_when_the_cloud_names_no_retry_after() -> None:
    m6i = offerings_by_key()["m6i.large/us-east-1a/on-demand"]
    a = store(jitter=0.0)
    waits, now = [], T0
    for _ in range(3):
        a.refused([Attempt(m6i, Refusal.THROTTLED)], now)
        waits.append(a.launch_backoff(now))
        now += waits[-1]
    assert waits == [1.0, 2.0, 4.0]


def test_the_same_seed_gives_the_same_delays() -> None:
    t4 = offerings_by_key()["g4dn.xlarge/us-east-1a/on-demand"]

    def delays(seed: int) -> list[float]:
        a = Availability(unavailable_for=180.0, rng=random.Random(seed))
        return [b.until for b in a.refused([Attempt(t4, Refusal.OTHER)], T0)]

    assert delays(3) == delays(3)
    assert delays(3) != delays(4)


def test_the_view_is_the_same_list_until_what_is_benched_changes() -> None:
    """A planner keeps the work it derived from a list for as long as it gets that same list back."""
    by_key = offerings_by_key()
    plain = list(by_key.values())
    a = store(jitter=0.0)
    assert a.apply(plain, T0) is plain
    a.refused([Attempt(by_key["g4dn.xlarge/us-east-1a/on-demand"], Refusal.NO_CAPACITY)], T0)
    one_out = a.apply(plain, T0 + 1)
    assert one_out is not plain and a.apply(plain, T0 + 2) is one_out
    a.refused([Attempt(by_key["g5.xlarge/us-east-1a/on-demand"], Refusal.NO_CAPACITY)], T0 + 3)
    two_out = a.apply(plain, T0 + 4)
    assert two_out is not one_out and len(unavailable(two_out)) == 2
    assert a.apply(plain, T0 + 200) is plain
