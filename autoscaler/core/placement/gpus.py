"""The GPUs of one node as KAI's GPU sharing uses them: whole devices, and devices shared by fractional pods.

KAI accounts a share in hundredths of a device (``gpu-fraction`` 0.125 is 13, as Go's ``math.Round`` makes
it; a ``gpu-memory`` share is its memory over the device's, rounded up). The shares on one device add up to at
most 100, pods with different compute modes never share a device, and a share on several devices
(``gpu-fraction-num-devices``) takes one slot on each of that many different devices. A device that starts
hosting shares is held by a KAI reservation pod requesting one whole ``nvidia.com/gpu``, so it is no longer a
whole GPU for anyone else. KAI's binpack puts a share on the fullest device it fits before opening a new one.

A partial-GPU instance size (AWS g6f, Azure NVads A10 v5, GCP g4-standard-6) exposes one device that is only
part of a GPU: a share goes there when the whole partition covers it, and has the partition to itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from autoscaler.core.gpu.share import ComputeMode, GpuShare
from autoscaler.core.offering import Offering

FULL = 100  # hundredths of a device


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """A device fractional pods use: the hundredths still free on it, and their compute mode."""

    free: int
    mode: ComputeMode


@dataclass(frozen=True, slots=True)
class GpuSlots:
    """A node's GPU devices: ``whole`` untouched ones and the ``shared`` ones, with one device's memory
    (0 when unknown: then no memory share fits) and the part of a GPU one device is (1 for a full GPU)."""

    whole: int
    shared: tuple[SharedGpu, ...] = ()
    memory_mib: int = 0
    fraction: float = 1.0
    # Worked out once: the planner keys what it remembers about a node's devices by them.
    _hash: int | None = field(default=None, init=False, compare=False, repr=False)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash((self.whole, self.shared, self.memory_mib, self.fraction))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> list[object]:
        # A hash holds only in the process that worked it out (string hashes are salted per process).
        return [None if f.name == "_hash" else getattr(self, f.name) for f in fields(self)]

    @property
    def partial(self) -> bool:
        return self.fraction < 1.0

    def need(self, share: GpuShare) -> int | None:
        """Hundredths of one device a share takes here, or None when it cannot go on such a device."""
        if self.partial:
            # The partition must cover the share (as a part of the full GPU), and then the pod has it alone.
            if share.portion is not None:
                return FULL if share.portion <= self.fraction + 1e-9 else None
            assert share.memory_mib is not None
            return FULL if self.memory_mib and share.memory_mib <= self.memory_mib else None
        if share.portion is not None:
            return share.hundredths
        assert share.memory_mib is not None
        if not self.memory_mib or share.memory_mib > self.memory_mib:
            return None
        return max(1, math.ceil(share.memory_mib * FULL / self.memory_mib))

    def take(self, share: GpuShare) -> tuple[GpuSlots, int] | None:
        """The slots after one pod of ``share`` is placed as KAI's binpack places it, and how many whole devices
        it turned into shared ones; None when it does not fit."""
        need = self.need(share)
        if need is None:
            return None
        if share.devices == 1:
            return self._take_one(need, share.compute_mode)
        shared = list(self.shared)
        whole = self.whole
        opened = 0
        used: set[int] = set()
        for _ in range(share.devices):
            # The fullest device of the same compute mode that still has room, else a whole one.
            best = None
            for i, d in enumerate(shared):
                if i in used or d.mode != share.compute_mode or d.free < need:
                    continue
                if best is None or d.free < shared[best].free:
                    best = i
            if best is not None:
                shared[best] = SharedGpu(shared[best].free - need, share.compute_mode)
                used.add(best)
                continue
            if whole <= 0:
                return None
            whole -= 1
            opened += 1
            shared.append(SharedGpu(FULL - need, share.compute_mode))
            used.add(len(shared) - 1)
        return GpuSlots(whole, tuple(shared), self.memory_mib, self.fraction), opened

    def _take_one(self, need: int, mode: ComputeMode) -> tuple[GpuSlots, int] | None:
        """``take`` for a share of one device, the commonest, without the bookkeeping of several."""
        best, best_free = -1, FULL + 1
        for i, d in enumerate(self.shared):
            if need <= d.free < best_free and d.mode == mode:
                best, best_free = i, d.free
        if best >= 0:
            shared = list(self.shared)
            shared[best] = SharedGpu(best_free - need, mode)
            return GpuSlots(self.whole, tuple(shared), self.memory_mib, self.fraction), 0
        if self.whole <= 0:
            return None
        opened = (*self.shared, SharedGpu(FULL - need, mode))
        return GpuSlots(self.whole - 1, opened, self.memory_mib, self.fraction), 1

    def take_many(self, share: GpuShare, want: int) -> tuple[GpuSlots, int, int]:
        """Place up to ``want`` pods of ``share``: (slots after, pods placed, whole devices opened)."""
        slots, placed, opened = self, 0, 0
        while placed < want:
            step = slots.take(share)
            if step is None:
                break
            slots, more = step
            placed += 1
            opened += more
        return slots, placed, opened


def slots_of(
    devices: int,
    shares: Iterable[tuple[GpuShare, tuple[str, ...]]],
    reserved_groups: Sequence[str],
    *,
    memory_mib: int = 0,
    fraction: float = 1.0,
) -> tuple[GpuSlots, int]:
    """The slots of a node with ``devices`` GPUs not held by whole-GPU pods, where KAI reservation pods hold
    ``reserved_groups`` and fractional pods run with their GPU groups. Shares whose group has no reservation
    pod (a simulated cluster has none) are packed as KAI would have: the second value is how many further
    devices they took, which the node's free ``nvidia.com/gpu`` must lose."""
    if not reserved_groups and not shares:
        return GpuSlots(max(0, devices), (), memory_mib, fraction), 0  # the common case: nothing shared
    base = GpuSlots(max(0, devices - len(reserved_groups)), memory_mib=memory_mib, fraction=fraction)
    groups = {g: FULL for g in reserved_groups}
    modes: dict[str, ComputeMode] = {}
    loose: list[GpuShare] = []
    for share, in_groups in shares:
        need = base.need(share)
        known = [g for g in in_groups if g in groups]
        if need is None or not known:
            loose.append(share)
            continue
        for g in known[: share.devices]:
            groups[g] -= need
            modes[g] = share.compute_mode
    slots = GpuSlots(
        base.whole,
        tuple(
            SharedGpu(max(0, free), modes.get(g, ComputeMode.TIME_SLICING))
            for g, free in sorted(groups.items())
        ),
        memory_mib,
        fraction,
    )
    opened = 0
    for share in loose:
        step = slots.take(share)
        if step is None:
            # It runs, so it fits somewhere this model does not see: plan no further share onto the node.
            return GpuSlots(0, (), memory_mib, fraction), opened
        slots, more = step
        opened += more
    return slots, opened


def device_slots(o: Offering) -> GpuSlots:
    """The GPU devices of a new node of ``o`` as KAI's sharing sees them (a partial-GPU size: one partition)."""
    if o.partial_gpu:
        return GpuSlots(o.gpu_count, memory_mib=o.gpu_memory_mib, fraction=o.gpu_fraction / o.gpu_count)
    return GpuSlots(o.gpu_count, memory_mib=o.gpu_memory_mib)


def device_model(slots: GpuSlots) -> tuple[int, int, float]:
    """What makes two nodes' GPUs the same for packing shares: how many, their memory, the part of a GPU each is."""
    return (slots.whole + len(slots.shared), slots.memory_mib, slots.fraction)
