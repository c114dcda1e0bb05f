"""Time-slicing and MPS: how many pods NVIDIA's device plugin lets share each GPU of a node.

The device plugin (NVIDIA/k8s-device-plugin, ``api/config/v1``; the GPU operator deploys the same plugin)
reads a config file whose ``sharing`` section replicates each GPU:

.. code-block:: yaml

    version: v1
    sharing:
      timeSlicing:            # or mps: (MPS wins when both are given; the two do not mix)
        renameByDefault: false
        failRequestsGreaterThanOne: false
        resources:
        - name: nvidia.com/gpu
          replicas: 4         # at least 2

A node with 8 GPUs then advertises ``nvidia.com/gpu: 32`` (or ``nvidia.com/gpu.shared: 32`` with
``renameByDefault: true``). Several configs live in one ConfigMap, one per key; a node picks one with the label
``nvidia.com/device-plugin.config=<key>``. Without the label the default config applies (the GPU operator's
ClusterPolicy ``devicePlugin.config.default``; with none, no sharing); a label naming no config makes the
plugin's config manager fail rather than guess. The same config applies to every GPU of the node. GPU feature
discovery then labels the node ``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.sharing-strategy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = [
    "DEVICE_PLUGIN_CONFIG_LABEL",
    "GPU_REPLICAS_LABEL",
    "GPU_SHARING_STRATEGY_LABEL",
    "NO_SHARING",
    "SharingConfig",
    "SharingConfigError",
    "SharingConfigs",
    "SharingStrategy",
    "sharing_config",
]

DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"


class SharingConfigError(ValueError):
    """A sharing config the device plugin would refuse, or a node label naming none; one line naming both."""


class SharingStrategy(StrEnum):
    """The values of the ``nvidia.com/gpu.sharing-strategy`` label."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


@dataclass(frozen=True, slots=True)
class SharingConfig:
    """One device-plugin config's sharing: replicas per device for each shared resource."""

    strategy: SharingStrategy = SharingStrategy.NONE
    replicas: Mapping[str, int] = field(default_factory=dict)  # resource → replicas per device
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False

    def advertised(self, resource: str, devices: int) -> dict[str, int]:
        """What a node with ``devices`` of ``resource`` advertises: ``{"nvidia.com/gpu": 32}`` for 8 GPUs × 4
        replicas, under ``<resource>.shared`` when renamed; the devices as they are when not shared."""
        replicas = self.replicas.get(resource)
        if not replicas:
            return {resource: devices}
        name = f"{resource}.shared" if self.rename_by_default else resource
        return {name: devices * replicas}

    def per_device(self, resource: str = "nvidia.com/gpu") -> int:
        """Pods that can share one device of ``resource`` (1 when it is not shared)."""
        return self.replicas.get(resource, 1)


NO_SHARING = SharingConfig()


def _where(name: str, path: str) -> str:
    return f"device plugin config {name!r}: {path}"


def _bool(raw: Mapping[str, Any], key: str, name: str, path: str) -> bool:
    value = raw.get(key, False)
    if type(value) is not bool:
        raise SharingConfigError(f"{_where(name, path + key)}: expected true or false, got {value!r}")
    return value


def _replicated(raw: object, name: str, path: str) -> tuple[dict[str, int], bool, bool]:
    if not isinstance(raw, Mapping):
        raise SharingConfigError(f"{_where(name, path.rstrip('.'))}: expected a map, got {raw!r}")
    resources = raw.get("resources")
    if not isinstance(resources, list) or not resources:
        raise SharingConfigError(f"{_where(name, path + 'resources')}: no resources specified")
    replicas: dict[str, int] = {}
    for i, entry in enumerate(resources):
        at = f"{path}resources[{i}]"
        if not isinstance(entry, Mapping):
            raise SharingConfigError(f"{_where(name, at)}: expected a map, got {entry!r}")
        resource = entry.get("name")
        if not isinstance(resource, str) or not resource:
            raise SharingConfigError(f"{_where(name, at + '.name')}: no resource name specified")
        count = entry.get("replicas")
        if type(count) is not int or count < 2:
            raise SharingConfigError(
                f"{_where(name, at + '.replicas')}: {count!r} is not a whole number >= 2"
            )
        # A `devices` subset is not read: the plugin ignores it too and replicates every device.
        replicas[resource] = count
    return (
        replicas,
        _bool(raw, "renameByDefault", name, path),
        _bool(raw, "failRequestsGreaterThanOne", name, path),
    )


def sharing_config(raw: Mapping[str, Any] | None, name: str = "default") -> SharingConfig:
    """The sharing of one device-plugin config (the parsed YAML of one ConfigMap key, named ``name``)."""
    if not raw:
        return NO_SHARING
    if not isinstance(raw, Mapping):
        raise SharingConfigError(f"{_where(name, 'config')}: expected a map, got {raw!r}")
    sharing = raw.get("sharing")
    if sharing is None:
        return NO_SHARING
    if not isinstance(sharing, Mapping):
        raise SharingConfigError(f"{_where(name, 'sharing')}: expected a map, got {sharing!r}")
    mps, time_slicing = sharing.get("mps"), sharing.get("timeSlicing")
    # As the plugin: MPS, when present, is the config's sharing, whatever timeSlicing says.
    if mps is not None:
        strategy, body, path = SharingStrategy.MPS, mps, "sharing.mps."
    elif time_slicing is not None:
        strategy, body, path = SharingStrategy.TIME_SLICING, time_slicing, "sharing.timeSlicing."
    else:
        return NO_SHARING
    replicas, rename, fail_above_one = _replicated(body, name, path)
    if strategy == SharingStrategy.MPS and set(replicas) != {"nvidia.com/gpu"}:
        others = sorted(set(replicas) - {"nvidia.com/gpu"})
        raise SharingConfigError(
            f"{_where(name, path + 'resources')}: MPS shares only nvidia.com/gpu (whole GPUs), not {others}"
        )
    return SharingConfig(strategy, MappingProxyType(replicas), rename, fail_above_one)


@dataclass(frozen=True, slots=True)
class SharingConfigs:
    """The named configs of the device plugin's ConfigMap and the default one; picks a node's config."""

    configs: Mapping[str, SharingConfig] = field(default_factory=dict)
    default: str | None = None

    def __post_init__(self) -> None:
        if self.default is not None and self.default not in self.configs:
            known = ", ".join(sorted(self.configs)) or "none"
            raise SharingConfigError(f"default device plugin config {self.default!r} is not one of: {known}")

    def for_node(self, labels: Mapping[str, str]) -> SharingConfig:
        """The config a node with these labels runs: the one its ``nvidia.com/device-plugin.config`` label
        names, else the default, else none. A label naming no config is an error (the plugin would not start)."""
        chosen = labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
        if not chosen:
            return self.configs[self.default] if self.default is not None else NO_SHARING
        config = self.configs.get(chosen)
        if config is None:
            known = ", ".join(sorted(self.configs)) or "none"
            raise SharingConfigError(
                f"node label {DEVICE_PLUGIN_CONFIG_LABEL}: {chosen!r} names no device plugin config (known: {known})"
            )
        return config
