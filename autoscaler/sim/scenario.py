"""Scenarios: KAI queues, jobs arriving over a day, cloud events, and the tidal configuration to run them with.

A scenario is YAML (or one of the built-ins in ``scenarios/``)::

    name: kai-day
    duration: 24h
    config: {clusterGPULimit: 16, ...}            # tidal configuration keys (merged over the defaults)
    queues: [{name: research, quota: 4, limit: 8, overQuotaWeight: 1, priority: 50}, ...]
    jobs:
      - {at: "08:00", name: serve, queue: production, pods: 6, gpus: 1, cpu: "4", memory: 16Gi,
         duration: 7h, gang: false, preemptible: false, offerings: "spot,on-demand"}
    spotInterruptions: [{at: "13:00", fraction: 0.5}]
    capacityOutages: [{at: "10:00", until: "12:00", instanceType: g4dn.xlarge}]
    reservations: [{id: cb-1, instanceType: g5.12xlarge, zone: us-east-1a, count: 2, kind: capacity-block,
                    at: "10:00", until: "34:00"}]            # capacity bought ahead (open, targeted, blocks)

A scenario may replay a trace instead of listing jobs, and name the catalog it is priced from (both paths
relative to the scenario file; a built-in's relative to the data directory, see ``data_directory``)::

    trace: {file: traces/alibaba_gpu_v2023_openb_pods.csv, start: 2856h, window: 168h, gpuSharing: kai}
    catalog: {file: catalog/instance_catalog.csv, cloud: aws, region: us-east-1}
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from autoscaler.config.options import ConfigError, parse_duration
from autoscaler.config.schema import load_yaml
from autoscaler.core.annotations import split_list
from autoscaler.core.model import CAPACITY_TYPES, ReservationKind
from autoscaler.core.quantity import QuantityError, to_milli

BUILT_IN = (
    "kai-day",
    "kai-day-reserved",
    "kai-day-block",
    "spot-storm",
    "burst-10k",
    "trace",
    "alibaba-week",
)
DATA_ENV = "TIDAL_DATA"
_CLOCK = re.compile(r"^(\d{1,3}):([0-5]\d)(?::([0-5]\d))?$")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; one line naming the file and field."""


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

    @property
    def shares_gpu(self) -> bool:
        return bool(self.gpu_fraction or self.gpu_memory_mib)


@dataclass(frozen=True, slots=True)
class Interruption:
    at: float
    fraction: float


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
    outages: tuple[Outage, ...] = ()
    trace: TraceSpec | None = None
    catalog: CatalogSpec | None = None
    reservations: tuple[ReservationSpec, ...] = ()

    @property
    def kai(self) -> bool:
        return bool(self.queues)


def clock_time(value: object, where: str) -> float:
    """``"08:30"`` → seconds after midnight; a duration (``"90m"``) or number is taken as seconds."""
    if isinstance(value, str):
        m = _CLOCK.match(value.strip())
        if m:
            return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
    try:
        return parse_duration(value, field=where)  # type: ignore[arg-type]
    except ConfigError as err:
        raise ScenarioError(f"{where}: {value!r} is not a time (e.g. 08:30, 90m, 3600)") from err


def _int(
    raw: dict[str, Any],
    key: str,
    where: str,
    default: int | None = None,
    *,
    minimum: int | None = 0,
    unlimited: bool = False,
) -> int | None:
    """A whole number at least ``minimum``; with ``unlimited``, -1 (KAI's "no limit") reads as None."""
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where}.{key}: {value!r} is not a whole number")
    if unlimited and value == -1:
        return None
    if minimum is not None and value < minimum:
        hint = " (-1 means no limit)" if unlimited else ""
        raise ScenarioError(f"{where}.{key}: {value!r} is below {minimum}{hint}")
    return value


def _bool(raw: dict[str, Any], key: str, where: str, default: bool) -> bool:
    # A quoted "false" is a non-empty string, which bool() would read as true.
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ScenarioError(f"{where}.{key}: {value!r} is not true or false")
    return value


def _str(raw: dict[str, Any], key: str, where: str, default: str = "") -> str:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ScenarioError(f"{where}.{key}: {value!r} is not a string")
    return str(value)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    # Iterating a map or a string instead would report its keys or letters as the entries.
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(f"{key}: {value!r} is not a list")
    return value


