"""Owned instances: found again after a restart, evictions seen, Flexible VMs and template copies."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.offering import LaunchRequest
from tests.fakes.azure_setup import (
    A100,
    FLEX,
    POOL_T4,
    POOL_T4_SPOT,
    T4,
    T4_FLEX,
    TEMPLATE,
    azure_config,
    azure_provider,
    running_arm,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from autoscaler.core.offering import Instance
    from providers.azure import AzureProvider
    from tests.fakes.azure_arm import FakeArm

TAGS = {"tidal.dev/cluster": "aks-test", "tidal.dev/managed": "true", "team": "ml"}
FLEX_CONFIG = {"scaleSets": {T4_FLEX: FLEX}, "spotScaleSets": {T4_FLEX: FLEX}}
TEMPLATE_CONFIG = {"scaleSets": None, "spotScaleSets": None, "templateScaleSet": TEMPLATE}


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    yield from running_arm(tmp_path)


def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def launch(
    provider: AzureProvider, token: str, size: str, capacity_type: str = "on-demand", zone: str | None = None
) -> Instance:
    candidates = [
        o
        for o in provider.offerings()
        if o.instance_type == size and o.capacity_type == capacity_type and (zone is None or o.zone == zone)
    ]
    return provider.launch(LaunchRequest(token, tuple(candidates[:1]), {}, (), TAGS))


def test_a_restarted_provider_finds_the_instances_it_launched_and_only_those(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    launched = {launch(provider, "tok-1", T4).id, launch(provider, "tok-2", T4, "spot").id}
    found = azure_provider(arm).instances()
    assert {i.id for i in found} == launched
    assert {i.launch_token for i in found} == {"tok-1", "tok-2"}
    assert all(i.state == "running" and i.tags["tidal.dev/cluster"] == "aks-test" for i in found)


def test_node_pool_instances_tidal_did_not_launch_are_not_listed(arm: FakeArm) -> None:
    arm.state.scale_sets[POOL_T4].tags["team"] = "ml"
    arm.state.add_scale_set("aks-extra-12345678-vmss", A100, capacity=3)
    assert azure_provider(arm).instances() == []


def test_an_evicted_spot_instance_is_listed_as_terminated(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    spot = launch(provider, "tok-s", T4, "spot")
    arm.state.evict(POOL_T4_SPOT, "0")
    [seen] = provider.instances()
    assert (seen.provider_id, seen.state, seen.capacity_type) == (spot.provider_id, "terminated", "spot")
    assert [i.state for i in azure_provider(arm).instances()] == ["terminated"]  # a restart sees it too


def test_a_spot_instance_deallocated_by_eviction_is_terminated_and_its_capacity_given_back(
    arm: FakeArm,
) -> None:
    provider = azure_provider(arm)
    launch(provider, "tok-s", T4, "spot")
    arm.state.evict(POOL_T4_SPOT, "0", deallocate=True)
    assert [i.state for i in provider.instances()] == ["terminated"]
    # tidal deleted the deallocated VM; the delete is sent, not waited for
    eventually(lambda: arm.state.scale_sets[POOL_T4_SPOT].capacity == 0)
    assert [i.state for i in provider.instances()] == ["terminated"]


def test_an_evicted_instance_is_forgotten_after_a_while(arm: FakeArm) -> None:
    clock = Clock()
    provider = azure_provider(arm, clock=clock)
    launch(provider, "tok-s", T4, "spot")
    arm.state.evict(POOL_T4_SPOT, "0")
    assert [i.state for i in provider.instances()] == ["terminated"]
    clock.now += 601
    launch(provider, "tok-next", T4, "spot")  # the next write on the pool drops the stale tag
    assert [i.launch_token for i in provider.instances()] == ["tok-next"]
    assert "tidal.dev.token.tok-s" not in arm.state.scale_sets[POOL_T4_SPOT].tags


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_flexible_spot_vm_is_created_with_spot_settings_tags_and_the_zone_asked_for(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure=FLEX_CONFIG))
    instance = launch(provider, "tok-f", T4_FLEX, "spot", zone="eastus-2")
    [vm] = arm.state.vms.values()
    props = vm.body["properties"]
    assert (props["priority"], props["evictionPolicy"], props["billingProfile"]) == (
        "Spot",
        "Delete",
        {"maxPrice": -1},
    )
    assert props["hardwareProfile"] == {"vmSize": T4_FLEX}
    assert vm.zone == "2" and instance.zone == "eastus-2"
    assert vm.tags == {
        "tidal.dev.cluster": "aks-test",
        "tidal.dev.managed": "true",
        "tidal.dev.launch-token": "tok-f",
        "team": "ml",
    }
    assert instance.provider_id.endswith(
        f"/mc_tidal-rg_tidal_eastus/providers/Microsoft.Compute/virtualMachines/{vm.name}"
    )
    assert instance.tags["tidal.dev/launch-token"] == "tok-f"


def test_a_flexible_launch_retried_with_the_same_token_makes_no_second_vm(arm: FakeArm) -> None:
    config = azure_config(arm, azure=FLEX_CONFIG)
    first = launch(azure_provider(arm, config), "tok-f", T4_FLEX)
    again = launch(azure_provider(arm, config), "tok-f", T4_FLEX)
    assert first.id == again.id and len(arm.state.vms) == 1


@pytest.mark.parametrize(("create", "delete"), [("async", "location"), ("location", "async")])
def test_a_flexible_vm_is_found_after_a_restart_and_deleted_by_terminate(
    arm: FakeArm, create: str, delete: str
) -> None:
    arm.state.styles.update(create=create, delete=delete)
    config = azure_config(arm, azure=FLEX_CONFIG)
    launch(azure_provider(arm, config), "tok-f", T4_FLEX)
    restarted = azure_provider(arm, config)
    [found] = restarted.instances()
    restarted.terminate(found)  # sent, not waited for
    assert len(arm.calls("DELETE", "/virtualMachines/")) == 1
    eventually(lambda: arm.state.vms == {})


def test_an_evicted_flexible_vm_is_listed_as_terminated(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure=FLEX_CONFIG))
    instance = launch(provider, "tok-f", T4_FLEX, "spot")
    provider.instances()
    arm.state.evict(FLEX, instance.id.split("/")[1])
    assert [(i.id, i.state) for i in provider.instances()] == [(instance.id, "terminated")]


def test_a_template_is_copied_once_per_size_and_priority_and_the_copy_grows(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure=TEMPLATE_CONFIG))
    instance = launch(provider, "tok-1", A100, "spot")
    launch(provider, "tok-2", A100, "spot")
    copy = arm.state.scale_sets["aks-gpu-12345678-nc24adsa100v4-spot-vmss"]
    assert (copy.size, copy.priority, copy.capacity, copy.zones) == (A100, "Spot", 2, ("2",))
    assert copy.profile["evictionPolicy"] == "Delete" and copy.profile["billingProfile"] == {"maxPrice": -1}
    assert copy.tags["tidal.dev.template"] == TEMPLATE and copy.tags["tidal.dev.cluster"] == "aks-test"
    assert len(arm.calls("PUT", "/virtualMachineScaleSets/")) == 1
    assert arm.state.scale_sets[TEMPLATE].capacity == 0  # the template itself is never grown
    assert {i.id for i in azure_provider(arm, azure_config(arm, azure=TEMPLATE_CONFIG)).instances()} == {
        instance.id,
        "aks-gpu-12345678-nc24adsa100v4-spot-vmss/1",
    }
