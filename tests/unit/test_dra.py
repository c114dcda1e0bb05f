"""A GPU offering's DRA devices, and whether a claim's request fits a node of that offering."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.dra import AllocationMode, DeviceClass, DeviceRequest, DeviceSubRequest
from autoscaler.core.dra_devices import Match, match_devices, offering_devices
from autoscaler.core.dra_selectors import Alternatives, Unsupported, Version

if TYPE_CHECKING:
    from autoscaler.core.dra_devices import OfferingDevices

# The DeviceClasses NVIDIA's DRA driver installs (deployments/helm/.../deviceclass-*.yaml).
CLASSES = {
    "gpu.nvidia.com": DeviceClass(
        "gpu.nvidia.com",
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",),
        "nvidia.com/gpu",
    ),
    "mig.nvidia.com": DeviceClass(
        "mig.nvidia.com",
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",),
    ),
}
PRODUCT = "device.attributes['gpu.nvidia.com'].productName"
P4D = offering_devices("A100", 40960, 8)  # p4d.24xlarge
G6_12X = offering_devices("L4", 22888, 4)  # g6.12xlarge
P5 = offering_devices("H100", 81920, 8)  # p5.48xlarge


def gpus(count: int = 1, *selectors: str, mode: AllocationMode = AllocationMode.EXACT_COUNT) -> DeviceRequest:
    return DeviceRequest("gpu", exactly=DeviceSubRequest("gpu", "gpu.nvidia.com", mode, count, selectors))


def test_an_offering_publishes_its_gpus_with_what_nvml_would_report() -> None:
    assert G6_12X.count == 4
    assert G6_12X.attributes == {
        "gpu.nvidia.com": {
            "type": "gpu",
            "productName": "NVIDIA L4",
            "architecture": "Ada Lovelace",
            "cudaComputeCapability": Version.parse("8.9.0"),
        }
    }
    assert G6_12X.capacity == {"gpu.nvidia.com": {"memory": 22888 * 2**20}}


def test_an_offering_whose_form_factor_the_catalog_does_not_tell_has_alternative_product_names() -> None:
    assert P4D.attributes["gpu.nvidia.com"]["productName"] == Alternatives(
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB")
    )


def test_an_unknown_gpu_model_publishes_only_its_type_and_memory() -> None:
    devices = offering_devices("Radeon Pro V520", 8192, 1)
    assert devices.attributes == {"gpu.nvidia.com": {"type": "gpu"}}


def test_a_claim_for_two_gpus_takes_two_of_an_eight_gpu_node() -> None:
    assert match_devices(gpus(2), CLASSES, P4D) == Match(2, gpus(2).exactly)


def test_a_claim_for_more_gpus_than_the_node_has_does_not_fit() -> None:
    match = match_devices(gpus(16), CLASSES, P4D)
    assert isinstance(match, Match) and not match.fits
    assert match.reason == "gpu.nvidia.com: 16 devices wanted, 8 on the node"


def test_allocation_mode_all_takes_every_gpu_of_the_node() -> None:
    request = gpus(0, mode=AllocationMode.ALL)
    assert match_devices(request, CLASSES, P5) == Match(8, request.exactly)


def _match(request: DeviceRequest, devices: OfferingDevices) -> Match:
    """The match of a request whose selectors tidal can evaluate."""
    result = match_devices(request, CLASSES, devices)
    assert isinstance(result, Match)
    return result


def test_a_product_name_selector_picks_the_offering_it_names() -> None:
    request = gpus(2, f"{PRODUCT}.matches('H100')")
    assert match_devices(request, CLASSES, P5) == Match(2, request.exactly)
    assert not _match(request, G6_12X).fits


def test_an_exact_product_name_the_catalog_cannot_confirm_is_unsupported() -> None:
    result = match_devices(gpus(1, f"{PRODUCT} == 'NVIDIA A100-SXM4-40GB'"), CLASSES, P4D)
    assert isinstance(result, Unsupported) and "depends on gpu.nvidia.com/productName" in result.reason


def test_a_memory_selector_is_checked_against_the_offerings_gpu_memory() -> None:
    request = gpus(1, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0")
    assert _match(request, P4D).fits
    assert not _match(request, G6_12X).fits


def test_a_selector_on_an_attribute_only_a_running_node_has_is_unsupported() -> None:
    result = match_devices(gpus(1, "device.attributes['gpu.nvidia.com'].uuid == 'GPU-1'"), CLASSES, P5)
    assert isinstance(result, Unsupported)
    assert result.reason.startswith("request 'gpu': selector")


def test_a_mig_request_does_not_fit_whole_gpus() -> None:
    request = DeviceRequest("mig", exactly=DeviceSubRequest("mig", "mig.nvidia.com"))
    match = match_devices(request, CLASSES, P5)
    assert isinstance(match, Match) and not match.fits


def test_a_device_class_that_does_not_exist_is_unsupported() -> None:
    request = DeviceRequest("gpu", exactly=DeviceSubRequest("gpu", "gpu.example.com"))
    assert match_devices(request, CLASSES, P5) == Unsupported(
        "request 'gpu': DeviceClass 'gpu.example.com' does not exist"
    )


def test_first_available_takes_the_first_alternative_the_node_can_satisfy() -> None:
    request = DeviceRequest(
        "gpu",
        first_available=(
            DeviceSubRequest("gpu/h100", "gpu.nvidia.com", selectors=(f"{PRODUCT}.matches('H100')",)),
            DeviceSubRequest("gpu/l4", "gpu.nvidia.com", count=2, selectors=(f"{PRODUCT}.matches('L4')",)),
        ),
    )
    assert match_devices(request, CLASSES, P5) == Match(1, request.first_available[0])
    assert match_devices(request, CLASSES, G6_12X) == Match(2, request.first_available[1])


def test_an_admin_access_request_fits_without_taking_a_device() -> None:
    request = DeviceRequest(
        "monitor", exactly=DeviceSubRequest("monitor", "gpu.nvidia.com", admin_access=True)
    )
    match = match_devices(request, CLASSES, P5)
    assert isinstance(match, Match) and match.fits and match.devices == 0
