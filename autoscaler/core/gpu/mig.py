"""MIG: profiles, which GPUs offer them, and the layouts NVIDIA's GPU operator cuts a GPU into.

Sources:
- Profiles and how many instances of each a GPU holds: NVIDIA's MIG user guide, "Supported MIG Profiles"
  (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html).
- Layouts: the GPU operator's default mig-parted config (NVIDIA/gpu-operator,
  ``assets/state-mig-manager/0400_configmap.yaml``). A node picks one with the label ``nvidia.com/mig.config``
  (the operator sets ``all-disabled`` on MIG-capable nodes without one when that is its default); the MIG
  manager reports progress in ``nvidia.com/mig.config.state`` (``pending``, ``rebooting``, ``success``,
  ``failed``). Every ``all-<profile>`` layout in that file holds the most instances of the profile the GPU
  allows; ``all-balanced`` is listed per GPU below.
- Resource names: with the device plugin's ``mixed`` strategy a profile is the extended resource
  ``nvidia.com/mig-<profile>`` with ``+`` written as ``.`` (``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``,
  k8s-device-plugin ``internal/rm/rm.go``); with ``single`` every instance is one ``nvidia.com/gpu``.
- Queue quota: KAI counts a MIG instance as its compute slices (``3g.40gb`` = 3 GPUs of quota), reading the
  resource name with ``^nvidia.com/mig-(\\d+)g\\.(\\d+)gb$``; a name that does not match (media extensions,
  ``+gfx``) counts nothing (KAI-Scheduler ``pkg/scheduler/api/common_info/resources/mig.go``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "MIG_CONFIG_LABEL",
    "MIG_CONFIG_STATE_LABEL",
    "MIG_GPUS",
    "MIG_RESOURCE_PREFIX",
    "MIG_STRATEGY_LABEL",
    "MigError",
    "MigGpu",
    "MigLayout",
    "MigProfile",
    "kai_quota_units",
    "layout",
    "mig_capable",
    "mig_config_ready",
    "mig_gpu",
    "node_mig_resources",
    "parse_profile",
]

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
_PROFILE = re.compile(r"(?:([0-9]+)c\.)?([0-9]+)g\.([0-9]+)gb((?:[+.-][a-z]+(?:\.[a-z]+)?)?)")
_KAI_MIG = re.compile(r"nvidia\.com/mig-([0-9]+)g\.([0-9]+)gb")


class MigError(ValueError):
    """A MIG profile, layout or strategy that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True, order=True)
class MigProfile:
    """A MIG profile: ``3g.40gb`` is 3 compute slices and 40 GB; ``extension`` is ``+me``, ``+me.all``,
    ``+gfx``, ``-me`` or ""; ``compute_instance`` is the ``c`` of a compute-instance profile (``1c.3g.40gb``)."""

    slices: int
    memory_gb: int
    extension: str = ""
    compute_instance: int = 0

    @property
    def name(self) -> str:
        """As nvidia-smi and mig-parted write it: ``1g.10gb+me``."""
        ci = f"{self.compute_instance}c." if self.compute_instance else ""
        return f"{ci}{self.slices}g.{self.memory_gb}gb{self.extension}"

    @property
    def resource(self) -> str:
        """The extended resource the device plugin's mixed strategy advertises: ``nvidia.com/mig-1g.10gb.me``."""
        return MIG_RESOURCE_PREFIX + self.name.replace("+", ".")

    def __str__(self) -> str:
        return self.name


def parse_profile(text: str) -> MigProfile:
    """``3g.40gb``, ``mig-3g.40gb``, ``nvidia.com/mig-1g.10gb.me`` or ``1g.10gb+me`` → :class:`MigProfile`."""
    body = text.removeprefix("nvidia.com/").removeprefix("mig-")
    match = _PROFILE.fullmatch(body)
    if match is None:
        raise MigError(f"{text!r} is not a MIG profile (expected e.g. 3g.40gb or nvidia.com/mig-1g.10gb)")
    ci, slices, memory, extension = match.groups()
    if extension.startswith("."):  # the resource name's spelling of "+"
        extension = "+" + extension[1:]
    if int(slices) < 1 or int(memory) < 1 or (ci is not None and not 1 <= int(ci) <= int(slices)):
        raise MigError(f"{text!r} is not a MIG profile (slices, memory and compute instances start at 1)")
    return MigProfile(int(slices), int(memory), extension, int(ci or 0))


