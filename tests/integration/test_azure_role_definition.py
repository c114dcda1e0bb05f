"""deploy/azure grants exactly the RBAC actions of the ARM calls tidal makes (observed by the fake ARM)."""

import json
from pathlib import Path

import pytest

from autoscaler.model import LaunchRequest
from providers.azure.permissions import ACTIONS, LINKED_ACTIONS, SUBSCRIPTION_ACTIONS
from tests.fakes.azure_setup import (
    A100,
    FLEX,
    T4,
    T4_FLEX,
    TEMPLATE,
    azure_config,
    azure_provider,
    running_arm,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "azure"


@pytest.fixture
def arm(tmp_path):
    yield from running_arm(tmp_path)


def role(name):
    return json.loads((DEPLOY / name).read_text())


def exercise_every_call(arm):
    """Offerings, launches and terminations on a node pool, a Flexible scale set and a template copy."""
    config = azure_config(
        arm, azure={"scaleSets": {T4: "aks-t4-12345678-vmss", T4_FLEX: FLEX}, "templateScaleSet": TEMPLATE}
    )
    provider = azure_provider(arm, config)
    offers = provider.offerings()
    for token, size, capacity_type in (
        ("u", T4, "on-demand"),
        ("f", T4_FLEX, "on-demand"),
        ("t", A100, "spot"),
    ):
        offer = next(o for o in offers if o.instance_type == size and o.capacity_type == capacity_type)
        provider.terminate(provider.launch(LaunchRequest(token, (offer,), {}, (), {})))
    provider.instances()


def test_every_call_tidal_makes_is_listed_in_the_permissions_module(arm):
    exercise_every_call(arm)
    assert arm.actions() == set(ACTIONS)


def test_the_role_definitions_grant_exactly_the_actions_used_and_their_linked_checks():
    granted = role("role-definition.json")["Actions"] + role("role-definition-skus.json")["Actions"]
    assert len(granted) == len(set(granted))
    assert set(granted) == set(ACTIONS) | set(LINKED_ACTIONS)
    assert not [a for a in granted if "*" in a]


def test_only_resource_skus_need_the_subscription_scope():
    node_group, subscription = role("role-definition.json"), role("role-definition-skus.json")
    assert set(subscription["Actions"]) == SUBSCRIPTION_ACTIONS
    assert not SUBSCRIPTION_ACTIONS & set(node_group["Actions"])
    assert subscription["AssignableScopes"] == ["/subscriptions/<subscription-id>"]
    assert node_group["AssignableScopes"] == [
        "/subscriptions/<subscription-id>/resourceGroups/<node-resource-group>"
    ]
