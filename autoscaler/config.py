"""tidal's configuration: typed, validated, with every default taken from ``autoscaler/defaults.yaml``.

Configuration comes from a YAML file (``tidal plan --config``) or a ConfigMap. Keys are camelCase as in
Kubernetes and Luna; attributes are snake_case. Validation reports every problem at once, each naming its key
path and the offending value, because a ConfigMap that fails one error at a time wastes a deploy per typo.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources as package_files
from types import MappingProxyType
from typing import Any, NamedTuple

from autoscaler import config_schema as schema
from autoscaler.config_schema import ConfigError, parse_duration, parse_selector_string
from autoscaler.disruption.budgets import Budget, budget_list
from autoscaler.disruption.unhealthy import ConditionRule, condition_rules
from autoscaler.gpu.layouts import GpuSharing, gpu_sharing
from autoscaler.model import ON_DEMAND, RESERVED, SPOT, Taint
from autoscaler.resources import Resources

__all__ = [
    "Config",
    "ConfigError",
    "DisruptionConfig",
    "KubeClientConfig",
    "LeaderElectionConfig",
    "ReservationsConfig",
    "ScaleDownConfig",
    "config_from_configmap",
    "config_from_mapping",
    "default_config",
    "load_config",
    "parse_duration",
    "parse_selector_string",
]


@dataclass(frozen=True, slots=True)
class ScaleDownConfig:
    """``scaleDown``: removing nodes tidal launched once they are empty or under-used."""

    enabled: bool
    node_unneeded_duration: float
    utilization_threshold_bin_packing: float
    utilization_threshold_bin_selection: float
    max_parallel_drains: int
    max_empty_bulk_delete: int
    replace_savings: float
    replace_young_pods_within: float


KEEP = "keep"
RELEASE = "release"
WAIT = "wait"


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
    queue_budgets: Mapping[str, float]
    capacity_types: tuple[str, ...]
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


class _Key(NamedTuple):
    attr: str
    convert: schema.Converter
    # A Luna-style ConfigMap entry for a string option is taken verbatim: read as YAML, a regexp such as
    # "[0-9]+" would turn into a list and "a: b" into a map.
    verbatim: bool = False


_CLUSTER_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_CPU_OR_NONE = schema.optional(schema.quantity)
_RESOURCES_OR_NONE = schema.optional(schema.resources)

_SCALE_DOWN = {
    "enabled": _Key("enabled", schema.boolean),
    "nodeUnneededDuration": _Key("node_unneeded_duration", schema.duration(positive=False)),
    "utilizationThresholdBinPacking": _Key(
        "utilization_threshold_bin_packing", schema.number(minimum=0, maximum=1)
    ),
    "utilizationThresholdBinSelection": _Key(
        "utilization_threshold_bin_selection", schema.number(minimum=0, maximum=1)
    ),
    "maxParallelDrains": _Key("max_parallel_drains", schema.integer(minimum=1)),
    "maxEmptyBulkDelete": _Key("max_empty_bulk_delete", schema.integer(minimum=1)),
    "replaceSavings": _Key("replace_savings", schema.number(minimum=0, maximum=1)),
    "replaceYoungPodsWithin": _Key("replace_young_pods_within", schema.duration(positive=False)),
}

_RESERVATIONS = {
    "reservedNodes": _Key("reserved_nodes", schema.choice((KEEP, RELEASE))),
    "drainBeforeBlockEnd": _Key("drain_before_block_end", schema.duration()),
    "beforeBlockStart": _Key("before_block_start", schema.choice((WAIT, ON_DEMAND))),
}

_DISRUPTION = {
    "budgets": _Key("budgets", budget_list),
    "nodeMaxLifetime": _Key("node_max_lifetime", schema.duration(positive=False)),
    "drift": _Key("drift", schema.boolean),
    "unhealthyConditions": _Key("unhealthy_conditions", condition_rules),
    "replacementTimeout": _Key("replacement_timeout", schema.duration()),
}

_LEADER_ELECTION = {
    "enabled": _Key("enabled", schema.boolean),
    "namespace": _Key("namespace", schema.text(pattern=_CLUSTER_NAME, rule="a DNS label", max_length=63)),
    "leaseName": _Key(
        "lease_name", schema.text(pattern=r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rule="a DNS name")
    ),
    "leaseDuration": _Key("lease_duration", schema.duration()),
    "renewDeadline": _Key("renew_deadline", schema.duration()),
    "retryPeriod": _Key("retry_period", schema.duration(minimum=1.0)),
}

_KUBE_CLIENT = {
    "qps": _Key("qps", schema.number(minimum=0)),
    "burst": _Key("burst", schema.integer(minimum=1)),
}

_SECTIONS: dict[str, tuple[str, type, dict[str, _Key]]] = {
    "scaleDown": ("scale_down", ScaleDownConfig, _SCALE_DOWN),
    "reservations": ("reservations", ReservationsConfig, _RESERVATIONS),
    "disruption": ("disruption", DisruptionConfig, _DISRUPTION),
    "leaderElection": ("leader_election", LeaderElectionConfig, _LEADER_ELECTION),
    "kubeClient": ("kube_client", KubeClientConfig, _KUBE_CLIENT),
}

_PROVIDERS = ("simulated", "aws", "gcp", "azure")

_TOP = {
    "cloud": _Key("cloud", schema.text(), verbatim=True),
    "region": _Key("region", schema.text(), verbatim=True),
    "zones": _Key("zones", schema.string_list(unique=True)),
    "clusterName": _Key(
        "cluster_name",
        schema.text(
            pattern=_CLUSTER_NAME, max_length=63, rule="a DNS label (lowercase letters, digits and '-')"
        ),
        verbatim=True,
    ),
    "labels": _Key("labels", schema.string_map(label_syntax=True, label_values=True, selector=True), True),
    "podAnnotations": _Key("pod_annotations", schema.string_map(label_syntax=True, selector=True), True),
    "schedulerNames": _Key("scheduler_names", schema.string_list(unique=True)),
    "pendingPodReasonRegexp": _Key("pending_pod_reason_regexp", schema.regexp(), verbatim=True),
    "clusterGPULimit": _Key("cluster_gpu_limit", schema.optional(schema.integer(minimum=0))),
    "clusterCPULimit": _Key("cluster_cpu_limit", _CPU_OR_NONE),
    "maxNodes": _Key("max_nodes", schema.optional(schema.integer(minimum=0))),
    "maxNodeCostPerHour": _Key("max_node_cost_per_hour", schema.optional(schema.number(positive=True))),
    "maxFallbackPriceRatio": _Key("max_fallback_price_ratio", schema.optional(schema.number(above=1))),
    "queueBudgets": _Key("queue_budgets", schema.number_map(item=schema.number(positive=True))),
    "capacityTypes": _Key(
        "capacity_types",
        schema.string_list(item=schema.choice((SPOT, ON_DEMAND, RESERVED)), non_empty=True, unique=True),
    ),
    "instanceFamilyInclusions": _Key("instance_family_inclusions", schema.string_list(unique=True)),
    "instanceFamilyExclusions": _Key("instance_family_exclusions", schema.string_list(unique=True)),
    "instanceTypeRegexp": _Key("instance_type_regexp", schema.regexp(empty_is_none=True), verbatim=True),
    "gpuSkus": _Key("gpu_skus", schema.string_list(unique=True)),
    "architectures": _Key(
        "architectures", schema.string_list(item=schema.architecture, non_empty=True, unique=True)
    ),
    "binSelectPodCpuThreshold": _Key("bin_select_pod_cpu_threshold", schema.quantity),
    "binSelectPodMemoryThreshold": _Key("bin_select_pod_memory_threshold", schema.quantity),
    "binPackingNodeCpu": _Key("bin_packing_node_cpu", schema.quantity),
    "binPackingNodeMemory": _Key("bin_packing_node_memory", schema.quantity),
    "binPackingNodeMinPodCount": _Key("bin_packing_node_min_pod_count", schema.integer(minimum=1)),
    "binPackingNodeTypeRegexp": _Key(
        "bin_packing_node_type_regexp", schema.regexp(empty_is_none=True), verbatim=True
    ),
    "nodeLabels": _Key("node_labels", schema.string_map(label_syntax=True, label_values=True)),
    "nodeTaints": _Key("node_taints", schema.taint_list),
    "nodeTags": _Key("node_tags", schema.string_map(label_syntax=False)),
    "daemonSetOverhead": _Key("daemon_set_overhead", _RESOURCES_OR_NONE),
    "kubeReserved": _Key("kube_reserved", _RESOURCES_OR_NONE),
    "maxPodsPerNode": _Key("max_pods_per_node", schema.integer(minimum=1, maximum=1000)),
    "gpuNodeTaint": _Key("gpu_node_taint", schema.boolean),
    "assumeExtendedResourceToleration": _Key("assume_extended_resource_toleration", schema.boolean),
    "gpuSharing": _Key("gpu_sharing", gpu_sharing),
    "scanInterval": _Key("scan_interval", schema.duration()),
    "batchIdleDuration": _Key("batch_idle_duration", schema.duration(positive=False)),
    "batchMaxDuration": _Key("batch_max_duration", schema.duration()),
    "registrationTimeout": _Key("registration_timeout", schema.duration()),
    "gpuReadinessTimeout": _Key("gpu_readiness_timeout", schema.duration()),
    "offeringUnavailableDuration": _Key("offering_unavailable_duration", schema.duration()),
    "gangLaunchTimeout": _Key("gang_launch_timeout", schema.duration()),
    "newNodeGracePeriod": _Key("new_node_grace_period", schema.duration(positive=False)),
    "maxParallelLaunches": _Key("max_parallel_launches", schema.integer(minimum=1)),
    "metricsAddress": _Key("metrics_address", schema.address, verbatim=True),
    "logFormat": _Key("log_format", schema.choice(("auto", "json", "console")), verbatim=True),
    "logLevel": _Key("log_level", schema.choice(("debug", "info", "warning", "error")), verbatim=True),
}

_KNOWN = (*_TOP, *_SECTIONS, *_PROVIDERS)
_DEFAULTS_FILE = "defaults.yaml"
_CONFIGMAP_DOCUMENT_KEYS = ("config.yaml", "config.yml")


@functools.cache
def _defaults() -> Mapping[str, Any]:
    """The raw default document; never mutated, only read when merging."""
    source = f"autoscaler/{_DEFAULTS_FILE}"
    document = schema.load_yaml(
        package_files.files("autoscaler").joinpath(_DEFAULTS_FILE).read_text(), source
    )
    if not isinstance(document, Mapping):
        raise ConfigError(["the document must be a map of settings"], source)
    return document


def _convert(
    keys: Mapping[str, _Key], values: Mapping[str, Any], prefix: str, errors: list[str]
) -> dict[str, Any]:
    out = {}
    for key, spec in keys.items():
        try:
            out[spec.attr] = spec.convert(values[key], f"{prefix}{key}")
        except ConfigError as err:
            errors.extend(err.errors)
    return out


def _section(name: str, given: Any, errors: list[str]) -> Any:
    attr_type, keys = _SECTIONS[name][1:]
    if given is None:  # an empty section in YAML (`scaleDown:`) means "all defaults"
        given = {}
    if not isinstance(given, Mapping):
        errors.append(f"{name}: {schema.show(given)} is not a map")
        return None
    errors.extend(schema.unknown_keys(given, keys, f"{name}."))
    merged = {**_defaults()[name], **{k: v for k, v in given.items() if k in keys}}
    fields = _convert(keys, merged, f"{name}.", errors)
    return attr_type(**fields) if len(fields) == len(keys) else None


# Clouds whose zone names carry their region (us-east-1a and us-east-1-bos-1a, us-central1-a, eastus-1): there a
# zone of another region is certainly a mistake, which would plan nodes in that zone at this region's prices.
# Names of any other form (an AWS zone ID, a bare Azure zone number) are left to the provider.
_ZONE_NAMES = {
    "aws": re.compile(r"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)(?:[a-z]|-[a-z0-9-]+)"),
    "gcp": re.compile(r"(?P<region>[a-z]+-[a-z]+\d+)-[a-z]"),
    "azure": re.compile(r"(?P<region>[a-z]+\d*)-\d"),
}


def _zones_in_region(values: Mapping[str, Any]) -> list[str]:
    pattern = _ZONE_NAMES.get(values.get("cloud") or "")
    region, zones = values.get("region"), values.get("zones")
    if pattern is None or not region or not zones:
        return []
    errors = []
    for zone in zones:
        named = pattern.fullmatch(zone)
        if named and named["region"] != region:
            errors.append(
                f"zones: {zone!r} is a zone of {named['region']}, not of region {region!r} "
                f"({values['cloud']} names a zone after its region)"
            )
    return errors


def _cross_checks(values: Mapping[str, Any]) -> list[str]:
    """Rules that tie two options together; each only when both options are valid on their own."""
    errors = []
    errors.extend(_zones_in_region(values))
    fmt = schema.format_seconds
    idle, longest = values.get("batch_idle_duration"), values.get("batch_max_duration")
    if idle is not None and longest is not None and idle > longest:
        errors.append(f"batchIdleDuration: {fmt(idle)} is longer than batchMaxDuration ({fmt(longest)})")
    election = values.get("leader_election")
    if election is not None:
        if election.renew_deadline >= election.lease_duration:
            errors.append(
                f"leaderElection.renewDeadline: {fmt(election.renew_deadline)} must be shorter than "
                f"leaderElection.leaseDuration ({fmt(election.lease_duration)})"
            )
        if election.retry_period >= election.renew_deadline:
            errors.append(
                f"leaderElection.retryPeriod: {fmt(election.retry_period)} must be shorter than "
                f"leaderElection.renewDeadline ({fmt(election.renew_deadline)})"
            )
    return errors


def config_from_mapping(data: Mapping[str, Any], *, source: str = "config") -> Config:
    """Validate a parsed configuration document laid over the defaults; ConfigError lists every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError([f"the document must be a map of settings, not {schema.show(data)}"], source)
    defaults = _defaults()
    errors = schema.unknown_keys(data, _KNOWN)
    values = _convert(_TOP, {**defaults, **data}, "", errors)
    for name, (attr, _, _) in _SECTIONS.items():
        values[attr] = _section(name, data.get(name), errors)
    providers = {}
    for name in _PROVIDERS:
        try:
            providers[name] = schema.raw_map(data.get(name, defaults[name]), name)
        except ConfigError as err:
            errors.extend(err.errors)
    values["providers"] = MappingProxyType(providers)
    errors.extend(_cross_checks(values))
    if errors:
        # Report in the order the user wrote the keys, so the message reads alongside the file.
        written = {str(key): i for i, key in enumerate(data)}
        errors.sort(key=lambda e: written.get(re.split(r"[.\[:]", e, maxsplit=1)[0], len(written)))
        raise ConfigError(errors, source)
    return Config(**values)


