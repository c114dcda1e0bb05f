import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config import schema
from autoscaler.config.options import (
    Config,
    ConfigError,
    DisruptionConfig,
    KubeClientConfig,
    LeaderElectionConfig,
    ReservationsConfig,
    ScaleDownConfig,
    SpotConfig,
    config_from_configmap,
    config_from_mapping,
    default_config,
    load_config,
    parse_duration,
    parse_selector_string,
)
from autoscaler.core.disruption.budgets import Budget
from autoscaler.core.disruption.unhealthy import ConditionRule
from autoscaler.core.model import Taint
from autoscaler.core.resources import GIB, MIB, Resources

ROOT = Path(__file__).resolve().parents[2]
PACKAGED_DEFAULTS = ROOT / "autoscaler" / "config" / "defaults.yaml"
DOCUMENTED_DEFAULTS = ROOT / "config" / "default.yaml"

# Every top-level key, the attribute it fills, a non-default value as a user writes it, and what it becomes.
TOP_LEVEL_KEYS = [
    ("cloud", "cloud", "gcp", "gcp"),
    ("region", "region", "europe-west4", "europe-west4"),
    ("zones", "zones", ["us-east-1a", "us-east-1b"], ("us-east-1a", "us-east-1b")),
    ("clusterName", "cluster_name", "prod-gpu", "prod-gpu"),
    ("labels", "labels", "team=ml,tier=batch", {"team": "ml", "tier": "batch"}),
    ("podAnnotations", "pod_annotations", "tidal.dev/opt-in=yes", {"tidal.dev/opt-in": "yes"}),
    ("schedulerNames", "scheduler_names", ["kai-scheduler"], ("kai-scheduler",)),
    ("clusterGPULimit", "cluster_gpu_limit", 16, 16),
    ("clusterCPULimit", "cluster_cpu_limit", "512", 512_000),
    ("maxNodes", "max_nodes", 40, 40),
    ("maxNodeCostPerHour", "max_node_cost_per_hour", 12.5, 12.5),
    ("maxFallbackPriceRatio", "max_fallback_price_ratio", 1.5, 1.5),
    ("exactPlanMaxPods", "exact_plan_max_pods", 0, 0),
    ("exactPlanTimeLimit", "exact_plan_time_limit", "250ms", 0.25),
    ("queueBudgets", "queue_budgets", {"research": 20, "prod": 55.5}, {"research": 20.0, "prod": 55.5}),
    ("capacityTypes", "capacity_types", ["spot", "on-demand"], ("spot", "on-demand")),
    ("instanceFamilyInclusions", "instance_family_inclusions", ["g5", "p4d"], ("g5", "p4d")),
    ("instanceFamilyExclusions", "instance_family_exclusions", ["t2"], ("t2",)),
    ("gpuSkus", "gpu_skus", ["A10G", "L4"], ("A10G", "L4")),
    ("architectures", "architectures", ["arm64", "amd64"], ("arm64", "amd64")),
    ("binSelectPodCpuThreshold", "bin_select_pod_cpu_threshold", "1500m", 1500),
    ("binSelectPodMemoryThreshold", "bin_select_pod_memory_threshold", "8Gi", 8 * GIB),
    ("binPackingNodeCpu", "bin_packing_node_cpu", 8, 8000),
    ("binPackingNodeMemory", "bin_packing_node_memory", "32Gi", 32 * GIB),
    ("binPackingNodeMinPodCount", "bin_packing_node_min_pod_count", 58, 58),
    ("nodeLabels", "node_labels", {"team": "ml"}, {"team": "ml"}),
    ("nodeTaints", "node_taints", ["gpu=true:NoSchedule"], (Taint("gpu", "true", "NoSchedule"),)),
    ("nodeTags", "node_tags", {"CostCenter": "42"}, {"CostCenter": "42"}),
    (
        "daemonSetOverhead",
        "daemon_set_overhead",
        {"cpu": "200m", "memory": "256Mi"},
        Resources({"cpu": 200, "memory": 256 * MIB}),
    ),
    ("kubeReserved", "kube_reserved", {"cpu": "100m"}, Resources({"cpu": 100})),
    ("maxPodsPerNode", "max_pods_per_node", 250, 250),
    ("gpuNodeTaint", "gpu_node_taint", False, False),
    ("assumeExtendedResourceToleration", "assume_extended_resource_toleration", True, True),
    ("scanInterval", "scan_interval", "30s", 30.0),
    ("batchIdleDuration", "batch_idle_duration", "2s", 2.0),
    ("batchMaxDuration", "batch_max_duration", "1m", 60.0),
    ("registrationTimeout", "registration_timeout", "20m", 1200.0),
    ("gpuReadinessTimeout", "gpu_readiness_timeout", "1h", 3600.0),
    ("offeringUnavailableDuration", "offering_unavailable_duration", "10m", 600.0),
    ("gangLaunchTimeout", "gang_launch_timeout", "20m", 1200.0),
    ("newNodeGracePeriod", "new_node_grace_period", "5m", 300.0),
    ("maxParallelLaunches", "max_parallel_launches", 3, 3),
    ("metricsAddress", "metrics_address", "127.0.0.1:9090", "127.0.0.1:9090"),
    ("logFormat", "log_format", "json", "json"),
    ("logLevel", "log_level", "debug", "debug"),
]
REGEXP_KEYS = [
    ("pendingPodReasonRegexp", "pending_pod_reason_regexp"),
    ("instanceTypeRegexp", "instance_type_regexp"),
    ("binPackingNodeTypeRegexp", "bin_packing_node_type_regexp"),
]
SCALE_DOWN_KEYS = [
    ("enabled", "enabled", False, False),
    ("nodeUnneededDuration", "node_unneeded_duration", "10m", 600.0),
    ("unneededWithoutDemand", "unneeded_without_demand", "1m", 60.0),
    ("utilizationThresholdBinPacking", "utilization_threshold_bin_packing", 0.5, 0.5),
    ("utilizationThresholdBinSelection", "utilization_threshold_bin_selection", 0.9, 0.9),
    ("maxParallelDrains", "max_parallel_drains", 2, 2),
    ("maxEmptyBulkDelete", "max_empty_bulk_delete", 20, 20),
    ("replaceSavings", "replace_savings", 0.3, 0.3),
    ("replaceYoungPodsWithin", "replace_young_pods_within", "0s", 0.0),
    ("multiNode", "multi_node", True, True),
]
DISRUPTION_KEYS = [
    ("budgets", "budgets", [{"nodes": 2}], (Budget(count=2),)),
    ("nodeMaxLifetime", "node_max_lifetime", "720h", 720 * 3600.0),
    ("drift", "drift", False, False),
    (
        "unhealthyConditions",
        "unhealthy_conditions",
        [{"type": "Ready", "status": "False", "duration": "30m"}],
        (ConditionRule("Ready", "False", 1800.0),),
    ),
    ("replacementTimeout", "replacement_timeout", "30m", 1800.0),
]
LEADER_ELECTION_KEYS = [
    ("enabled", "enabled", False, False),
    ("namespace", "namespace", "kube-system", "kube-system"),
    ("leaseName", "lease_name", "tidal-prod", "tidal-prod"),
    ("leaseDuration", "lease_duration", "30s", 30.0),
    ("renewDeadline", "renew_deadline", "5s", 5.0),
    ("retryPeriod", "retry_period", "1s", 1.0),
]
KUBE_CLIENT_KEYS = [
    ("qps", "qps", 20, 20.0),
    ("burst", "burst", 40, 40),
]
RESERVATIONS_KEYS = [
    ("reservedNodes", "reserved_nodes", "release", "release"),
    ("drainBeforeBlockEnd", "drain_before_block_end", "1h", 3600.0),
    ("beforeBlockStart", "before_block_start", "on-demand", "on-demand"),
]
SPOT_KEYS = [
    ("interruptionCostHours", "interruption_cost_hours", 6, 6.0),
    ("restartTime", "restart_time", "10m", 600.0),
    ("bucketPeriod", "bucket_period", "24h", 86400.0),
]
PROVIDER_KEYS = ["simulated", "aws", "gcp", "azure"]


