"""timeline.png: what a simulated day looked like, drawn so a person can read it.

Panels: the cluster's GPUs (spot and on-demand, stacked) against what ran and ``clusterGPULimit``; each KAI
queue's running GPUs against its quota and limit; pending pods by why they waited; cost so far. Launches,
removals, spot interruptions and capacity outages are marked on the time axis of every panel.

Each y-axis is scaled to its data: a reference line far above it (a 512-GPU limit over a 20-GPU day) would
flatten the curve to the floor, so such a line is written as a note in the corner instead of drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.sim.record import INTERRUPTION, LAUNCH, OUTAGE_BEGINS, OUTAGE_ENDS, REMOVAL, Record

# A reference line is drawn when it is at most this many times the data's peak; beyond, it is a note.
ON_SCALE = 1.5
HEADROOM = 1.15


@dataclass(frozen=True, slots=True)
class Scale:
    """The top of a y-axis and which reference lines fit under it."""

    top: float
    drawn: tuple[tuple[str, float], ...]
    noted: tuple[tuple[str, float], ...]


def scale(values: Sequence[float], lines: Mapping[str, float | None]) -> Scale:
    """Scale an axis to ``values``; a line in ``lines`` (name -> value, None for none) is drawn when it is
    within ON_SCALE of the data's peak, and noted otherwise."""
    peak = max([*values, 0.0])
    drawn: list[tuple[str, float]] = []
    noted: list[tuple[str, float]] = []
    for name, value in lines.items():
        if value is None:
            continue
        (drawn if peak and value <= peak * ON_SCALE else noted).append((name, float(value)))
    top = max([peak, *(v for _, v in drawn)]) * HEADROOM or 1.0
    return Scale(top, tuple(drawn), tuple(noted))


def figure(rec: Record) -> Any:
    """The timeline as a matplotlib Figure (not yet saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queues = sorted(rec.queues)
    rows = 4 if queues else 3
    fig, axes = plt.subplots(rows, 1, figsize=(11, 2.6 * rows + 1), sharex=True)
    gpu_ax, *rest = axes
    queue_ax = rest[0] if queues else None
    pending_ax, cost_ax = rest[-2], rest[-1]
    hours = [s.t / 3600 for s in rec.samples]

    _gpus(gpu_ax, rec, hours)
    if queue_ax is not None:
        _queues(queue_ax, rec, hours, queues)
    _pending(pending_ax, rec, hours)
    cost_ax.plot(hours, [s.cost for s in rec.samples], color="black")
    cost_ax.set_ylabel("cost so far (USD)")
    cost_ax.set_xlabel("hours")
    cost_ax.set_ylim(bottom=0)
    for ax in axes:
        _events(ax, rec, label=ax is gpu_ax)
    gpu_ax.legend(loc="upper left", fontsize="small", ncol=3)
    fig.suptitle(f"{rec.scenario} — {rec.policy}")
    fig.tight_layout()
    return fig


def _note(ax: Any, noted: Sequence[tuple[str, float]]) -> None:
    """Reference lines far off the axis, written in its top right corner."""
    if noted:
        text = "; ".join(f"{name} {value:g} (off scale)" for name, value in noted)
        ax.text(0.99, 0.95, text, transform=ax.transAxes, ha="right", va="top", fontsize="small")


def _gpus(ax: Any, rec: Record, hours: list[float]) -> None:
    spot = [s.spot_gpus for s in rec.samples]
    up = [s.gpus_up for s in rec.samples]
    on_demand = [u - sp for u, sp in zip(up, spot, strict=True)]
    ax.fill_between(
        hours, 0, on_demand, step="post", alpha=0.5, color="tab:blue", linewidth=0, label="on-demand GPUs"
    )
    top = [od + sp for od, sp in zip(on_demand, spot, strict=True)]
    ax.fill_between(
        hours, on_demand, top, step="post", alpha=0.5, color="tab:orange", linewidth=0, label="spot GPUs"
    )
    used = [s.gpus_used for s in rec.samples]
    ax.step(hours, used, where="post", color="black", linewidth=1, label="GPUs of running pods")
    limits = {s.gpu_limit for s in rec.samples if s.gpu_limit is not None}
    limit = max(limits) if limits else None
    axis = scale([*up, *used], {"clusterGPULimit": limit})
    for name, value in axis.drawn:
        ax.axhline(value, color="tab:red", linestyle="--", linewidth=1, label=f"{name} {value:g}")
    _note(ax, axis.noted)
    ax.set_ylim(0, axis.top)
    ax.set_ylabel("GPUs")


def _queues(ax: Any, rec: Record, hours: list[float], queues: Sequence[str]) -> None:
    colors = ["tab:purple", "tab:green", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    running_all: list[float] = []
    bounds: dict[str, float | None] = {}
    for i, name in enumerate(queues):
        running = [s.queue_gpus.get(name, 0) for s in rec.samples]
        running_all += running
        color = colors[i % len(colors)]
        ax.step(hours, running, where="post", color=color, label=f"{name} running")
        quota, limit = rec.queues[name]
        bounds[f"{name} quota"] = quota
        bounds[f"{name} limit"] = limit
    axis = scale(running_all, bounds)
    for name, value in axis.drawn:
        queue, kind = name.rsplit(" ", 1)
        color = colors[queues.index(queue) % len(colors)]
        style = ":" if kind == "quota" else "--"
        ax.axhline(value, color=color, linestyle=style, linewidth=1, label=f"{name} {value:g}")
    _note(ax, axis.noted)
    ax.set_ylim(0, axis.top)
    ax.set_ylabel("GPUs by KAI queue")
    ax.legend(loc="upper left", fontsize="small", ncol=2)


def _pending(ax: Any, rec: Record, hours: list[float]) -> None:
    kinds = sorted({k for s in rec.samples for k in s.pending})
    for kind in kinds:
        ax.step(hours, [s.pending.get(kind, 0) for s in rec.samples], where="post", label=kind)
    ax.set_ylabel("pending pods")
    ax.set_ylim(bottom=0)
    if kinds:
        ax.legend(loc="upper left", fontsize="x-small", title="waiting because", title_fontsize="small")


def _events(ax: Any, rec: Record, *, label: bool) -> None:
    """Launches and removals as ticks on the time axis, interruptions as lines, outages as shaded spans."""
    seen: set[str] = set()

    def once(name: str) -> str | None:
        if not label or name in seen:
            return None
        seen.add(name)
        return name

    began: float | None = None
    for t, kind, _count in rec.markers:
        h = t / 3600
        if kind == LAUNCH:
            ax.plot(
                [h], [0], marker="^", color="tab:green", clip_on=False, linestyle="", label=once("launch")
            )
        elif kind == REMOVAL:
            ax.plot([h], [0], marker="v", color="tab:red", clip_on=False, linestyle="", label=once("removal"))
        elif kind == INTERRUPTION:
            ax.axvline(h, color="tab:purple", linestyle="-.", linewidth=1.5, label=once("spot interruption"))
        elif kind == OUTAGE_BEGINS:
            began = h if began is None else began
        elif kind == OUTAGE_ENDS and began is not None:
            ax.axvspan(began, h, color="grey", alpha=0.15, label=once("capacity outage"))
            began = None
    if began is not None:
        ax.axvspan(began, rec.end / 3600, color="grey", alpha=0.15, label=once("capacity outage"))
