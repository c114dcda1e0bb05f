"""A pod as the simulation follows it: the Kubernetes pod, and the job, queue, gang and times around it."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.model import Pod

__all__ = ["SimPod"]


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
