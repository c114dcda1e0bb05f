"""Trace replay: pods of the Alibaba GPU trace (or any CSV with its columns) as simulation jobs.

Columns used: pod_id, submit_time_s, duration_s, num_gpu, gpu_milli, cpu_milli, memory_mib, gpu_spec.
A pod of the trace that used part of one GPU (gpu_milli < 1000) is replayed as ``gpu_sharing`` says:

- ``kai`` (the default): a pod asking KAI for that share of a GPU (``gpu-fraction: 0.46`` for 460), which
  KAI packs onto a device with other shares;
- ``whole``: a pod asking for one whole ``nvidia.com/gpu``, allowed onto a partial-GPU instance size.

``gpu_spec`` models tidal knows (T4, P100, V100M16|V100M32, A10, …) become the ``instance-gpu-skus``
annotation; the trace's undisclosed codes (G1, G2, G3) constrain nothing.
"""

from __future__ import annotations

import csv
import math
import os
import random
from pathlib import Path

from autoscaler.core.quantity import MAX_MILLI
from autoscaler.sim.scenario import JobSpec, ScenarioError

REQUIRED = ("pod_id", "submit_time_s", "duration_s", "cpu_milli", "memory_mib")
GPU_SHARING = ("kai", "whole")  # how a pod that used part of a GPU is replayed; the first is the default
UNDISCLOSED = {"G1", "G2", "G3"}
MIB = 2**20 * 1000


def load_trace(
    path: str | os.PathLike[str],
    *,
    compression: float = 1.0,
    sample: float = 1.0,
    start: float = 0.0,
    window: float | None = None,
    seed: int = 0,
    max_duration: float | None = None,
    gpu_sharing: str = GPU_SHARING[0],
) -> list[JobSpec]:
    """Jobs (one pod each) from a trace CSV; times are shifted so the window starts at 0 and divided by
    ``compression``; ``sample`` keeps that fraction of pods (seeded); ``gpu_sharing`` (kai or whole) says how
    a pod that used part of a GPU asks for it."""
    if compression <= 0 or not 0 < sample <= 1:
        raise ScenarioError(f"{path}: compression must be > 0 and sample in (0, 1]")
    if gpu_sharing not in GPU_SHARING:
        raise ScenarioError(f"gpu sharing: {gpu_sharing!r} is not one of {', '.join(GPU_SHARING)}")
    shares = gpu_sharing == "kai"
    rnd = random.Random(seed)
    p = Path(path)
    jobs: list[JobSpec] = []
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise ScenarioError(f"{p}: missing columns {', '.join(missing)}")
            seen: dict[str, int] = {}
            for line, row in enumerate(reader, start=2):
                pod_id = (row.get("pod_id") or "").strip()
                if not pod_id:
                    raise ScenarioError(f"{p}:{line}: pod_id is empty")
                # Pods are named after pod_id: a second row of one id would replace the first one's pod.
                if pod_id in seen:
                    raise ScenarioError(f"{p}:{line}: pod_id {pod_id!r} is already on line {seen[pod_id]}")
                seen[pod_id] = line
                jobs_row = _row(row, f"{p}:{line}")
                if jobs_row is None:
                    continue
                submit, duration, gpus, cpu, mem, skus, fraction = jobs_row
                if submit < start or (window is not None and submit >= start + window):
                    continue
                if rnd.random() >= sample:
                    continue
                if max_duration is not None:
                    duration = min(duration, max_duration)
                jobs.append(
                    JobSpec(
                        at=(submit - start) / compression,
                        name=f"t-{pod_id}",
                        pods=1,
                        gpus=0 if fraction and shares else gpus,
                        cpu_milli=cpu,
                        memory_milli=mem,
                        duration=max(1.0, duration / compression),
                        gpu_skus=skus,
                        partial_gpu=bool(fraction) and not shares,
                        gpu_fraction=fraction if shares else 0.0,
                    )
                )
    except OSError as err:
        raise ScenarioError(f"{p}: {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise ScenarioError(f"{p}: not a CSV file ({err})") from None
    return jobs


def _num(row: dict[str, str], key: str, where: str, default: float | None = None) -> float:
    raw = (row.get(key) or "").strip()
    if not raw:
        if default is None:
            raise ScenarioError(f"{where}: {key} is empty")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ScenarioError(f"{where}: {key}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ScenarioError(f"{where}: {key}: {raw!r} is not a finite number")
    if value < 0:
        raise ScenarioError(f"{where}: {key}: {raw!r} is negative")
    return value


def _row(row: dict[str, str], where: str) -> tuple[float, float, int, int, int, str, float] | None:
    """(submit, duration, GPUs, CPU milli, memory milli, GPU models, the part of one GPU it used or 0)."""
    submit = _num(row, "submit_time_s", where)
    duration = _num(row, "duration_s", where, 0.0)
    if duration <= 0:
        return None  # never ran in the trace: nothing to replay
    num_gpu = int(_num(row, "num_gpu", where, 0.0))
    milli = int(_num(row, "gpu_milli", where, 0.0))
    fraction = milli / 1000 if num_gpu == 1 and 0 < milli < 1000 else 0.0
    gpus = max(num_gpu, 1 if milli else 0)
    cpu = int(_num(row, "cpu_milli", where))
    memory = _num(row, "memory_mib", where) * MIB
    if memory > MAX_MILLI:
        raise ScenarioError(f"{where}: memory_mib: {row['memory_mib'].strip()!r} is out of range")
    mem = int(memory)
    specs = [s for s in (row.get("gpu_spec") or "").split("|") if s and s not in UNDISCLOSED]
    return submit, duration, gpus, cpu, mem, ",".join(specs) if gpus else "", fraction