def every_documented_key() -> list[str]:
    keys = [key for key, *_ in TOP_LEVEL_KEYS] + [key for key, _ in REGEXP_KEYS] + PROVIDER_KEYS
    keys += ["scaleDown"] + [f"scaleDown.{key}" for key, *_ in SCALE_DOWN_KEYS]
    keys += ["disruption"] + [f"disruption.{key}" for key, *_ in DISRUPTION_KEYS]
    keys += ["leaderElection"] + [f"leaderElection.{key}" for key, *_ in LEADER_ELECTION_KEYS]
    keys += ["kubeClient"] + [f"kubeClient.{key}" for key, *_ in KUBE_CLIENT_KEYS]
    keys += ["reservations"] + [f"reservations.{key}" for key, *_ in RESERVATIONS_KEYS]
    keys += ["spot"] + [f"spot.{key}" for key, *_ in SPOT_KEYS]
    keys += ["gpuSharing"]
    return keys


def errors_of(data: dict[str, Any], **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data, **kwargs)
    return caught.value.errors


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- defaults -----------------------------------------------------------------------------------------


def test_defaults_are_the_documented_values() -> None:
    config = default_config()
    assert config.cloud == "aws"
    assert config.region == "us-east-1"
    assert config.zones == ()
    assert config.cluster_name == "tidal"
    assert config.labels == {}
    assert config.pod_annotations == {}
    assert config.scheduler_names == ("default-scheduler", "kai-scheduler")
    assert (
        config.pending_pod_reason_regexp.pattern
        == r"(?s)^(?!\s*(?:OverLimit|OverQuota|NonPreemptibleOverQuota))(?!.*(?i:quota))"
    )
    assert config.cluster_gpu_limit is None
    assert config.cluster_cpu_limit is None
    assert config.max_nodes is None
    assert config.max_node_cost_per_hour is None
    assert config.capacity_types == ("on-demand",)
    assert config.instance_family_inclusions == ()
    assert config.instance_family_exclusions == ()
    assert config.instance_type_regexp is None
    assert config.gpu_skus == ()
    assert config.architectures == ("amd64",)
    assert config.bin_select_pod_cpu_threshold == 2000
    assert config.bin_select_pod_memory_threshold == 6 * GIB
    assert config.bin_packing_node_cpu == 6000
    assert config.bin_packing_node_memory == 24 * GIB
    assert config.bin_packing_node_min_pod_count == 42
    assert config.bin_packing_node_type_regexp is None
    assert config.node_labels == {}
    assert config.node_taints == ()
    assert config.node_tags == {}
    assert config.daemon_set_overhead is None
    assert config.kube_reserved is None
    assert config.max_pods_per_node == 110
    assert config.scale_down == ScaleDownConfig(
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
    )
    assert config.reservations == ReservationsConfig(
        reserved_nodes="keep", drain_before_block_end=2400.0, before_block_start="wait"
    )
    assert config.spot == SpotConfig(interruption_cost_hours=1.0, restart_time=300.0, bucket_period=2628000.0)
    assert config.scan_interval == 10.0
    assert config.batch_idle_duration == 1.0
    assert config.batch_max_duration == 10.0
    assert config.registration_timeout == 900.0
    assert config.gpu_readiness_timeout == 600.0
    assert config.offering_unavailable_duration == 180.0
    assert config.new_node_grace_period == 120.0
    assert config.max_parallel_launches == 10
    assert config.leader_election == LeaderElectionConfig(
        enabled=True,
        namespace="tidal-system",
        lease_name="tidal",
        lease_duration=15.0,
        renew_deadline=10.0,
        retry_period=2.0,
    )
    assert config.metrics_address == ":8080"
    assert config.log_format == "auto"
    assert config.log_level == "info"
    assert config.providers == {"simulated": {}, "aws": {}, "gcp": {}, "azure": {}}


