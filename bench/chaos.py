"""The chaos benchmark: many seeds of randomized failure in the simulator, tidal's promises checked from what
the emulated cluster and the simulated cloud recorded (autoscaler/sim/chaos.py says what a seed does, and
autoscaler/sim/chaos_world.py what is checked).

    python bench/chaos.py                  # 1,000 seeds on two processes, result in bench/results/chaos.json
    python bench/chaos.py --seeds 20 --no-write     # the short form `make bench` runs
    python bench/chaos.py --first 184 --seeds 1 -v  # one seed, every violation it found
    python bench/chaos.py --short [--out DIR]       # 2 seeds of 15 minutes: a check that it still runs

Exits 1 when any seed broke a promise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.runtime.observability.logging import configure_logging  # noqa: E402
from autoscaler.sim.chaos import ChaosResult, run_seed, summarize  # noqa: E402
from bench import output  # noqa: E402


def _quiet() -> None:
    # Injected faults make the controller log errors by design; the benchmark reports what they broke.
    configure_logging("console", "error", stream=open(os.devnull, "w"))  # noqa: SIM115


def _run(args: tuple[int, float]) -> ChaosResult:
    seed, hours = args
    return run_seed(seed, duration=hours * 3600.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--hours", type=float, default=2.0, help="simulated hours per seed (default 2)")
    parser.add_argument("--no-write", action="store_true", help="do not write the result")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every violation")
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:
        args.seeds, args.hours, args.jobs = 2, 0.25, 1
    _quiet()
    seeds = range(args.first, args.first + args.seeds)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet) as pool:
        results = list(pool.map(_run, [(s, args.hours) for s in seeds], chunksize=8))
    wall = time.perf_counter() - started
    doc = {
        "benchmark": "chaos",
        "firstSeed": args.first,
        "hoursPerSeed": args.hours,
        **summarize(results),
        "wallSeconds": round(wall, 1),
        "secondsPerSeed": round(sum(r.wall_seconds for r in results) / max(1, len(results)), 3),
        "processes": args.jobs,
        "examples": [{"seed": r.seed, **asdict(v)} for r in results for v in r.violations][:20],
    }
    total = sum(doc["violations"].values())
    print(
        f"chaos: {doc['seeds']} seeds x {args.hours:g}h, {total} violations {doc['violations']}, "
        f"{doc['launches']} launches, {doc['evictions']} evictions, {doc['reconciles']} reconciles, "
        f"wall {doc['wallSeconds']}s"
    )
    if args.verbose:
        for r in results:
            for v in r.violations:
                print(f"  seed {r.seed} t={v.t:.0f} {v.kind}: {v.detail}")
            for e in r.errors:
                print(f"  seed {r.seed} reconcile error: {e}")
    if not args.no_write:
        output.write(args, "chaos", doc)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
