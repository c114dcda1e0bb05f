"""GPU layouts of new nodes: MIG cuts and device-plugin sharing (time-slicing, MPS) tidal plans with.

A node's GPUs reach pods as whole ``nvidia.com/gpu`` unless NVIDIA's GPU operator is told otherwise, by
labels on the node: ``nvidia.com/mig.config`` makes the MIG manager cut every GPU by a layout (and the device
plugin advertise ``nvidia.com/mig-<profile>``), ``nvidia.com/device-plugin.config`` makes the device plugin
replicate each GPU (``nvidia.com/gpu`` × replicas). The ``gpuSharing`` configuration says which layout new nodes
of each GPU model get; each becomes an offering variant (:class:`~autoscaler.core.offering.GpuLayout`) with the
resources the node will advertise and the label that makes it so. MIG variants stand beside the whole-GPU
offering (a node is cut only for pods that ask for MIG instances); a device-plugin config replaces it (every
node of that model is shared, as the operator would share it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from autoscaler.config.schema import ConfigError, show
from autoscaler.core.gpu.device_plugin import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    SharingConfig,
    SharingConfigError,
    SharingStrategy,
    sharing_config,
)
from autoscaler.core.gpu.dra_demand import DRA_GPU, DRA_LABEL
from autoscaler.core.gpu.mig import (
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_RESOURCE_PREFIX,
    MigError,
    MigLayout,
    layout,
    mig_capable,
    mig_gpu,
    node_mig_resources,
    parse_profile,
)
from autoscaler.core.offering import GpuLayout, Offering

__all__ = [
    "NO_GPU_SHARING",
    "GpuSharing",
    "gpu_sharing",
    "gpus_visible",
    "mig_resources",
    "with_layouts",
]

_STRATEGIES = ("single", "mixed")
_KEYS = (
    "migLayouts",
    "migStrategy",
    "migCustomLayouts",
    "devicePluginConfigs",
    "devicePluginConfigByModel",
    "dra",
)


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """``gpuSharing``: the MIG layout and device-plugin config new nodes of each GPU model get."""

    mig_layouts: Mapping[str, str] = field(default_factory=dict)  # normalised GPU model → layout name
    mig_strategy: str = "mixed"
    mig_custom: Mapping[str, MigLayout] = field(default_factory=dict)
    device_plugin: Mapping[str, SharingConfig] = field(default_factory=dict)  # config name → sharing
    device_plugin_by_model: Mapping[str, str] = field(default_factory=dict)  # normalised model → config
    dra: bool = False  # NVIDIA GPU nodes may be launched for pods whose ResourceClaims ask for GPUs

    @property
    def configured(self) -> bool:
        """Some GPU model gets a layout."""
        return bool(self.mig_layouts or self.device_plugin_by_model or self.dra)


NO_GPU_SHARING = GpuSharing()


def _model(name: str) -> str:
    return name.upper().replace(" ", "").replace("-", "").removeprefix("NVIDIA")


def _string_map(value: Any, path: str, errors: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(f"{path}: {show(value)} is not a map")
        return {}
    out = {}
    for k, v in value.items():
        if not isinstance(v, str) or not v:
            errors.append(f"{path}.{k}: {show(v)} is not a name")
        else:
            out[str(k)] = v
    return out


def _custom(value: Any, path: str, errors: list[str]) -> dict[str, MigLayout]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(f"{path}: {show(value)} is not a map of layout name to {{profile: count}}")
        return {}
    out = {}
    for name, devices in value.items():
        if not isinstance(devices, Mapping) or not devices:
            errors.append(f"{path}.{name}: {show(devices)} is not a map of MIG profile to instances per GPU")
            continue
        parsed: dict[str, int] = {}
        for profile, count in devices.items():
            try:
                key = parse_profile(str(profile)).name
            except MigError as err:
                errors.append(f"{path}.{name}.{profile}: {err}")
                continue
            if type(count) is not int or count < 1:
                errors.append(f"{path}.{name}.{profile}: {show(count)} is not a whole number above 0")
                continue
            parsed[key] = count
        out[str(name)] = MigLayout(True, MappingProxyType(parsed))
    return out


def _layout_name_ok(name: str, custom: Mapping[str, MigLayout]) -> bool:
    if name in custom or name in ("all-disabled", "all-balanced"):
        return True
    if not name.startswith("all-"):
        return False
    try:
        parse_profile(name.removeprefix("all-"))
    except MigError:
        return False
    return True


def gpu_sharing(value: Any, path: str) -> GpuSharing:
    """Validate the ``gpuSharing`` section; ConfigError names every bad key and value."""
    if value is None:
        return NO_GPU_SHARING
    if not isinstance(value, Mapping):
        raise ConfigError([f"{path}: {show(value)} is not a map"])
    errors = [f"{path}.{k}: unknown key (known: {', '.join(_KEYS)})" for k in value if k not in _KEYS]
    strategy = value.get("migStrategy", "mixed")
    if strategy not in _STRATEGIES:
        errors.append(f"{path}.migStrategy: {show(strategy)} is not one of single, mixed")
    custom = _custom(value.get("migCustomLayouts"), f"{path}.migCustomLayouts", errors)
    mig = _string_map(value.get("migLayouts"), f"{path}.migLayouts", errors)
    for model, name in mig.items():
        if not mig_capable(model):
            errors.append(
                f"{path}.migLayouts.{model}: GPU model {model!r} cannot be cut with MIG (A100, A30, H100, H200, B200... can)"
            )
        elif not _layout_name_ok(name, custom):
            errors.append(
                f"{path}.migLayouts.{model}: {name!r} is not a layout of the GPU operator (all-disabled, "
                "all-balanced, all-<profile> such as all-1g.10gb) nor one of migCustomLayouts"
            )
    configs: dict[str, SharingConfig] = {}
    raw_configs = value.get("devicePluginConfigs")
    if raw_configs is not None and not isinstance(raw_configs, Mapping):
        errors.append(
            f"{path}.devicePluginConfigs: {show(raw_configs)} is not a map of config name to config"
        )
    else:
        for name, raw in (raw_configs or {}).items():
            try:
                configs[str(name)] = sharing_config(raw, str(name))
            except SharingConfigError as err:
                errors.append(f"{path}.devicePluginConfigs.{name}: {err}")
    by_model = _string_map(
        value.get("devicePluginConfigByModel"), f"{path}.devicePluginConfigByModel", errors
    )
    for model, name in by_model.items():
        if name not in configs:
            known = ", ".join(sorted(configs)) or "none"
            errors.append(
                f"{path}.devicePluginConfigByModel.{model}: {name!r} is not in devicePluginConfigs ({known})"
            )
    both = sorted({_model(m) for m in mig} & {_model(m) for m in by_model})
    if both:
        errors.append(
            f"{path}: GPU model {', '.join(both)} has both a MIG layout and a device plugin config; "
            "tidal plans one way of sharing per model"
        )
    dra = value.get("dra", False)
    if type(dra) is not bool:
        errors.append(f"{path}.dra: {show(dra)} is not true or false")
    if errors:
        raise ConfigError(errors)
    return GpuSharing(
        MappingProxyType({_model(k): v for k, v in mig.items()}),
        str(strategy),
        MappingProxyType(custom),
        MappingProxyType(configs),
        MappingProxyType({_model(k): v for k, v in by_model.items()}),
        bool(dra),
    )


def _mig_variant(o: Offering, name: str, sharing: GpuSharing) -> Offering | None:
    gpu = mig_gpu(o.gpu_model, o.gpu_memory_mib)
    if gpu is None or o.partial_gpu:
        return None
    chosen = layout(name, gpu, sharing.mig_custom)
    if chosen is None or not chosen.enabled:
        return None
    resources = node_mig_resources(chosen, o.gpu_count, sharing.mig_strategy)
    if not resources:
        return None
    return replace(
        o,
        layout=GpuLayout(f"mig {name}", tuple(sorted(resources.items())), ((MIG_CONFIG_LABEL, name),)),
    )


def _shared_variant(o: Offering, name: str, config: SharingConfig) -> Offering:
    resources = config.advertised("nvidia.com/gpu", o.gpu_count)
    strategy = config.strategy.value if config.strategy != SharingStrategy.NONE else "no sharing"
    replicas = config.per_device()
    return replace(
        o,
        layout=GpuLayout(
            f"{strategy} {name} x{replicas}",
            tuple(sorted(resources.items())),
            ((DEVICE_PLUGIN_CONFIG_LABEL, name),),
        ),
    )


def with_layouts(offerings: Sequence[Offering], sharing: GpuSharing) -> list[Offering]:
    """The offerings with their GPU layout variants: a MIG variant beside each offering of a model with a
    MIG layout its GPU can take, and each offering of a model with a device-plugin config replaced by the
    shared one. Offerings of other models, and all of them when nothing is configured, are returned as is."""
    if not sharing.configured:
        return list(offerings)
    out: list[Offering] = []
    for o in offerings:
        model = _model(o.gpu_model) if o.gpu_count and o.gpu_vendor.upper() != "AMD" else ""
        plugin = sharing.device_plugin_by_model.get(model) if model else None
        if plugin is not None:
            out.append(_shared_variant(o, plugin, sharing.device_plugin[plugin]))
            continue
        out.append(o)
        if sharing.dra and model and not o.partial_gpu:
            out.append(replace(o, layout=GpuLayout("dra", ((DRA_GPU, o.gpu_count),), (DRA_LABEL,))))
        mig = sharing.mig_layouts.get(model) if model else None
        if mig is not None:
            variant = _mig_variant(o, mig, sharing)
            if variant is not None:
                out.append(variant)
    return out


def mig_resources(requests: Iterable[str]) -> list[str]:
    """The MIG instance resources among resource names (``nvidia.com/mig-1g.10gb``)."""
    return sorted(r for r in requests if r.startswith(MIG_RESOURCE_PREFIX))


def gpus_visible(labels: Mapping[str, str], allocatable: Mapping[str, int], gpus: int) -> bool:
    """A node's ``gpus`` GPUs are usable by pods: once the MIG manager has applied the node's MIG layout
    (``nvidia.com/mig.config.state: success``) and something GPU-like is advertised, else once the device
    plugin advertises all of them (or replicas of them)."""
    if labels.get(DRA_LABEL[0]) == DRA_LABEL[1]:
        return True  # the DRA driver publishes the GPUs in ResourceSlices, which tidal does not watch
    config = labels.get(MIG_CONFIG_LABEL, "")
    if config and config != "all-disabled":
        if labels.get(MIG_CONFIG_STATE_LABEL) != "success":
            return False
        return any(
            v > 0
            for k, v in allocatable.items()
            if k.startswith(MIG_RESOURCE_PREFIX) or k == "nvidia.com/gpu"
        )
    whole = max(allocatable.get("nvidia.com/gpu", 0), allocatable.get("amd.com/gpu", 0))
    return whole // 1000 >= gpus


def node_layout(labels: Mapping[str, str], candidates: Iterable[Offering]) -> Offering | None:
    """Of an instance type's offering variants, the one whose layout labels the node carries (the whole-GPU
    one when it carries none)."""
    plain = None
    for o in candidates:
        if o.layout is None:
            plain = plain or o
        elif all(labels.get(k) == v for k, v in o.layout.labels):
            return o
    return plain