def kai_quota_units(resource: str, count: int = 1) -> int:
    """GPUs of KAI queue quota that ``count`` instances of a MIG resource use: compute slices × count, and 0
    for names KAI does not parse (it skips them with an error in its log)."""
    match = _KAI_MIG.fullmatch(resource)
    return int(match.group(1)) * count if match else 0


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A GPU that supports MIG: its compute slices and, per profile, the most instances it holds."""

    name: str
    memory_gb: int
    slices: int
    profiles: Mapping[str, int]
    balanced: Mapping[str, int] = field(default_factory=dict)  # the operator's all-balanced layout

    def supports(self, profile: MigProfile | str) -> bool:
        """Whether the GPU can be cut into this profile."""
        name = profile.name if isinstance(profile, MigProfile) else parse_profile(profile).name
        return name in self.profiles


def _gpu(
    name: str, memory_gb: int, slices: int, profiles: dict[str, int], balanced: dict[str, int]
) -> MigGpu:
    return MigGpu(name, memory_gb, slices, MappingProxyType(profiles), MappingProxyType(balanced))


def _seven(one: int, one_big: int, two: int, three: int, four: int, seven: int) -> dict[str, int]:
    """The seven-slice family (A100-80GB and later): memory in GB of each profile → most instances."""
    return {
        f"1g.{one}gb": 7,
        f"1g.{one}gb+me": 1,
        f"1g.{one_big}gb": 4,
        f"2g.{two}gb": 3,
        f"3g.{three}gb": 2,
        f"4g.{four}gb": 1,
        f"7g.{seven}gb": 1,
    }


def _balanced(one: int, two: int, three: int) -> dict[str, int]:
    return {f"1g.{one}gb": 2, f"2g.{two}gb": 1, f"3g.{three}gb": 1}


_A100_80 = _seven(10, 20, 20, 40, 40, 80)
MIG_GPUS: Mapping[str, MigGpu] = MappingProxyType(
    {
        gpu.name: gpu
        for gpu in (
            _gpu(
                "A100-40GB",
                40,
                7,
                {
                    "1g.5gb": 7,
                    "1g.5gb+me": 1,
                    "1g.10gb": 4,
                    "2g.10gb": 3,
                    "3g.20gb": 2,
                    "4g.20gb": 1,
                    "7g.40gb": 1,
                },
                _balanced(5, 10, 20),
            ),
            _gpu("A100-80GB", 80, 7, _A100_80, _balanced(10, 20, 40)),
            _gpu("H100-80GB", 80, 7, _A100_80, _balanced(10, 20, 40)),
            _gpu("H100-94GB", 94, 7, _seven(12, 24, 24, 47, 47, 94), _balanced(12, 24, 47)),
            _gpu("H100-96GB", 96, 7, _seven(12, 24, 24, 48, 48, 96), _balanced(12, 24, 48)),
            _gpu("H200-141GB", 141, 7, _seven(18, 35, 35, 71, 71, 141), _balanced(18, 35, 71)),
            _gpu("GH200-144GB", 144, 7, _seven(18, 36, 36, 72, 72, 144), _balanced(18, 36, 72)),
            _gpu("B200-180GB", 180, 7, _seven(23, 45, 45, 90, 90, 180), _balanced(23, 45, 90)),
            _gpu("GB200-186GB", 186, 7, _seven(23, 47, 47, 93, 93, 186), _balanced(23, 47, 93)),
            _gpu("B300-270GB", 270, 7, _seven(34, 67, 67, 135, 135, 269), _balanced(34, 67, 135)),
            _gpu(
                "A30-24GB",
                24,
                4,
                {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
                {"1g.6gb": 2, "2g.12gb": 1},
            ),
            _gpu(
                "RTX-PRO-6000-96GB",
                96,
                4,
                {
                    "1g.24gb": 4,
                    "1g.24gb+gfx": 4,
                    "1g.24gb+me.all": 1,
                    "1g.24gb-me": 4,
                    "2g.48gb": 2,
                    "2g.48gb+gfx": 2,
                    "2g.48gb+me.all": 1,
                    "2g.48gb-me": 2,
                    "4g.96gb": 1,
                    "4g.96gb+gfx": 1,
                },
                {"1g.24gb": 2, "2g.48gb": 1},
            ),
        )
    }
)

# Catalog GPU model (as offerings name it, upper-cased, spaces removed) → MIG GPUs of that model by memory.
_BY_MODEL: Mapping[str, tuple[str, ...]] = {
    "A100": ("A100-40GB", "A100-80GB"),
    "A30": ("A30-24GB",),
    "H100": ("H100-80GB", "H100-94GB", "H100-96GB"),
    "H100NVL": ("H100-94GB",),
    "H200": ("H200-141GB",),
    "H200NVL": ("H200-141GB",),
    "GH200": ("H100-96GB", "GH200-144GB"),
    "B200": ("B200-180GB",),
    "GB200": ("GB200-186GB",),
    "B300": ("B300-270GB",),
    "RTXPRO6000": ("RTX-PRO-6000-96GB",),
    "RTXPROSERVER6000": ("RTX-PRO-6000-96GB",),
}
_GIB_MIB = 1024


def mig_capable(gpu_model: str) -> bool:
    """Whether GPUs of a catalog model (``A100``, ``H100``) can be cut with MIG at all."""
    return gpu_model.upper().replace(" ", "").replace("-", "").removeprefix("NVIDIA") in _BY_MODEL


def mig_gpu(gpu_model: str, gpu_memory_mib: int) -> MigGpu | None:
    """The MIG GPU an offering's GPU is (``("A100", 40960)`` → A100-40GB), or None when it has no MIG.

    Memory picks among a model's sizes; it must be within 10% of one, so a partial (vGPU) slice of a big GPU,
    which cannot be cut further, is not taken for the whole GPU.
    """
    names = _BY_MODEL.get(gpu_model.upper().replace(" ", "").replace("-", "").removeprefix("NVIDIA"), ())
    if not names or gpu_memory_mib <= 0:
        return None
    memory_gb = gpu_memory_mib / _GIB_MIB
    best = min(names, key=lambda n: abs(MIG_GPUS[n].memory_gb - memory_gb))
    if abs(MIG_GPUS[best].memory_gb - memory_gb) > 0.1 * MIG_GPUS[best].memory_gb:
        return None
    return MIG_GPUS[best]


@dataclass(frozen=True, slots=True)
class MigLayout:
    """How the GPUs of a node are cut: ``enabled`` False leaves them whole; else ``devices`` per GPU."""

    enabled: bool
    devices: Mapping[str, int] = field(default_factory=dict)


DISABLED = MigLayout(False)


def layout(config: str, gpu: MigGpu, custom: Mapping[str, MigLayout] | None = None) -> MigLayout | None:
    """The layout the ``nvidia.com/mig.config`` value ``config`` gives a GPU, or None when the GPU cannot take
    it (the MIG manager would fail and report ``failed``).

    ``custom`` holds the layouts of a ConfigMap of the user's own (by name; they win over the defaults).
    """
    chosen = (custom or {}).get(config)
    if chosen is None:
        chosen = _default_layout(config, gpu)
    if chosen is None:
        return None
    if chosen.enabled and not _fits(chosen.devices, gpu):
        return None
    return chosen


def _default_layout(config: str, gpu: MigGpu) -> MigLayout | None:
    if config == "all-disabled":
        return DISABLED
    if config == "all-enabled":
        return MigLayout(True)
    if config == "all-balanced":
        return MigLayout(True, gpu.balanced) if gpu.balanced else None
    if not config.startswith("all-"):
        return None
    try:
        profile = parse_profile(config.removeprefix("all-"))
    except MigError:
        return None
    count = gpu.profiles.get(profile.name)
    return MigLayout(True, {profile.name: count}) if count else None


def _fits(devices: Mapping[str, int], gpu: MigGpu) -> bool:
    """Each profile supported and within its instance count, and the slices and memory within the GPU's.

    A coarse check (MIG also fixes where each instance may sit): the GPU operator's layouts all pass it, and a
    custom one that passes may still be refused by the MIG manager, which then reports ``failed``.
    """
    slices = memory = instances = 0
    for name, count in devices.items():
        if count < 0 or count > gpu.profiles.get(name, 0):
            return False
        profile = parse_profile(name)
        slices += profile.slices * count
        memory += profile.memory_gb * count
        instances += count
    # Profile names round memory to whole GB (four 1g.24gb fill a 94 GB H100 NVL): up to 1 GB each.
    return slices <= gpu.slices and memory <= gpu.memory_gb + instances


def node_mig_resources(chosen: MigLayout, gpus: int, strategy: str = "mixed") -> dict[str, int]:
    """The GPU resources a node of ``gpus`` GPUs cut by ``chosen`` advertises under the device plugin's MIG
    ``strategy`` (``none``, ``single`` or ``mixed``).

    ``single`` needs one profile for every instance (else the device plugin refuses to start).
    """
    if strategy not in ("none", "single", "mixed"):
        raise MigError(f"MIG strategy {strategy!r} is not one of none, single, mixed")
    if not chosen.enabled or strategy == "none":
        # strategy none exposes MIG-enabled GPUs as nothing usable; a disabled layout leaves whole GPUs.
        return {"nvidia.com/gpu": gpus} if not chosen.enabled else {}
    devices = {name: count for name, count in chosen.devices.items() if count}
    if strategy == "single":
        if len(devices) > 1:
            raise MigError(f"MIG strategy single needs one profile per node, not {sorted(devices)}")
        return {"nvidia.com/gpu": gpus * sum(devices.values())} if devices else {}
    return {parse_profile(name).resource: gpus * count for name, count in sorted(devices.items())}


def mig_config_ready(labels: Mapping[str, str]) -> bool:
    """The MIG manager has applied the node's ``nvidia.com/mig.config`` (``nvidia.com/mig.config.state`` is
    ``success``)."""
    return labels.get(MIG_CONFIG_STATE_LABEL) == "success"
