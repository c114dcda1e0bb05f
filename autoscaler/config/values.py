"""What the rest of tidal reads of its configuration: plain frozen dataclasses, built once per load.

Kept apart from the pydantic models that validate a document (``config.models``, ``config.options``), so that
what only reads a configuration (the decision core, ``tidal plan`` with the defaults) does not import pydantic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.core.disruption.budgets import Budget
from autoscaler.core.disruption.unhealthy import ConditionRule
from autoscaler.core.gpu.layouts import GpuSharing
from autoscaler.core.model import Taint
from autoscaler.core.resources import Resources

__all__ = [
    "KEEP",
    "RELEASE",
    "WAIT",
    "Config",
    "DisruptionConfig",
    "KubeClientConfig",
    "LeaderElectionConfig",
    "ReservationsConfig",
    "ScaleDownConfig",
    "SpotConfig",
]

KEEP = "keep"
RELEASE = "release"
WAIT = "wait"


@dataclass(frozen=True, slots=True)
class ScaleDownConfig:
    """``scaleDown``: removing nodes tidal launched once they are empty or under-used."""

    enabled: bool
    node_unneeded_duration: float
    unneeded_without_demand: float
    utilization_threshold_bin_packing: float
    utilization_threshold_bin_selection: float
    max_parallel_drains: int
    max_empty_bulk_delete: int
    replace_savings: float
    replace_young_pods_within: float
    multi_node: bool


@dataclass(frozen=True, slots=True)
class ReservationsConfig:
    """``reservations``: capacity bought ahead (capacity reservations, Capacity Blocks)."""

    # keep: scale-down never removes a node whose reservation lasts (removing it saves nothing); release:
    # such nodes are removed like any other when empty or when their pods fit elsewhere.
    reserved_nodes: str
    # Nodes on a Capacity Block are cordoned and drained this long before the block ends.
    drain_before_block_end: float
    # What pods that only a Capacity Block not yet started would hold do meanwhile: wait, or on-demand.
    before_block_start: str


@dataclass(frozen=True, slots=True)
class SpotConfig:
    """``spot``: what a spot interruption costs pods that do not say (see ``autoscaler.core.spot_risk``)."""

    # Hours of work an interruption loses for pods without tidal.dev/interruption-cost.
    interruption_cost_hours: float
    # Seconds of the node's price an interruption costs beyond the work lost (boot and restart).
    restart_time: float
    # Seconds of running in which a spot type's published share of instances is interrupted (a month).
    bucket_period: float

    @property
    def rate_scale(self) -> float:
        """How many times the catalog's rates (a share of a month) interruptions are counted as frequent."""
        return 730.0 * 3600.0 / self.bucket_period


@dataclass(frozen=True, slots=True)
class DisruptionConfig:
    """``disruption``: budgets, and the methods beyond scale-down (expired, drifted, unhealthy nodes)."""

    budgets: tuple[Budget, ...]
    node_max_lifetime: float
    drift: bool
    unhealthy_conditions: tuple[ConditionRule, ...]
    replacement_timeout: float


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """``leaderElection``: the Lease that lets only one replica act."""

    enabled: bool
    namespace: str
    lease_name: str
    lease_duration: float
    renew_deadline: float
    retry_period: float


@dataclass(frozen=True, slots=True)
class KubeClientConfig:
    """``kubeClient``: how many requests a second tidal may send the Kubernetes API server."""

    qps: float
    burst: int


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; durations in seconds, quantities in milli-units (see defaults.yaml)."""

    cloud: str
    region: str
    zones: tuple[str, ...]
    cluster_name: str
    labels: Mapping[str, str]
    pod_annotations: Mapping[str, str]
    scheduler_names: tuple[str, ...]
    pending_pod_reason_regexp: re.Pattern[str]
    cluster_gpu_limit: int | None
    cluster_cpu_limit: int | None
    max_nodes: int | None
    max_node_cost_per_hour: float | None
    max_fallback_price_ratio: float | None
    exact_plan_max_pods: int
    exact_plan_time_limit: float
    queue_budgets: Mapping[str, float]
    capacity_types: tuple[str, ...]
    spot: SpotConfig
    instance_family_inclusions: tuple[str, ...]
    instance_family_exclusions: tuple[str, ...]
    instance_type_regexp: re.Pattern[str] | None
    gpu_skus: tuple[str, ...]
    architectures: tuple[str, ...]
    bin_select_pod_cpu_threshold: int
    bin_select_pod_memory_threshold: int
    bin_packing_node_cpu: int
    bin_packing_node_memory: int
    bin_packing_node_min_pod_count: int
    bin_packing_node_type_regexp: re.Pattern[str] | None
    node_labels: Mapping[str, str]
    node_taints: tuple[Taint, ...]
    node_tags: Mapping[str, str]
    daemon_set_overhead: Resources | None
    kube_reserved: Resources | None
    max_pods_per_node: int
    gpu_node_taint: bool
    assume_extended_resource_toleration: bool
    gpu_sharing: GpuSharing
    scale_down: ScaleDownConfig
    reservations: ReservationsConfig
    disruption: DisruptionConfig
    scan_interval: float
    batch_idle_duration: float
    batch_max_duration: float
    registration_timeout: float
    gpu_readiness_timeout: float
    offering_unavailable_duration: float
    gang_launch_timeout: float
    new_node_grace_period: float
    max_parallel_launches: int
    leader_election: LeaderElectionConfig
    kube_client: KubeClientConfig
    metrics_address: str
    log_format: str
    log_level: str
    providers: Mapping[str, Mapping[str, Any]]
