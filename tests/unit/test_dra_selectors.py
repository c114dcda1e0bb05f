"""The CEL subset of DRA device selectors: what NVIDIA's driver documents and users write is evaluated,
anything else is Unsupported with its reason, never a guess."""

from __future__ import annotations

from fractions import Fraction

import pytest

from autoscaler.core.dra_selectors import Alternatives, AttributeValue, Unsupported, Version, check, evaluate
from autoscaler.core.dra_selectors import evaluate_all as every

GIB = 2**30
# An A100 40GB as NVIDIA's DRA driver publishes it (cmd/gpu-kubelet-plugin/deviceinfo.go).
A100: dict[str, dict[str, AttributeValue]] = {
    "gpu.nvidia.com": {
        "type": "gpu",
        "uuid": "GPU-4a1c9e0d-0e7c-8b1a-2e6f-2d7c0b0a9f11",
        "productName": "NVIDIA A100-SXM4-40GB",
        "brand": "Nvidia",
        "architecture": "Ampere",
        "cudaComputeCapability": Version.parse("8.0.0"),
        "driverVersion": Version.parse("550.90.7"),
        "index": 0,
    }
}
A100_CAPACITY = {"gpu.nvidia.com": {"memory": 40 * GIB}}
GPU = 'device.attributes["gpu.nvidia.com"]'
MEMORY = 'device.capacity["gpu.nvidia.com"].memory'


def matches(expr: str) -> bool | Unsupported:
    return evaluate(expr, A100, A100_CAPACITY)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # The DeviceClass selectors of NVIDIA's Helm chart.
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'", False),
        (f'{GPU}.productName == "NVIDIA A100-SXM4-40GB"', True),
        (f'{GPU}.productName == "NVIDIA H100 80GB HBM3"', False),
        (f'{GPU}.productName != "NVIDIA H100 80GB HBM3"', True),
        (f'{GPU}.productName.matches("A100")', True),
        (f'{GPU}.productName.matches("^NVIDIA (A100|H100)")', True),
        (f'{GPU}.productName.startsWith("NVIDIA H")', False),
        (f'{GPU}.productName.endsWith("40GB")', True),
        (f'{GPU}.productName.lowerAscii().contains("a100")', True),
        (f'{GPU}["productName"] == "NVIDIA A100-SXM4-40GB"', True),
        (f'{GPU}.architecture in ["Ampere", "Hopper"]', True),
        (f'{GPU}.architecture in ["Hopper", "Blackwell"]', False),
        (f'{MEMORY}.compareTo(quantity("40Gi")) >= 0', True),
        (f'{MEMORY}.compareTo(quantity("80Gi")) >= 0', False),
        (f'{MEMORY}.isGreaterThan(quantity("39Gi"))', True),
        (f'{MEMORY}.isLessThan(quantity("40Gi"))', False),
        (f'{GPU}.cudaComputeCapability.isGreaterThan(semver("7.5.0"))', True),
        (f'{GPU}.cudaComputeCapability.compareTo(semver("9.0.0")) < 0', True),
        (f"{GPU}.index < 4", True),
        (f'!({GPU}.architecture == "Hopper")', True),
        (f'{GPU}.architecture == "Hopper" || {GPU}.productName.matches("A100")', True),
        (
            f'({GPU}.architecture == "Hopper" || {GPU}.architecture == "Ampere") && {MEMORY}.compareTo(quantity("40Gi")) == 0',
            True,
        ),
        ('"productName" in device.attributes["gpu.nvidia.com"]', True),
    ],
)
def test_a_selector_in_the_subset_is_evaluated(expr: str, expected: bool) -> None:
    assert matches(expr) is expected


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        (f"{GPU}.index + 1 > 2", "arithmetic (+)"),
        (f'{GPU}.architecture == "Ampere" ? true : false', "the conditional operator ?:"),
        (f"has({GPU}.productName)", "the macro has()"),
        (f"{GPU}.productName.size() > 3", "the method size() on str"),
        (f'{GPU}.productName.matches("(?=A)A100")', "lookaround, backreference or \\p class"),
        (f"{MEMORY} > 1.5", "the floating-point number 1.5"),
        ('device.attributes["gpu.nvidia.com"].productName == gpu', "the identifier 'gpu'"),
        (f'{GPU}.productName == "A" == true', "chained comparisons"),
        (f"{GPU}.architecture == 8", "comparing str with int"),
        (f'{MEMORY} >= quantity("40Gi")', "on a quantity or version (CEL compares them with compareTo())"),
        (f'{GPU}.cudaComputeCapability == semver("8.0.0")', "on a quantity or version"),
        (f'{GPU}.productName.exists(c, c == "A")', "the macro exists()"),
        ("[1, 2].all(x, x > 0)", "the macro all()"),
        ("device.attributes.size() > 0", "the method size() on _Domains"),
        (f'{GPU}.productName == "A100', "cannot read"),
        (f"{GPU}.productName.startsWith()", "startsWith() with 0 argument(s)"),
        (f'{MEMORY}.compareTo(quantity("1Gi"), quantity("2Gi")) > 0', "compareTo() with 2 argument(s)"),
    ],
)
def test_a_selector_outside_the_subset_is_unsupported_with_the_reason(expr: str, reason: str) -> None:
    result = matches(expr)
    assert isinstance(result, Unsupported)
    assert expr in result.reason
    if reason:
        assert reason in result.reason


