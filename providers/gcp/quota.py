"""Which offerings a Compute Engine quota covers, from the metric GCE names when it refuses a VM.

GCE says which quota stopped an insert: ``Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 4.0 in region
us-central1.`` in the message, and in the operation's ``errorDetails[].quotaInfo`` (``metricName``
``compute.googleapis.com/nvidia_t4_gpus``, ``dimensions.region``). The metric decides the scope:

- ``CPUS``, ``INSTANCES``, ``IN_USE_ADDRESSES``, ``SSD_TOTAL_GB``… — every offering of the region;
- ``N2_CPUS``, ``C3_CPUS``… — the machine family (``n2``);
- ``NVIDIA_T4_GPUS``, ``NVIDIA_A100_80GB_GPUS``… — the machine types with that accelerator;
- ``GPUS_ALL_REGIONS`` — every GPU offering; ``CPUS_ALL_REGIONS`` — every offering;
- a ``PREEMPTIBLE_`` prefix: the same, for Spot VMs only (they draw on preemptible quota when it exists).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

from autoscaler.cloud import QuotaScope
from autoscaler.core.model import SPOT
from providers.gcp.gpus import Accelerator

__all__ = ["MachineType", "parse_quota", "quota_scope"]


class MachineType(Protocol):
    """What a quota's scope reads of a machine type (:class:`providers.gcp.shapes.Shape` is one): its name
    and the accelerator it comes with. Named here, not imported, because reading machine types reports
    errors through :mod:`providers.gcp.errors`, which reads quotas through this module."""

    @property
    def name(self) -> str: ...

    @property
    def gpu(self) -> Accelerator | None: ...


_MESSAGE = re.compile(
    r"Quota '(?P<metric>[A-Z0-9_]+)' exceeded\.\s+Limit: [0-9.]+(?: in region (?P<region>[a-z0-9-]+))?"
)
_MEMORY = re.compile(r"_[0-9]+GB$")


def parse_quota(message: str, metric_name: str = "", region: str = "") -> tuple[str, str] | None:
    """``(METRIC, region)`` from a quotaInfo (``metric_name``, its region dimension) or, failing that, from
    GCE's message; None when neither names a quota."""
    if metric_name:
        return metric_name.rsplit("/", 1)[-1].upper(), region
    found = _MESSAGE.search(message or "")
    if found is None:
        return None
    return found["metric"], found["region"] or region


def _accelerator_key(accelerator_type: str) -> str:
    """``nvidia-tesla-t4`` → ``T4``; ``nvidia-a100-80gb`` → ``A100_80GB`` (the middle of a GPU metric)."""
    name = accelerator_type.removeprefix("nvidia-").removeprefix("tesla-")
    return name.upper().replace("-", "_")


def quota_scope(metric: str, region: str, shapes: Iterable[MachineType]) -> QuotaScope:
    """The offerings ``metric`` (in ``region``) covers; ``shapes`` are the machine types offered."""
    name = metric
    capacity_type = ""
    if metric.startswith("PREEMPTIBLE_"):
        metric, capacity_type = metric.removeprefix("PREEMPTIBLE_"), SPOT
    if metric == "GPUS_ALL_REGIONS":
        return QuotaScope("gpu", name, capacity_type=capacity_type, gpus_only=True)
    if metric == "CPUS_ALL_REGIONS":
        return QuotaScope("region", name, capacity_type=capacity_type)
    if metric.endswith("_GPUS"):
        wanted = metric.removeprefix("NVIDIA_").removesuffix("_GPUS")
        with_gpu = [s for s in shapes if s.gpu is not None]
        exact = {s.name for s in with_gpu if s.gpu and _accelerator_key(s.gpu.type) == wanted}
        # NVIDIA_H100_GPUS is the quota of nvidia-h100-80gb: the memory suffix is not in every metric.
        loose = {
            s.name for s in with_gpu if s.gpu and _MEMORY.sub("", _accelerator_key(s.gpu.type)) == wanted
        }
        types = frozenset(exact or loose)
        if types:
            return QuotaScope("gpu", name, region, capacity_type, instance_types=types)
        return QuotaScope("gpu", name, region, capacity_type, gpus_only=True)
    family = metric.removesuffix("_CPUS")
    if family != metric and family:
        return QuotaScope("family", name, region, capacity_type, families=frozenset({family.lower()}))
    return QuotaScope("region", name, region, capacity_type)
