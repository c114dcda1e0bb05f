"""What a simulation shows a person: summary.json, report.md and timeline.png."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from autoscaler.core.words import count
from autoscaler.sim.cluster import SimPod
from autoscaler.sim.record import Record, cost_so_far, over_limit_launches


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return round(ordered[k], 1)


def provisioned_hours(rec: Record, vcpus: dict[str, int]) -> tuple[float, float]:
    """(GPU-hours, vCPU-hours) of every instance launched, from launch to termination."""
    gpu = cpu = 0.0
    for iid, (inst, start) in rec.started.items():
        hours = max(0.0, rec.ended.get(iid, rec.end) - start) / 3600
        gpu += inst.gpu_count * hours
        cpu += vcpus.get(inst.instance_type, 0) * hours
    return gpu, cpu


def _used_hours(pods: list[SimPod], end: float, what: str) -> float:
    total = 0.0
    for sp in pods:
        if sp.started is None:
            continue
        amount = sp.gpus if what == "gpu" else sp.pod.requests.cpu / 1000
        total += amount * ((sp.ended if sp.ended is not None else end) - sp.started) / 3600
    return total


def summary(
    rec: Record,
    vcpus: dict[str, int],
    *,
    lower_bound: dict[str, Any] | None = None,
    reservations: float = 0.0,
) -> dict[str, Any]:
    """The ``summary.json`` document; ``reservations`` is what the capacity bought ahead cost, used or not
    (part of the total)."""
    pending: dict[str, list[float]] = defaultdict(list)
    for sp in rec.pods:
        if sp.started is not None:
            pending[sp.queue or ("gpu" if sp.gpus else "cpu")].append(sp.started - sp.submitted)
    gpu_prov, cpu_hours = provisioned_hours(rec, vcpus)
    ran = [*rec.pods, *rec.cut_runs]  # work cut short by an interruption was still requested and held
    gpu_used = _used_hours(ran, rec.end, "gpu")
    cpu_used = _used_hours(ran, rec.end, "cpu")
    bought = cost_so_far(rec, rec.end)
    cost = bought + reservations
    costs = {"total": round(cost, 4)}
    if reservations:
        costs.update(instances=round(bought, 4), reservations=round(reservations, 4))
    doc: dict[str, Any] = {
        "policy": rec.policy,
        "scenario": rec.scenario,
        "cost": costs,
        "gpuHours": {"provisioned": round(gpu_prov, 2), "requested": round(gpu_used, 2)},
        "utilization": {
            "cpu": round(cpu_used / cpu_hours, 4) if cpu_hours else None,
            "gpu": round(gpu_used / gpu_prov, 4) if gpu_prov else None,
        },
        "pendingSeconds": {
            k: {"p50": _pct(v, 0.5), "p95": _pct(v, 0.95), "p99": _pct(v, 0.99)}
            for k, v in sorted(pending.items())
        },
        "nodes": {
            "launched": rec.launches,
            "removed": sum(1 for iid in rec.started if rec.ended.get(iid, rec.end) < rec.end),
            "gpuNodesAtEnd": rec.gpu_nodes_at_end,
        },
        "overLimitLaunches": over_limit_launches(rec),
        "gpuLimitViolations": rec.gpu_limit_violations,
        "pods": {"submitted": len(rec.pods), "ran": sum(1 for sp in rec.pods if sp.started is not None)},
        "podsNeverServed": sum(1 for sp in rec.pods if sp.started is None),
        "neverServedBecause": dict(Counter(rec.waiting.values()).most_common(10)),
        "gpuHoursIdle": round(gpu_prov - gpu_used, 2),
        "reconciles": rec.reconciles,
        "wallSeconds": round(rec.wall_seconds, 3),
    }
    if rec.scaling_pods:
        doc["scalingPods"] = rec.scaling_pods  # what KAI's node-scale-adjuster made for the baseline
    if lower_bound is not None:
        doc["lowerBound"] = lower_bound
        if lower_bound.get("cost"):
            doc["cost"]["overLowerBound"] = round(cost / lower_bound["cost"], 4)
    return doc


def never_served_line(doc: dict[str, Any]) -> str:
    """Why pods were never served, the commonest reasons first: one line for a person."""
    reasons = doc.get("neverServedBecause") or {}
    shown = "; ".join(f"{reason} ({n})" for reason, n in list(reasons.items())[:3])
    return f"{doc['podsNeverServed']} of {count(doc['pods']['submitted'], 'pod')} {'was' if doc['podsNeverServed'] == 1 else 'were'} never served: {shown}"


REPORT_FILES = ("summary.json", "report.md", "timeline.png")  # what write_report may put in its folder


def stamp(t: float) -> str:
    """A simulated time as the timeline writes it: the day (the first is d1) and the time of day, to the
    second (``d2 13:04:05``), so that a line read alone says when it happened in a run of days."""
    day, rest = divmod(int(t), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"d{day + 1} {hours:02d}:{minutes:02d}:{seconds:02d}"


def timeline_text(rec: Record) -> list[str]:
    """A readable timeline: what happened, with GPUs up/used, pending pods by reason and cost so far."""
    lines = []
    samples = {s.t: s for s in rec.samples}
    for t, text in rec.lines:
        s = samples.get(t)
        state = ""
        if s is not None:
            waiting = ", ".join(f"{n} {k}" for k, n in sorted(s.pending.items())) or "none"
            state = f"  [GPUs {s.gpus_up} up / {s.gpus_used:g} used; pending: {waiting}; ${s.cost:.2f}]"
        lines.append(f"{stamp(t)}  {text}{state}")
    return lines


def shown_timeline(rec: Record, max_lines: int, report: str | None = None) -> list[str]:
    """The timeline's first ``max_lines`` events and, when there were more, a last line saying how many were
    left out and where to see them."""
    lines = timeline_text(rec)
    left = len(lines) - max_lines
    if left <= 0:
        return lines
    where = f"{report}/report.md has every one" if report else "--report DIR writes every one to report.md"
    more = count(left, "more event")
    return [*lines[:max_lines], f"... {more} not shown (--max-lines {len(lines)} shows them all; {where})"]


def write_report(rec: Record, doc: dict[str, Any], directory: Path) -> list[str]:
    """Write summary.json, report.md and (with matplotlib) timeline.png; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    (directory / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    written.append("summary.json")
    png = _plot(rec, directory / "timeline.png")
    md = [
        f"# {rec.scenario} — policy {rec.policy}",
        "",
        f"Cost ${doc['cost']['total']:.2f}; GPU-hours provisioned {doc['gpuHours']['provisioned']}, "
        f"requested {doc['gpuHours']['requested']}; over-limit launches {doc['overLimitLaunches']}; "
        f"GPU limit violations {doc['gpuLimitViolations']}; pods ran {doc['pods']['ran']} of "
        f"{doc['pods']['submitted']}, never served {doc['podsNeverServed']}.",
        "",
    ]
    if doc["podsNeverServed"]:
        md += [never_served_line(doc) + ".", ""]
    if "lowerBound" in doc:
        lb = doc["lowerBound"]
        md.append(
            f"Lower bound: {lb.get('cost')} ({lb.get('why', 'LP relaxation of the capacity for the pods that ran, integrated over the run')})."
        )
        md.append("")
    md += ["## Timeline", "", "```", *timeline_text(rec), "```", ""]
    md.append(
        "![timeline](timeline.png)"
        if png
        else "timeline.png was not drawn: matplotlib is not installed (pip install 'tidal-autoscaler[plot]')."
    )
    (directory / "report.md").write_text("\n".join(md) + "\n")
    written.append("report.md")
    if png:
        written.append("timeline.png")
    return written


def _plot(rec: Record, path: Path) -> bool:
    try:
        import matplotlib.pyplot as plt

        from autoscaler.sim.timeline_plot import figure
    except ImportError:
        return False
    fig = figure(rec)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
