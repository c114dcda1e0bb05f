"""EC2 instance types as nodes: the pods EKS allows, GPUs (whole and partitioned), what cannot be a node."""

from __future__ import annotations

from typing import Any

from autoscaler.core.model import ON_DEMAND, SPOT, Arch
from providers.aws.instance_types import eks_max_pods, parse_instance_type


def network(enis: int, ips: int, cards: list[int] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"MaximumNetworkInterfaces": enis, "Ipv4AddressesPerInterface": ips}
    if cards is not None:
        data["DefaultNetworkCardIndex"] = 0
        data["NetworkCards"] = [
            {"NetworkCardIndex": i, "MaximumNetworkInterfaces": n} for i, n in enumerate(cards)
        ]
    return data


def instance_type(name: str, vcpu: int, mib: int, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceType": name,
        "CurrentGeneration": True,
        "SupportedUsageClasses": ["on-demand", "spot"],
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "VCpuInfo": {"DefaultVCpus": vcpu},
        "MemoryInfo": {"SizeInMiB": mib},
        "NetworkInfo": network(3, 10),
        **extra,
    }


def test_max_pods_follow_the_vpc_cni_formula() -> None:
    # m5.large: 3 ENIs with 10 addresses each -> 3 * (10 - 1) + 2, as in EKS's eni-max-pods.txt
    assert eks_max_pods(network(3, 10), vcpu=2) == 29


def test_only_the_default_network_card_carries_pod_addresses() -> None:
    # p5.48xlarge: 64 interfaces over 32 cards, but 2 on the default card -> 2 * 49 + 2
    assert eks_max_pods(network(64, 50, cards=[2] * 32), vcpu=192) == 100


def test_max_pods_are_capped_at_110_below_30_vcpus_and_250_above() -> None:
    assert eks_max_pods(network(15, 50), vcpu=16) == 110
    assert eks_max_pods(network(60, 50, cards=[15, 15, 15, 15]), vcpu=96) == 250


def test_a_gpu_type_reports_model_count_and_memory_per_gpu() -> None:
    spec = parse_instance_type(
        instance_type(
            "p4d.24xlarge",
            96,
            1179648,
            GpuInfo={
                "Gpus": [
                    {"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}
                ]
            },
        )
    )
    assert spec is not None
    assert (spec.gpu_count, spec.gpu_model, spec.gpu_vendor, spec.gpu_memory_mib) == (
        8,
        "A100",
        "NVIDIA",
        40960,
    )
    assert spec.gpu_fraction == 8.0
    assert spec.capacity_types == (ON_DEMAND, SPOT)


def test_a_partitioned_gpu_is_one_gpu_holding_a_fraction_of_the_device() -> None:
    spec = parse_instance_type(
        instance_type(
            "g6f.large",
            2,
            8192,
            GpuInfo={
                "Gpus": [
                    {
                        "Name": "L4",
                        "Manufacturer": "NVIDIA",
                        "Count": 0,
                        "LogicalGpuCount": 1,
                        "GpuPartitionSize": 0.125,
                        "MemoryInfo": {"SizeInMiB": 2861},
                    }
                ]
            },
        )
    )
    assert spec is not None
    assert (spec.gpu_count, spec.gpu_fraction, spec.gpu_memory_mib) == (1, 0.125, 2861)


def test_arm_types_are_arm64_and_mac_or_i386_types_are_not_nodes() -> None:
    graviton = parse_instance_type(
        instance_type("m7g.large", 2, 8192, ProcessorInfo={"SupportedArchitectures": ["arm64"]})
    )
    assert graviton is not None and graviton.arch == Arch.ARM64
    mac = instance_type("mac1.metal", 12, 32768, ProcessorInfo={"SupportedArchitectures": ["x86_64_mac"]})
    old = instance_type("t1.micro", 1, 627, ProcessorInfo={"SupportedArchitectures": ["i386"]})
    assert parse_instance_type(mac) is None
    assert parse_instance_type(old) is None


def test_a_type_sold_only_as_capacity_blocks_is_not_offered() -> None:
    assert (
        parse_instance_type(
            instance_type("p5e.48xlarge", 192, 2097152, SupportedUsageClasses=["capacity-block"])
        )
        is None
    )
