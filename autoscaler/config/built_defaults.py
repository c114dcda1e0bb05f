"""The configuration's defaults: ``defaults.yaml`` as validation makes it, written as Python.

Written by scripts/gen_config_defaults.py; do not edit (change defaults.yaml and run the script). A test holds
this file equal to what the script writes, and :func:`options` equal to the validated defaults.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from autoscaler.config.values import (
    DisruptionConfig,
    KubeClientConfig,
    LeaderElectionConfig,
    ReservationsConfig,
    ScaleDownConfig,
    SpotConfig,
)
from autoscaler.core.disruption.budgets import Budget
from autoscaler.core.gpu.layouts import GpuSharing

__all__ = ["PROVIDER_SECTIONS", "options"]

# The providers' sections defaults.yaml documents, as written there; each provider checks its own.
PROVIDER_SECTIONS: dict[str, Any] = {
    "aws": {},
    "azure": {},
    "gcp": {},
    "simulated": {},
}


def options() -> dict[str, Any]:
    """Every option but the providers' sections, at its default: ``Config``'s arguments."""
    return {
        "cloud": "aws",
        "region": "us-east-1",
        "zones": (),
        "cluster_name": "tidal",
        "labels": MappingProxyType({}),
        "pod_annotations": MappingProxyType({}),
        "scheduler_names": (
            "default-scheduler",
            "kai-scheduler",
        ),
        "pending_pod_reason_regexp": re.compile(
            "(?s)^(?!\\s*(?:OverLimit|OverQuota|NonPreemptibleOverQuota))(?!.*(?i:quota))",
            48,
        ),
        "cluster_gpu_limit": None,
        "cluster_cpu_limit": None,
        "max_nodes": None,
        "max_node_cost_per_hour": None,
        "max_fallback_price_ratio": 2.0,
        "exact_plan_max_pods": 40,
        "exact_plan_time_limit": 1.0,
        "queue_budgets": MappingProxyType({}),
        "capacity_types": ("on-demand",),
        "spot": SpotConfig(
            interruption_cost_hours=1.0,
            restart_time=300.0,
            bucket_period=2628000.0,
        ),
        "instance_family_inclusions": (),
        "instance_family_exclusions": (),
        "instance_type_regexp": None,
        "gpu_skus": (),
        "architectures": ("amd64",),
        "bin_select_pod_cpu_threshold": 2000,
        "bin_select_pod_memory_threshold": 6442450944000,
        "bin_packing_node_cpu": 6000,
        "bin_packing_node_memory": 25769803776000,
        "bin_packing_node_min_pod_count": 42,
        "bin_packing_node_type_regexp": None,
        "node_labels": MappingProxyType({}),
        "node_taints": (),
        "node_tags": MappingProxyType({}),
        "daemon_set_overhead": None,
        "kube_reserved": None,
        "max_pods_per_node": 110,
        "gpu_node_taint": True,
        "assume_extended_resource_toleration": False,
        "gpu_sharing": GpuSharing(
            mig_layouts=MappingProxyType({}),
            mig_strategy="mixed",
            mig_custom=MappingProxyType({}),
            device_plugin=MappingProxyType({}),
            device_plugin_by_model=MappingProxyType({}),
            dra=False,
        ),
        "scale_down": ScaleDownConfig(
            enabled=True,
            node_unneeded_duration=300.0,
            unneeded_without_demand=30.0,
            utilization_threshold_bin_packing=0.2,
            utilization_threshold_bin_selection=0.75,
            max_parallel_drains=5,
            max_empty_bulk_delete=10,
            replace_savings=0.5,
            replace_young_pods_within=900.0,
            multi_node=False,
        ),
        "reservations": ReservationsConfig(
            reserved_nodes="keep",
            drain_before_block_end=2400.0,
            before_block_start="wait",
        ),
        "disruption": DisruptionConfig(
            budgets=(
                Budget(
                    count=None,
                    percent=10,
                    reasons=(
                        "expired",
                        "drifted",
                        "unhealthy",
                    ),
                    schedule=None,
                    schedule_text="",
                    duration=0.0,
                ),
            ),
            node_max_lifetime=0.0,
            drift=True,
            unhealthy_conditions=(),
            replacement_timeout=900.0,
        ),
        "scan_interval": 10.0,
        "batch_idle_duration": 1.0,
        "batch_max_duration": 10.0,
        "registration_timeout": 900.0,
        "gpu_readiness_timeout": 600.0,
        "offering_unavailable_duration": 180.0,
        "gang_launch_timeout": 600.0,
        "new_node_grace_period": 120.0,
        "max_parallel_launches": 10,
        "leader_election": LeaderElectionConfig(
            enabled=True,
            namespace="tidal-system",
            lease_name="tidal",
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=2.0,
        ),
        "kube_client": KubeClientConfig(
            qps=50.0,
            burst=100,
        ),
        "metrics_address": ":8080",
        "log_format": "auto",
        "log_level": "info",
    }
