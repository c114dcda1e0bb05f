"""A plan, and a catalog's offerings, as people read them (a table) and as programs read them (JSON)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from autoscaler.cli.snapshot import LoadedSnapshot
from autoscaler.config.values import Config
from autoscaler.core.offering import Offering
from autoscaler.core.planning.decisions import BIN_PACKING, Launch
from autoscaler.core.planning.planner import Plan
from autoscaler.core.planning.why import LaunchWhy, PodStory, idle_warning
from autoscaler.core.spot_risk import InterruptionRisk
from autoscaler.core.words import count
from autoscaler.runtime.status import queue_status

# Kinds of launch whose "why" the table shows; --output json has every one.
WHY_SHOWN = 10
MODES = {
    BIN_PACKING: "bin-packing (a node of the binPackingNode* size, shared by small pods)",
    "bin-selection": "bin-selection (a node chosen for its pods)",
}
# Bin-packing nodes that each hold one pod (its anti-affinity, say, or the only small pod waiting): they
# are of the size small pods share, but are not shared.
PACKING_ALONE = "bin-packing (a node of the binPackingNode* size for small pods to share; {} one pod)"


def _mode(mode: str, pods_per_node: Sequence[int]) -> str:
    """The words for a launch's mode, true of what its nodes hold."""
    if mode == BIN_PACKING and pods_per_node and max(pods_per_node) == 1:
        return PACKING_ALONE.format("it holds" if len(pods_per_node) == 1 else "each of these nodes holds")
    return MODES.get(mode, mode)


def _priced(o: Offering) -> str:
    return f"{o.key} ${o.price:.4f}/h"


def _why_json(why: LaunchWhy) -> dict[str, Any]:
    return {
        "modeReason": why.mode_reason,
        "compared": [
            {"offering": c.offering.key, "pricePerHour": c.offering.price, "verdict": c.verdict}
            for c in why.compared
        ],
        "cheaperCompared": why.cheaper_compared,
        "ruledOut": [
            {
                "filter": r.rejection.filter.value,
                "key": r.rejection.key,
                "reason": r.rejection.message,
                "count": r.count,
                "cheapest": r.cheapest.key,
                "cheapestPricePerHour": r.cheapest.price,
            }
            for r in why.ruled_out
        ],
        "fallbackCapPerHour": why.fallback_cap,
        "fallbackCappedBy": why.capped_by,
        "leftOutAboveCap": why.left_out.key if why.left_out is not None else None,
        "gpusUsed": why.gpus_used,
        "idleGpus": why.idle_gpus,
        "exactPlanSavingPerHour": why.exact_saving or None,
        "interruption": _interruption_json(why.interruption),
    }


def _interruption_json(risk: InterruptionRisk | None) -> dict[str, Any] | None:
    if risk is None:
        return None
    return {
        "ratePerHour": risk.rate,
        "costHours": risk.hours,
        "expectedCostPerHour": risk.expected,
    }


def interruption_line(offering: Offering, risk: InterruptionRisk) -> str:
    """One line on a spot node's interruption risk and what it is expected to cost its pods."""
    return (
        f"spot interruptions: {risk.rate:.2g} an hour ({risk.share:.0%} of such nodes in {risk.period:g}h of "
        "running); one costs "
        f"{risk.hours:.2f}h of its price (work lost + restart): expected ${risk.expected:.4f}/h, "
        f"${offering.price + risk.expected:.4f}/h in all"
    )