def test_no_path_an_empty_mapping_and_an_empty_file_all_give_the_defaults(tmp_path: Path) -> None:
    assert load_config(None) == default_config()
    assert config_from_mapping({}) == default_config()
    assert load_config(write(tmp_path, "")) == default_config()
    assert load_config(write(tmp_path, "# only a comment\n", "comment.yaml")) == default_config()


def test_the_documented_default_file_loads_to_the_defaults() -> None:
    assert load_config(DOCUMENTED_DEFAULTS) == default_config()


def test_the_packaged_defaults_read_with_libyaml_are_what_the_strict_reader_reads() -> None:
    text = PACKAGED_DEFAULTS.read_text(encoding="utf-8")
    assert schema.load_yaml(text, "defaults.yaml", own=True) == schema.load_yaml(text, "defaults.yaml")


def test_a_file_tidal_ships_is_refused_for_a_duplicate_key_too() -> None:
    with pytest.raises(ConfigError, match=r"duplicate key 'clusterGPULimit' \(first on line 1\)"):
        schema.load_yaml("clusterGPULimit: 8\nclusterGPULimit: 16\n", "defaults.yaml", own=True)


def test_config_default_yaml_is_a_byte_identical_copy_of_the_packaged_defaults() -> None:
    assert DOCUMENTED_DEFAULTS.read_bytes() == PACKAGED_DEFAULTS.read_bytes()


def test_every_config_attribute_has_a_key_in_this_specification() -> None:
    mapped = {attr for _, attr, *_ in TOP_LEVEL_KEYS} | {attr for _, attr in REGEXP_KEYS}
    mapped |= {
        "scale_down",
        "disruption",
        "leader_election",
        "kube_client",
        "reservations",
        "spot",
        "providers",
        "gpu_sharing",
    }
    assert mapped == {f.name for f in dataclasses.fields(Config)}
    assert {attr for _, attr, *_ in SCALE_DOWN_KEYS} == {f.name for f in dataclasses.fields(ScaleDownConfig)}
    assert {attr for _, attr, *_ in DISRUPTION_KEYS} == {f.name for f in dataclasses.fields(DisruptionConfig)}
    assert {attr for _, attr, *_ in LEADER_ELECTION_KEYS} == {
        f.name for f in dataclasses.fields(LeaderElectionConfig)
    }
    assert {attr for _, attr, *_ in KUBE_CLIENT_KEYS} == {
        f.name for f in dataclasses.fields(KubeClientConfig)
    }
    assert {attr for _, attr, *_ in RESERVATIONS_KEYS} == {
        f.name for f in dataclasses.fields(ReservationsConfig)
    }
    assert {attr for _, attr, *_ in SPOT_KEYS} == {f.name for f in dataclasses.fields(SpotConfig)}


def test_every_key_is_in_the_default_file_with_a_comment_directly_above_it() -> None:
    lines = DOCUMENTED_DEFAULTS.read_text().splitlines()
    found: dict[str, str] = {}
    section = ""
    for i, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            continue
        indent, key = match.groups()
        if not indent:
            section = key
        path = f"{section}.{key}" if indent else key
        above = lines[i - 1] if i else ""
        found[path] = above if above.startswith(f"{indent}#") else ""
    missing = [key for key in every_documented_key() if key not in found]
    undocumented = [key for key in every_documented_key() if not found.get(key)]
    assert not missing
    assert not undocumented
    assert sorted(found) == sorted(every_documented_key())


def test_the_default_file_documents_every_key_exactly_once_as_parsed_yaml() -> None:
    document = yaml.safe_load(DOCUMENTED_DEFAULTS.read_text())
    sections = {"scaleDown", "disruption", "leaderElection", "kubeClient", "reservations", "spot"}
    top = set(document) - sections
    assert top == {key for key in every_documented_key() if "." not in key} - sections
    assert set(document["scaleDown"]) == {key for key, *_ in SCALE_DOWN_KEYS}
    assert set(document["disruption"]) == {key for key, *_ in DISRUPTION_KEYS}
    assert set(document["leaderElection"]) == {key for key, *_ in LEADER_ELECTION_KEYS}
    assert set(document["kubeClient"]) == {key for key, *_ in KUBE_CLIENT_KEYS}
    assert set(document["reservations"]) == {key for key, *_ in RESERVATIONS_KEYS}
    assert set(document["spot"]) == {key for key, *_ in SPOT_KEYS}


