"""VM shapes from Resource SKUs, and the GPU each size name stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.model import Arch
from providers.azure.skus import gpu_spec, shapes_from_skus
from tests.fakes.azure_catalog import SIZES_BY_NAME, disk_sku, sku_resource

if TYPE_CHECKING:
    from typing import Any


@pytest.mark.parametrize(
    ("size", "sku_gpus", "expected"),
    [
        ("Standard_NC4as_T4_v3", 1, ("T4", "NVIDIA", 1, 16384, 1.0)),
        ("Standard_NC24s_v3", 4, ("V100", "NVIDIA", 4, 16384, 4.0)),
        ("Standard_ND40rs_v2", 8, ("V100", "NVIDIA", 8, 32768, 8.0)),
        ("Standard_ND96asr_v4", 8, ("A100", "NVIDIA", 8, 40960, 8.0)),
        ("Standard_ND96amsr_A100_v4", 8, ("A100", "NVIDIA", 8, 81920, 8.0)),
        ("Standard_NC24ads_A100_v4", 1, ("A100", "NVIDIA", 1, 81920, 1.0)),
        ("Standard_ND96isr_H100_v5", 8, ("H100", "NVIDIA", 8, 81920, 8.0)),
        ("Standard_NC40ads_H100_v5", 1, ("H100 NVL", "NVIDIA", 1, 96256, 1.0)),
        ("Standard_NCC40ads_H100_v5", 1, ("H100 NVL", "NVIDIA", 1, 96256, 1.0)),
        ("Standard_NC8ads_A10_v4", 1, ("A10", "NVIDIA", 1, 24576, 1.0)),
        ("Standard_NV6ads_A10_v5", 1, ("A10", "NVIDIA", 1, 4096, 1 / 6)),
        ("Standard_NV18ads_A10_v5", 1, ("A10", "NVIDIA", 1, 12288, 0.5)),
        ("Standard_NV36ads_A10_v5", 1, ("A10", "NVIDIA", 1, 24576, 1.0)),
        ("Standard_NV72ads_A10_v5", 2, ("A10", "NVIDIA", 2, 24576, 2.0)),
        ("Standard_ND96isr_MI300X_v5", 0, ("MI300X", "AMD", 8, 196608, 8.0)),
    ],
)
def test_the_gpu_model_comes_from_the_size_name(
    size: str, sku_gpus: int, expected: tuple[object, ...]
) -> None:
    spec = gpu_spec(size, sku_gpus)
    assert spec is not None
    assert (spec.model, spec.vendor, spec.count, spec.memory_mib, spec.fraction) == expected


def test_a_cpu_size_has_no_gpu() -> None:
    assert gpu_spec("Standard_D4s_v5", 0) is None


def test_a_gpu_size_the_table_does_not_know_keeps_the_count_resource_skus_give() -> None:
    spec = gpu_spec("Standard_NX99zz_v9", 4)
    assert spec is not None and (spec.model, spec.count) == ("", 4)


def sku(name: str, **kw: Any) -> dict[str, Any]:
    return sku_resource(SIZES_BY_NAME[name], "eastus", **kw)


def test_a_shape_has_vcpus_memory_arch_zones_and_spot_capability() -> None:
    shapes = shapes_from_skus(
        [sku("Standard_NC24ads_A100_v4"), sku("Standard_D4ps_v5", zones=("2",))], "eastus"
    )
    a100, arm64 = shapes["Standard_NC24ads_A100_v4"], shapes["Standard_D4ps_v5"]
    assert (a100.vcpu, a100.memory_mib, a100.zones, a100.spot_capable) == (
        24,
        220 * 1024,
        ("1", "2", "3"),
        True,
    )
    assert a100.gpu is not None and a100.gpu.model == "A100"
    assert (arm64.arch, arm64.zones, arm64.gpu) == (Arch.ARM64, ("2",), None)


def test_zone_and_location_restrictions_make_zones_unavailable() -> None:
    zonal, whole = sku("Standard_NC4as_T4_v3"), sku("Standard_D4s_v5")
    zonal["restrictions"] = [
        {
            "type": "Zone",
            "values": ["eastus"],
            "restrictionInfo": {"locations": ["eastus"], "zones": ["3"]},
            "reasonCode": "NotAvailableForSubscription",
        }
    ]
    whole["restrictions"] = [
        {
            "type": "Location",
            "values": ["eastus"],
            "restrictionInfo": {"locations": ["eastus"]},
            "reasonCode": "QuotaId",
        }
    ]
    shapes = shapes_from_skus([zonal, whole], "eastus")
    t4 = shapes["Standard_NC4as_T4_v3"]
    assert [t4.zone_available(z) for z in "123"] == [True, True, False]
    assert t4.zone_available("")  # somewhere in the location is fine
    assert not shapes["Standard_D4s_v5"].zone_available("1")


def test_other_resource_types_and_locations_are_left_out() -> None:
    elsewhere = sku_resource(SIZES_BY_NAME["Standard_D8s_v5"], "westus2")
    shapes = shapes_from_skus([disk_sku("eastus"), elsewhere, sku("Standard_D4s_v5")], "EastUS")
    assert list(shapes) == ["Standard_D4s_v5"]