@functools.cache
def default_config() -> Config:
    """The configuration with every option at its documented default."""
    return config_from_mapping({}, source=f"autoscaler/{_DEFAULTS_FILE}")


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read a YAML configuration file (None means the defaults); an empty file is the defaults too."""
    if path is None:
        return default_config()
    source = os.fspath(path)
    return config_from_mapping(read_document(source), source=source)


def read_document(path: str) -> Mapping[str, Any]:
    """A configuration file's settings as written (an empty file has none), not yet validated."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ConfigError([f"cannot read the file: {err.strerror or err}"], path) from None
    except UnicodeDecodeError:
        raise ConfigError(["is not UTF-8 text"], path) from None
    document = schema.load_yaml(text, path)
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError([f"the document must be a map of settings, not {schema.show(document)}"], path)
    return document


def config_from_configmap(data: Mapping[str, str], *, source: str = "configmap") -> Config:
    """Build the configuration from a ConfigMap's ``data``.

    Either one entry ``config.yaml`` (or ``config.yml``) holds the whole YAML document, or, Luna style, every
    entry is one top-level option whose value is that option's YAML (``{"clusterGPULimit": "16"}``).
    """
    document_keys = [k for k in _CONFIGMAP_DOCUMENT_KEYS if k in data]
    if document_keys:
        others = sorted(k for k in data if k != document_keys[0])
        if others:
            raise ConfigError(
                [f"{document_keys[0]} holds the whole configuration; move {', '.join(others)} into it"],
                source,
            )
        document = schema.load_yaml(data[document_keys[0]], f"{source}/{document_keys[0]}")
        return config_from_mapping({} if document is None else document, source=source)
    parsed: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in data.items():
        if not isinstance(value, str) or (key in _TOP and _TOP[key].verbatim):
            parsed[key] = value
            continue
        try:
            parsed[key] = schema.load_yaml(value, key)
        except ConfigError as err:
            where = err.source.removeprefix(key).replace(":", " line ", 1).replace(":", " column ", 1)
            errors.append(f"{key}: invalid YAML{where}: {'; '.join(err.errors)}")
    try:
        config = config_from_mapping(parsed, source=source)
    except ConfigError as err:
        errors.extend(err.errors)
    if errors:
        raise ConfigError(errors, source)
    return config
