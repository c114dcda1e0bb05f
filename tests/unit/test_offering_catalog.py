"""The offerings a controller plans with: refreshed, and with offerings benched after capacity errors."""

from __future__ import annotations

from autoscaler.catalog import OfferingCatalog
from tests.builders import aws_offerings

T0 = 1_795_168_800.0


def catalog() -> OfferingCatalog:
    offerings = aws_offerings()
    return OfferingCatalog(lambda: list(offerings), refresh_interval=300.0, unavailable_for=180.0)


def unavailable(offerings):
    return sorted(o.instance_type for o in offerings if not o.available)


def test_a_benched_offering_is_unavailable_until_its_time_is_up():
    c = catalog()
    [t4] = [o for o in c.offerings(T0) if o.instance_type == "g4dn.xlarge" and o.capacity_type == "on-demand"]
    c.bench([t4], T0)
    assert unavailable(c.offerings(T0 + 179)) == ["g4dn.xlarge"]
    assert unavailable(c.offerings(T0 + 180)) == []


def test_the_list_stays_the_same_object_until_what_is_benched_changes():
    """A planner keeps the work it derived from a list for as long as it gets that same list back."""
    c = catalog()
    plain = c.offerings(T0)
    assert c.offerings(T0 + 1) is plain
    first, second = [o for o in plain if o.capacity_type == "on-demand" and o.gpu_count][:2]
    c.bench([first], T0 + 2)
    one_out = c.offerings(T0 + 3)
    assert one_out is not plain and c.offerings(T0 + 4) is one_out

    c.bench([second], T0 + 5)
    two_out = c.offerings(T0 + 6)
    assert two_out is not one_out
    assert unavailable(two_out) == sorted([first.instance_type, second.instance_type])
    assert c.offerings(T0 + 200) is plain  # both benches over