def _entry(raw: Any, where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: {raw!r} is not a map")
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return raw


def _required(raw: dict[str, Any], key: str, where: str) -> Any:
    if raw.get(key) is None:
        raise ScenarioError(f"{where}: {key!r} is required")
    return raw[key]


def _unique(names: list[str], where: str) -> set[str]:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise ScenarioError(f"{where}[{i}].name: {name!r} is already the name of {where}[{seen[name]}]")
        seen[name] = i
    return set(seen)


def _quantity(raw: dict[str, Any], key: str, where: str, default: str) -> int:
    try:
        milli = to_milli(raw.get(key, default), field=f"{where}.{key}")
    except QuantityError as err:
        raise ScenarioError(str(err)) from None
    if milli < 0:
        raise ScenarioError(f"{where}.{key}: {raw[key]!r} is below 0")
    return milli


def _job(raw: Any, where: str) -> JobSpec:
    known = {
        "at",
        "name",
        "pods",
        "gpus",
        "cpu",
        "memory",
        "duration",
        "queue",
        "gang",
        "preemptible",
        "offerings",
        "gpuSkus",
        "partialGpu",
        "priority",
        "gpuFraction",
        "gpuMemory",
        "computeMode",
    }
    raw = _entry(raw, where, known)
    if "name" not in raw or "at" not in raw:
        raise ScenarioError(f"{where}: 'name' and 'at' are required")
    offerings = _str(raw, "offerings", where)
    if "offerings" in raw:
        # Checked here, where it is written: on the pods it would only make the simulation skip the job.
        values = split_list(offerings)
        if not values or not set(values) <= set(CAPACITY_TYPES):
            raise ScenarioError(
                f"{where}.offerings: {offerings!r} is not a list of spot, on-demand and reserved"
            )
    gpus = _int(raw, "gpus", where, 0) or 0
    fraction, memory, mode = _share(raw, where, gpus)
    return JobSpec(
        at=clock_time(raw["at"], f"{where}.at"),
        name=_str(raw, "name", where),
        pods=_int(raw, "pods", where, 1, minimum=1) or 0,
        gpus=gpus,
        cpu_milli=_quantity(raw, "cpu", where, "1"),
        memory_milli=_quantity(raw, "memory", where, "4Gi"),
        duration=clock_time(raw.get("duration", "1h"), f"{where}.duration"),
        queue=_str(raw, "queue", where),
        gang=_bool(raw, "gang", where, False),
        preemptible=_bool(raw, "preemptible", where, True),
        offerings=offerings,
        gpu_skus=_str(raw, "gpuSkus", where),
        partial_gpu=_bool(raw, "partialGpu", where, False),
        priority=_int(raw, "priority", where, 0, minimum=None) or 0,
        gpu_fraction=fraction,
        gpu_memory_mib=memory,
        compute_mode=mode,
    )


def _share(raw: dict[str, Any], where: str, gpus: int) -> tuple[float, int, str]:
    """A job's share of a GPU (``gpuFraction`` or ``gpuMemory`` MiB, ``computeMode``), checked as KAI would."""
    fraction = raw.get("gpuFraction", 0)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ScenarioError(f"{where}.gpuFraction: {fraction!r} is not a number above 0 and below 1")
    memory = _int(raw, "gpuMemory", where, 0, minimum=0) or 0
    mode = _str(raw, "computeMode", where)
    if mode and mode not in ("time-slicing", "sm-sharing"):
        raise ScenarioError(f"{where}.computeMode: {mode!r} is not time-slicing or sm-sharing")
    if fraction and memory:
        raise ScenarioError(f"{where}.gpuMemory: {memory!r} is set beside gpuFraction (give one of them)")
    if (fraction or memory) and gpus:
        raise ScenarioError(
            f"{where}.gpus: {gpus!r} is set beside a GPU share (a pod asks for one or the other)"
        )
    if mode and not (fraction or memory):
        raise ScenarioError(f"{where}.computeMode: {mode!r} is set without gpuFraction or gpuMemory")
    return float(fraction), memory, mode


def _reservation(raw: Any, where: str) -> ReservationSpec:
    r = _entry(raw, where, {"id", "instanceType", "zone", "count", "kind", "at", "until"})
    for key in ("id", "instanceType", "zone", "count"):
        _required(r, key, where)
    kind = _str(r, "kind", where, ReservationKind.OPEN.value)
    if kind not in {k.value for k in ReservationKind}:
        raise ScenarioError(f"{where}.kind: {kind!r} is not open, targeted or capacity-block")
    at = clock_time(r["at"], f"{where}.at") if r.get("at") is not None else None
    until = clock_time(r["until"], f"{where}.until") if r.get("until") is not None else None
    if kind == ReservationKind.CAPACITY_BLOCK.value and (at is None or until is None):
        raise ScenarioError(f"{where}: a capacity-block needs at and until")
    if at is not None and until is not None and until <= at:
        raise ScenarioError(f"{where}.until: {r['until']!r} is not after at ({r['at']!r})")
    return ReservationSpec(
        _str(r, "id", where),
        _str(r, "instanceType", where),
        _str(r, "zone", where),
        _int(r, "count", where, minimum=1) or 1,
        kind,
        at,
        until,
    )


def _trace(data: dict[str, Any], base: Path) -> TraceSpec | None:
    if data.get("trace") is None:
        return None
    raw = _entry(data["trace"], "trace", {"file", "start", "window", "gpuSharing"})
    _required(raw, "file", "trace")
    window = raw.get("window")
    sharing = _str(raw, "gpuSharing", "trace")
    if sharing and sharing not in ("kai", "whole"):
        raise ScenarioError(f"trace.gpuSharing: {sharing!r} is not kai or whole")
    return TraceSpec(
        base / _str(raw, "file", "trace"),
        clock_time(raw.get("start", 0), "trace.start"),
        None if window is None else clock_time(window, "trace.window"),
        sharing,
    )


def _catalog(data: dict[str, Any], base: Path) -> CatalogSpec | None:
    if data.get("catalog") is None:
        return None
    raw = _entry(data["catalog"], "catalog", {"file", "cloud", "region"})
    _required(raw, "file", "catalog")
    return CatalogSpec(
        base / _str(raw, "file", "catalog"), _str(raw, "cloud", "catalog"), _str(raw, "region", "catalog")
    )


def parse_scenario(data: Any, source: str, *, base: Path | None = None) -> Scenario:
    """Validate a scenario document; every error names the source and the field. ``base`` is the directory
    that the trace's and catalog's file names are relative to (default: the current directory)."""
    try:
        return _parse(data, base or Path())
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None


def _parse(data: Any, base: Path) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("the scenario must be a map")
    known = {
        "name",
        "duration",
        "config",
        "queues",
        "jobs",
        "spotInterruptions",
        "capacityOutages",
        "trace",
        "catalog",
        "reservations",
    }
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ScenarioError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    queues: list[QueueSpec] = []
    for i, raw in enumerate(_list(data, "queues")):
        where = f"queues[{i}]"
        q = _entry(raw, where, {"name", "quota", "limit", "overQuotaWeight", "priority", "parent"})
        _required(q, "name", where)
        queues.append(
            QueueSpec(
                _str(q, "name", where),
                _int(q, "quota", where, unlimited=True),
                _int(q, "limit", where, unlimited=True),
                _int(q, "overQuotaWeight", where, 1) or 1,
                _int(q, "priority", where, 0, minimum=None) or 0,
                _str(q, "parent", where),
            )
        )
    names = _unique([q.name for q in queues], "queues")
    for i, queue in enumerate(queues):
        if queue.parent and (queue.parent == queue.name or queue.parent not in names):
            raise ScenarioError(f"queues[{i}].parent: {queue.parent!r} is not another queue of the scenario")
    jobs = [_job(j, f"jobs[{i}]") for i, j in enumerate(_list(data, "jobs"))]
    # Two jobs of one name would make pods of one name: the later would silently replace the earlier.
    _unique([j.name for j in jobs], "jobs")
    for j in jobs:
        if j.queue and queues and j.queue not in names:
            raise ScenarioError(f"job {j.name}: queue {j.queue!r} is not defined")
    interruptions = []
    for i, raw in enumerate(_list(data, "spotInterruptions")):
        where = f"spotInterruptions[{i}]"
        x = _entry(raw, where, {"at", "fraction"})
        fraction = x.get("fraction", 1)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ScenarioError(f"{where}.fraction: {fraction!r} is not a number from 0 to 1")
        interruptions.append(Interruption(clock_time(_required(x, "at", where), f"{where}.at"), fraction))
    outages = []
    for i, raw in enumerate(_list(data, "capacityOutages")):
        where = f"capacityOutages[{i}]"
        o = _entry(raw, where, {"at", "until", "instanceType", "zone", "capacityType"})
        at = clock_time(_required(o, "at", where), f"{where}.at")
        until = clock_time(_required(o, "until", where), f"{where}.until")
        if until <= at:
            raise ScenarioError(f"{where}.until: {o['until']!r} is not after at ({o['at']!r})")
        capacity_type = o.get("capacityType")
        if capacity_type is not None and capacity_type not in CAPACITY_TYPES:
            raise ScenarioError(f"{where}.capacityType: {capacity_type!r} is not spot or on-demand")
        outages.append(
            Outage(
                at,
                until,
                _str(o, "instanceType", where) if o.get("instanceType") is not None else None,
                _str(o, "zone", where) if o.get("zone") is not None else None,
                capacity_type,
            )
        )
    reservations = [_reservation(r, f"reservations[{i}]") for i, r in enumerate(_list(data, "reservations"))]
    _unique([r.id for r in reservations], "reservations")
    name = data.get("name", "scenario")
    if not isinstance(name, str):
        raise ScenarioError(f"name: {name!r} is not a string")
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ScenarioError("config: expected a map of tidal configuration keys")
    return Scenario(
        name=name,
        duration=clock_time(data.get("duration", "24h"), "duration"),
        config=config,
        queues=tuple(queues),
        jobs=tuple(sorted(jobs, key=lambda j: (j.at, j.name))),
        interruptions=tuple(interruptions),
        outages=tuple(outages),
        trace=_trace(data, base),
        catalog=_catalog(data, base),
        reservations=tuple(reservations),
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
