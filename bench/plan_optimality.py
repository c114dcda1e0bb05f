"""How far one scale-up plan is from the cheapest possible: tidal's plan cost over the exact optimum.

Several hundred snapshots of pending pods, deterministic by seed, small (2 to 12 pods) and medium (13 to 40),
each of one kind: CPU pods, whole-GPU pods, KAI GPU shares (``gpu-fraction`` and ``gpu-memory``, some in
``sm-sharing`` mode), MIG instances, or a mix; some pods pinned to a zone or a GPU model, some allowed spot,
some snapshots under a ``clusterGPULimit``. Prices are the real us-east-1 catalog
(config/catalogs/aws-us-east-1.csv, two zones).

For each snapshot the exact optimum is solved from the offerings' own data (``autoscaler.core.planning.exact``:
node templates' allocatable, the offering filters' verdict per pod and offering, GPU devices per offering),
for the pods tidal launched nodes for, within the same limits. Two plans are measured against it: the
heuristic alone (``exactPlanMaxPods: 0``) and tidal as configured by default (the exact step on batches up to
``exactPlanMaxPods``). Targets: mean ratio <= 1.01, worst <= 1.05.

    python bench/plan_optimality.py [--snapshots N] [--seed S] [--no-write] [--compare-solvers]

``--compare-solvers`` also solves every model with OR-Tools CP-SAT and with HiGHS (through SciPy) and reports
the time each took to prove the optimum, which chose CP-SAT.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.cli.snapshot import SnapshotBuilder  # noqa: E402
from autoscaler.config.options import Config, config_from_mapping  # noqa: E402
from autoscaler.core.model import Snapshot  # noqa: E402
from autoscaler.core.offering import Offering  # noqa: E402
from autoscaler.core.planning import exact, exact_model, exact_solve  # noqa: E402
from autoscaler.core.planning.classes import pod_mode  # noqa: E402
from autoscaler.core.planning.decisions import NO_USAGE  # noqa: E402
from autoscaler.core.planning.exact_step import limits  # noqa: E402
from autoscaler.core.planning.offerings import OfferingIndex  # noqa: E402
from autoscaler.core.planning.planner import Plan, PlanInput, plan  # noqa: E402
from autoscaler.runtime.catalog import offering_templates, read_catalog_csv  # noqa: E402
from bench.provenance import commit  # noqa: E402

CATALOG = ROOT / "config" / "catalogs" / "aws-us-east-1.csv"
RESULTS = ROOT / "bench" / "results" / "plan_optimality.json"
ZONES = ["us-east-1a", "us-east-1b"]
NOW = 1_795_168_800.0
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KINDS = ("cpu", "whole-gpu", "shares", "mig", "mixed")
MIG_LAYOUTS = {"A100": "all-1g.5gb", "H100": "all-1g.10gb"}
MIG_PROFILES = {"A100": "nvidia.com/mig-1g.5gb", "H100": "nvidia.com/mig-1g.10gb"}


def _pod(
    name: str,
    requests: dict[str, str],
    *,
    annotations: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    gpu: bool = False,
    kai: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler" if kai else "default-scheduler",
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    if selector:
        spec["nodeSelector"] = selector
    app = name.rsplit("-", 1)[0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "annotations": annotations or {},
            "labels": {"app": app},
            "ownerReferences": [{"kind": "ReplicaSet", "name": app, "controller": True}],
        },
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                }
            ],
        },
    }


def _workload(rnd: random.Random, kind: str, w: int, replicas: int) -> list[dict[str, Any]]:
    """``replicas`` identical pods of one Deployment of ``kind``."""
    ann: dict[str, str] = {}
    selector: dict[str, str] = {}
    if rnd.random() < 0.3:
        ann["tidal.dev/instance-offerings"] = rnd.choice(["spot,on-demand", "spot", "on-demand"])
    if rnd.random() < 0.2:
        selector["topology.kubernetes.io/zone"] = rnd.choice(ZONES)
    gpu = kai = False
    if kind == "cpu":
        cpu, mem = rnd.choice(
            [
                ("250m", "512Mi"),
                ("500m", "1Gi"),
                ("1", "2Gi"),
                ("1", "4Gi"),
                ("2", "4Gi"),
                ("2", "8Gi"),
                ("3", "6Gi"),
                ("4", "16Gi"),
                ("6", "12Gi"),
                ("7", "28Gi"),
            ]
        )
        requests = {"cpu": cpu, "memory": mem}
        if rnd.random() < 0.15:
            selector["kubernetes.io/arch"] = rnd.choice(["amd64", "arm64"])
    elif kind == "whole-gpu":
        gpus = rnd.choice([1, 1, 1, 2, 4])
        cpu, mem = rnd.choice([("2", "8Gi"), ("4", "16Gi"), ("6", "24Gi"), ("12", "48Gi"), ("3", "30Gi")])
        requests = {"cpu": cpu, "memory": mem, "nvidia.com/gpu": str(gpus)}
        gpu = True
        if rnd.random() < 0.35:
            ann["tidal.dev/instance-gpu-skus"] = rnd.choice(["T4", "L4", "A10G", "L4,A10G", "L40S"])
    elif kind == "shares":
        if rnd.random() < 0.25:
            ann["gpu-memory"] = str(rnd.choice([2000, 4000, 8000, 12000]))
        else:
            ann["gpu-fraction"] = rnd.choice(["0.1", "0.2", "0.25", "0.3", "0.5", "0.75"])
        if rnd.random() < 0.15:
            ann["kai.scheduler/gpu-compute-sharing-mode"] = "sm-sharing"
        if rnd.random() < 0.3:
            ann["tidal.dev/instance-gpu-skus"] = rnd.choice(["T4", "L4", "A10G"])
        cpu, mem = rnd.choice([("500m", "2Gi"), ("1", "4Gi"), ("2", "8Gi"), ("1", "2Gi"), ("3", "12Gi")])
        requests = {"cpu": cpu, "memory": mem}
        gpu = kai = True
    else:  # mig
        model = rnd.choice(sorted(MIG_PROFILES))
        cpu, mem = rnd.choice([("1", "4Gi"), ("2", "8Gi"), ("4", "16Gi")])
        requests = {"cpu": cpu, "memory": mem, MIG_PROFILES[model]: "1"}
        gpu = True
    return [
        _pod(f"w{w}-{kind}-{i}", requests, annotations=dict(ann), selector=dict(selector), gpu=gpu, kai=kai)
        for i in range(replicas)
    ]


def scenario(seed: int) -> tuple[str, int, list[dict[str, Any]], dict[str, Any]]:
    """One snapshot's pods and configuration, deterministic for ``seed``: (kind, pods, objects, config)."""
    rnd = random.Random(seed)
    kind = KINDS[seed % len(KINDS)]
    medium = rnd.random() < 0.35
    total = rnd.randint(13, 40) if medium else rnd.randint(2, 12)
    objs: list[dict[str, Any]] = []
    w = 0
    while len(objs) < total:
        k = rnd.choice(KINDS[:4]) if kind == "mixed" else kind
        replicas = min(total - len(objs), rnd.randint(1, max(1, total // 2)))
        objs.extend(_workload(rnd, k, w, replicas))
        w += 1
    cfg: dict[str, Any] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zones": ZONES,
        "capacityTypes": rnd.choice([["on-demand", "spot"], ["spot", "on-demand"], ["on-demand"]]),
        "gpuSharing": {"migLayouts": MIG_LAYOUTS},
    }
    if kind in ("whole-gpu", "mixed") and rnd.random() < 0.2:
        cfg["clusterGPULimit"] = rnd.randint(2, 8)
    return kind, len(objs), objs, cfg


def _snapshot(objs: list[dict[str, Any]]) -> Snapshot:
    b = SnapshotBuilder()
    for i, obj in enumerate(objs):
        b.add(obj, f"object {i}")
    return b.build()


def _oracle(
    snap: Snapshot, offerings: list[Offering], config: Config, tidal: Plan
) -> tuple[exact.Problem, exact_model.Outcome, float]:
    """The exact optimum for the pods ``tidal`` launched nodes for, and the seconds it took."""
    index = OfferingIndex(offerings, config, snap.daemonsets)
    demand = tidal.demand
    launched = {p for la in tidal.launch.launches for p in la.pods}
    items = [
        (p, demand.constraints[p.key], pod_mode(p, demand.constraints[p.key], index))
        for p in demand.counted
        if p.key in launched
    ]
    problem = exact.problem(items, index, limits(index, NO_USAGE))
    t0 = time.perf_counter()
    outcome = exact_solve.solve(problem, cost_bound=tidal.launch.cost_per_hour + 1e-6, time_limit=120)
    return problem, outcome, time.perf_counter() - t0


def run(seeds: range, compare: bool, max_pods: int | None = None) -> dict[str, Any]:
    offerings = read_catalog_csv(
        CATALOG, cloud="aws", region="us-east-1", zones=ZONES, template=offering_templates("aws")
    )
    _warm_up()

    rows = []
    for seed in seeds:
        kind, n, objs, cfg = scenario(seed)
        snap = _snapshot(objs)
        heuristic_cfg = config_from_mapping({**cfg, "exactPlanMaxPods": 0}, source="bench")
        extra = {} if max_pods is None else {"exactPlanMaxPods": max_pods}
        tidal_cfg = config_from_mapping({**cfg, **extra}, source="bench")
        t0 = time.perf_counter()
        heuristic = plan(PlanInput(snap, offerings, heuristic_cfg, NOW))
        t1 = time.perf_counter()
        tidal = plan(PlanInput(snap, offerings, tidal_cfg, NOW))
        t2 = time.perf_counter()
        problem, outcome, solve_s = _oracle(snap, offerings, heuristic_cfg, heuristic)
        row: dict[str, Any] = {
            "seed": seed,
            "kind": kind,
            "pods": n,
            "placed": sum(len(la.pods) for la in heuristic.launch.launches),
            "heuristicCost": heuristic.launch.cost_per_hour,
            "tidalCost": tidal.launch.cost_per_hour,
            "tidalPlaced": sum(len(la.pods) for la in tidal.launch.launches),
            "heuristicSeconds": round(t1 - t0, 4),
            "tidalSeconds": round(t2 - t1, 4),
            "oracleStatus": outcome.status,
            "oracleSeconds": round(solve_s, 4),
            "groups": len(problem.groups),
            "types": len(problem.types),
        }
        if outcome.solution is not None:
            fault = exact.verify(problem, outcome.solution)
            row["optimum"] = outcome.solution.cost
            row["oracleFault"] = fault
        elif outcome.status == "infeasible":
            row["optimum"] = None  # the heuristic's plan breaks the model: reported, never hidden
        rows.append(row)
        if compare:
            row["solvers"] = _compare(problem, heuristic.launch.cost_per_hour)
    return _summary(rows)


def _warm_up() -> None:
    """Load and start the solver once, as a running daemon has: no plan's time includes that."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = model.new_int_var(0, 3, "x")
    model.add(x >= 1)
    model.minimize(x)
    cp_model.CpSolver().solve(model)


def _ratio(cost: float, optimum: float) -> float:
    if optimum <= 0:
        return 1.0 if cost <= 1e-9 else float("inf")
    return cost / optimum


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    solved = [r for r in rows if r.get("optimum") is not None and not r.get("oracleFault")]
    out: dict[str, Any] = {"snapshots": len(rows), "solved": len(solved)}
    for policy, key in (("heuristic", "heuristicCost"), ("tidal", "tidalCost")):
        ratios = [
            _ratio(r[key], r["optimum"])
            for r in solved
            if r.get("tidalPlaced") == r["placed"] or policy == "heuristic"
        ]
        out[policy] = {
            "meanRatio": round(statistics.fmean(ratios), 5) if ratios else None,
            "worstRatio": round(max(ratios), 5) if ratios else None,
            "atOptimum": sum(1 for x in ratios if x <= 1 + 1e-9),
            "over1pct": sum(1 for x in ratios if x > 1.01),
            "over5pct": sum(1 for x in ratios if x > 1.05),
        }
        by_kind = {}
        for kind in KINDS:
            ks = [_ratio(r[key], r["optimum"]) for r in solved if r["kind"] == kind]
            if ks:
                by_kind[kind] = {
                    "mean": round(statistics.fmean(ks), 5),
                    "worst": round(max(ks), 5),
                    "n": len(ks),
                }
        out[policy]["byKind"] = by_kind
        worst = sorted(solved, key=lambda r: -_ratio(r[key], r["optimum"]))[:5]
        out[policy]["worstSeeds"] = [
            {"seed": r["seed"], "kind": r["kind"], "pods": r["pods"], "cost": r[key], "optimum": r["optimum"]}
            for r in worst
        ]
    out["oracle"] = {
        "statuses": {
            s: sum(1 for r in rows if r["oracleStatus"] == s)
            for s in sorted({r["oracleStatus"] for r in rows})
        },
        "faults": [r["seed"] for r in rows if r.get("oracleFault")],
        "secondsMedian": round(statistics.median(r["oracleSeconds"] for r in rows), 4),
        "secondsMax": round(max(r["oracleSeconds"] for r in rows), 4),
    }
    out["planSeconds"] = {
        "heuristicMedian": round(statistics.median(r["heuristicSeconds"] for r in rows), 4),
        "tidalMedian": round(statistics.median(r["tidalSeconds"] for r in rows), 4),
        "tidalMax": round(max(r["tidalSeconds"] for r in rows), 4),
    }
    out["rows"] = rows
    return out


def _compare(problem: exact.Problem, bound: float) -> dict[str, Any]:
    """Seconds CP-SAT and HiGHS each take to prove the same optimum (and the optimum, to check they agree)."""
    out: dict[str, Any] = {}
    for name, runner in (("cpsat", exact_model.run), ("highs", exact_model.run_highs)):
        t0 = time.perf_counter()
        found = exact_solve.solve(problem, cost_bound=bound + 1e-6, time_limit=120, runner=runner)
        out[name] = {"seconds": round(time.perf_counter() - t0, 4), "cost": _cost(found)}
    return out


def _cost(outcome: exact_model.Outcome) -> float | None:
    return outcome.solution.cost if outcome.status == "optimal" and outcome.solution is not None else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snapshots", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help="print the summary without recording it")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where to record the result")
    ap.add_argument("--compare-solvers", action="store_true")
    ap.add_argument("--max-pods", type=int, help="exactPlanMaxPods for tidal's plans (default: the default)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    summary = run(range(args.seed, args.seed + args.snapshots), args.compare_solvers, args.max_pods)
    summary = {
        "benchmark": "plan_optimality",
        "catalog": str(CATALOG.relative_to(ROOT)),
        "seeds": [args.seed, args.seed + args.snapshots - 1],
        "wallSeconds": round(time.perf_counter() - t0, 1),
        **summary,
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
            # Other work on the machine inflates every time measured here; the costs do not depend on it.
            "loadAverage": [round(x, 1) for x in os.getloadavg()],
        },
    }
    if args.compare_solvers:
        summary["solvers"] = _solver_summary(summary["rows"])
    shown = {k: v for k, v in summary.items() if k != "rows"}
    print(json.dumps(shown, indent=2))
    if not args.no_write:
        summary["commit"] = commit()
        args.out.write_text(dumps(summary) + "\n")
    return 0


def dumps(summary: dict[str, Any]) -> str:
    """The result as JSON, its per-snapshot rows one a line."""
    head = json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2)
    rows = ",\n".join("    " + json.dumps(r) for r in summary["rows"])
    return f'{head[:-2]},\n  "rows": [\n{rows}\n  ]\n}}'


def _solver_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("cpsat", "highs"):
        times = [r["solvers"][name]["seconds"] for r in rows if name in r.get("solvers", {})]
        if not times:
            continue
        agree = sum(
            1
            for r in rows
            if name in r.get("solvers", {})
            and r["solvers"][name]["cost"] is not None
            and r["solvers"]["cpsat"]["cost"] is not None
            and abs(r["solvers"][name]["cost"] - r["solvers"]["cpsat"]["cost"]) < 1e-4
        )
        out[name] = {
            "models": len(times),
            "secondsMedian": round(statistics.median(times), 4),
            "secondsP90": round(sorted(times)[int(0.9 * (len(times) - 1))], 4),
            "secondsMax": round(max(times), 4),
            "secondsTotal": round(sum(times), 2),
            "sameOptimumAsCpsat": agree,
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
