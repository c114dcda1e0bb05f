"""deploy/azure grants exactly the RBAC actions of the ARM calls tidal makes (observed by the fake ARM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from autoscaler.core.offering import LaunchRequest
from providers.azure.permissions import (
    ACTIONS,
    FLEXIBLE_ACTIONS,
    LINKED_ACTIONS,
    SUBSCRIPTION_ACTIONS,
    linked_actions,
)
from tests.fakes.azure_reservations import FakeCapacityReservation
from tests.fakes.azure_setup import (
    A100,
    FLEX,
    POOL_T4,
    T4,
    T4_FLEX,
    TEMPLATE,
    azure_config,
    azure_provider,
    running_arm,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from tests.fakes.azure_arm import FakeArm

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "azure"
GROUP_DEPLOY = "Microsoft.Compute/capacityReservationGroups/deploy/action"


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    yield from running_arm(tmp_path)


def role(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DEPLOY / name).read_text())
    return document


def exercise_every_call(arm: FakeArm) -> None:
    """Offerings, launches and terminations on a node pool, a Flexible scale set and a template copy."""
    arm.state.add_capacity_reservation_group("ml-crg", FakeCapacityReservation("t4", T4_FLEX, "1", 1))
    config = azure_config(
        arm,
        azure={
            "scaleSets": {T4: "aks-t4-12345678-vmss", T4_FLEX: FLEX},
            "templateScaleSet": TEMPLATE,
            "capacityReservationGroups": ["ml-crg"],
        },
    )
    provider = azure_provider(arm, config)
    offers = provider.offerings()
    for token, size, capacity_type in (
        ("u", T4, "on-demand"),
        ("f", T4_FLEX, "on-demand"),
        ("t", A100, "spot"),
        ("r", T4_FLEX, "reserved"),
    ):
        offer = next(o for o in offers if o.instance_type == size and o.capacity_type == capacity_type)
        provider.terminate(provider.launch(LaunchRequest(token, (offer,), {}, (), {})))
    provider.instances()


def test_every_call_tidal_makes_is_listed_in_the_permissions_module(arm: FakeArm) -> None:
    exercise_every_call(arm)
    assert arm.actions() == set(ACTIONS)


def test_the_role_definitions_grant_exactly_the_actions_used_and_their_linked_checks() -> None:
    granted = role("role-definition.json")["Actions"] + role("role-definition-skus.json")["Actions"]
    assert len(granted) == len(set(granted))
    assert set(granted) == set(ACTIONS) | set(LINKED_ACTIONS)
    assert not [a for a in granted if "*" in a]


def granted_actions() -> set[str]:
    return set(role("role-definition.json")["Actions"]) | set(role("role-definition-skus.json")["Actions"])


def test_every_resource_a_node_pools_model_links_to_has_its_join_or_assign_action_in_the_role(
    arm: FakeArm,
) -> None:
    provider = azure_provider(arm)
    needed: set[str] = set()
    for ss in provider.arm.scale_sets():  # as ARM returns them to the provider, through the SDK
        actions, unknown = linked_actions(ss.raw)
        assert unknown == [], f"{ss.name} links to resources of an unknown type"
        assert set(actions) <= granted_actions(), ss.name
        needed |= set(actions)
    # the seeded pools link to what AKS puts in a node pool's model (one pool also names an ASG)
    assert needed == {
        "Microsoft.Network/virtualNetworks/subnets/join/action",
        "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
        "Microsoft.Network/networkSecurityGroups/join/action",
        "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action",
        "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
    }
    # ... and the role grants no linked action that neither they, a Flexible VM's NIC nor a VM's capacity
    # reservation group need
    assert set(LINKED_ACTIONS) == needed | set(FLEXIBLE_ACTIONS) | {GROUP_DEPLOY}


def test_a_flexible_vm_links_to_what_its_scale_set_links_to_and_carries_the_kubelet_identity(
    arm: FakeArm,
) -> None:
    config = azure_config(arm, azure={"scaleSets": {T4_FLEX: FLEX}})
    provider = azure_provider(arm, config)
    offer = next(o for o in provider.offerings() if o.instance_type == T4_FLEX)
    provider.launch(LaunchRequest("f", (offer,), {}, (), {}))
    [vm] = arm.state.vms.values()
    sent, unknown = linked_actions(vm.body)
    scale_set = provider.arm.scale_set(FLEX)
    assert scale_set is not None
    model, _ = linked_actions(scale_set.raw)
    assert unknown == [] and sent == model
    assert list(vm.body["identity"]["userAssignedIdentities"]) == list(
        scale_set.raw["identity"]["userAssignedIdentities"]
    )


def test_a_vm_put_into_a_capacity_reservation_links_to_its_group_which_the_role_lets_it_deploy_to(
    arm: FakeArm,
) -> None:
    arm.state.add_capacity_reservation_group("ml-crg", FakeCapacityReservation("t4", T4_FLEX, "1", 1))
    section = {"scaleSets": {T4_FLEX: FLEX}, "capacityReservationGroups": ["ml-crg"]}
    provider = azure_provider(arm, azure_config(arm, azure=section, capacityTypes=["reserved"]))
    offer = next(o for o in provider.offerings() if o.capacity_type == "reserved")
    provider.launch(LaunchRequest("r", (offer,), {}, (), {}))
    [vm] = arm.state.vms.values()
    sent, unknown = linked_actions(vm.body)
    assert unknown == []
    assert sent[GROUP_DEPLOY] == [provider.arm.capacity_reservation_group_id("ml-crg")]
    assert GROUP_DEPLOY in granted_actions()


def test_links_the_shipped_role_does_not_cover_are_named_by_action_and_unknown_ones_reported() -> None:
    gallery = (
        "/subscriptions/s/resourceGroups/images/providers/Microsoft.Compute/galleries/g/images/i/versions/1"
    )
    prefix = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/publicIPPrefixes/nodes"
    placement = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/proximityPlacementGroups/ppg"
    model = {
        "properties": {
            "virtualMachineProfile": {
                "storageProfile": {"imageReference": {"id": gallery}},
                "networkProfile": {
                    "networkInterfaceConfigurations": [
                        {
                            "properties": {
                                "ipConfigurations": [
                                    {
                                        "properties": {
                                            "publicIPAddressConfiguration": {
                                                "properties": {"publicIPPrefix": {"id": prefix}}
                                            }
                                        }
                                    }
                                ]
                            }
                        }
                    ]
                },
            },
            "proximityPlacementGroup": {"id": placement},
        }
    }
    actions, unknown = linked_actions(model)
    assert actions == {
        "Microsoft.Compute/galleries/images/versions/read": [gallery],
        "Microsoft.Network/publicIPPrefixes/join/action": [prefix],
    }
    assert not set(actions) & granted_actions()
    assert unknown == [placement]  # a link tidal has no rule for is reported, not ignored


def test_only_resource_skus_need_the_subscription_scope() -> None:
    node_group, subscription = role("role-definition.json"), role("role-definition-skus.json")
    assert set(subscription["Actions"]) == SUBSCRIPTION_ACTIONS
    assert not SUBSCRIPTION_ACTIONS & set(node_group["Actions"])
    assert subscription["AssignableScopes"] == ["/subscriptions/<subscription-id>"]
    assert node_group["AssignableScopes"] == [
        "/subscriptions/<subscription-id>/resourceGroups/<node-resource-group>"
    ]


def test_a_node_pool_linking_to_a_resource_the_role_does_not_cover_is_named_once_at_start(
    arm: FakeArm,
) -> None:
    gallery = (
        f"/subscriptions/{arm.subscription}/resourceGroups/images/providers/Microsoft.Compute"
        "/galleries/ours/images/gpu-node/versions/1.0.0"
    )
    arm.state.scale_sets[POOL_T4].profile["storageProfile"]["imageReference"] = {"id": gallery}
    provider = azure_provider(arm)
    with capture_logs() as logs:
        provider.offerings()
        provider.offerings()
    warnings = [e for e in logs if e["event"] == "azure_scale_set_needs_permission"]
    assert [(w["scale_set"], w["action"], w["scope"]) for w in warnings] == [
        (POOL_T4, "Microsoft.Compute/galleries/images/versions/read", gallery)
    ]