def _launch_json(la: Launch, whys: dict[int, dict[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {
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
        "fallbackPricesPerHour": [o.price for o in la.alternatives],
        **_reservation(la.offering),
    }
    if la.why is not None:
        # Launches of one kind share one explanation: build its document once.
        found = whys.get(id(la.why))
        if found is None:
            found = whys[id(la.why)] = _why_json(la.why)
        doc["why"] = found
    return doc


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The ``tidal plan --output json`` document."""
    whys: dict[int, dict[str, Any]] = {}
    return {
        "launches": [_launch_json(la, whys) for la in plan.launch.launches],
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
        "removals": [{"node": r.node, "reason": r.reason, "gpus": r.gpus} for r in plan.removal.removals],
        "costEstimates": [
            {"pod": e.pod, "podGroup": e.group, "pods": list(e.pods), "estimate": json.loads(e.annotation())}
            for e in plan.estimates
        ],
        "blocked": [{"node": b.node, "reason": b.reason} for b in plan.removal.blocked],
        "queues": {q.queue: queue_status(q) for q in plan.queues},
        "costPerHour": plan.launch.cost_per_hour,
        "gpuTotalBefore": plan.launch.gpus_before,
        "gpuTotalAfter": plan.gpus_after,
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
    ignored = len(plan.ignored)
    out = [
        f"{count(counted, 'pod')} need{'s' if counted == 1 else ''} capacity, {ignored} "
        f"need{'s' if ignored == 1 else ''} no new node, {len(plan.launch.unplaced)} cannot be placed",
        f"launch {count(len(launches), 'node')} for ${plan.launch.cost_per_hour:.4f}/h, remove "
        f"{len(plan.removal.removals)}; GPUs {plan.launch.gpus_before} -> {plan.gpus_after} "
        f"(+{plan.launch.gpus_after - plan.launch.gpus_before} launched, "
        f"-{plan.launch.gpus_after - plan.gpus_after} removed; clusterGPULimit {limit})",
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
    if any(la.why is not None for la in launches):
        out += why_lines(launches)
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
    if plan.queues:
        out.append("KAI queues (GPUs; $/h of the nodes serving each, with this plan's launches):")
        out += table(
            ["QUEUE", "ALLOCATED", "PENDING", "LAUNCHING", "$/HOUR", "BUDGET $/HOUR"],
            [
                [
                    q.queue,
                    f"{q.gpus_allocated:g}",
                    f"{q.gpus_pending:g}",
                    f"{q.gpus_launching:g}",
                    f"{q.cost_per_hour:.4f}",
                    "-" if q.budget is None else f"{q.budget:.2f}",
                ]
                for q in plan.queues
            ],
        )
        out.append("")
    if plan.estimates:
        out.append("Cost estimates (gated pods, never launched for; the daemon writes them on the pod):")
        out += table(
            ["POD", "ESTIMATE"],
            [[e.pod + (f" (PodGroup {e.group})" if e.group else ""), e.summary()] for e in plan.estimates],
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


def _kinds_of_launch(launches: Sequence[Launch]) -> list[list[Launch]]:
    """Launches grouped by what they are and why (nodes for replicas of one workload are one kind)."""
    # Launches of one kind mostly share their offering, fallbacks and reasons as objects: each distinct trio of
    # objects is hashed once, not each of thousands of launches (a hash of a dataclass goes over every field).
    alike: dict[tuple[int, int, int], list[tuple[int, Launch]]] = {}
    for i, la in enumerate(launches):
        alike.setdefault((id(la.offering), id(la.alternatives), id(la.why)), []).append((i, la))
    groups: dict[tuple[object, ...], list[list[tuple[int, Launch]]]] = {}
    for same in alike.values():
        la = same[0][1]
        groups.setdefault((la.offering, la.alternatives, la.why), []).append(same)
    # Equal trios of distinct objects make one kind, its launches in the order they came.
    return [
        [
            la
            for _, la in (
                parts[0] if len(parts) == 1 else sorted(chain.from_iterable(parts), key=itemgetter(0))
            )
        ]
        for parts in groups.values()
    ]


def why_lines(launches: Sequence[Launch]) -> list[str]:
    """Why each kind of launch is the offering it is: its mode, the candidates it was compared with, the
    filters that ruled out cheaper offerings, and its fallbacks with their prices."""
    kinds = _kinds_of_launch(launches)
    out = ["Why these instance types:"]
    for group in kinds[:WHY_SHOWN]:
        la, why = group[0], group[0].why
        if why is None:
            continue
        pods = [p for g in group for p in g.pods]
        nodes = f"{count(len(group), 'node')} " if len(group) > 1 else ""
        out.append(f"{nodes}{_priced(la.offering)} for {_pods(pods, 3)}")
        out.append(f"  mode: {_mode(la.mode, [len(g.pods) for g in group])}, because {why.mode_reason}")
        if why.interruption is not None:
            out.append(f"  {interruption_line(la.offering, why.interruption)}")
        if why.exact_saving:
            out.append(
                f"  exact plan: these launches cost ${why.exact_saving:.4f}/h less than the heuristic's"
                " for the same pods (exactPlanMaxPods)"
            )
        if why.compared:
            listed = "; ".join(
                f"{c.offering.instance_type} {c.offering.capacity_type} "
                f"${c.offering.price:.4f}/h ({c.verdict})"
                for c in why.compared
            )
            hidden = why.cheaper_compared - next(i for i, c in enumerate(why.compared) if c.chosen)
            more = f" (and {hidden} cheaper, not listed)" if hidden > 0 else ""
            out.append(f"  compared with: {listed}{more}")
        for r in why.ruled_out:
            out.append(
                f"  ruled out {r.count} cheaper: {r.rejection.message} [{r.rejection.filter.value}"
                f"{' ' + r.rejection.key if r.rejection.key else ''}] (cheapest {_priced(r.cheapest)})"
            )
        cap = f" (at most ${why.fallback_cap:.4f}/h, {why.capped_by})" if why.fallback_cap else ""
        shown = ", ".join(_priced(o) for o in la.alternatives[:5])
        rest = f" (+{len(la.alternatives) - 5} more)" if len(la.alternatives) > 5 else ""
        out.append(f"  fallbacks{cap}: {shown or 'none'}{rest}")
        if why.left_out is not None:
            out.append(f"  left out above the cap: {_priced(why.left_out)} and dearer")
    if len(kinds) > WHY_SHOWN:
        out.append(f"({len(kinds) - WHY_SHOWN} more kinds of launch: --output json explains every one)")
    return out


def plan_warnings(plan: Plan) -> list[str]:
    """What people should know about a plan: today, nodes far bigger than their pods (GPUs left idle)."""
    out = []
    for group in _kinds_of_launch(plan.launch.launches):
        la = group[0]
        if la.why is not None and la.why.idle_gpus:
            line = idle_warning(la.offering, la.pods, la.why)
            out.append(f"{len(group)} nodes like this: {line}" if len(group) > 1 else line)
    return out


def story_lines(story: PodStory) -> list[str]:
    """``tidal plan --explain POD``: one pod's whole story."""
    out = [f"Pod {story.pod}"]
    if story.requests:
        out.append(f"  requests: {story.requests}")
    if story.queue:
        out.append(f"  KAI queue: {story.queue}")
    out.append(f"  outcome: {story.outcome}")
    if story.mode:
        held = [story.launch_pods] if story.launch is not None else []
        out.append(f"  mode: {_mode(story.mode, held)}, because {story.mode_reason}")
    if story.capacity_types:
        out.append(f"  capacity types, in order of preference: {', '.join(story.capacity_types)}")
    if story.steps or story.candidates:
        out.append(f"  filters, from {count(story.offerings, 'offering')}:")
        out += [
            "    " + line
            for line in table(
                ["FILTER", "REMOVES", "REMOVED", "CHEAPEST REMOVED", "LEFT"],
                [
                    [
                        f"{s.rejection.filter.value}{' ' + s.rejection.key if s.rejection.key else ''}",
                        s.rejection.message,
                        str(s.removed),
                        _priced(s.cheapest),
                        str(s.left),
                    ]
                    for s in story.steps
                ],
            )
        ]
    if story.candidates:
        out.append("  cheapest offerings that hold it:")
        out += [
            "    " + line
            for line in table(
                ["OFFERING", "$/HOUR", "VERDICT"],
                [[c.offering.key, f"{c.offering.price:.4f}", c.verdict] for c in story.candidates],
            )
        ]
    elif story.mode:
        out.append("  no offering holds it")
    if story.nearest:
        out.append(f"  nearest offering: {story.nearest}")
    why = story.launch_why
    if story.launch is not None:
        cap = f" (at most ${why.fallback_cap:.4f}/h)" if why is not None and why.fallback_cap else ""
        out.append(f"  fallbacks{cap}: {', '.join(_priced(o) for o in story.fallbacks) or 'none'}")
        if why is not None:
            if why.interruption is not None:
                out.append(f"  {interruption_line(story.launch, why.interruption)}")
            out += [f"  ruled out {r.count} cheaper: {r.rejection.message}" for r in why.ruled_out]
            if why.idle_gpus:
                out.append(f"  warning: {idle_warning(story.launch, (story.pod,), why)}")
    return out


def story_json(story: PodStory) -> dict[str, Any]:
    """One pod's story in the ``--output json`` document (``explain``)."""
    return {
        "pod": story.pod,
        "requests": story.requests,
        "queue": story.queue,
        "outcome": story.outcome,
        "mode": story.mode,
        "modeReason": story.mode_reason,
        "capacityTypes": list(story.capacity_types),
        "offerings": story.offerings,
        "filters": [
            {
                "filter": s.rejection.filter.value,
                "key": s.rejection.key,
                "removes": s.rejection.message,
                "removed": s.removed,
                "cheapestRemoved": s.cheapest.key,
                "cheapestRemovedPricePerHour": s.cheapest.price,
                "left": s.left,
            }
            for s in story.steps
        ],
        "candidates": [
            {
                "offering": c.offering.key,
                "pricePerHour": c.offering.price,
                "holds": c.holds,
                "pricePerPodPerHour": c.per_pod,
                "chosen": c.chosen,
                "verdict": c.verdict,
            }
            for c in story.candidates
        ],
        "launchPods": story.launch_pods,
        "nearest": story.nearest,
        "launch": story.launch.key if story.launch is not None else None,
        "fallbacks": [o.key for o in story.fallbacks],
        "launchWhy": _why_json(story.launch_why) if story.launch_why is not None else None,
    }


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
            f"({count(total, 'object')} given more than once, the later copy used: "
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
