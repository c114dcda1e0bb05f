"""EC2 instance types as tidal sees them: shape, GPUs, architecture and the pods EKS lets a node run.

The shape comes from DescribeInstanceTypes and where each type is sold from DescribeInstanceTypeOfferings
(per availability zone); both change rarely, so the provider caches them for hours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.core.model import ON_DEMAND, SPOT, Arch, CapacityType
from autoscaler.core.offering import Offering

__all__ = [
    "InstanceSpec",
    "eks_max_pods",
    "fetch_instance_types",
    "fetch_zone_offerings",
    "parse_instance_type",
]

# EKS's recommendation (max-pods-calculator): at most 110 pods below 30 vCPUs, 250 from there on.
SMALL_NODE_MAX_PODS, LARGE_NODE_MAX_PODS, LARGE_NODE_VCPUS = 110, 250, 30
_USAGE_CLASSES = {"on-demand": ON_DEMAND, "spot": SPOT}
_TYPE_FILTER_LIMIT = 200  # values per DescribeInstanceTypes filter


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One instance type: what a node of it has, and which capacity types AWS sells it as."""

    instance_type: str
    vcpu: int
    memory_mib: int
    arch: Arch
    max_pods: int
    capacity_types: tuple[str, ...]
    current_generation: bool = True
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_vendor: str = ""
    gpu_memory_mib: int = 0
    gpu_fraction: float = 0.0

    def offering(self, zone: str, capacity_type: str, price: float, region: str, source: str) -> Offering:
        """This type as an offering in ``zone`` at ``price`` (USD per hour)."""
        return Offering(
            instance_type=self.instance_type,
            zone=zone,
            capacity_type=CapacityType(capacity_type),
            vcpu=self.vcpu,
            memory_mib=self.memory_mib,
            price=price,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            gpu_vendor=self.gpu_vendor,
            gpu_memory_mib=self.gpu_memory_mib,
            gpu_fraction=self.gpu_fraction,
            arch=self.arch,
            max_pods=self.max_pods,
            region=region,
            price_source=source,
        )


def eks_max_pods(network: Mapping[str, Any], vcpu: int) -> int:
    """Max pods as the EKS VPC CNI computes it: ENIs × (IPv4 addresses per ENI − 1) + 2, capped as EKS recommends.

    Only the default network card's interfaces carry pod addresses (p5.48xlarge has 32 cards but 100 pods).
    """
    enis = int(network.get("MaximumNetworkInterfaces") or 0)
    cards = network.get("NetworkCards") or []
    default_card = int(network.get("DefaultNetworkCardIndex") or 0)
    for card in cards:
        if int(card.get("NetworkCardIndex") or 0) == default_card and card.get("MaximumNetworkInterfaces"):
            enis = int(card["MaximumNetworkInterfaces"])
    ips = int(network.get("Ipv4AddressesPerInterface") or 0)
    if enis <= 0 or ips <= 1:
        return SMALL_NODE_MAX_PODS
    cap = LARGE_NODE_MAX_PODS if vcpu >= LARGE_NODE_VCPUS else SMALL_NODE_MAX_PODS
    return min(enis * (ips - 1) + 2, cap)


def _arch(architectures: Sequence[str]) -> Arch | None:
    if "x86_64" in architectures:
        return Arch.AMD64
    if "arm64" in architectures:
        return Arch.ARM64
    return None  # i386-only and Mac types cannot be EKS nodes


def parse_instance_type(data: Mapping[str, Any]) -> InstanceSpec | None:
    """An :class:`InstanceSpec` from one DescribeInstanceTypes entry, or None if it cannot be an EKS node."""
    arch = _arch(data.get("ProcessorInfo", {}).get("SupportedArchitectures", []))
    vcpu = int(data.get("VCpuInfo", {}).get("DefaultVCpus") or 0)
    memory = int(data.get("MemoryInfo", {}).get("SizeInMiB") or 0)
    capacity_types = tuple(
        _USAGE_CLASSES[u] for u in data.get("SupportedUsageClasses", []) if u in _USAGE_CLASSES
    )
    if arch is None or vcpu < 1 or memory < 1 or not capacity_types:
        return None
    gpu_count, model, vendor, gpu_memory, fraction = 0, "", "", 0, 0.0
    gpus = data.get("GpuInfo", {}).get("Gpus") or []
    if gpus:
        first = gpus[0]
        # Partitioned GPUs (g6f) report Count 0 and LogicalGpuCount 1 with a fractional partition size.
        gpu_count = sum(max(int(g.get("Count") or 0), int(g.get("LogicalGpuCount") or 0)) for g in gpus)
        model = str(first.get("Name") or "")
        vendor = str(first.get("Manufacturer") or "")
        gpu_memory = int(first.get("MemoryInfo", {}).get("SizeInMiB") or 0)
        fraction = float(gpu_count) * float(first.get("GpuPartitionSize") or 1.0)
    return InstanceSpec(
        instance_type=str(data["InstanceType"]),
        vcpu=vcpu,
        memory_mib=memory,
        arch=arch,
        max_pods=eks_max_pods(data.get("NetworkInfo", {}), vcpu),
        capacity_types=capacity_types,
        current_generation=bool(data.get("CurrentGeneration", True)),
        gpu_count=gpu_count,
        gpu_model=model if gpu_count else "",
        gpu_vendor=vendor if gpu_count else "",
        gpu_memory_mib=gpu_memory if gpu_count else 0,
        gpu_fraction=fraction if gpu_count else 0.0,
    )


def _family_filters(families: Sequence[str]) -> list[dict[str, Any]]:
    if not families:
        return []
    return [{"Name": "instance-type", "Values": [f"{f}.*" for f in families][:_TYPE_FILTER_LIMIT]}]


def fetch_instance_types(
    ec2: Any, *, families: Sequence[str] = (), architectures: Sequence[str] = (), current_only: bool = False
) -> dict[str, InstanceSpec]:
    """Every instance type that can be an EKS node and passes the filters (``architectures`` as Kubernetes
    names); families are filtered by AWS, the rest here."""
    paginator = ec2.get_paginator("describe_instance_types")
    found: dict[str, InstanceSpec] = {}
    for page in paginator.paginate(Filters=_family_filters(families)):
        for data in page.get("InstanceTypes", []):
            spec = parse_instance_type(data)
            if spec is None or (architectures and spec.arch.value not in architectures):
                continue
            if current_only and not spec.current_generation:
                continue
            found[spec.instance_type] = spec
    return found


def fetch_zone_offerings(
    ec2: Any, zones: Iterable[str] | None, *, instance_types: Sequence[str] = ()
) -> dict[str, tuple[str, ...]]:
    """For each instance type (of ``instance_types`` when few enough to name), the zones among ``zones``
    (None: every zone of the region) where AWS sells it."""
    filters: list[dict[str, Any]] = []
    if zones is not None:
        wanted = sorted(set(zones))
        if not wanted:
            return {}
        filters.append({"Name": "location", "Values": wanted})
    if 0 < len(instance_types) <= _TYPE_FILTER_LIMIT:
        filters.append({"Name": "instance-type", "Values": sorted(instance_types)})
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    out: dict[str, list[str]] = {}
    for page in paginator.paginate(LocationType="availability-zone", Filters=filters):
        for row in page.get("InstanceTypeOfferings", []):
            out.setdefault(str(row["InstanceType"]), []).append(str(row["Location"]))
    return {t: tuple(sorted(set(z))) for t, z in out.items()}