# --- keys, types and the camelCase mapping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "attr", "value", "expected"), TOP_LEVEL_KEYS, ids=[k[0] for k in TOP_LEVEL_KEYS]
)
def test_each_top_level_key_fills_its_snake_case_attribute(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({key: value})
    assert getattr(config, attr) == expected
    assert getattr(default_config(), attr) != expected


@pytest.mark.parametrize(("key", "attr"), REGEXP_KEYS)
def test_regexp_keys_are_compiled(key: str, attr: str) -> None:
    config = config_from_mapping({key: r"^g[56]\.[0-9]*xlarge$"})
    assert getattr(config, attr).search("g5.12xlarge")
    assert not getattr(config, attr).search("m5.large")


@pytest.mark.parametrize(("key", "attr", "value", "expected"), SPOT_KEYS, ids=[k[0] for k in SPOT_KEYS])
def test_each_spot_key_fills_its_attribute_and_keeps_the_other_defaults(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({"spot": {key: value}})
    assert config.spot == dataclasses.replace(default_config().spot, **{attr: expected})


@pytest.mark.parametrize(
    ("key", "attr", "value", "expected"), SCALE_DOWN_KEYS, ids=[k[0] for k in SCALE_DOWN_KEYS]
)
def test_each_scale_down_key_fills_its_attribute_and_keeps_the_other_defaults(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({"scaleDown": {key: value}})
    assert getattr(config.scale_down, attr) == expected
    assert config.scale_down == dataclasses.replace(default_config().scale_down, **{attr: expected})


@pytest.mark.parametrize(
    ("key", "attr", "value", "expected"), DISRUPTION_KEYS, ids=[k[0] for k in DISRUPTION_KEYS]
)
def test_each_disruption_key_fills_its_attribute_and_keeps_the_other_defaults(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({"disruption": {key: value}})
    assert getattr(config.disruption, attr) == expected
    assert config.disruption == dataclasses.replace(default_config().disruption, **{attr: expected})


@pytest.mark.parametrize(
    ("key", "attr", "value", "expected"), LEADER_ELECTION_KEYS, ids=[k[0] for k in LEADER_ELECTION_KEYS]
)
def test_each_leader_election_key_fills_its_attribute_and_keeps_the_other_defaults(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({"leaderElection": {key: value}})
    assert getattr(config.leader_election, attr) == expected
    assert config.leader_election == dataclasses.replace(default_config().leader_election, **{attr: expected})


@pytest.mark.parametrize(
    ("key", "attr", "value", "expected"), KUBE_CLIENT_KEYS, ids=[k[0] for k in KUBE_CLIENT_KEYS]
)
def test_each_kube_client_key_fills_its_attribute_and_keeps_the_other_defaults(
    key: str, attr: str, value: Any, expected: Any
) -> None:
    config = config_from_mapping({"kubeClient": {key: value}})
    assert getattr(config.kube_client, attr) == expected
    assert config.kube_client == dataclasses.replace(default_config().kube_client, **{attr: expected})


def test_the_kube_client_rate_limit_is_never_negative_and_bursts_at_least_one_request() -> None:
    assert errors_of({"kubeClient": {"qps": -1, "burst": 0}}) == [
        "kubeClient.qps: -1 is below 0",
        "kubeClient.burst: 0 is below 1",
    ]


def test_an_empty_section_means_all_of_its_defaults() -> None:
    assert config_from_mapping({"scaleDown": None, "leaderElection": None}) == default_config()


def test_provider_sections_are_passed_through_as_maps() -> None:
    config = config_from_mapping({"aws": {"subnetTag": "tidal", "spot": {"maxPrice": 3}}})
    assert config.providers["aws"] == {"subnetTag": "tidal", "spot": {"maxPrice": 3}}
    assert config.providers["gcp"] == {}


def test_a_provider_section_must_be_a_map() -> None:
    assert errors_of({"gcp": "project=x"}) == ["gcp: 'project=x' is not a map"]


def test_cloud_accepts_any_provider_name_since_providers_are_plugins() -> None:
    assert config_from_mapping({"cloud": "oracle"}).cloud == "oracle"


def test_unlimited_limits_are_null() -> None:
    config = config_from_mapping({"clusterGPULimit": 8, "maxNodes": 3})
    assert config_from_mapping({"clusterGPULimit": None, "maxNodes": None}).cluster_gpu_limit is None
    assert config.cluster_gpu_limit == 8


def test_fallbacks_are_capped_at_twice_the_chosen_price_unless_the_ratio_is_null() -> None:
    assert default_config().max_fallback_price_ratio == 2.0
    assert config_from_mapping({"maxFallbackPriceRatio": None}).max_fallback_price_ratio is None


def test_no_queue_has_a_budget_by_default_and_null_means_none() -> None:
    assert default_config().queue_budgets == {}
    assert config_from_mapping({"queueBudgets": None}).queue_budgets == {}


def test_a_zero_gpu_limit_is_allowed_and_means_no_gpus() -> None:
    assert config_from_mapping({"clusterGPULimit": 0}).cluster_gpu_limit == 0


def test_the_config_and_its_maps_cannot_be_modified() -> None:
    config = config_from_mapping({"nodeLabels": {"team": "ml"}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.cloud = "gcp"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.node_labels["team"] = "infra"  # type: ignore[index]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"clusterGPULimit": "16"}, "clusterGPULimit: '16' is not an integer"),
        ({"clusterGPULimit": 1.5}, "clusterGPULimit: 1.5 is not an integer"),
        ({"maxNodes": True}, "maxNodes: true is not an integer"),
        ({"clusterGPULimit": -1}, "clusterGPULimit: -1 is below 0"),
        ({"maxPodsPerNode": 0}, "maxPodsPerNode: 0 is below 1"),
        ({"maxPodsPerNode": 1001}, "maxPodsPerNode: 1001 is above 1000"),
        ({"maxParallelLaunches": 0}, "maxParallelLaunches: 0 is below 1"),
        ({"binPackingNodeMinPodCount": 0}, "binPackingNodeMinPodCount: 0 is below 1"),
        ({"maxNodeCostPerHour": 0}, "maxNodeCostPerHour: 0 must be above 0"),
        ({"maxNodeCostPerHour": "cheap"}, "maxNodeCostPerHour: 'cheap' is not a number"),
        ({"maxFallbackPriceRatio": 1}, "maxFallbackPriceRatio: 1 must be above 1"),
        ({"maxFallbackPriceRatio": 0.5}, "maxFallbackPriceRatio: 0.5 must be above 1"),
        ({"maxFallbackPriceRatio": "2x"}, "maxFallbackPriceRatio: '2x' is not a number"),
        ({"exactPlanMaxPods": -1}, "exactPlanMaxPods: -1 is below 0"),
        ({"exactPlanTimeLimit": "0s"}, "exactPlanTimeLimit: '0s' must be longer than 0s"),
        ({"queueBudgets": ["research"]}, "queueBudgets: ['research'] is not a map (e.g. {research: 20.0})"),
        ({"queueBudgets": {"research": 0}}, "queueBudgets.research: 0 must be above 0"),
        ({"queueBudgets": {"research": "20$"}}, "queueBudgets.research: '20$' is not a number"),
        ({"scaleDown": {"enabled": "yes please"}}, "scaleDown.enabled: 'yes please' is not true or false"),
        ({"spot": {"interruptionCostHours": -1}}, "spot.interruptionCostHours: -1 is below 0"),
        ({"spot": {"interruptionCostHours": "2h"}}, "spot.interruptionCostHours: '2h' is not a number"),
        (
            {"spot": {"restartTime": "soon"}},
            "spot.restartTime: 'soon' is not a duration (e.g. 30s, 5m, 1h30m)",
        ),
        (
            {"scaleDown": {"utilizationThresholdBinSelection": -0.1}},
            "scaleDown.utilizationThresholdBinSelection: -0.1 is below 0",
        ),
        (
            {"scaleDown": {"utilizationThresholdBinPacking": 1.5}},
            "scaleDown.utilizationThresholdBinPacking: 1.5 is above 1",
        ),
        ({"scaleDown": {"maxParallelDrains": 0}}, "scaleDown.maxParallelDrains: 0 is below 1"),
        ({"scaleDown": "off"}, "scaleDown: 'off' is not a map"),
        ({"zones": "us-east-1a"}, "zones: 'us-east-1a' is not a list (e.g. [a, b])"),
        ({"zones": ["us-east-1a", 7]}, "zones[1]: 7 is not a non-empty string"),
        ({"region": ""}, "region: must not be empty"),
        ({"cloud": None}, "cloud: null is not a string"),
        ({"clusterName": "Prod_GPU"}, "clusterName: 'Prod_GPU' is not a DNS label"),
        ({"clusterName": "a" * 64}, "clusterName: '" + "a" * 50),
        ({"logFormat": "text"}, "logFormat: 'text' is not one of auto, json, console"),
        (
            {"logLevel": "warn"},
            "logLevel: 'warn' is not one of debug, info, warning, error (did you mean 'warning'?)",
        ),
        ({"metricsAddress": "8080"}, "metricsAddress: '8080' is not host:port"),
        ({"metricsAddress": ":70000"}, "metricsAddress: ':70000' is not host:port"),
        ({"architectures": ["sparc"]}, "architectures[0]: 'sparc' is not one of amd64, arm64"),
        ({"architectures": []}, "architectures: must list at least one item"),
        ({"nodeLabels": ["team=ml"]}, "nodeLabels: ['team=ml'] is not a map"),
        ({"nodeLabels": {"team": 1}}, "nodeLabels.team: 1 is not a string (quote it)"),
        (
            {"nodeLabels": {"team": "machine learning"}},
            "nodeLabels.team: 'machine learning' is not a valid label value",
        ),
        ({"nodeLabels": {"-team": "ml"}}, "nodeLabels: '-team' is not a valid key"),
        ({"daemonSetOverhead": "200m"}, "daemonSetOverhead: '200m' is not a resource map"),
        ({"kubeReserved": {"memory": "lots"}}, "kubeReserved.memory: 'lots' is not a quantity"),
        ({"kubeReserved": {"memory": "-1Gi"}}, "kubeReserved.memory: '-1Gi' is negative"),
    ],
)
def test_a_wrong_value_is_reported_with_its_key_path_and_the_value(
    data: dict[str, str]
    | dict[str, float]
    | dict[str, bool]
    | dict[str, int]
    | dict[str, list[str]]
    | dict[str, dict[str, int]]
    | dict[str, dict[str, str]]
    | dict[str, dict[str, float]]
    | dict[str, list[str | int]]
    | dict[str, None]
    | dict[str, Any],
    error: str,
) -> None:
    errors = errors_of(data)
    assert len(errors) == 1
    assert errors[0].startswith(error)


def test_metrics_address_accepts_the_usual_listen_forms() -> None:
    for address in (":8080", "0.0.0.0:8080", "localhost:9090", "[::]:8080", "[::1]:0"):
        assert config_from_mapping({"metricsAddress": address}).metrics_address == address


def test_x86_64_and_aarch64_are_normalised_to_kubernetes_architecture_names() -> None:
    assert config_from_mapping({"architectures": ["x86_64", "aarch64"]}).architectures == ("amd64", "arm64")


def test_empty_scheduler_names_mean_any_scheduler() -> None:
    assert config_from_mapping({"schedulerNames": []}).scheduler_names == ()


def test_an_empty_type_regexp_means_no_constraint_but_an_empty_reason_regexp_matches_everything() -> None:
    config = config_from_mapping({"instanceTypeRegexp": "", "pendingPodReasonRegexp": ""})
    assert config.instance_type_regexp is None
    assert config.pending_pod_reason_regexp.search("0/3 nodes are available")


def test_node_tags_are_not_held_to_label_syntax() -> None:
    tags = {"kubernetes.io/cluster/prod": "owned", "Cost Center": "GPU research"}
    assert config_from_mapping({"nodeTags": tags}).node_tags == tags


# --- durations ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2h", 7200.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("1h0m0.5s", 3600.5),
        (" 45s ", 45.0),
        ("90", 90.0),
        (90, 90.0),
        (2.5, 2.5),
        ("0s", 0.0),
    ],
)
def test_durations_use_go_style_units_and_bare_numbers_are_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text, field="d") == pytest.approx(seconds)


@pytest.mark.parametrize("garbage", ["5x", "", "m", "5 m", "1d", "5m3", "1h-30m", "ten seconds", "nan"])
def test_a_malformed_duration_names_the_field_and_the_value(garbage: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_duration(garbage, field="scanInterval")
    assert str(caught.value) == f"scanInterval: {garbage!r} is not a duration (e.g. 30s, 5m, 1h30m)"


@pytest.mark.parametrize("negative", ["-5s", -5])
def test_a_negative_duration_is_rejected(negative: str | int) -> None:
    with pytest.raises(ConfigError, match="is below 0"):
        parse_duration(negative, field="scanInterval")


@pytest.mark.parametrize("not_text", [True, None, [5], float("inf")])
def test_a_duration_must_be_text_or_a_number(not_text: object) -> None:
    with pytest.raises(ConfigError, match="is not a duration"):
        parse_duration(not_text, field="scanInterval")  # type: ignore[arg-type]


def test_the_example_bad_duration_is_reported_in_its_section() -> None:
    assert errors_of({"scaleDown": {"nodeUnneededDuration": "5x"}}) == [
        "scaleDown.nodeUnneededDuration: '5x' is not a duration (e.g. 30s, 5m, 1h30m)"
    ]


def test_intervals_must_be_longer_than_zero_but_waits_may_be_zero() -> None:
    assert errors_of({"scanInterval": "0s"}) == ["scanInterval: '0s' must be longer than 0s"]
    config = config_from_mapping({"scaleDown": {"nodeUnneededDuration": 0}, "newNodeGracePeriod": "0s"})
    assert config.scale_down.node_unneeded_duration == 0
    assert config.new_node_grace_period == 0


def test_batch_idle_duration_may_not_exceed_batch_max_duration() -> None:
    assert errors_of({"batchIdleDuration": "20s"}) == [
        "batchIdleDuration: 20s is longer than batchMaxDuration (10s)"
    ]
    assert config_from_mapping({"batchIdleDuration": "10s"}).batch_idle_duration == 10.0


def test_leader_election_timings_must_be_consistent() -> None:
    assert errors_of({"leaderElection": {"renewDeadline": "15s"}}) == [
        "leaderElection.renewDeadline: 15s must be shorter than leaderElection.leaseDuration (15s)"
    ]
    assert errors_of({"leaderElection": {"retryPeriod": "500ms"}}) == [
        "leaderElection.retryPeriod: '500ms' is below 1s"
    ]
    assert errors_of({"leaderElection": {"retryPeriod": "10s"}}) == [
        "leaderElection.retryPeriod: 10s must be shorter than leaderElection.renewDeadline (10s)"
    ]


# --- quantities ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "milli"), [("512", 512_000), ("1000m", 1000), (64, 64_000), ("1.5", 1500), ("0", 0)]
)
def test_the_cluster_cpu_limit_is_a_cpu_quantity_kept_in_milli_units(value: str | int, milli: int) -> None:
    assert config_from_mapping({"clusterCPULimit": value}).cluster_cpu_limit == milli


def test_memory_quantities_are_kept_in_milli_bytes() -> None:
    config = config_from_mapping({"binPackingNodeMemory": "16Gi", "binSelectPodMemoryThreshold": "512Mi"})
    assert config.bin_packing_node_memory == 16 * 2**30 * 1000
    assert config.bin_select_pod_memory_threshold == 512 * 2**20 * 1000


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("lots", "binPackingNodeCpu: 'lots' is not a quantity"),
        ("-2", "binPackingNodeCpu: '-2' is below 0"),
        (None, "binPackingNodeCpu: null is not a quantity"),
        (True, "binPackingNodeCpu: true is not a quantity"),
    ],
)
def test_a_bad_quantity_names_the_key_and_value(value: str | bool | None, error: str) -> None:
    [message] = errors_of({"binPackingNodeCpu": value})
    assert message.startswith(error)


