"""GcpProvider.offerings() against the fake Compute Engine and Cloud Billing Catalog (unmodified clients)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import ProviderError
from tests.fakes.gcp_cloud import FakeGcp, make_provider
from tests.fakes.gcp_fixtures import SAMPLE, attachable_gpu_prices, machines
from tests.fakes.gcp_http import Fault

if TYPE_CHECKING:
    from collections.abc import Iterator

    from autoscaler.core.offering import Offering

LIST = machines()
GPU_PRICES = attachable_gpu_prices()
needs_gpu_prices = pytest.mark.skipif(
    not GPU_PRICES, reason="shared GCP attachable-GPU price file not present"
)


@pytest.fixture(scope="module")
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        yield fake


@pytest.fixture(scope="module")
def offerings(gcp: FakeGcp) -> dict[tuple[str, str, str], Offering]:
    found = make_provider(gcp).offerings()
    return {(o.instance_type, o.zone, o.capacity_type): o for o in found}


def test_every_machine_type_of_every_zone_is_offered_spot_and_on_demand(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        for capacity in ("spot", "on-demand"):
            assert ("n1-standard-8", zone, capacity) in offerings
            assert ("e2-standard-4", zone, capacity) in offerings


def test_built_in_gpus_carry_the_planners_model_and_memory(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    a100 = offerings[("a2-highgpu-1g", "us-central1-a", "on-demand")]
    h100 = offerings[("a3-highgpu-8g", "us-central1-a", "on-demand")]
    l4 = offerings[("g2-standard-4", "us-central1-b", "spot")]
    assert (a100.gpu_count, a100.gpu_model, a100.gpu_memory_mib, a100.gpu_vendor) == (
        1,
        "A100",
        40960,
        "NVIDIA",
    )
    assert (h100.gpu_count, h100.gpu_model, h100.gpu_memory_mib, h100.vcpu) == (8, "H100", 81920, 208)
    assert (l4.gpu_count, l4.gpu_model) == (1, "L4")


def test_a_machine_type_is_offered_only_in_the_zones_that_list_it(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    assert ("a3-highgpu-8g", "us-central1-a", "spot") in offerings
    assert ("a3-highgpu-8g", "us-central1-b", "spot") not in offerings


@needs_gpu_prices
def test_n1_machine_types_are_offered_with_each_valid_count_of_attachable_gpus(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    t4 = offerings[("n1-standard-8_nvidia-tesla-t4x1", "us-central1-a", "on-demand")]
    assert (t4.vcpu, t4.memory_mib, t4.gpu_count, t4.gpu_model, t4.gpu_memory_mib) == (
        8,
        30720,
        1,
        "T4",
        16384,
    )
    assert ("n1-standard-8_nvidia-tesla-t4x4", "us-central1-a", "spot") in offerings
    assert (
        "n1-standard-8_nvidia-tesla-v100x1",
        "us-central1-a",
        "spot",
    ) in offerings  # 8 vCPU ≤ 12 for 1×V100
    assert (
        "n1-standard-16_nvidia-tesla-v100x1",
        "us-central1-a",
        "spot",
    ) not in offerings  # too big for 1×V100
    assert not any(k[0].startswith(("e2-", "n2-", "g2-")) and "_" in k[0] for k in offerings)


def test_shared_core_and_virtual_workstation_types_are_not_offered(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    assert not any(k[0] == "e2-micro" or "vws" in k[0] for k in offerings)


def test_arm_machine_types_are_offered_as_arm64(offerings: dict[tuple[str, str, str], Offering]) -> None:
    assert offerings[("t2a-standard-4", "us-central1-a", "on-demand")].arch.value == "arm64"


@pytest.mark.parametrize(
    "name", ["e2-standard-4", "n1-standard-8", "n2-standard-8", "g2-standard-4", "a2-highgpu-1g"]
)
def test_spot_and_on_demand_prices_are_the_list_prices_built_from_the_regions_skus(
    offerings: dict[tuple[str, str, str], Offering], name: str
) -> None:
    on_demand = offerings[(name, "us-central1-a", "on-demand")]
    spot = offerings[(name, "us-central1-a", "spot")]
    assert on_demand.price == pytest.approx(LIST[name].on_demand, rel=1e-4)
    assert spot.price == pytest.approx(LIST[name].spot, rel=1e-4)
    assert spot.price < on_demand.price
    assert on_demand.price_source == spot.price_source == "billing catalog"


@needs_gpu_prices
def test_an_attached_gpu_adds_its_own_sku_price_to_the_machine_price(
    offerings: dict[tuple[str, str, str], Offering],
) -> None:
    on_demand_gpu, spot_gpu = GPU_PRICES["nvidia-tesla-t4"]
    machine = LIST["n1-standard-8"]
    assert machine.spot is not None
    assert offerings[
        ("n1-standard-8_nvidia-tesla-t4x2", "us-central1-b", "on-demand")
    ].price == pytest.approx(machine.on_demand + 2 * on_demand_gpu, rel=1e-4)
    assert offerings[("n1-standard-8_nvidia-tesla-t4x2", "us-central1-b", "spot")].price == pytest.approx(
        machine.spot + 2 * spot_gpu, rel=1e-4
    )


def test_prices_are_read_once_and_refreshed_after_the_refresh_interval(gcp: FakeGcp) -> None:
    now = [1000.0]
    provider = make_provider(gcp, clock=lambda: now[0], gcp={"priceRefreshInterval": "1h"})
    before = gcp.billing.sku_lists
    provider.offerings()
    now[0] += 1800
    provider.offerings()
    assert gcp.billing.sku_lists == before + 1
    now[0] += 1801
    provider.offerings()
    assert gcp.billing.sku_lists == before + 2


def test_when_billing_is_unreachable_the_catalog_file_prices_the_offerings_and_says_so() -> None:
    with FakeGcp() as gcp:
        provider = make_provider(
            gcp, gcp={"billingEndpoint": "http://127.0.0.1:9", "catalogFallback": str(SAMPLE)}
        )
        found = {(o.instance_type, o.zone, o.capacity_type): o for o in provider.offerings()}
    n1 = found[("n1-standard-8", "us-central1-a", "spot")]
    assert n1.price == pytest.approx(0.13402)
    assert n1.price_source == "catalog file gcp-us-central1.csv"
    assert ("n1-highmem-8", "us-central1-a", "spot") not in found  # the file does not price it


def test_when_billing_is_unreachable_and_there_is_no_fallback_offerings_fail_with_a_clear_error() -> None:
    with FakeGcp() as gcp:
        provider = make_provider(gcp, gcp={"billingEndpoint": "http://127.0.0.1:9"})
        with pytest.raises(ProviderError, match=r"no priced offerings .* set gcp.catalogFallback"):
            provider.offerings()


def test_a_billing_outage_after_a_good_read_keeps_the_billing_prices() -> None:
    now = [0.0]
    with FakeGcp() as gcp:
        # A short request timeout bounds the client's retries of the outage's 503s.
        settings = {"priceRefreshInterval": "1m", "requestTimeout": "1s"}
        provider = make_provider(gcp, clock=lambda: now[0], gcp=settings)
        first = {o.key: o.price for o in provider.offerings()}
        good_reads = len(gcp.billing_server.calls)
        gcp.billing_server.faults.append(Fault(503, "backendError", "billing is down", count=1_000_000))
        now[0] += 120
        again = provider.offerings()
        assert gcp.billing_server.calls[good_reads:]  # the refresh was tried, and failed
    assert {o.key: o.price for o in again} == first
    assert {o.price_source for o in again} == {"billing catalog"}
