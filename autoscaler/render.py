"""A plan, and a catalog's offerings, as people read them (a table) and as programs read them (JSON)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from autoscaler.config import Config
from autoscaler.model import Offering
from autoscaler.planning import Plan
from autoscaler.snapshot import LoadedSnapshot


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The ``tidal plan --output json`` document."""
    return {
        "launches": [
            {
                "instanceType": la.offering.instance_type,
                "zone": la.offering.zone,
                "capacityType": la.offering.capacity_type,
                "pricePerHour": la.offering.price,
                "gpus": la.offering.gpu_count,
                "gpuModel": la.offering.gpu_model,
                "mode": la.mode,
                "gang": la.gang,
                "pods": list(la.pods),
                "fallbacks": [o.key for o in la.alternatives],
                **_reservation(la.offering),
            }
            for la in plan.launch.launches
        ],
        "unplaced": [
            {
                "pod": u.pod,
                "reason": u.reason,
                "filter": u.rejection.filter.value if u.rejection else "",
                "nearest": u.nearest,
            }
            for u in plan.launch.unplaced
        ],
        "ignored": [{"pod": i.pod, "reason": i.detail, "kind": i.reason.value} for i in plan.ignored],
        "removals": [{"node": r.node, "reason": r.reason} for r in plan.removal.removals],
        "blocked": [{"node": b.node, "reason": b.reason} for b in plan.removal.blocked],
        "costPerHour": plan.launch.cost_per_hour,
        "gpuTotalAfter": plan.launch.gpus_after,
    }


def _reservation(o: Offering) -> dict[str, Any]:
    """A reserved launch's reservation (nothing for others)."""
    r = o.reservation
    if r is None:
        return {}
    out: dict[str, Any] = {
        "reservation": r.id,
        "reservationType": r.kind.value,
        "onDemandPrice": r.on_demand_price,
    }
    if r.end is not None:
        out["reservationEnd"] = r.end
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def _pods(pods: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(pods[:limit])
    return f"{shown} (+{len(pods) - limit} more)" if len(pods) > limit else shown


def plan_to_table(plan: Plan, config: Config) -> str:
    """What a person reads first: launches with prices, then why other pods wait, then scale-down."""
    launches = plan.launch.launches
    counted = len(plan.demand.counted)
    limit = "none" if config.cluster_gpu_limit is None else str(config.cluster_gpu_limit)
    out = [
        f"{counted} pods need capacity, {len(plan.ignored)} need no new node, "
        f"{len(plan.launch.unplaced)} cannot be placed",
        f"launch {len(launches)} nodes for ${plan.launch.cost_per_hour:.4f}/h; "
        f"GPUs {plan.launch.gpus_before} -> {plan.launch.gpus_after} (clusterGPULimit {limit})",
        "",
    ]
    if launches:
        out += table(
            ["INSTANCE TYPE", "ZONE", "CAPACITY", "$/HOUR", "GPUS", "MODE", "PODS"],
            [
                [
                    la.offering.instance_type,
                    la.offering.zone or "-",
                    la.offering.capacity_type
                    + (f" {la.offering.reservation.id}" if la.offering.reservation is not None else ""),
                    f"{la.offering.price:.4f}",
                    f"{la.offering.gpu_count} {la.offering.gpu_model}".strip(),
                    la.mode + (f" gang {la.gang}" if la.gang else ""),
                    _pods(la.pods),
                ]
                for la in launches
            ],
        )
        out.append("")
    if plan.launch.unplaced:
        out.append("Cannot be placed:")
        out += table(
            ["POD", "FILTER", "REASON"],
            [
                [
                    u.pod,
                    u.rejection.filter.value if u.rejection else "-",
                    u.reason + (f" (nearest: {u.nearest})" if u.nearest else ""),
                ]
                for u in plan.launch.unplaced
            ],
        )
        out.append("")
    if plan.ignored:
        out.append("Pending, but no new node is needed:")
        out += table(["POD", "REASON"], [[i.pod, i.detail] for i in plan.ignored])
        out.append("")
    if plan.removal.removals:
        out.append("Remove:")
        out += table(["NODE", "REASON"], [[r.node, r.reason] for r in plan.removal.removals])
        out.append("")
    if plan.removal.blocked:
        out.append("Kept:")
        out += table(["NODE", "REASON"], [[b.node, b.reason] for b in plan.removal.blocked])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _kinds(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def snapshot_footer(loaded: LoadedSnapshot) -> str:
    """Lines under the plan table about the snapshot files themselves (empty, skipped, duplicated)."""
    out = []
    if not loaded.objects:
        out.append("(the snapshot has no objects: no pods, nodes, PDBs, DaemonSets, PodGroups or Queues)")
    if loaded.skipped:
        out.append(f"(skipped objects of other kinds: {_kinds(loaded.skipped)})")
    if loaded.duplicates:
        total = sum(loaded.duplicates.values())
        out.append(
            f"({total} object{'s' if total != 1 else ''} given more than once, the later copy used: "
            f"{_kinds(loaded.duplicates)})"
        )
    return "".join(line + "\n" for line in out)


def offerings_json(offerings: Sequence[Offering]) -> str:
    """``tidal catalog --output json``: one object per offering."""
    return json.dumps(
        [
            {
                "instanceType": o.instance_type,
                "zone": o.zone,
                "capacityType": o.capacity_type,
                "vcpu": o.vcpu,
                "memoryMiB": o.memory_mib,
                "gpus": o.gpu_count,
                "gpuModel": o.gpu_model,
                "gpuMemoryMiB": o.gpu_memory_mib,
                "arch": o.arch.value,
                "maxPods": o.max_pods,
                "pricePerHour": o.price,
                "priceSource": o.price_source,
                "available": o.available,
            }
            for o in offerings
        ],
        indent=2,
    )


def offerings_table(offerings: Sequence[Offering]) -> str:
    """``tidal catalog``'s table: one line per offering, with where its price came from."""
    headers = [
        "INSTANCE TYPE",
        "ZONE",
        "CAPACITY",
        "VCPU",
        "MEMORY",
        "GPUS",
        "$/HOUR",
        "PRICE SOURCE",
        "AVAILABLE",
    ]
    rows = [
        [
            o.instance_type,
            o.zone or "-",
            o.capacity_type,
            str(o.vcpu),
            f"{o.memory_mib / 1024:g}Gi",
            f"{o.gpu_count} {o.gpu_model}".strip(),
            f"{o.price:.4f}",
            o.price_source or "-",
            "yes" if o.available else "no",
        ]
        for o in offerings
    ]
    return "\n".join(table(headers, rows))
