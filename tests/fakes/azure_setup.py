"""An AKS cluster's node resource group in the fake ARM, and the tidal configuration that points at it.

@pytest.fixture
def arm(tmp_path):
    yield from running_arm(tmp_path)           # a running FakeArm with the node pools

def test_something(arm):
    provider = azure_provider(arm)             # the real AzureProvider, through the real SDK
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoscaler.config.options import Config, config_from_mapping
from providers.azure import AzureProvider
from tests.fakes.azure_arm import FakeArm
from tests.fakes.azure_auth import FakeCredential

T4 = "Standard_NC4as_T4_v3"
T4_BIG = "Standard_NC8as_T4_v3"
T4_FLEX = "Standard_NC16as_T4_v3"
A100 = "Standard_NC24ads_A100_v4"
CPU = "Standard_D4s_v5"

POOL_T4 = "aks-t4-12345678-vmss"
POOL_T4_SPOT = "aks-t4spot-12345678-vmss"
POOL_T4_BIG = "aks-t4big-12345678-vmss"
POOL_A100 = "aks-a100-12345678-vmss"
POOL_CPU = "aks-cpu-12345678-vmss"
FLEX = "aks-flex-12345678-vmss"
TEMPLATE = "aks-gpu-12345678-vmss"


def seed_node_pools(arm: FakeArm) -> None:
    """The scale sets AKS made for the cluster's node pools (the CPU pool already runs two nodes)."""
    state = arm.state
    state.add_scale_set(POOL_T4, T4, zones=("1",))
    state.add_scale_set(POOL_T4_SPOT, T4, zones=("1",), priority="Spot")
    state.add_scale_set(POOL_T4_BIG, T4_BIG, zones=("2",))
    state.add_scale_set(POOL_A100, A100, zones=("1", "2", "3"), application_security_groups=True)
    state.add_scale_set(POOL_CPU, CPU, zones=("1",), capacity=2)
    state.add_scale_set(FLEX, T4_FLEX, orchestration="Flexible", zones=("1", "2", "3"))
    state.add_scale_set(TEMPLATE, T4, zones=("2",))


def azure_section(arm: FakeArm, **overrides: Any) -> dict[str, Any]:
    """The ``azure:`` section for the seeded pools: four regular pools and one Spot pool."""
    section: dict[str, Any] = {
        "subscriptionId": arm.subscription,
        "resourceGroup": arm.resource_group,
        "scaleSets": {T4: POOL_T4, T4_BIG: POOL_T4_BIG, A100: POOL_A100, CPU: POOL_CPU},
        "spotScaleSets": {T4: POOL_T4_SPOT},
        "endpoint": arm.url,
        "pricesEndpoint": arm.url,
    }
    section.update(overrides)
    return {k: v for k, v in section.items() if v is not None}


def azure_config(arm: FakeArm, *, azure: dict[str, Any] | None = None, **top: Any) -> Config:
    """A Config with ``cloud: azure`` for the fake (``azure`` overrides keys of the section)."""
    data: dict[str, Any] = {
        "cloud": "azure",
        "region": "eastus",
        "clusterName": "aks-test",
        "azure": azure_section(arm, **(azure or {})),
        **top,
    }
    return config_from_mapping(data, source="test")


def azure_provider(arm: FakeArm, config: Config | None = None, **kwargs: Any) -> AzureProvider:
    """The real provider talking to the fake through the unmodified SDK."""
    options: dict[str, Any] = {
        "credential": FakeCredential(),
        "connection_verify": str(arm.cert),
        "polling_interval": 0,
        "clock": kwargs.pop("clock", None),
        **kwargs,
    }
    if options["clock"] is None:
        del options["clock"]
    return AzureProvider(config or azure_config(arm), **options)


def running_arm(tmp_path: Path) -> Iterator[FakeArm]:
    """A running fake ARM holding the cluster's node pools (``yield from`` it in a test's fixture)."""
    fake = FakeArm(tmp_path / "tls").start()
    seed_node_pools(fake)
    try:
        yield fake
    finally:
        fake.stop()