def test_an_attribute_tidal_does_not_know_for_the_device_is_unsupported_not_false() -> None:
    result = evaluate(f'{GPU}.uuid == "GPU-1"', {"gpu.nvidia.com": {"type": "gpu"}})
    assert result == Unsupported(
        f"selector '{GPU}.uuid == \"GPU-1\"': attribute gpu.nvidia.com/uuid is not known for this device"
    )


def test_an_attribute_of_another_domain_is_unsupported() -> None:
    result = matches('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"')
    assert isinstance(result, Unsupported) and "resource.kubernetes.io/pcieRoot is not known" in result.reason


def test_and_absorbs_what_it_cannot_evaluate_when_the_other_side_is_false() -> None:
    assert matches(f'{GPU}.architecture == "Hopper" && {GPU}.pcie == "x"') is False
    assert matches(f'{GPU}.pcie == "x" && {GPU}.architecture == "Hopper"') is False


def test_or_absorbs_what_it_cannot_evaluate_when_the_other_side_is_true() -> None:
    assert matches(f'{GPU}.pcie == "x" || {GPU}.architecture == "Ampere"') is True


def test_and_with_an_unknown_side_and_a_true_side_stays_unsupported() -> None:
    assert isinstance(matches(f'{GPU}.pcie == "x" && {GPU}.architecture == "Ampere"'), Unsupported)


def test_an_unsupported_result_is_never_taken_for_a_match() -> None:
    assert not Unsupported("anything")


def test_alternatives_that_agree_give_the_answer() -> None:
    attributes = {
        "gpu.nvidia.com": {"productName": Alternatives(("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"))}
    }
    assert evaluate(f'{GPU}.productName.matches("A100")', attributes) is True
    assert evaluate(f'{GPU}.productName.matches("H100")', attributes) is False


def test_alternatives_that_disagree_are_unsupported_naming_the_attribute() -> None:
    attributes = {
        "gpu.nvidia.com": {"productName": Alternatives(("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"))}
    }
    result = evaluate(f'{GPU}.productName == "NVIDIA A100-SXM4-80GB"', attributes)
    assert isinstance(result, Unsupported) and "depends on gpu.nvidia.com/productName" in result.reason


def test_capacity_given_as_whole_bytes_compares_with_quantities() -> None:
    assert evaluate(
        f'{MEMORY}.compareTo(quantity("16Gi")) == 0', A100, {"gpu.nvidia.com": {"memory": Fraction(16 * GIB)}}
    )


def test_of_several_unsupported_selectors_the_first_is_reported() -> None:
    result = every([f'{GPU}.pcie == "x"', f'{GPU}.serial == "y"'], A100, A100_CAPACITY)
    assert isinstance(result, Unsupported) and "pcie" in result.reason


def test_every_selector_must_match_and_false_wins_over_unsupported() -> None:
    selectors = [f'{GPU}.pcie == "x"', f'{GPU}.architecture == "Hopper"']
    assert every(selectors, A100, A100_CAPACITY) is False
    assert isinstance(every([f'{GPU}.pcie == "x"', f'{GPU}.type == "gpu"'], A100, A100_CAPACITY), Unsupported)
    assert every([f'{GPU}.type == "gpu"'], A100, A100_CAPACITY) is True


def test_check_tells_syntax_outside_the_subset_without_a_device() -> None:
    assert check(f'{GPU}.productName.matches("A100")') is None
    assert isinstance(check(f"{GPU}.index * 2 > 1"), Unsupported)


def test_semantic_versions_order_pre_releases_first() -> None:
    assert Version.parse("1.0.0-rc1") < Version.parse("1.0.0") < Version.parse("1.0.1")
    assert str(Version.parse("8.9.0")) == "8.9.0"
    with pytest.raises(ValueError, match="is not a semantic version"):
        Version.parse("8.9")
