"""A fit: how many pods like one a node takes, and what a node to launch becomes if it takes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.model import Pod
from autoscaler.core.placement import filters
from autoscaler.core.placement.bins import Option
from autoscaler.core.placement.gpus import GpuSlots
from autoscaler.core.resources import Resources

__all__ = ["Fit", "request"]


@dataclass(frozen=True, slots=True)
class Fit:
    """``count`` pods fit; for a new node, the options it narrows to and the labels it settles; for GPU
    shares, the node's devices after them and how many whole GPUs they turned into shared ones."""

    count: int
    options: tuple[Option, ...] = ()
    settled: Mapping[str, str] | None = None
    gpus: GpuSlots | None = None
    opened: int = 0


def request(pod: Pod) -> Resources:
    """What a pod takes from a node, its pod slot included."""
    return pod.requests + filters.ONE_POD
