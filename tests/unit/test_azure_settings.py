"""The ``azure:`` section: what a good one means, and one line naming every problem of a bad one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.config.options import ConfigError, config_from_mapping
from providers.azure import ProviderConfigError, parse_settings

if TYPE_CHECKING:
    from typing import Any

    from autoscaler.config.options import Config
    from providers.azure import AzureSettings

SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"


def config(azure: dict[str, Any], **top: Any) -> Config:
    return config_from_mapping({"cloud": "azure", "region": "eastus", "azure": azure, **top}, source="test")


def settings(azure: dict[str, Any], **top: Any) -> AzureSettings:
    cfg = config(azure, **top)
    return parse_settings(cfg.providers["azure"], cfg)


def problems(azure: dict[str, Any], **top: Any) -> ProviderConfigError:
    with pytest.raises(ProviderConfigError) as failure:
        settings(azure, **top)
    return failure.value


GOOD = {
    "subscriptionId": SUBSCRIPTION,
    "resourceGroup": "MC_ml-rg_ml-aks_eastus",
    "scaleSets": {"Standard_NC24ads_A100_v4": "aks-a100-12345678-vmss"},
}


def test_a_minimal_section_names_the_subscription_node_resource_group_and_pools() -> None:
    s = settings(GOOD)
    assert (s.subscription_id, s.resource_group) == (SUBSCRIPTION, "MC_ml-rg_ml-aks_eastus")
    assert dict(s.scale_sets) == {"Standard_NC24ads_A100_v4": "aks-a100-12345678-vmss"}
    assert (s.endpoint, s.prices_endpoint) == ("https://management.azure.com", "https://prices.azure.com")
    assert (s.template_scale_set, s.catalog_fallback, s.price_refresh_interval) == (None, None, 3600.0)


def test_every_key_of_the_contract_is_read(tmp_path: Path) -> None:
    catalog = tmp_path / "azure.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour,spot_usd_per_hour\n"
        "azure,eastus,Standard_NC4as_T4_v3,4,28672,1,x86_64,0.526,0.0627\n"
    )
    s = settings(
        {
            **GOOD,
            "spotScaleSets": {"Standard_NC4as_T4_v3": "aks-t4spot-12345678-vmss"},
            "templateScaleSet": "aks-gpu-12345678-vmss",
            "endpoint": "https://management.usgovcloudapi.net/",
            "pricesEndpoint": "https://prices.example.com",
            "catalogFallback": str(catalog),
            "priceRefreshInterval": "30m",
        }
    )
    assert dict(s.spot_scale_sets) == {"Standard_NC4as_T4_v3": "aks-t4spot-12345678-vmss"}
    assert s.template_scale_set == "aks-gpu-12345678-vmss"
    assert (s.endpoint, s.prices_endpoint) == (
        "https://management.usgovcloudapi.net",
        "https://prices.example.com",
    )
    assert (s.catalog_fallback, s.price_refresh_interval) == (Path(catalog), 1800.0)
    assert [(o.instance_type, o.capacity_type, o.price) for o in s.fallback_offerings] == [
        ("Standard_NC4as_T4_v3", "on-demand", 0.526),
        ("Standard_NC4as_T4_v3", "spot", 0.0627),
    ]


def test_a_launch_gives_its_operation_a_short_grace_that_the_section_may_change() -> None:
    assert settings(GOOD).operation_wait == 2.0
    assert settings({**GOOD, "operationWait": "500ms"}).operation_wait == 0.5
    assert settings({**GOOD, "operationWait": "0s"}).operation_wait == 0.0  # never wait
    assert problems({**GOOD, "operationWait": "5m"}).errors == [
        "azure.operationWait: '5m' is longer than 30s: a launch must not hold the reconcile loop; "
        "operations still running are followed without waiting"
    ]


def test_a_template_alone_is_enough() -> None:
    s = settings(
        {"subscriptionId": SUBSCRIPTION, "resourceGroup": "MC_x", "templateScaleSet": "aks-gpu-1-vmss"}
    )
    assert s.scale_sets == {} and s.template_scale_set == "aks-gpu-1-vmss"


def test_every_problem_is_reported_at_once_on_one_line() -> None:
    err = problems(
        {
            "subscriptionId": "my-subscription",
            "scaleSets": {"NC24ads_A100_v4": "aks-a100-vmss", "Standard_D4s_v5": ""},
            "endpoint": "http://localhost:8443",
            "priceRefreshInterval": "soon",
            "scaleSet": {},
        }
    )
    assert isinstance(err, ConfigError) and "\n" not in str(err)
    assert err.errors == [
        "azure.scaleSet: unknown key (did you mean 'scaleSets'?)",
        "azure.subscriptionId: 'my-subscription' is not a subscription id (a GUID)",
        "azure.scaleSets: 'NC24ads_A100_v4' is not an Azure VM size (e.g. Standard_NC24ads_A100_v4)",
        "azure.scaleSets.Standard_D4s_v5: '' is not a scale set name",
        "azure.endpoint: 'http://localhost:8443' is not an https:// URL "
        "(Azure bearer tokens are only sent over TLS)",
        "azure.priceRefreshInterval: 'soon' is not a duration (e.g. 30s, 5m, 1h30m)",
        "azure.resourceGroup: required",
    ]


def test_a_section_without_any_scale_set_says_which_key_to_set() -> None:
    err = problems({"subscriptionId": SUBSCRIPTION, "resourceGroup": "MC_x"})
    assert err.errors == [
        "azure.scaleSets: required unless spotScaleSets or templateScaleSet is set "
        "(the node-pool scale set tidal grows for each VM size)"
    ]


def test_region_and_zones_must_be_named_as_azure_and_aks_name_them() -> None:
    err = problems(GOOD, region="us-east-1", zones=["us-east-1a"])
    assert err.errors == ["region: 'us-east-1' is not an Azure region (e.g. eastus)"]
    err = problems(GOOD, zones=["eastus-1", "1"])
    assert err.errors == ["zones: '1' is not a zone of eastus as AKS names it (e.g. eastus-1)"]


def test_a_catalog_fallback_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    err = problems({**GOOD, "catalogFallback": str(missing)})
    assert err.errors == [f"azure.catalogFallback: {missing}: No such file or directory"]
    other_region = tmp_path / "west.csv"
    other_region.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour\n"
        "azure,westus2,Standard_D4s_v5,4,16384,0,x86_64,0.192\n"
    )
    err = problems({**GOOD, "catalogFallback": str(other_region)})
    assert err.errors == [f"azure.catalogFallback: '{other_region}' has no rows for azure eastus"]


def test_the_shared_instance_catalog_can_serve_as_the_fallback() -> None:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "catalog" / "instance_catalog.csv"
    if not shared.exists():
        pytest.skip("the shared data set is not present")
    s = settings({**GOOD, "catalogFallback": str(shared)})
    a100 = {
        (o.capacity_type, o.price)
        for o in s.fallback_offerings
        if o.instance_type == "Standard_NC24ads_A100_v4"
    }
    assert a100 == {("on-demand", 3.673), ("spot", 0.444433)}
