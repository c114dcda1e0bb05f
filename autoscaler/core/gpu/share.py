"""A KAI Scheduler pod's share of a GPU, read from its annotations.

A pod that asks KAI for part of a GPU requests no ``nvidia.com/gpu`` at all: the request is in annotations,
checked by KAI's admission webhook and read by its scheduler and binder (kai-scheduler/KAI-Scheduler,
``pkg/common/resources/gpu_sharing.go`` and ``pkg/binder/plugins/gpusharing/gpu-request``). The rules below
are KAI's, so a pod tidal accepts is one KAI would place and one it refuses is one KAI would refuse too:

- ``gpu-fraction``: a share of one device, a decimal above 0 and below 1 (KAI refuses 1: a whole GPU is
  requested as ``nvidia.com/gpu: 1``). KAI accounts it in hundredths of a GPU.
- ``gpu-memory``: GPU memory in MiB, a positive whole number.
- ``gpu-fraction-num-devices``: the same share on each of that many devices (a positive whole number,
  only together with a fraction or a memory request).
- NvFractions (KAI's ``NvFractions`` sharing mode, with NVIDIA's gpu-sharing operator): per container,
  ``nvidia.com/container.<name>.gpu-memory.request`` and ``.gpu-memory.limit`` (Kubernetes quantities;
  a limit alone is also the request; the request must not exceed the limit), and
  ``nvidia.com/container.<name>.gpu-compute.mode`` (``time-slicing``, the default, or ``sm-sharing``).
  An NvFractions request wins over ``gpu-fraction``; ``gpu-memory`` beside it must agree with it.
- ``gpu-fraction-container-name``: the container that gets the GPU (default: the first container).

KAI never puts pods with different compute modes on one device. On a node in NvFractions mode it places a
share only once the node's ``gpu-sharing.nvidia.com/Ready`` condition is True.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum

from autoscaler.core.quantity import QuantityError, parse_quantity

__all__ = [
    "COMPUTE_MODE",
    "GPU_FRACTION",
    "GPU_FRACTION_CONTAINER",
    "GPU_FRACTION_NUM_DEVICES",
    "GPU_MEMORY",
    "LEGACY_SHARING_READY_CONDITION",
    "NVFRACTIONS_PREFIX",
    "SHARING_READY_CONDITION",
    "ComputeMode",
    "GpuShare",
    "GpuShareError",
    "ShareSource",
    "gpu_share",
    "sharing_ready",
]

GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_FRACTION_NUM_DEVICES = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER = "gpu-fraction-container-name"
NVFRACTIONS_PREFIX = "nvidia.com/container."
_REQUEST = ".gpu-memory.request"
_LIMIT = ".gpu-memory.limit"
_COMPUTE_MODE = ".gpu-compute.mode"
# Written by KAI's binder once the pod is bound (the devices it got); never part of a request.
_BINDER_OWNED = (".gpus.devices",)
# KAI's user guide names this pod-wide spelling of the compute mode; its code reads the per-container one.
# tidal reads both, and refuses a pod where they disagree, so it never mixes what either would keep apart.
COMPUTE_MODE = "kai.scheduler/gpu-compute-sharing-mode"

# The node condition NVIDIA's gpu-sharing operator sets; KAI in NvFractions mode places shares only on nodes
# where it is True (an older operator, gpu-fractioning, used the second name).
SHARING_READY_CONDITION = "gpu-sharing.nvidia.com/Ready"
LEGACY_SHARING_READY_CONDITION = "gpu-fractioning.nvidia.com/Ready"

# What Go's strconv.ParseFloat accepts that a person would write: a decimal, optionally in scientific notation.
# (ParseFloat also takes "Inf", "NaN", hex floats and underscores; KAI's older webhook refused those too.)
_DECIMAL = re.compile(r"\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WHOLE = re.compile(r"[0-9]+")
_INT64_MAX = 2**63 - 1
_MIB = 2**20


class GpuShareError(ValueError):
    """A GPU-share annotation KAI would refuse; the message is one line naming the annotation and value."""

    def __init__(self, annotation: str, message: str) -> None:
        super().__init__(f"annotation {annotation}: {message}")
        self.annotation = annotation


class ComputeMode(StrEnum):
    """How pods on one device share its compute (KAI's GPUComputeSharingMode)."""

    TIME_SLICING = "time-slicing"
    SM_SHARING = "sm-sharing"


class ShareSource(StrEnum):
    """Which annotation the share comes from."""

    FRACTION = "gpu-fraction"
    MEMORY = "gpu-memory"
    NVFRACTIONS = "nvfractions"


@dataclass(frozen=True, slots=True)
class GpuShare:
    """Part of one GPU on each of ``devices`` GPUs, as KAI would allocate it.

    Exactly one of ``portion`` (a share of a device's memory, 0 < portion < 1) and ``memory_mib`` (per device)
    is set. ``memory_limit_mib`` is NvFractions' runtime cap; scheduling goes by the request.
    """

    source: ShareSource
    container: str
    devices: int = 1
    portion: float | None = None
    memory_mib: int | None = None
    memory_limit_mib: int | None = None
    compute_mode: ComputeMode = ComputeMode.TIME_SLICING
    ignored: tuple[str, ...] = ()  # NvFractions annotations of this pod that tidal does not read
    # Worked out once: a share is part of the key of most of what the planner remembers about its pods.
    _hash: int | None = field(default=None, init=False, compare=False, repr=False)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> list[object]:
        # A hash holds only in the process that worked it out (string hashes are salted per process).
        return [None if f.name == "_hash" else getattr(self, f.name) for f in fields(self)]

    @property
    def hundredths(self) -> int | None:
        """The portion in hundredths of a GPU, rounded as KAI accounts it (``math.Round(portion * 100)``);
        None for a memory share."""
        if self.portion is None:
            return None
        return math.floor(self.portion * 100 + 0.5)

    def portion_of(self, device_memory_mib: int) -> float:
        """The share of one device of ``device_memory_mib``: the portion, or memory over device memory (above 1
        when the memory does not fit on such a device at all)."""
        if self.portion is not None:
            return self.portion
        if device_memory_mib <= 0:
            raise ValueError(
                f"device memory {device_memory_mib} MiB: a memory share needs the device's memory"
            )
        assert self.memory_mib is not None
        return self.memory_mib / device_memory_mib

    def gpus(self, device_memory_mib: int | None = None) -> float:
        """GPUs this share counts as against a KAI queue's quota: portion (in hundredths) × devices, or for a
        memory share, memory over the device's memory × devices (KAI's GpuMemoryAsGpuFraction)."""
        if self.portion is not None:
            return (self.hundredths or 0) * self.devices / 100
        if not device_memory_mib:
            raise ValueError("a memory share counts against a quota only on a device of known memory")
        return self.devices * self.portion_of(device_memory_mib)


def sharing_ready(conditions: Mapping[str, str]) -> bool:
    """Whether a node's GPU-sharing condition (``{condition type: status}``) says KAI may place NvFractions
    shares there: ``gpu-sharing.nvidia.com/Ready`` (or the older name) is ``True``."""
    status = conditions.get(SHARING_READY_CONDITION)
    if status is None:
        status = conditions.get(LEGACY_SHARING_READY_CONDITION)
    return status == "True"


def _got(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fraction(value: str) -> float:
    if _DECIMAL.fullmatch(value) is None:
        raise GpuShareError(GPU_FRACTION, f"{_got(value)} is not a decimal number (e.g. '0.5')")
    portion = float(value)
    if not 0 < portion < 1:
        raise GpuShareError(
            GPU_FRACTION,
            f"{_got(value)} is not above 0 and below 1 (a share of one GPU; ask for whole GPUs with "
            "nvidia.com/gpu)",
        )
    return portion


def _whole(annotation: str, value: str, what: str) -> int:
    if _WHOLE.fullmatch(value) is None or not 0 < int(value) <= _INT64_MAX:
        raise GpuShareError(annotation, f"{_got(value)} is not {what}")
    return int(value)


def _mib(annotation: str, value: str) -> int:
    """A Kubernetes memory quantity, in MiB rounded up (a share is never planned smaller than asked)."""
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise GpuShareError(annotation, f"{_got(value)} is not a memory quantity (e.g. '7680Mi')") from None
    if amount <= 0:
        raise GpuShareError(annotation, f"{_got(value)} is not above 0")
    return math.ceil(amount / _MIB)


@dataclass(slots=True)
class _NvFractions:
    """The per-container NvFractions annotations of one pod."""

    requests: dict[str, tuple[str, int]]  # container -> (annotation, MiB)
    limits: dict[str, tuple[str, int]]
    modes: dict[str, tuple[str, ComputeMode]]
    ignored: list[str]


def _split_key(key: str, suffix: str) -> str:
    container = key[len(NVFRACTIONS_PREFIX) : -len(suffix)]
    if not container:
        raise GpuShareError(key, "names no container (expected nvidia.com/container.<name>" + suffix + ")")
    return container


def _read_nvfractions(annotations: Mapping[str, str], known: frozenset[str]) -> _NvFractions:
    found = _NvFractions({}, {}, {}, [])
    for key in sorted(annotations):  # sorted: the same pod always gives the same error first
        if not key.startswith(NVFRACTIONS_PREFIX) or key.endswith(_BINDER_OWNED):
            continue
        value = annotations[key]
        if key.endswith(_REQUEST):
            container = _split_key(key, _REQUEST)
            found.requests[container] = (key, _mib(key, value))
        elif key.endswith(_LIMIT):
            container = _split_key(key, _LIMIT)
            found.limits[container] = (key, _mib(key, value))
        elif key.endswith(_COMPUTE_MODE):
            container = _split_key(key, _COMPUTE_MODE)
            found.modes[container] = (key, _compute_mode(key, value))
        else:
            # A newer KAI may read more (a compute share, for one); tidal plans by memory and says what it left.
            found.ignored.append(key)
            continue
        if container not in known:
            raise GpuShareError(key, f"container {container!r} is not a container of this pod")
    return found


def _compute_mode(annotation: str, value: str) -> ComputeMode:
    try:
        return ComputeMode(value)
    except ValueError:
        choices = ", ".join(m.value for m in ComputeMode)
        raise GpuShareError(annotation, f"{_got(value)} is not one of {choices}") from None


def _pod_compute_mode(annotations: Mapping[str, str], nv: _NvFractions) -> ComputeMode:
    modes = dict(nv.modes.values())
    if COMPUTE_MODE in annotations:
        modes[COMPUTE_MODE] = _compute_mode(COMPUTE_MODE, annotations[COMPUTE_MODE])
    if len(set(modes.values())) > 1:
        first, *rest = sorted(modes)
        raise GpuShareError(
            first,
            f"{modes[first].value!r} disagrees with {rest[0]} {modes[rest[0]].value!r} "
            "(one pod has one compute mode)",
        )
    return next(iter(modes.values()), ComputeMode.TIME_SLICING)


def gpu_share(
    annotations: Mapping[str, str],
    containers: Sequence[str],
    *,
    init_containers: Sequence[str] = (),
    requests_whole_gpu: bool = False,
) -> GpuShare | None:
    """The GPU share a pod asks KAI for, or None when it asks for none.

    ``containers`` and ``init_containers`` are the pod's container names, in order (the first container gets
    the GPU unless an annotation names another); ``requests_whole_gpu`` says whether any container requests or
    limits ``nvidia.com/gpu``, which KAI refuses beside a share. Raises :class:`GpuShareError`, one line naming
    the annotation and the value, for anything KAI's admission would refuse.
    """
    known = frozenset(containers) | frozenset(init_containers)
    nv = _read_nvfractions(annotations, known)
    fraction = annotations.get(GPU_FRACTION) or None  # KAI treats an empty value as absent
    memory = annotations.get(GPU_MEMORY) or None
    nv_keys = sorted(k for k, _ in [*nv.requests.values(), *nv.limits.values()])
    if nv_keys:
        source, source_key = ShareSource.NVFRACTIONS, nv_keys[0]
    elif fraction is not None:
        source, source_key = ShareSource.FRACTION, GPU_FRACTION
    elif memory is not None:
        source, source_key = ShareSource.MEMORY, GPU_MEMORY
    else:
        if GPU_FRACTION_NUM_DEVICES in annotations:
            raise GpuShareError(
                GPU_FRACTION_NUM_DEVICES,
                f"{_got(annotations[GPU_FRACTION_NUM_DEVICES])} is set without gpu-fraction, gpu-memory or an "
                "NvFractions memory request (it multiplies one of them)",
            )
        return None
    if requests_whole_gpu:
        raise GpuShareError(
            source_key, "a GPU share cannot be combined with a whole nvidia.com/gpu request or limit"
        )
    devices = 1
    if GPU_FRACTION_NUM_DEVICES in annotations:
        devices = _whole(
            GPU_FRACTION_NUM_DEVICES, annotations[GPU_FRACTION_NUM_DEVICES], "a whole number of GPUs above 0"
        )
    portion = _fraction(fraction) if fraction is not None else None
    memory_mib = _whole(GPU_MEMORY, memory, "a whole number of MiB above 0") if memory is not None else None
    if portion is not None and memory_mib is not None:
        raise GpuShareError(
            GPU_MEMORY, f"{_got(memory or '')} is set beside gpu-fraction (ask for one of them)"
        )
    compute_mode = _pod_compute_mode(annotations, nv)
    target = _target_container(annotations, containers, known)
    if source == ShareSource.NVFRACTIONS:
        named = annotations.get(GPU_FRACTION_CONTAINER) or None
        return _nvfractions_share(nv, named, devices, compute_mode, fraction, memory_mib)
    return GpuShare(
        source=source,
        container=target,
        devices=devices,
        portion=portion,
        memory_mib=memory_mib,
        compute_mode=compute_mode,
        ignored=tuple(nv.ignored),
    )


def _target_container(
    annotations: Mapping[str, str], containers: Sequence[str], known: frozenset[str]
) -> str:
    named = annotations.get(GPU_FRACTION_CONTAINER)
    if named:
        if named not in known:
            raise GpuShareError(GPU_FRACTION_CONTAINER, f"{_got(named)} is not a container of this pod")
        return named
    return containers[0] if containers else ""


def _nvfractions_share(
    nv: _NvFractions,
    named: str | None,
    devices: int,
    compute_mode: ComputeMode,
    fraction: str | None,
    legacy_memory_mib: int | None,
) -> GpuShare:
    containers = sorted(nv.requests.keys() | nv.limits.keys())
    if len(containers) > 1:
        keys = sorted(k for k, _ in [*nv.requests.values(), *nv.limits.values()])
        raise GpuShareError(
            keys[-1], f"only one container of a pod may ask for a GPU share, not {containers}"
        )
    container = containers[0]
    request = nv.requests.get(container)
    limit = nv.limits.get(container)
    if limit is not None and (fraction is not None or legacy_memory_mib is not None):
        raise GpuShareError(
            limit[0], "an NvFractions limit cannot be combined with gpu-fraction or gpu-memory"
        )
    if request is not None and limit is not None and request[1] > limit[1]:
        raise GpuShareError(request[0], f"{request[1]} MiB is above the limit of {limit[1]} MiB")
    memory_mib = (request or limit or ("", 0))[1]
    if legacy_memory_mib is not None and legacy_memory_mib != memory_mib:
        raise GpuShareError(
            GPU_MEMORY,
            f"{legacy_memory_mib} MiB disagrees with {(request or limit or ('',))[0]} ({memory_mib} MiB)",
        )
    if named and named != container:
        raise GpuShareError(
            GPU_FRACTION_CONTAINER,
            f"{_got(named)} is not {container!r}, the container the NvFractions request names",
        )
    return GpuShare(
        source=ShareSource.NVFRACTIONS,
        container=container,
        devices=devices,
        memory_mib=memory_mib,
        memory_limit_mib=limit[1] if limit else None,
        compute_mode=compute_mode,
        ignored=tuple(nv.ignored),
    )
