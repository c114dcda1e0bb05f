"""Compute Engine reservations named in ``gcp.reservations``: offered as reserved capacity, launched into by
reservation affinity, against the fake Compute Engine."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from autoscaler.cloud import Refusal
from autoscaler.core.model import RESERVED
from autoscaler.core.offering import LaunchRequest, ReservationKind
from providers.gcp.settings import ProviderConfigError
from tests.fakes.gcp_cloud import FakeGcp, make_provider

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from autoscaler.core.offering import Offering
    from providers.gcp import GcpProvider

ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"
ENDS = "2026-12-01T16:00:00.000-08:00"


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        fake.add_reservation("ml-n2", ZONE_A, "n2-standard-4", 2)
        fake.add_reservation("batch-only", ZONE_B, "n2-standard-8", 1, specific_required=True)
        fake.add_reservation("training-window", ZONE_A, "g2-standard-4", 2, delete_at=ENDS)
        fake.add_reservation("someone-elses", ZONE_B, "n2-standard-4", 5)
        yield fake


NAMED: dict[str, Any] = {"gcp": {"reservations": ["ml-n2", "batch-only", "training-window"]}}


def reserved(provider: GcpProvider) -> dict[str, Offering]:
    return {o.reservation.id: o for o in provider.offerings() if o.reservation is not None}


def on_demand(provider: GcpProvider, instance_type: str, zone: str = ZONE_A) -> Offering:
    return next(
        o
        for o in provider.offerings()
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, "on-demand")
    )


def request(*offerings: Offering, token: str | None = None) -> LaunchRequest:
    return LaunchRequest(
        token or str(uuid.uuid4()),
        tuple(offerings),
        {"tidal.dev/managed": "true"},
        (),
        {"tidal.dev/cluster": "e2e"},
    )


def test_named_reservations_become_reserved_offerings(gcp: FakeGcp) -> None:
    found = reserved(make_provider(gcp, **NAMED))
    assert sorted(found) == ["batch-only", "ml-n2", "training-window"]  # someone-elses is not named
    ml = found["ml-n2"]
    assert (ml.instance_type, ml.zone, ml.capacity_type, ml.price) == ("n2-standard-4", ZONE_A, RESERVED, 0.0)
    r = ml.reservation
    assert r is not None
    assert (r.kind, r.available, r.total) == (ReservationKind.OPEN, 2, 2)
    assert r.on_demand_price == on_demand(make_provider(gcp), "n2-standard-4").price
    batch, window_reservation = found["batch-only"].reservation, found["training-window"].reservation
    assert batch is not None and window_reservation is not None
    assert batch.kind == ReservationKind.TARGETED
    window = found["training-window"]
    assert (window_reservation.kind, window_reservation.end) == (ReservationKind.CAPACITY_BLOCK, 1796169600.0)
    assert window.gpu_count == 1


def test_a_named_reservation_in_no_configured_zone_is_one_warning_line(gcp: FakeGcp) -> None:
    provider = make_provider(gcp, gcp={"reservations": ["ml-n2", "ml-n2-typo"]})
    with capture_logs() as logs:
        provider.offerings()
        provider.offerings()
    warnings = [e for e in logs if e["event"] == "gcp_reservations_not_found"]
    assert len(warnings) == 1
    assert warnings[0]["problem"] == (
        "gcp.reservations: ml-n2-typo not found in zones us-central1-a, us-central1-b of project tidal-test"
    )


def test_a_malformed_reservation_name_is_one_clear_line(gcp: FakeGcp) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        make_provider(gcp, gcp={"reservations": ["ML_Reservation"]})
    assert "\n" not in str(caught.value)
    assert "gcp.reservations[0]: 'ML_Reservation' is not a reservation name" in str(caught.value)


def test_a_vm_goes_into_its_reservation_by_specific_reservation_affinity(gcp: FakeGcp) -> None:
    provider = make_provider(gcp, **NAMED)
    instance = provider.launch(request(reserved(provider)["ml-n2"]))
    [vm] = gcp.instances()
    assert vm["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["ml-n2"],
    }
    assert vm["scheduling"]["provisioningModel"] == "STANDARD"
    assert (instance.capacity_type, instance.reservation_id) == (RESERVED, "ml-n2")
    [listed] = provider.instances()
    assert (listed.capacity_type, listed.reservation_id, listed.price) == (RESERVED, "ml-n2", 0.0)
    assert gcp.compute.reservations[(ZONE_A, "ml-n2")].vms == {vm["name"]}


def test_a_full_reservation_is_a_stockout_of_its_offering_and_the_launch_falls_back(gcp: FakeGcp) -> None:
    provider = make_provider(gcp, **NAMED)
    into = reserved(provider)["batch-only"]
    gcp.compute.reservations[(ZONE_B, "batch-only")].vms.add("taken-by-another-vm")
    instance = provider.launch(request(into, on_demand(provider, "n2-standard-8", ZONE_B)))
    assert (instance.capacity_type, instance.reservation_id) == ("on-demand", "")
    [late] = provider.poll_errors()
    assert (late.attempt.offering.key, late.attempt.refusal) == (into.key, Refusal.NO_CAPACITY)
    assert "does not have available resources" in late.attempt.detail


def test_a_reservation_deleted_since_it_was_listed_is_an_invalid_request_for_its_offering(
    gcp: FakeGcp,
) -> None:
    provider = make_provider(gcp, **NAMED)
    into = reserved(provider)["ml-n2"]
    gcp.delete_reservation("ml-n2", ZONE_A)
    instance = provider.launch(request(into, on_demand(provider, "n2-standard-4")))
    assert instance.capacity_type == "on-demand"
    [late] = provider.poll_errors()
    assert (late.attempt.offering.key, late.attempt.refusal) == (into.key, Refusal.INVALID)


def test_other_launches_never_consume_a_reservation_the_template_names(gcp: FakeGcp) -> None:
    template = gcp.add_node_pool("e2e", "reserved-pool")
    gcp.compute.templates[template]["properties"]["reservationAffinity"] = {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["ml-n2"],
    }
    provider = make_provider(gcp, template=template)
    provider.launch(request(on_demand(provider, "n2-standard-4")))
    spot = next(
        o for o in provider.offerings() if (o.instance_type, o.capacity_type) == ("e2-standard-4", "spot")
    )
    provider.launch(request(spot))
    affinities = sorted(vm["reservationAffinity"]["consumeReservationType"] for vm in gcp.instances())
    assert affinities == ["ANY_RESERVATION", "NO_RESERVATION"]
    assert gcp.compute.reservations[(ZONE_A, "ml-n2")].vms == set()