# --- opt-in selectors ---------------------------------------------------------------------------------


def test_luna_style_labels_string_becomes_a_map() -> None:
    config = config_from_mapping({"labels": "elotl-luna=true, team=ml ,"})
    assert config.labels == {"elotl-luna": "true", "team": "ml"}


def test_labels_may_also_be_given_as_a_yaml_map() -> None:
    assert config_from_mapping({"labels": {"elotl-luna": "true"}}).labels == {"elotl-luna": "true"}


def test_pod_annotations_values_are_not_held_to_label_value_syntax() -> None:
    config = config_from_mapping({"podAnnotations": "example.com/purpose=batch training"})
    assert config.pod_annotations == {"example.com/purpose": "batch training"}


def test_selector_string_parsing() -> None:
    assert parse_selector_string("", field="labels") == {}
    assert parse_selector_string("a=1,b=", field="labels") == {"a": "1", "b": ""}
    assert parse_selector_string("example.com/x=y", field="labels") == {"example.com/x": "y"}


def test_a_malformed_selector_string_reports_every_bad_entry() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_selector_string("a=1,oops,=2,a=3", field="labels")
    assert caught.value.errors == [
        "labels: 'oops' is not key=value",
        "labels: '=2' is not key=value",
        "labels: key 'a' appears twice",
    ]


