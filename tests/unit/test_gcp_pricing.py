"""Cloud Billing Catalog SKUs → per-family core/RAM and per-GPU prices → machine prices."""

import pytest
from google.cloud import billing_v1

from autoscaler.core.model import Arch
from providers.gcp.gpus import accelerator
from providers.gcp.pricing import book_from_skus, classify_sku
from providers.gcp.shapes import Shape

REGION = "us-central1"


def sku(
    description: str,
    price: float,
    *,
    usage: str = "OnDemand",
    unit: str = "h",
    region: str = REGION,
    family: str = "Compute",
) -> billing_v1.Sku:
    units, nanos = divmod(round(price * 1e9), 10**9)
    return billing_v1.Sku(
        description=description,
        category=billing_v1.Category(resource_family=family, usage_type=usage),
        service_regions=[region],
        pricing_info=[
            billing_v1.PricingInfo(
                pricing_expression=billing_v1.PricingExpression(
                    usage_unit=unit,
                    tiered_rates=[
                        billing_v1.PricingExpression.TierRate(
                            start_usage_amount=0,
                            unit_price={"currency_code": "USD", "units": units, "nanos": nanos},
                        )
                    ],
                )
            )
        ],
    )


N1 = [
    sku("N1 Predefined Instance Core running in Americas", 0.031611),
    sku("N1 Predefined Instance Ram running in Americas", 0.004237, unit="GiBy.h"),
    sku("Spot Preemptible N1 Predefined Instance Core running in Americas", 0.01115, usage="Preemptible"),
    sku(
        "Spot Preemptible N1 Predefined Instance Ram running in Americas",
        0.001494,
        usage="Preemptible",
        unit="GiBy.h",
    ),
    sku("Nvidia Tesla T4 GPU running in Americas", 0.35),
    sku(
        "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas", 0.11, usage="Preemptible"
    ),
]


@pytest.mark.parametrize(
    ("description", "usage", "unit", "key"),
    [
        ("E2 Instance Core running in Americas", "OnDemand", "h", ("core", "e2", "on-demand")),
        ("N2D AMD Instance Ram running in Americas", "OnDemand", "GiBy.h", ("ram", "n2d", "on-demand")),
        ("T2A Arm Instance Core running in Americas", "OnDemand", "h", ("core", "t2a", "on-demand")),
        ("Compute optimized Instance Core running in Americas", "OnDemand", "h", ("core", "c2", "on-demand")),
        ("Spot Preemptible A2 Instance Core running in Americas", "Preemptible", "h", ("core", "a2", "spot")),
        (
            "Nvidia Tesla A100 GPU running in Americas",
            "OnDemand",
            "h",
            ("gpu", "nvidia-tesla-a100", "on-demand"),
        ),
        (
            "Nvidia A100 80GB GPU running in Americas",
            "OnDemand",
            "h",
            ("gpu", "nvidia-a100-80gb", "on-demand"),
        ),
        (
            "Nvidia H100 80GB GPU running in Americas",
            "OnDemand",
            "h",
            ("gpu", "nvidia-h100-80gb", "on-demand"),
        ),
        (
            "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            "h",
            ("gpu", "nvidia-l4", "spot"),
        ),
    ],
)
def test_a_sku_tidal_prices_with_is_classified_by_part_family_and_capacity_type(
    description: str, usage: str, unit: str, key: tuple[str, ...]
) -> None:
    assert classify_sku(sku(description, 0.5, usage=usage, unit=unit), REGION) == (key, 0.5)


@pytest.mark.parametrize(
    "other",
    [
        sku("Commitment v1: N1 Predefined Instance Core in Americas for 1 Year", 0.02, usage="Commit1Yr"),
        sku("N1 Custom Instance Core running in Americas", 0.033),
        sku("N1 Sole Tenancy Instance Core running in Americas", 0.035),
        sku("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", 0.55),
        sku("N1 Predefined Instance Core running in Netherlands", 0.0348, region="europe-west4"),
        sku("Storage PD Capacity", 0.00005, family="Storage", unit="GiBy.mo"),
        sku("N1 Predefined Instance Ram running in Americas", 3.1, unit="GiBy.mo"),
    ],
)
def test_skus_for_other_regions_commitments_custom_sole_tenant_licences_and_storage_are_ignored(
    other: billing_v1.Sku,
) -> None:
    assert classify_sku(other, REGION) is None


