"""The benchmark suite: every scenario under every policy, in the simulator, against the LP lower bound.

Writes bench/results/<row>--<policy>.json (the simulator's summary.json) and bench/results/README.md, one
table: scenario x policy -> cost, cost / lower bound, GPU-hours idle, pending p95, over-limit launches, wall.
The Alibaba week is run twice: alibaba-week-kai replays the pods that used part of a GPU as KAI
gpu-fraction pods (``tidal simulate --scenario alibaba-week``), alibaba-week-whole as one whole GPU each
(``--gpu-sharing whole``).
A scenario with reservations is run a second time without them: its row shows both costs (the first one
includes what the reservations cost, used or not).

    python bench/suite.py [--only kai-day,spot-storm] [--policies tidal] [--table-only]
    python bench/suite.py --short [--out DIR]   # kai-day under tidal, and its table: a check that it still runs
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.runtime.observability.logging import configure_logging  # noqa: E402
from autoscaler.sim.run import Prepared, prepare, simulate  # noqa: E402
from autoscaler.sim.scenario import ScenarioError, load_scenario  # noqa: E402
from bench import output  # noqa: E402

POLICIES = ("tidal", "ca-like", "karpenter-like")
# (row, scenario, how trace pods that used part of a GPU ask for it: None for scenarios without a trace)
SCENARIOS = (
    ("kai-day", "kai-day", None),
    ("kai-day-reserved", "kai-day-reserved", None),
    ("kai-day-block", "kai-day-block", None),
    ("spot-storm", "spot-storm", None),
    ("burst-10k", "burst-10k", None),
    ("alibaba-week-kai", "alibaba-week", "kai"),
    ("alibaba-week-whole", "alibaba-week", "whole"),
)


def scenarios(wanted: set[str] | None = None) -> Iterator[tuple[str, Prepared]]:
    """(name, run) for each benchmark scenario that can run here (of ``wanted``, when given), prepared exactly
    as ``tidal simulate --scenario NAME`` prepares it (alibaba-week needs the trace and catalog of $TIDAL_DATA
    or shared/data). Each is prepared as it is asked for: a row runs with no other scenario's pods in memory
    (a trace's hundreds of thousands of pods would be walked by every collection of the row's garbage)."""
    for row, name, sharing in SCENARIOS:
        if wanted and row not in wanted:
            continue  # not prepared: reading a trace takes a while
        try:
            prepared = prepare(load_scenario(name), gpu_sharing=sharing)
        except ScenarioError as err:
            print(f"skipping {row}: {err}", file=sys.stderr)
            continue
        yield row, prepared


def pending_p50(doc: dict[str, Any]) -> float:
    return max((v["p50"] for v in doc["pendingSeconds"].values()), default=0.0)


def pending_p95(doc: dict[str, Any]) -> float:
    return max((v["p95"] for v in doc["pendingSeconds"].values()), default=0.0)


def row(path: Path) -> tuple[Any, ...]:
    """One table row from a recorded run."""
    doc = json.loads(path.read_text())
    return (
        path.stem.split("--")[0],
        doc["policy"],
        doc["cost"]["total"],
        doc["cost"].get("overLowerBound"),
        doc["gpuHoursIdle"],
        pending_p95(doc),
        doc["overLimitLaunches"],
        doc["gpuLimitViolations"],
        doc["podsNeverServed"],
        doc["wallSeconds"],
        doc.get("commit", "unrecorded"),
        doc["cost"].get("withoutReservations"),
        pending_p50(doc),
    )


def causes_table(paths: list[Path]) -> list[str]:
    """The lower bound's parts and the cost above it by cause (USD), one row per recorded run that has them."""
    from autoscaler.sim.cost_causes import CAUSES

    out = [
        "",
        "## Where the cost above the lower bound went",
        "",
        "USD. The bound is fractional nodes + whole nodes + boot (docs/simulation-costs.md); the causes add up to",
        "the cost less the bound.",
        "",
        "| scenario | policy | cost | bound | fractional | whole nodes | boot in bound | "
        + " | ".join(CAUSES)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(CAUSES),
    ]
    for path in paths:
        doc = json.loads(path.read_text())
        lb, above = doc.get("lowerBound") or {}, doc.get("costAboveBound")
        if not above or lb.get("cost") is None:
            continue
        cells = [f"{above.get(k, 0.0):.2f}" for k in CAUSES]
        out.append(
            f"| {path.stem.split('--')[0]} | {doc['policy']} | {doc['cost']['total']:.2f} | {lb['cost']:.2f}"
            f" | {lb.get('fractional', 0.0):.2f} | {lb.get('wholeNodes', 0.0):.2f} | {lb.get('boot', 0.0):.2f}"
            f" | {' | '.join(cells)} |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--policies", help="comma-separated policies (default: all)")
    parser.add_argument("--table-only", action="store_true", help="rebuild README.md from the recorded JSON")
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:  # the quickest scenario, tidal alone
        args.only, args.policies = args.only or "kai-day", args.policies or "tidal"
    configure_logging("console", "error", stream=sys.stderr)
    wanted = set(args.only.split(",")) if args.only else None
    results = output.directory(args)
    for name, run in [] if args.table_only else scenarios(wanted):
        for policy in args.policies.split(",") if args.policies else POLICIES:
            # What the rows before left behind (a simulation's objects refer to each other, so only the cycle
            # collector frees them, and a run collects rarely) is freed before this row is timed: a row's
            # time is its own, whatever ran before it in this process.
            gc.collect()
            cpu = time.process_time()
            out = simulate(
                run.scenario, policy=policy, catalog=run.catalog, cloud=run.cloud, region=run.region
            )
            doc = dict(out.summary)
            if run.scenario.reservations:
                bare = replace(run.scenario, reservations=())
                without = simulate(
                    bare, policy=policy, catalog=run.catalog, cloud=run.cloud, region=run.region
                )
                doc["cost"]["withoutReservations"] = without.summary["cost"]["total"]
            # The whole row's CPU: the runs with the lower bound and the cost causes (cpuSeconds is the run's).
            doc["rowCpuSeconds"] = round(time.process_time() - cpu, 3)
            output.write(args, f"{name}--{policy}", doc)
            del out
            print(
                f"{name:18} {policy:15} ${doc['cost']['total']:>10.2f}"
                f"  x{doc['cost'].get('overLowerBound')}  wall {doc['wallSeconds']}s"
                f"  CPU {doc['rowCpuSeconds']}s",
                flush=True,
            )
    # The table always shows every recorded run, so a partial re-run keeps the others.
    rows = [row(path) for path in sorted(results.glob("*--*.json"))]
    lines = [
        "# Benchmark results",
        "",
        "Produced by `make bench` (`bench/suite.py`, `bench/plan_scale.py`, `bench/scaleup_latency.py`,",
        "`bench/reconcile_scale.py`; `bench/chaos.py` for the 1,000-seed chaos run) on a 2-core machine.",
        "Costs are USD of list prices over the scenario. The lower bound is the cheapest capacity holding the pods",
        "that ran (runs cut short by a spot interruption included; a run started during a capacity outage cannot use",
        "what the outage took), in whole nodes, up a boot time before the pods it holds (docs/simulation-costs.md):",
        "no policy can pay less. Runs recorded before it was tightened divide by the LP relaxation alone (the",
        "fractional bound). With reservations (kai-day-reserved, kai-day-block) the cost includes",
        "what they cost, used or not (their instances at the on-demand price for as long as they last); the bound",
        "prices only what can be bought, and the same scenario run without them gives the cost without them.",
        "",
        "| scenario | policy | cost | cost without reservations | cost / lower bound | GPU-hours idle"
        " | pending p50 (s) | pending p95 (s) | over-limit launches | GPU limit violations | pods never served"
        " | wall (s) | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        no_reservations = "-" if r[11] is None else f"{r[11]:.2f}"
        lines.append(
            f"| {r[0]} | {r[1]} | {r[2]:.2f} | {no_reservations} | {r[3]} | {r[4]} | {r[12]} | {r[5]} | {r[6]} | {r[7]}"
            f" | {r[8]} | {r[9]} | {r[10]} |"
        )
    lines += causes_table(sorted(results.glob("*--*.json")))
    # Notes written beside the results by hand from measured runs (what each policy change saved, a
    # before/after comparison), each as it is.
    for note in sorted(p for p in results.glob("*.md") if p.name != "README.md"):
        lines += ["", note.read_text().strip()]
    for extra in (
        "plan_scale",
        "plan_scale_fractional",
        "plan_scale_fractional_per_pod",
        "reconcile_scale",
        "scaleup_latency",
        "chaos",
    ):
        path = results / f"{extra}.json"
        if path.exists():
            lines += ["", f"## {extra}", "", "```json", path.read_text().strip(), "```"]
    (results / "README.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