def test_a_selector_with_an_invalid_label_key_is_rejected() -> None:
    [message] = errors_of({"labels": "bad key=1"})
    assert message.startswith("labels: 'bad key' is not a valid key")


# --- taints -------------------------------------------------------------------------------------------


def test_node_taints_accept_key_value_effect_and_key_effect() -> None:
    config = config_from_mapping(
        {
            "nodeTaints": [
                "nvidia.com/gpu=present:NoSchedule",
                "dedicated:NoExecute",
                "spot=true:PreferNoSchedule",
            ]
        }
    )
    assert config.node_taints == (
        Taint("nvidia.com/gpu", "present", "NoSchedule"),
        Taint("dedicated", "", "NoExecute"),
        Taint("spot", "true", "PreferNoSchedule"),
    )


def test_node_taints_accept_the_kubernetes_map_form() -> None:
    config = config_from_mapping({"nodeTaints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]})
    assert config.node_taints == (Taint("gpu", "true", "NoSchedule"),)


@pytest.mark.parametrize(
    ("taint", "error"),
    [
        ("gpu=true", "nodeTaints[0]: 'gpu=true' is not key=value:Effect or key:Effect"),
        (
            "gpu=true:NoSchedul",
            "nodeTaints[0]: effect 'NoSchedul' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        ("gpu:", "nodeTaints[0]: effect '' is not one of"),
        ("=true:NoSchedule", "nodeTaints[0]: '' is not a valid key"),
        (7, "nodeTaints[0]: 7 is not key=value:Effect or key:Effect"),
        ({"key": "gpu", "efect": "NoSchedule"}, "nodeTaints[0].efect: unknown key (did you mean 'effect'?)"),
    ],
)
def test_a_malformed_taint_is_reported_by_position(taint: str | int | dict[str, str], error: str) -> None:
    [message] = errors_of({"nodeTaints": [taint]})
    assert message.startswith(error)


# --- capacity types -----------------------------------------------------------------------------------


def test_capacity_types_keep_their_order_as_the_preference() -> None:
    assert config_from_mapping({"capacityTypes": ["spot", "on-demand"]}).capacity_types == (
        "spot",
        "on-demand",
    )
    assert config_from_mapping({"capacityTypes": ["on-demand", "spot"]}).capacity_types == (
        "on-demand",
        "spot",
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ([], "capacityTypes: must list at least one item"),
        (None, "capacityTypes: must list at least one item"),
        (["spot", "spot"], "capacityTypes: 'spot' is listed twice"),
        (["preemptible"], "capacityTypes[0]: 'preemptible' is not one of spot, on-demand, reserved"),
        (["Spot"], "capacityTypes[0]: 'Spot' is not one of spot, on-demand, reserved (did you mean 'spot'?)"),
        ("spot", "capacityTypes: 'spot' is not a list (e.g. [a, b])"),
    ],
)
def test_capacity_types_must_be_a_non_empty_list_of_spot_on_demand_and_reserved(
    value: object, error: str
) -> None:
    assert errors_of({"capacityTypes": value}) == [error]


# --- unknown keys and error collection ----------------------------------------------------------------


def test_an_unknown_top_level_key_is_rejected_with_a_suggestion() -> None:
    assert errors_of({"clusterGpuLimit": 8}) == [
        "clusterGpuLimit: unknown key (did you mean 'clusterGPULimit'?)"
    ]


def test_an_unknown_nested_key_is_rejected_with_a_suggestion() -> None:
    assert errors_of({"scaleDown": {"nodeUneededDuration": "10m"}}) == [
        "scaleDown.nodeUneededDuration: unknown key (did you mean 'nodeUnneededDuration'?)"
    ]
    assert errors_of({"leaderElection": {"leaseDurtion": "10s"}}) == [
        "leaderElection.leaseDurtion: unknown key (did you mean 'leaseDuration'?)"
    ]


def test_an_unknown_key_with_nothing_close_gets_no_suggestion() -> None:
    assert errors_of({"frobnicate": 1}) == ["frobnicate: unknown key"]


def test_all_errors_are_reported_together_in_the_order_written_on_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(
            {
                "clusterGPULimit": -1,
                "pendingPodReasonRegexp": "(",
                "scaleDown": {"nodeUnneededDuration": "5x", "maxParallelDrans": 2},
                "capacityTypes": ["spot", "spt"],
            },
            source="config.yaml",
        )
    err = caught.value
    assert err.errors == [
        "clusterGPULimit: -1 is below 0",
        "pendingPodReasonRegexp: invalid regexp '(': missing ), unterminated subpattern at position 0",
        "scaleDown.maxParallelDrans: unknown key (did you mean 'maxParallelDrains'?)",
        "scaleDown.nodeUnneededDuration: '5x' is not a duration (e.g. 30s, 5m, 1h30m)",
        "capacityTypes[1]: 'spt' is not one of spot, on-demand, reserved (did you mean 'spot'?)",
    ]
    assert str(err) == "config.yaml: " + "; ".join(err.errors)
    assert "\n" not in str(err)


def test_the_error_message_matches_the_documented_example() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"clusterGPULimit": -1, "pendingPodReasonRegexp": "("}, source="config.yaml")
    assert str(caught.value) == (
        "config.yaml: clusterGPULimit: -1 is below 0; "
        "pendingPodReasonRegexp: invalid regexp '(': missing ), unterminated subpattern at position 0"
    )


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(("key", "_attr"), REGEXP_KEYS)
def test_an_invalid_regexp_is_reported_with_the_pattern(key: str, _attr: str) -> None:
    [message] = errors_of({key: "[a-"})
    assert message.startswith(f"{key}: invalid regexp '[a-': ")