C2 = [
    sku("Compute optimized Core running in Americas", 0.03398),
    sku("Compute optimized Ram running in Americas", 0.00455, unit="GiBy.h"),
    sku("Spot Preemptible Compute optimized Core running in Americas", 0.00971, usage="Preemptible"),
    sku(
        "Spot Preemptible Compute optimized Ram running in Americas",
        0.0013,
        usage="Preemptible",
        unit="GiBy.h",
    ),
]


@pytest.mark.parametrize(
    ("fixture", "key"),
    [
        (C2[0], ("core", "c2", "on-demand")),
        (C2[1], ("ram", "c2", "on-demand")),
        (C2[2], ("core", "c2", "spot")),
        (C2[3], ("ram", "c2", "spot")),
    ],
)
def test_c2_skus_are_named_compute_optimized_without_instance_and_price_the_c2_family(
    fixture: billing_v1.Sku, key: tuple[str, ...]
) -> None:
    assert classify_sku(fixture, REGION) == (key, pytest.approx(fixture_price(fixture)))  # type: ignore[comparison-overlap]


def test_a_c2_machine_is_priced_from_the_compute_optimized_skus() -> None:
    book = book_from_skus(C2, REGION)
    c2 = Shape("c2-standard-8", "c2-standard-8", "us-central1-a", 8, 32 * 1024, Arch.AMD64)
    assert book.price(c2, "on-demand") == pytest.approx(8 * 0.03398 + 32 * 0.00455, abs=1e-6)
    assert book.price(c2, "spot") == pytest.approx(8 * 0.00971 + 32 * 0.0013, abs=1e-6)


def fixture_price(fixture: billing_v1.Sku) -> float:
    money = fixture.pricing_info[0].pricing_expression.tiered_rates[0].unit_price
    price: float = money.units + money.nanos / 1e9
    return price


def test_a_machine_costs_its_vcpus_times_core_plus_gib_times_ram_plus_its_gpus() -> None:
    book = book_from_skus(N1, REGION)
    n1 = Shape("n1-standard-8", "n1-standard-8", "us-central1-a", 8, 30 * 1024, Arch.AMD64)
    t4 = accelerator("nvidia-tesla-t4")
    with_t4 = Shape(
        "n1-standard-8_nvidia-tesla-t4x2",
        "n1-standard-8",
        "us-central1-a",
        8,
        30 * 1024,
        Arch.AMD64,
        t4,
        2,
        True,
    )
    assert book.price(n1, "on-demand") == pytest.approx(0.379998, abs=1e-6)
    assert book.price(n1, "spot") == pytest.approx(0.13402, abs=1e-6)
    assert book.price(with_t4, "on-demand") == pytest.approx(0.379998 + 2 * 0.35, abs=1e-6)
    assert book.price(with_t4, "spot") == pytest.approx(0.13402 + 2 * 0.11, abs=1e-6)


def test_a_machine_whose_family_or_gpu_has_no_sku_has_no_price() -> None:
    book = book_from_skus(N1, REGION)
    assert book.price(Shape("e2-standard-4", "e2-standard-4", "z", 4, 16384), "on-demand") is None
    l4 = accelerator("nvidia-l4")
    assert (
        book.price(Shape("n1-x", "n1-standard-4", "z", 4, 15360, Arch.AMD64, l4, 1, True), "on-demand")
        is None
    )


def test_of_two_skus_for_the_same_part_the_plainer_description_wins() -> None:
    book = book_from_skus(
        [sku("N1 Predefined Instance Core running in Americas (preview tier)", 9.0), *N1], REGION
    )
    assert book.parts[("core", "n1", "on-demand")] == pytest.approx(0.031611)
