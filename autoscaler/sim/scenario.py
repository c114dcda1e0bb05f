"""Scenarios: KAI queues, jobs arriving over a day, cloud events, and the tidal configuration to run them with.

A scenario is YAML (or one of the built-ins in ``scenarios/``)::

    name: kai-day
    duration: 24h
    config: {clusterGPULimit: 16, ...}            # tidal configuration keys (merged over the defaults)
    queues: [{name: research, quota: 4, limit: 8, overQuotaWeight: 1, priority: 50}, ...]
    jobs:
      - {at: "08:00", name: serve, queue: production, pods: 6, gpus: 1, cpu: "4", memory: 16Gi,
         duration: 7h, gang: false, preemptible: false, offerings: "spot,on-demand", interruptionCost: 2h}
    spotInterruptions: [{at: "13:00", fraction: 0.5}]
    spotInterruptionRates: {period: 24h, seed: 1}   # each spot node at its type's published rate, a month's
                                                    # share of instances counted over the period of running
    capacityOutages: [{at: "10:00", until: "12:00", instanceType: g4dn.xlarge}]
    reservations: [{id: cb-1, instanceType: g5.12xlarge, zone: us-east-1a, count: 2, kind: capacity-block,
                    at: "10:00", until: "34:00"}]            # capacity bought ahead (open, targeted, blocks)
    kueue: {provisioningClass: best-effort-atomic-scale-up.autoscaling.x-k8s.io, gpuQuota: 16, retryAfter: 60s}
    buffers: [{name: warm-gpus, replicas: 2, gpus: 1, cpu: "3", memory: 12Gi}]   # CapacityBuffers

A scenario may replay a trace instead of listing jobs, and name the catalog it is priced from (both paths
relative to the scenario file; a built-in's relative to the data directory, see ``data_directory``)::

    trace: {file: traces/alibaba_gpu_v2023_openb_pods.csv, start: 2856h, window: 168h, gpuSharing: kai}
    catalog: {file: catalog/instance_catalog.csv, cloud: aws, region: us-east-1}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from autoscaler.config.schema import ConfigError, load_yaml
from autoscaler.core.offering import ReservationKind
from autoscaler.sim.built_in import BUILT_IN
from autoscaler.sim.scenario_models import ScenarioError, ScenarioModel, clock_time, validate

__all__ = [
    "BUILT_IN",
    "DATA_ENV",
    "BufferSpec",
    "CatalogSpec",
    "Interruption",
    "JobSpec",
    "KueueSpec",
    "Outage",
    "QueueSpec",
    "ReservationSpec",
    "Scenario",
    "ScenarioError",
    "TraceSpec",
    "clock_time",
    "data_directory",
    "load_scenario",
    "parse_scenario",
]

DATA_ENV = "TIDAL_DATA"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    quota: int | None
    limit: int | None
    over_quota_weight: int = 1
    priority: int = 0
    parent: str = ""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """``pods`` identical pods submitted together at ``at`` seconds; a gang when ``gang``."""

    at: float
    name: str
    pods: int
    gpus: int
    cpu_milli: int
    memory_milli: int
    duration: float
    queue: str = ""
    gang: bool = False
    preemptible: bool = True
    offerings: str = ""
    gpu_skus: str = ""
    partial_gpu: bool = False
    priority: int = 0
    # A share of one GPU asked of KAI instead of whole GPUs: a portion (0 < f < 1) or GPU memory in MiB,
    # and how pods on one device share its compute ("time-slicing" or "sm-sharing").
    gpu_fraction: float = 0.0
    gpu_memory_mib: int = 0
    compute_mode: str = ""
    interruption_cost: str = ""  # the pods' tidal.dev/interruption-cost

    @property
    def shares_gpu(self) -> bool:
        return bool(self.gpu_fraction or self.gpu_memory_mib)


@dataclass(frozen=True, slots=True)
class Interruption:
    at: float
    fraction: float


@dataclass(frozen=True, slots=True)
class SpotRates:
    """Each spot node is interrupted at its type's published rate, the share counted over ``period`` seconds
    of running; its moment drawn once per node from ``seed``."""

    period: float
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Outage:
    at: float
    until: float
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None


@dataclass(frozen=True, slots=True)
class ReservationSpec:
    """Capacity bought ahead: ``count`` instances of one type in one zone, from ``at`` until ``until`` (a
    Capacity Block needs both; an open or targeted reservation lasts the whole run without them)."""

    id: str
    instance_type: str
    zone: str
    count: int
    kind: str = ReservationKind.OPEN.value
    at: float | None = None
    until: float | None = None

    def hours(self, end: float) -> float:
        """How long it is paid for within a run of ``end`` seconds."""
        start = self.at if self.at is not None else 0.0
        stop = min(end, self.until) if self.until is not None else end
        return max(0.0, stop - start) / 3600


@dataclass(frozen=True, slots=True)
class KueueSpec:
    """Workloads admitted by Kueue through a ProvisioningRequest admission check: a ClusterQueue of
    ``gpu_quota`` GPUs (None: unlimited) that asks for capacity with ``provisioning_class`` and retries a
    request that failed after ``retry_after`` seconds."""

    provisioning_class: str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    gpu_quota: int | None = None
    retry_after: float = 60.0


@dataclass(frozen=True, slots=True)
class BufferSpec:
    """A CapacityBuffer of ``replicas`` chunks, each a pod of ``gpus`` GPUs, ``cpu`` and ``memory``."""

    name: str
    replicas: int
    gpus: int = 0
    cpu_milli: int = 1000
    memory_milli: int = 4 * 2**30 * 1000


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """The trace a scenario replays: a CSV and the part of it (``start``, ``window`` seconds) to replay."""

    file: Path
    start: float = 0.0
    window: float | None = None
    gpu_sharing: str = ""  # how pods that used part of a GPU are replayed (trace.GPU_SHARING); "" = default


@dataclass(frozen=True, slots=True)
class CatalogSpec:
    """The catalog a scenario is priced from, and which cloud's and region's rows of it."""

    file: Path
    cloud: str = ""
    region: str = ""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    duration: float
    config: dict[str, Any] = field(default_factory=dict)
    queues: tuple[QueueSpec, ...] = ()
    jobs: tuple[JobSpec, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    spot_rates: SpotRates | None = None
    outages: tuple[Outage, ...] = ()
    trace: TraceSpec | None = None
    catalog: CatalogSpec | None = None
    reservations: tuple[ReservationSpec, ...] = ()
    kueue: KueueSpec | None = None  # every job then goes through Kueue's admission
    buffers: tuple[BufferSpec, ...] = ()

    @property
    def kai(self) -> bool:
        return bool(self.queues)


def parse_scenario(data: Any, source: str, *, base: Path | None = None) -> Scenario:
    """Validate a scenario document; every error names the source and the field. ``base`` is the directory
    that the trace's and catalog's file names are relative to (default: the current directory)."""
    try:
        doc = validate(data)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None
    return _scenario(doc, base or Path())


def _scenario(doc: ScenarioModel, base: Path) -> Scenario:
    jobs = [
        JobSpec(
            at=j.at,
            name=j.name,
            pods=j.pods,
            gpus=j.gpus,
            cpu_milli=j.cpu,
            memory_milli=j.memory,
            duration=j.duration,
            queue=j.queue,
            gang=j.gang,
            preemptible=j.preemptible,
            offerings=j.offerings,
            gpu_skus=j.gpu_skus,
            partial_gpu=j.partial_gpu,
            priority=j.priority,
            gpu_fraction=j.gpu_fraction,
            gpu_memory_mib=j.gpu_memory,
            compute_mode=j.compute_mode,
            interruption_cost=j.interruption_cost,
        )
        for j in doc.jobs
    ]
    trace, catalog = doc.trace, doc.catalog
    return Scenario(
        name=doc.name,
        duration=doc.duration,
        config=doc.config,
        # A weight of 0 reads as the default weight, as it always has.
        queues=tuple(
            QueueSpec(q.name, q.quota, q.limit, q.over_quota_weight or 1, q.priority, q.parent)
            for q in doc.queues
        ),
        jobs=tuple(sorted(jobs, key=lambda j: (j.at, j.name))),
        interruptions=tuple(Interruption(x.at, x.fraction) for x in doc.spot_interruptions),
        spot_rates=None
        if doc.spot_interruption_rates is None
        else SpotRates(doc.spot_interruption_rates.period, doc.spot_interruption_rates.seed),
        outages=tuple(
            Outage(o.at, o.until, o.instance_type, o.zone, o.capacity_type) for o in doc.capacity_outages
        ),
        trace=None
        if trace is None
        else TraceSpec(base / trace.file, trace.start, trace.window, trace.gpu_sharing),
        catalog=None if catalog is None else CatalogSpec(base / catalog.file, catalog.cloud, catalog.region),
        reservations=tuple(
            ReservationSpec(r.id, r.instance_type, r.zone, r.count, r.kind, r.at, r.until)
            for r in doc.reservations
        ),
        kueue=None
        if doc.kueue is None
        else KueueSpec(doc.kueue.provisioning_class, doc.kueue.gpu_quota, doc.kueue.retry_after),
        buffers=tuple(BufferSpec(b.name, b.replicas, b.gpus, b.cpu, b.memory) for b in doc.buffers),
    )


def data_directory() -> Path:
    """Where built-in scenarios find the traces and catalogs they replay: ``$TIDAL_DATA``, else the
    ``shared/data`` directory next to a source checkout of tidal."""
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """A built-in scenario by name, or a scenario file."""
    text: str
    source = str(name_or_path)
    if source in BUILT_IN:
        text = resources.files("autoscaler.sim").joinpath(f"scenarios/{source}.yaml").read_text()
        base = data_directory()
    else:
        base = Path(name_or_path).parent
        try:
            text = Path(name_or_path).read_text(encoding="utf-8")
        except OSError as err:
            known = ", ".join(BUILT_IN)
            raise ScenarioError(f"{source}: {err.strerror or err} (built-in scenarios: {known})") from None
        except UnicodeDecodeError:
            raise ScenarioError(f"{source}: not a UTF-8 text file") from None
    try:
        # The strict loader: a second `jobs:` key would otherwise silently replace the first.
        data = load_yaml(text, source)
    except ConfigError as err:
        problem = " ".join("; ".join(err.errors).split())
        if not problem.startswith("invalid YAML"):
            problem = f"invalid YAML: {problem}"
        raise ScenarioError(f"{err.source}: {problem}") from None
    return parse_scenario(data, source, base=base)
