"""What a CapacityBuffer buys and costs: the buffer-day scenario (GPU inference jobs arriving one at a time)
in the simulator with its buffer of one warm 1-GPU chunk, and again without it. Reported per run: how long
the GPU pods waited from creation to start (mean, p95, max), the cost of the day, and the GPU-hours idle.

    python bench/capacity_buffer.py             # result in bench/results/capacity-buffer.json
    python bench/capacity_buffer.py --no-write
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.runtime.observability.logging import configure_logging  # noqa: E402
from autoscaler.sim.run import simulate  # noqa: E402
from autoscaler.sim.scenario import load_scenario  # noqa: E402
from bench.provenance import commit  # noqa: E402

RESULT = ROOT / "bench" / "results" / "capacity-buffer.json"
SCENARIO = "buffer-day"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[k]


def measure(with_buffer: bool) -> dict[str, Any]:
    scenario = load_scenario(SCENARIO)
    if not with_buffer:
        scenario = replace(scenario, buffers=())
    outcome = simulate(scenario, bound=False)
    waits = [
        sp.started - sp.submitted
        for sp in outcome.record.pods
        if sp.started is not None and sp.pod.requests.gpus > 0
    ]
    doc = outcome.summary
    return {
        "buffer": [{"name": b.name, "replicas": b.replicas, "gpus": b.gpus} for b in scenario.buffers],
        "gpuPods": len(waits),
        "pendingSeconds": {
            "mean": round(sum(waits) / len(waits), 1) if waits else 0.0,
            "p95": round(_percentile(waits, 0.95), 1),
            "max": round(max(waits, default=0.0), 1),
        },
        "cost": doc["cost"]["total"],
        "gpuHours": doc["gpuHours"],
        "gpuHoursIdle": doc.get("gpuHoursIdle"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULT.relative_to(ROOT)}")
    args = parser.parse_args()
    configure_logging("console", "error", stream=open(os.devnull, "w"))  # noqa: SIM115
    runs = {"withBuffer": measure(True), "withoutBuffer": measure(False)}
    extra = runs["withBuffer"]["cost"] - runs["withoutBuffer"]["cost"]
    doc = {
        "benchmark": "capacity-buffer",
        "scenario": SCENARIO,
        "commit": commit(),
        **runs,
        "bufferCostPerDay": round(extra, 2),
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if not args.no_write:
        RESULT.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
