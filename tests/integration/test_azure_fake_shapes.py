"""The Azure fake speaks ARM's shapes as azure-mgmt-compute knows them: every body tidal sends and every
answer the fake gives, through launches on Uniform and Flexible scale sets, a template copy, an allocation
failure, listings and deletes, is read back through the SDK's own models. A property the SDK does not know
(misspelled, or invented by the fake) fails here instead of passing unnoticed in the fallback tests."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import CapacityUnavailable
from autoscaler.core.offering import LaunchRequest
from tests.fakes.azure_reservations import FakeCapacityReservation
from tests.fakes.azure_setup import (
    FLEX,
    POOL_T4,
    T4,
    T4_BIG,
    T4_FLEX,
    TEMPLATE,
    azure_config,
    azure_provider,
    running_arm,
)
from tests.fakes.azure_shapes import PAGE_KEYS, ROUTE_MODELS, problems

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from autoscaler.core.offering import Offering
    from providers.azure import AzureProvider
    from tests.fakes.azure_arm import FakeArm
    from tests.fakes.azure_http import Exchange


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    yield from running_arm(tmp_path)


def offering(provider: AzureProvider, size: str, capacity_type: str = "on-demand") -> Offering:
    return next(
        o for o in provider.offerings() if o.instance_type == size and o.capacity_type == capacity_type
    )


def request(token: str, *offerings: Offering) -> LaunchRequest:
    return LaunchRequest(token, tuple(offerings), {}, (), {"tidal.dev/cluster": "e2e"})


def shape_problems(exchanges: Iterable[Exchange]) -> list[str]:
    found: list[str] = []
    for x in exchanges:
        if x.handler not in ROUTE_MODELS:
            continue
        wanted, answer, paged = ROUTE_MODELS[x.handler]
        if wanted is not None and x.request is not None:
            found += [f"{x.handler} request {p}" for p in problems(wanted, x.request)]
        if answer is None or x.response is None:
            continue
        if paged:
            found += [f"{x.handler} page: {k} is not a page property" for k in set(x.response) - PAGE_KEYS]
            for i, item in enumerate(x.response.get("value") or []):
                found += [f"{x.handler} response {p}" for p in problems(answer, item, f"value[{i}]")]
        else:
            found += [f"{x.handler} response {p}" for p in problems(answer, x.response)]
    return sorted(set(found))


def test_every_request_and_answer_of_the_azure_fake_reads_back_through_the_sdk_models(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "2s"}))
    flex = azure_provider(arm, azure_config(arm, azure={"scaleSets": {T4_FLEX: FLEX}, "spotScaleSets": None}))
    uniform = provider.launch(request("tok-a", offering(provider, T4)))
    flexible = flex.launch(request("tok-b", offering(flex, T4_FLEX)))
    arm.state.fail_allocation(T4_BIG)
    with pytest.raises(CapacityUnavailable):
        provider.launch(request("tok-c", offering(provider, T4_BIG)))
    provider.instances()
    provider.terminate(uniform)
    flex.terminate(flexible)
    time.sleep(0.2)
    provider.instances()
    flex.instances()

    handlers = {x.handler for x in arm.exchanges}
    assert {
        "skus",
        "patch_scale_set",
        "put_vm",
        "delete_instances",
        "list_scale_set_vms",
        "list_vms",
    } <= handlers
    assert shape_problems(arm.exchanges) == []


def test_a_template_copy_reads_back_through_the_sdk_models(arm: FakeArm) -> None:
    template = {"scaleSets": None, "spotScaleSets": None, "templateScaleSet": TEMPLATE}
    provider = azure_provider(arm, azure_config(arm, azure=template))
    provider.launch(request("tok-a", offering(provider, T4)))
    assert "put_scale_set" in {x.handler for x in arm.exchanges}
    assert shape_problems(arm.exchanges) == []


def test_capacity_reservation_groups_and_a_vm_in_one_read_back_through_the_sdk_models(arm: FakeArm) -> None:
    arm.state.add_capacity_reservation_group(
        "ml-crg",
        FakeCapacityReservation("t4-zone1", T4_FLEX, "1", 2),
        FakeCapacityReservation(
            "t4-window", T4_FLEX, "2", 1, start="2026-11-20T08:00:00+00:00", end="2026-11-21T08:00:00+00:00"
        ),
        reservation_type="Block",
    )
    section = {"scaleSets": {T4_FLEX: FLEX}, "spotScaleSets": None, "capacityReservationGroups": ["ml-crg"]}
    provider = azure_provider(arm, azure_config(arm, azure=section, capacityTypes=["reserved"]))
    provider.terminate(provider.launch(request("tok-r", offering(provider, T4_FLEX, "reserved"))))
    provider.instances()
    handlers = {x.handler for x in arm.exchanges}
    assert {"get_capacity_reservation_group", "list_capacity_reservations", "put_vm"} <= handlers
    assert shape_problems(arm.exchanges) == []


def test_the_shape_check_finds_a_property_the_sdk_does_not_know() -> None:
    """The check can fail: a misspelled property of a scale set is caught."""
    from azure.mgmt.compute import models

    body = {
        "location": "eastus",
        "sku": {"name": T4, "capacity": 1},
        "properties": {"upgradePolicy": {"mod": "Manual"}},
    }
    assert problems(models.VirtualMachineScaleSet, body) == [
        "properties.upgradePolicy.mod: not a property of UpgradePolicy"
    ]
    assert POOL_T4 and FLEX  # the seeded pools these tests launch into
