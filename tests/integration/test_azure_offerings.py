"""Offerings from Resource SKUs, the configured node pools and the Retail Prices API (fake ARM, real SDK)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from autoscaler.cloud import ProviderError
from autoscaler.core.offering import LaunchRequest
from tests.fakes.azure_setup import (
    A100,
    CPU,
    FLEX,
    POOL_T4,
    POOL_T4_BIG,
    POOL_T4_SPOT,
    T4,
    T4_BIG,
    T4_FLEX,
    TEMPLATE,
    azure_config,
    azure_provider,
    running_arm,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path
    from typing import Any

    from autoscaler.core.offering import Offering
    from tests.fakes.azure_arm import FakeArm

API = "Azure Retail Prices API"


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    yield from running_arm(tmp_path)


def by_key(offerings: Iterable[Offering]) -> dict[str, Offering]:
    return {o.key: o for o in offerings}


def write_catalog(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "azure-eastus.csv"
    header = (
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_model,arch,"
        "on_demand_usd_per_hour,spot_usd_per_hour"
    )
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_offering_has_the_shape_resource_skus_give_and_the_zone_of_its_node_pool(arm: FakeArm) -> None:
    offer = by_key(azure_provider(arm).offerings())[f"{T4}/eastus-1/on-demand"]
    assert (offer.vcpu, offer.memory_mib, offer.arch.value) == (4, 28 * 1024, "amd64")
    assert (offer.gpu_count, offer.gpu_model, offer.gpu_vendor, offer.gpu_memory_mib) == (
        1,
        "T4",
        "NVIDIA",
        16384,
    )
    assert (offer.region, offer.available, offer.max_pods) == ("eastus", True, 110)


def test_a_pool_spanning_several_zones_offers_no_zone_because_azure_picks_it(arm: FakeArm) -> None:
    keys = {o.key for o in azure_provider(arm).offerings() if o.instance_type == A100}
    assert keys == {f"{A100}//on-demand"}


def test_only_sizes_with_a_configured_pool_are_offered(arm: FakeArm) -> None:
    offered = {(o.instance_type, o.capacity_type) for o in azure_provider(arm).offerings()}
    assert offered == {
        (T4, "on-demand"),
        (T4, "spot"),
        (T4_BIG, "on-demand"),
        (A100, "on-demand"),
        (CPU, "on-demand"),
    }


def test_a_size_not_available_to_the_subscription_in_the_pools_zone_is_unavailable(arm: FakeArm) -> None:
    arm.state.restrict(T4, zones=("1",))
    offers = by_key(azure_provider(arm).offerings())
    assert not offers[f"{T4}/eastus-1/on-demand"].available
    assert not offers[f"{T4}/eastus-1/spot"].available
    assert offers[f"{T4_BIG}/eastus-2/on-demand"].available


def test_a_size_restricted_in_the_whole_location_is_unavailable(arm: FakeArm) -> None:
    arm.state.restrict(T4_BIG)
    assert not by_key(azure_provider(arm).offerings())[f"{T4_BIG}/eastus-2/on-demand"].available


def test_a_multi_zone_pool_stays_available_while_one_of_its_zones_is_open(arm: FakeArm) -> None:
    arm.state.restrict(A100, zones=("1", "2"))
    assert by_key(azure_provider(arm).offerings())[f"{A100}//on-demand"].available
    arm.state.restrict(A100, zones=("3",))
    assert not by_key(azure_provider(arm).offerings())[f"{A100}//on-demand"].available


def test_spot_and_pay_as_you_go_prices_come_from_the_price_sheet_without_windows_or_low_priority(
    arm: FakeArm,
) -> None:
    offers = by_key(azure_provider(arm).offerings())
    regular, spot = offers[f"{T4}/eastus-1/on-demand"], offers[f"{T4}/eastus-1/spot"]
    assert (regular.price, spot.price) == (0.526, 0.062699)
    assert regular.price_source == spot.price_source == API
    assert offers[f"{A100}//on-demand"].price == 3.673


def test_the_price_sheet_is_read_page_by_page(arm: FakeArm) -> None:
    arm.price_page_size = 7
    offers = by_key(azure_provider(arm).offerings())
    pages = arm.calls("GET", "/api/retail/prices")
    assert len(pages) > 5
    assert pages[-1].query.get("$skip")  # later pages came from NextPageLink
    assert offers[f"{CPU}/eastus-1/on-demand"].price == 0.192


def test_prices_are_cached_until_the_refresh_interval_passes(arm: FakeArm) -> None:
    clock = Clock()
    config = azure_config(arm, azure={"priceRefreshInterval": "1h"})
    provider = azure_provider(arm, config, clock=clock)
    provider.offerings()
    clock.now += 1800
    provider.offerings()
    assert len(arm.calls("GET", "/api/retail/prices")) == 1
    clock.now += 1801
    provider.offerings()
    assert len(arm.calls("GET", "/api/retail/prices")) == 2


def test_a_price_sheet_outage_keeps_the_last_prices(arm: FakeArm) -> None:
    clock = Clock()
    provider = azure_provider(arm, clock=clock)
    provider.offerings()
    good_reads = len(arm.calls("GET", "/api/retail/prices"))
    arm.prices_down = True
    clock.now += 7200
    offer = by_key(provider.offerings())[f"{T4}/eastus-1/on-demand"]
    during_outage = arm.calls("GET", "/api/retail/prices")[good_reads:]
    assert during_outage and {r.status for r in during_outage} == {503}
    assert (offer.price, offer.price_source) == (0.526, API)


def test_without_the_price_sheet_the_catalog_file_prices_offerings_and_says_so(
    arm: FakeArm, tmp_path: Path
) -> None:
    catalog = write_catalog(tmp_path, [f"azure,eastus,{T4},4,28672,1,T4,x86_64,0.5,0.06"])
    arm.prices_down = True
    config = azure_config(arm, azure={"catalogFallback": str(catalog)})
    offers = by_key(azure_provider(arm, config).offerings())
    regular = offers[f"{T4}/eastus-1/on-demand"]
    assert (regular.price, regular.price_source) == (
        0.5,
        "catalog file azure-eastus.csv (Retail Prices API unavailable)",
    )
    assert offers[f"{T4}/eastus-1/spot"].price == 0.06
    assert f"{CPU}/eastus-1/on-demand" not in offers  # priced by neither


def test_a_size_missing_from_the_price_sheet_is_priced_from_the_catalog_file(
    arm: FakeArm, tmp_path: Path
) -> None:
    catalog = write_catalog(tmp_path, [f"azure,eastus,{A100},24,225280,1,A100,x86_64,3.5,"])
    arm.prices = [p for p in arm.prices if p["armSkuName"] != A100]
    config = azure_config(arm, azure={"catalogFallback": str(catalog)})
    offers = by_key(azure_provider(arm, config).offerings())
    assert (
        offers[f"{A100}//on-demand"].price_source
        == "catalog file azure-eastus.csv (not in the Retail Prices API)"
    )
    assert offers[f"{T4}/eastus-1/on-demand"].price_source == API


def test_when_arm_is_unreachable_the_catalog_file_stands_in_for_the_offerings(
    arm: FakeArm, tmp_path: Path
) -> None:
    catalog = write_catalog(tmp_path, [f"azure,eastus,{T4},4,28672,1,T4,x86_64,0.5,0.06"])
    config = azure_config(arm, azure={"catalogFallback": str(catalog), "endpoint": "https://127.0.0.1:9"})
    offers = azure_provider(arm, config, connect_retries=0).offerings()
    assert {(o.instance_type, o.capacity_type, o.price) for o in offers} == {
        (T4, "on-demand", 0.5),
        (T4, "spot", 0.06),
    }
    assert {o.price_source for o in offers} == {
        "catalog file azure-eastus.csv (Azure Resource Manager unavailable)"
    }


def test_when_arm_is_unreachable_without_a_catalog_file_offerings_fail_with_a_provider_error(
    arm: FakeArm,
) -> None:
    config = azure_config(arm, azure={"endpoint": "https://127.0.0.1:9"})
    with pytest.raises(ProviderError, match="Resource SKUs"):
        azure_provider(arm, config, connect_retries=0).offerings()


def test_a_template_offers_every_priced_size_of_the_location_in_both_capacity_types(arm: FakeArm) -> None:
    config = azure_config(arm, azure={"scaleSets": None, "spotScaleSets": None, "templateScaleSet": TEMPLATE})
    offers = by_key(azure_provider(arm, config).offerings())
    assert f"{A100}/eastus-2/spot" in offers and f"{A100}/eastus-2/on-demand" in offers
    partial = offers["Standard_NV6ads_A10_v5/eastus-2/on-demand"]
    assert (partial.gpu_model, partial.gpu_count, round(partial.gpu_fraction, 3)) == ("A10", 1, 0.167)
    assert "Standard_ND96isr_MI300X_v5/eastus-2/on-demand" not in offers  # no price anywhere


def test_a_flexible_scale_set_offers_each_of_its_zones(arm: FakeArm) -> None:
    config = azure_config(arm, azure={"scaleSets": {T4_FLEX: FLEX}, "spotScaleSets": {T4_FLEX: FLEX}})
    keys = {o.key for o in azure_provider(arm, config).offerings()}
    assert keys == {f"{T4_FLEX}/eastus-{z}/{c}" for z in "123" for c in ("on-demand", "spot")}


def test_configured_zones_limit_the_offerings(arm: FakeArm) -> None:
    config = azure_config(
        arm, azure={"scaleSets": {T4_FLEX: FLEX}, "spotScaleSets": None}, zones=["eastus-2"]
    )
    assert {o.zone for o in azure_provider(arm, config).offerings()} == {"eastus-2"}


# --- Spot pools: read from the scale set's model ---------------------------------------------------------

ONLY_SCALE_SETS = {"scaleSets": {T4: POOL_T4_SPOT, T4_BIG: POOL_T4_BIG}, "spotScaleSets": None}


def test_a_spot_node_pool_listed_under_scale_sets_is_the_spot_pool_of_its_size(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure=ONLY_SCALE_SETS))
    offered = {(o.instance_type, o.capacity_type) for o in provider.offerings()}
    assert offered == {(T4, "spot"), (T4_BIG, "on-demand")}

    spot = next(o for o in provider.offerings() if o.instance_type == T4)
    instance = provider.launch(LaunchRequest("tok-s", (spot,), {}, (), {}))

    assert (instance.capacity_type, instance.id) == ("spot", f"{POOL_T4_SPOT}/0")
    assert arm.state.scale_sets[POOL_T4_SPOT].capacity == 1


def test_spot_scale_sets_remains_the_explicit_way_and_gives_a_size_both_pools(arm: FakeArm) -> None:
    offered = {(o.instance_type, o.capacity_type) for o in azure_provider(arm).offerings()}
    assert {(T4, "on-demand"), (T4, "spot")} <= offered


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ({"evictionPolicy": "Deallocate"}, "evictionPolicy is Deallocate, not Delete"),
        ({"evictionPolicy": None}, "evictionPolicy is Deallocate, not Delete"),  # Azure's default
        ({"billingProfile": {"maxPrice": 0.2}}, "billingProfile.maxPrice is 0.2, not -1"),
    ],
)
def test_a_spot_pool_that_would_deallocate_or_bid_is_refused_with_the_reason(
    arm: FakeArm, model: dict[str, Any], reason: str
) -> None:
    profile = arm.state.scale_sets[POOL_T4_SPOT].profile
    for key, value in model.items():
        if value is None:
            profile.pop(key)
        else:
            profile[key] = value
    for section in (ONLY_SCALE_SETS, {}):
        with capture_logs() as logs:
            offered = azure_provider(arm, azure_config(arm, azure=section)).offerings()
        assert (T4, "spot") not in {(o.instance_type, o.capacity_type) for o in offered}
        [refusal] = [e for e in logs if e["event"] == "azure_spot_scale_set_refused"]
        assert refusal["scale_set"] == POOL_T4_SPOT and refusal["reason"].startswith(reason)


def test_a_regular_pool_under_spot_scale_sets_is_not_sold_as_spot(arm: FakeArm) -> None:
    section = {"scaleSets": {T4_BIG: POOL_T4_BIG}, "spotScaleSets": {T4: POOL_T4}}
    offered = {
        (o.instance_type, o.capacity_type)
        for o in azure_provider(arm, azure_config(arm, azure=section)).offerings()
    }
    assert offered == {(T4_BIG, "on-demand")}
