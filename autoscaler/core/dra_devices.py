"""The DRA devices a node of an offering will publish, and what a claim's request takes of them.

Apart from :mod:`autoscaler.core.dra`, the objects themselves: every snapshot carries those, while only a plan
with pods that name claims evaluates selectors (:mod:`autoscaler.core.dra_selectors`, CEL) against devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from autoscaler.core.dra import NVIDIA_DRIVER, AllocationMode, DeviceClass, DeviceRequest, DeviceSubRequest
from autoscaler.core.dra_selectors import Alternatives, AttributeValue, Unsupported, Version, evaluate_all

__all__ = ["Match", "OfferingDevices", "match_devices", "offering_devices"]


# --- what a node of an offering will publish ---------------------------------------------------------------

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class _GpuFacts:
    product_names: tuple[str, ...]  # NVML names; several when the catalog cannot tell the form factor apart
    architecture: str
    compute_capability: str


# (catalog model upper-cased without spaces, memory in GiB or 0 for any) → what NVML reports on such a GPU.
_GPU_FACTS: Mapping[tuple[str, int], _GpuFacts] = {
    ("T4", 0): _GpuFacts(("Tesla T4",), "Turing", "7.5.0"),
    ("T4G", 0): _GpuFacts(("NVIDIA T4G",), "Turing", "7.5.0"),
    ("V100", 16): _GpuFacts(("Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"), "Volta", "7.0.0"),
    ("V100", 32): _GpuFacts(("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB"), "Volta", "7.0.0"),
    ("A10G", 0): _GpuFacts(("NVIDIA A10G",), "Ampere", "8.6.0"),
    ("A10", 0): _GpuFacts(("NVIDIA A10",), "Ampere", "8.6.0"),
    ("A100", 40): _GpuFacts(("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), "Ampere", "8.0.0"),
    ("A100", 80): _GpuFacts(("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), "Ampere", "8.0.0"),
    ("L4", 0): _GpuFacts(("NVIDIA L4",), "Ada Lovelace", "8.9.0"),
    ("L40S", 0): _GpuFacts(("NVIDIA L40S",), "Ada Lovelace", "8.9.0"),
    ("H100", 80): _GpuFacts(("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"), "Hopper", "9.0.0"),
    ("H100NVL", 0): _GpuFacts(("NVIDIA H100 NVL",), "Hopper", "9.0.0"),
    ("H200", 0): _GpuFacts(("NVIDIA H200", "NVIDIA H200 NVL"), "Hopper", "9.0.0"),
    ("B200", 0): _GpuFacts(("NVIDIA B200",), "Blackwell", "10.0.0"),
}


@dataclass(frozen=True, slots=True)
class OfferingDevices:
    """The GPUs a node of an offering will publish through NVIDIA's DRA driver: ``count`` alike devices."""

    count: int
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Fraction | int | Alternatives]] = field(default_factory=dict)
    driver: str = NVIDIA_DRIVER


def offering_devices(gpu_model: str, gpu_memory_mib: int, count: int) -> OfferingDevices:
    """The DRA devices of an offering with ``count`` GPUs of ``gpu_model`` (catalog spelling: ``A100``,
    ``H100``, ``L4``) and ``gpu_memory_mib`` each.

    ``type`` is ``gpu``; ``productName`` (one value or :class:`Alternatives` when the catalog does not tell
    SXM from PCIe), ``architecture`` and ``cudaComputeCapability`` come from a table of NVML's answers for
    known models and are left out for others; ``memory`` capacity is the catalog's GPU memory. Anything a
    real device has but a node not yet launched cannot (``uuid``, PCI addresses, driver versions) is left out,
    so a selector on it evaluates to :class:`Unsupported`.
    """
    attributes: dict[str, AttributeValue] = {"type": "gpu"}
    key = gpu_model.upper().replace(" ", "").removeprefix("NVIDIA")
    gib = round(gpu_memory_mib / 1024)
    facts = _GPU_FACTS.get((key, gib)) or _GPU_FACTS.get((key, 0))
    if facts is not None:
        names = facts.product_names
        attributes["productName"] = names[0] if len(names) == 1 else Alternatives(names)
        attributes["architecture"] = facts.architecture
        attributes["cudaComputeCapability"] = Version.parse(facts.compute_capability)
    capacity: dict[str, Fraction | int | Alternatives] = {}
    if gpu_memory_mib > 0:
        capacity["memory"] = gpu_memory_mib * _MIB
    return OfferingDevices(count, {NVIDIA_DRIVER: attributes}, {NVIDIA_DRIVER: capacity} if capacity else {})


# --- matching a request to an offering's devices -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """How many of the offering's devices a request takes (0: it does not fit), and the alternative chosen."""

    devices: int
    request: DeviceSubRequest | None = None
    reason: str = ""

    @property
    def fits(self) -> bool:
        """Some alternative can be allocated on the node (an admin-access request fits taking 0 devices)."""
        return self.request is not None


def match_devices(
    request: DeviceRequest, classes: Mapping[str, DeviceClass], devices: OfferingDevices
) -> Match | Unsupported:
    """The devices of one node that ``request`` would take, trying ``firstAvailable`` alternatives in order.

    A request whose DeviceClass does not exist, or whose selectors tidal cannot evaluate for these devices,
    is :class:`Unsupported` (a claim the scheduler cannot allocate is never planned for).
    """
    reasons: list[str] = []
    for sub in request.alternatives:
        device_class = classes.get(sub.device_class)
        if device_class is None:
            return Unsupported(f"request {request.name!r}: DeviceClass {sub.device_class!r} does not exist")
        matched = evaluate_all(
            (*device_class.selectors, *sub.selectors),
            devices.attributes,
            devices.capacity,
            driver=devices.driver,
        )
        if isinstance(matched, Unsupported):
            return Unsupported(f"request {request.name!r}: {matched.reason}")
        if not matched:
            reasons.append(f"{sub.device_class}: the selectors match none of the {devices.count} devices")
            continue
        wanted = devices.count if sub.allocation_mode == AllocationMode.ALL else sub.count
        if wanted > devices.count or devices.count == 0:
            reasons.append(f"{sub.device_class}: {wanted} devices wanted, {devices.count} on the node")
            continue
        return Match(0 if sub.admin_access else wanted, sub)
    return Match(0, None, "; ".join(reasons) or "no device requested")