def test_a_document_that_is_not_a_map_is_rejected() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(["cloud", "aws"], source="x.yaml")  # type: ignore[arg-type]
    assert str(caught.value) == "x.yaml: the document must be a map of settings, not ['cloud', 'aws']"


# --- files --------------------------------------------------------------------------------------------


def test_a_config_file_is_read_over_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "cloud: gcp\nregion: us-central1\nscaleDown:\n  nodeUnneededDuration: 1m30s\n")
    config = load_config(path)
    assert (config.cloud, config.region) == ("gcp", "us-central1")
    assert config.scale_down.node_unneeded_duration == 90.0
    assert config.scale_down.max_parallel_drains == 5


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "cloud: aws\nzones: [us-east-1a,\n  region: x: y\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3:")
    assert "\n" not in message
    assert "Traceback" not in message


def test_a_config_file_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    path = write(tmp_path, "cloud: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: invalid YAML: nested too deeply")):
        load_config(path)


def test_a_yaml_syntax_error_has_the_exact_column(tmp_path: Path) -> None:
    path = write(tmp_path, 'cloud: aws\nregion: "us-east-1\n')
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3:1: found unexpected end of stream")):
        load_config(path)


def test_a_duplicate_key_is_an_error_rather_than_the_last_one_silently_winning(tmp_path: Path) -> None:
    path = write(tmp_path, "cloud: aws\nregion: x\ncloud: gcp\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:3:1: duplicate key 'cloud' (first on line 1)"


def test_a_file_whose_document_is_a_list_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "- cloud: aws\n")
    with pytest.raises(ConfigError, match="the document must be a map of settings"):
        load_config(path)


