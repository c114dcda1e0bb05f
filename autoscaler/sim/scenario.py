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
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config import ConfigError, parse_duration
from autoscaler.quantity import QuantityError, to_milli

BUILT_IN = ("kai-day", "spot-storm", "burst-10k", "trace")
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
class Scenario:
    name: str
    duration: float
    config: dict[str, Any] = field(default_factory=dict)
    queues: tuple[QueueSpec, ...] = ()
    jobs: tuple[JobSpec, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    outages: tuple[Outage, ...] = ()

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


def _int(raw: dict[str, Any], key: str, where: str, default: int | None = None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ScenarioError(f"{where}.{key}: {value!r} is not a whole number")
    return None if value == -1 else value


def _job(raw: Any, where: str) -> JobSpec:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a map")
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
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r}")
    if "name" not in raw or "at" not in raw:
        raise ScenarioError(f"{where}: 'name' and 'at' are required")
    try:
        cpu = to_milli(raw.get("cpu", "1"), field=f"{where}.cpu")
        memory = to_milli(raw.get("memory", "4Gi"), field=f"{where}.memory")
    except QuantityError as err:
        raise ScenarioError(str(err)) from None
    pods = _int(raw, "pods", where, 1) or 0
    if pods < 1:
        raise ScenarioError(f"{where}.pods: must be at least 1")
    return JobSpec(
        at=clock_time(raw["at"], f"{where}.at"),
        name=str(raw["name"]),
        pods=pods,
        gpus=_int(raw, "gpus", where, 0) or 0,
        cpu_milli=cpu,
        memory_milli=memory,
        duration=clock_time(raw.get("duration", "1h"), f"{where}.duration"),
        queue=str(raw.get("queue", "")),
        gang=bool(raw.get("gang", False)),
        preemptible=bool(raw.get("preemptible", True)),
        offerings=str(raw.get("offerings", "")),
        gpu_skus=str(raw.get("gpuSkus", "")),
        partial_gpu=bool(raw.get("partialGpu", False)),
        priority=_int(raw, "priority", where, 0) or 0,
    )


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate a scenario document; every error names the source and the field."""
    try:
        return _parse(data)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None


def _parse(data: Any) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("the scenario must be a map")
    known = {"name", "duration", "config", "queues", "jobs", "spotInterruptions", "capacityOutages"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    queues = []
    for i, q in enumerate(data.get("queues") or []):
        where = f"queues[{i}]"
        if not isinstance(q, dict) or "name" not in q:
            raise ScenarioError(f"{where}: expected a map with a name")
        queues.append(
            QueueSpec(
                str(q["name"]),
                _int(q, "quota", where),
                _int(q, "limit", where),
                _int(q, "overQuotaWeight", where, 1) or 1,
                _int(q, "priority", where, 0) or 0,
                str(q.get("parent", "")),
            )
        )
    jobs = [_job(j, f"jobs[{i}]") for i, j in enumerate(data.get("jobs") or [])]
    names = {q.name for q in queues}
    for j in jobs:
        if j.queue and queues and j.queue not in names:
            raise ScenarioError(f"job {j.name}: queue {j.queue!r} is not defined")
    interruptions = [
        Interruption(clock_time(s.get("at"), f"spotInterruptions[{i}].at"), float(s.get("fraction", 1)))
        for i, s in enumerate(data.get("spotInterruptions") or [])
    ]
    outages = [
        Outage(
            clock_time(o.get("at"), f"capacityOutages[{i}].at"),
            clock_time(o.get("until"), f"capacityOutages[{i}].until"),
            o.get("instanceType"),
            o.get("zone"),
            o.get("capacityType"),
        )
        for i, o in enumerate(data.get("capacityOutages") or [])
    ]
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ScenarioError("config: expected a map of tidal configuration keys")
    return Scenario(
        name=str(data.get("name", "scenario")),
        duration=clock_time(data.get("duration", "24h"), "duration"),
        config=config,
        queues=tuple(queues),
        jobs=tuple(sorted(jobs, key=lambda j: (j.at, j.name))),
        interruptions=tuple(interruptions),
        outages=tuple(outages),
    )


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """A built-in scenario by name, or a scenario file."""
    text: str
    source = str(name_or_path)
    if source in BUILT_IN:
        text = resources.files("autoscaler.sim").joinpath(f"scenarios/{source}.yaml").read_text()
    else:
        try:
            text = Path(name_or_path).read_text(encoding="utf-8")
        except OSError as err:
            known = ", ".join(BUILT_IN)
            raise ScenarioError(f"{source}: {err.strerror or err} (built-in scenarios: {known})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        pos = f"{mark.line + 1}:{mark.column + 1}" if mark else "?"
        raise ScenarioError(f"{source}:{pos}: invalid YAML: {err.problem}") from None
    return parse_scenario(data, source)
