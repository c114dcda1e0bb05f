"""A pod as the simulation follows it: the Kubernetes pod, and the job, queue, gang and times around it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from autoscaler.core.model import Condition, Pod

__all__ = ["SimPod", "with_scheduled"]


def _copier() -> Callable[[Pod, Condition], Pod]:
    """``replace(pod, scheduled=...)`` written out slot by slot, as dataclasses write their ``__init__``: the
    emulated scheduler rewrites the condition of every pod still waiting whenever its message changes,
    thousands at a time, and nothing derived from a pod's fields depends on this one. (A loop over the slots
    costs three times as much as the statements one after the other.)"""
    env: dict[str, Any] = {"new_pod": object.__new__, "Pod": Pod}
    lines = ["def with_scheduled(pod, scheduled):", "    new = new_pod(Pod)"]
    for i, f in enumerate(fields(Pod)):  # every field, derived ones included
        env[f"set{i}"] = getattr(Pod, f.name).__set__
        lines.append(f"    set{i}(new, {'scheduled' if f.name == 'scheduled' else 'pod.' + f.name})")
    lines.append("    return new")
    exec("\n".join(lines), env)  # the source is built above from Pod's own fields, nothing else
    copy: Callable[[Pod, Condition], Pod] = env["with_scheduled"]
    return copy


with_scheduled = _copier()
"""A copy of ``pod`` whose ``PodScheduled`` condition is ``scheduled``."""


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
    # The emulated scheduler's number for the pod's requests and node constraints, which stay the same however
    # the pod is rewritten (its condition, labels, annotations, node); -1 until it is first placed.
    shape: int = field(default=-1, compare=False, repr=False)

    @property
    def gpus(self) -> float:
        """GPUs the pod asks for: whole ones, or its share of a GPU on each of its devices."""
        share = self.pod.gpu_share
        if share is None:
            return self.pod.requests.gpus
        if share.portion is not None:
            return share.portion * share.devices
        return self.device_share * share.devices