def test_a_missing_file_is_reported_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: cannot read the file: No such file or directory"


def test_errors_in_a_file_are_prefixed_with_its_path(tmp_path: Path) -> None:
    path = write(tmp_path, "maxNodes: many\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert str(caught.value) == f"{path}: maxNodes: 'many' is not an integer"
    assert caught.value.source == str(path)


# --- ConfigMaps ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["config.yaml", "config.yml"])
def test_a_configmap_may_hold_the_whole_document_under_one_key(key: str) -> None:
    config = config_from_configmap({key: "clusterGPULimit: 16\ncapacityTypes: [spot]\n"})
    assert config.cluster_gpu_limit == 16
    assert config.capacity_types == ("spot",)


def test_a_configmap_may_hold_one_entry_per_key_luna_style() -> None:
    config = config_from_configmap(
        {
            "clusterGPULimit": "16",
            "capacityTypes": "[spot]",
            "labels": "elotl-luna=true",
            "scaleDown": "nodeUnneededDuration: 10m",
            "clusterCPULimit": "",
            "pendingPodReasonRegexp": "[Ii]nsufficient nvidia.com/gpu",
            "binPackingNodeTypeRegexp": "^m5: large$",
        }
    )
    assert config.cluster_gpu_limit == 16
    assert config.capacity_types == ("spot",)
    assert config.labels == {"elotl-luna": "true"}
    assert config.scale_down.node_unneeded_duration == 600.0
    assert config.cluster_cpu_limit is None
    # String options are taken verbatim: as YAML these would be a list and a map.
    assert config.pending_pod_reason_regexp.pattern == "[Ii]nsufficient nvidia.com/gpu"
    assert config.bin_packing_node_type_regexp is not None
    assert config.bin_packing_node_type_regexp.pattern == "^m5: large$"


def test_an_empty_configmap_gives_the_defaults() -> None:
    assert config_from_configmap({}) == default_config()
    assert config_from_configmap({"config.yaml": ""}) == default_config()


def test_configmap_errors_name_the_configmap_and_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_configmap(
            {"clusterGPULimit": "-1", "maxNode": "3"}, source="configmap tidal-system/tidal"
        )
    assert str(caught.value) == (
        "configmap tidal-system/tidal: clusterGPULimit: -1 is below 0; "
        "maxNode: unknown key (did you mean 'maxNodes'?)"
    )


def test_a_yaml_error_in_a_luna_style_entry_is_reported_with_the_others() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_configmap({"capacityTypes": "[spot", "maxNodes": "-3"})
    assert caught.value.errors[0].startswith("capacityTypes: invalid YAML line 1 column 6: ")
    assert caught.value.errors[1:] == ["maxNodes: -3 is below 0"]


def test_a_yaml_error_in_a_configmap_document_names_the_key_and_line() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_configmap({"config.yaml": "cloud: aws\nzones: [a\n"}, source="configmap")
    assert str(caught.value).startswith("configmap/config.yaml:3:1: ")


def test_a_whole_document_key_cannot_be_mixed_with_luna_style_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_configmap({"config.yaml": "cloud: aws\n", "maxNodes": "3"})
    assert str(caught.value) == "configmap: config.yaml holds the whole configuration; move maxNodes into it"
