"""A pod as the simulation follows it: the Kubernetes pod, and the job, queue, gang and times around it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from autoscaler.core.model import Condition, Pod

__all__ = ["SimPod", "with_scheduled"]

# Every field of a Pod, derived ones included, as its slot's descriptor.
_SLOTS: tuple[Any, ...] = tuple(getattr(Pod, f.name) for f in fields(Pod))
_VALUES = attrgetter(*(f.name for f in fields(Pod)))  # every field's value, in the order of _SLOTS, at once
_SCHEDULED: Any = next(slot for slot in _SLOTS if slot.__name__ == "scheduled")


def with_scheduled(pod: Pod, scheduled: Condition) -> Pod:
    """``replace(pod, scheduled=scheduled)``, slot by slot: the emulated scheduler rewrites the condition of
    every pod still waiting whenever its message changes, thousands at a time, and nothing derived from a
    pod's fields depends on this one."""
    new: Pod = object.__new__(Pod)
    for slot, value in zip(_SLOTS, _VALUES(pod), strict=True):
        slot.__set__(new, value)
    _SCHEDULED.__set__(new, scheduled)
    return new


@dataclass(slots=True)
class SimPod:
    """One pod and what the simulation knows about it beyond Kubernetes."""

    pod: Pod
    job: str
    queue: str
    gang: str
    duration: float
    preemptible: bool
    submitted: float
    started: float | None = None
    ended: float | None = None
    held_seconds: float = 0.0
    device_share: float = 0.0  # for a memory share once bound: the part of its device(s) it was given

    @property
    def gpus(self) -> float:
        """GPUs the pod asks for: whole ones, or its share of a GPU on each of its devices."""
        share = self.pod.gpu_share
        if share is None:
            return self.pod.requests.gpus
        if share.portion is not None:
            return share.portion * share.devices
        return self.device_share * share.devices
