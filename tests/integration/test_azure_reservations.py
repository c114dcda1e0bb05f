"""Azure capacity reservation groups named in ``azure.capacityReservationGroups``: offered as reserved
capacity, VMs of a Flexible scale set associated with the group, against the fake ARM."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from autoscaler.core.model import RESERVED
from autoscaler.core.offering import LaunchRequest, ReservationKind
from providers.azure.settings import ProviderConfigError
from tests.fakes.azure_reservations import FakeCapacityReservation
from tests.fakes.azure_setup import FLEX, T4_FLEX, azure_config, azure_provider, running_arm

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

    from autoscaler.core.offering import Offering
    from providers.azure import AzureProvider
    from tests.fakes.azure_arm import FakeArm

GROUP = "ml-crg"
BLOCK_GROUP = "training-block"


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    for fake in running_arm(tmp_path):
        fake.state.add_capacity_reservation_group(
            GROUP,
            FakeCapacityReservation("t4-zone1", T4_FLEX, "1", 2),
            FakeCapacityReservation("t4-zone2", T4_FLEX, "2", 1),
        )
        fake.state.add_capacity_reservation_group(
            BLOCK_GROUP,
            FakeCapacityReservation(
                "t4-window",
                T4_FLEX,
                "3",
                4,
                start="2026-11-20T08:00:00+00:00",
                end="2026-11-21T08:00:00+00:00",
            ),
            reservation_type="Block",
        )
        yield fake


def provider_for(arm: FakeArm, **azure: Any) -> AzureProvider:
    section = {"scaleSets": {T4_FLEX: FLEX}, "capacityReservationGroups": [GROUP, BLOCK_GROUP], **azure}
    return azure_provider(arm, azure_config(arm, azure=section, capacityTypes=["reserved", "on-demand"]))


def reserved(provider: AzureProvider) -> dict[str, Offering]:
    return {o.reservation.id: o for o in provider.offerings() if o.reservation is not None}


def request(*offerings: Offering, token: str = "7d3e9b1c-2f4a-4e6b-8c0d-1a2b3c4d5e6f") -> LaunchRequest:
    return LaunchRequest(
        token, tuple(offerings), {"tidal.dev/managed": "true"}, (), {"tidal.dev/cluster": "aks-test"}
    )


def test_each_reservation_of_a_listed_group_is_a_reserved_offering(arm: FakeArm) -> None:
    found = reserved(provider_for(arm))
    assert sorted(found) == ["t4-window", "t4-zone1", "t4-zone2"]
    one = found["t4-zone1"]
    assert (one.instance_type, one.zone, one.capacity_type, one.price) == (T4_FLEX, "eastus-1", RESERVED, 0.0)
    r = one.reservation
    assert r is not None
    assert (r.kind, r.available, r.total, r.name) == (ReservationKind.OPEN, 2, 2, GROUP)
    assert r.on_demand_price > 0
    window = found["t4-window"].reservation
    assert window is not None
    assert (window.kind, window.start, window.end) == (
        ReservationKind.CAPACITY_BLOCK,
        1795161600.0,
        1795248000.0,
    )


def test_a_vm_goes_into_a_reservation_associated_with_its_group(arm: FakeArm) -> None:
    provider = provider_for(arm)
    instance = provider.launch(request(reserved(provider)["t4-zone1"]))
    [vm] = arm.state.vms.values()
    assert vm.body["properties"]["capacityReservation"] == {
        "capacityReservationGroup": {"id": f"{provider.arm.capacity_reservation_group_id(GROUP)}"}
    }
    assert vm.zone == "1"
    assert arm.state.groups[GROUP].reservations["t4-zone1"].allocated == [vm.name]
    assert instance.capacity_type == RESERVED
    [listed] = [i for i in provider.instances() if i.state != "terminated"]
    assert (listed.capacity_type, listed.reservation_id, listed.price) == (RESERVED, "t4-zone1", 0.0)
    left = reserved(provider)["t4-zone1"].reservation
    assert left is not None
    assert left.available == 1


def test_a_group_arm_does_not_have_is_one_warning_line(arm: FakeArm) -> None:
    provider = provider_for(arm, capacityReservationGroups=[GROUP, "ml-crg-typo"])
    with capture_logs() as logs:
        provider.offerings()
        provider.offerings()
    warnings = [e for e in logs if e["event"] == "azure_capacity_reservation_groups_not_found"]
    assert len(warnings) == 1
    assert warnings[0]["problem"] == (
        f"azure.capacityReservationGroups: ml-crg-typo not found in resource group {arm.resource_group}"
    )


def test_a_malformed_group_name_is_one_clear_line(arm: FakeArm) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        provider_for(arm, capacityReservationGroups=["ml crg"])
    assert "\n" not in str(caught.value)
    assert "azure.capacityReservationGroups[0]: 'ml crg' is not a capacity reservation group name" in str(
        caught.value
    )
