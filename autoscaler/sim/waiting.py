"""Why a simulated pod is waiting, in words a timeline can show: "queue research at its GPU limit",
"clusterGPULimit 16 reached", "waiting for room on a node", rather than one word for all of them."""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.core.demand import Reason
from autoscaler.core.planning.planner import Plan
from autoscaler.sim.cluster import SimPod


def queue_hold(sp: SimPod) -> str:
    """A pod KAI holds for its queue: at the queue's limit, or over its quota (non-preemptible work)."""
    cond = sp.pod.scheduled
    over_quota = cond is not None and not cond.message.startswith("OverLimit")
    return f"queue {sp.queue or '?'} {'over its GPU quota' if over_quota else 'at its GPU limit'}"


def short(reason: str) -> str:
    """A planner reason without the detail that makes every pod's reason different:
    ``clusterGPULimit 16 reached (14 GPUs in use...)`` -> ``clusterGPULimit 16 reached``; a gang's reason keeps
    why, not which gang; a queue's keeps which queue and which bound, not the counts."""
    if reason.startswith("gang ") and "cannot be placed whole: " in reason:
        reason = "gang cannot be placed whole: " + reason.split("cannot be placed whole: ", 1)[1]
    if reason.startswith("queue ") and ":" in reason:
        return reason.split(":", 1)[0].split(",", 1)[0]
    return reason.split(" (", 1)[0]


def waiting_reasons(plan: Plan | None) -> dict[str, str]:
    """Pod key -> why the plan left it waiting, shortened."""
    if plan is None:
        return {}
    out = {a.pod: "waiting for room on a node" for a in plan.launch.absorbed}
    for i in plan.demand.ignored:
        if i.reason in (Reason.QUEUE_LIMIT, Reason.QUEUE_QUOTA):
            # The same fact as KAI's own hold, in the same words: tidal saw the queue full before KAI said so.
            out[i.pod] = short(i.detail).replace(" would exceed its GPU limit", " at its GPU limit")
            out[i.pod] = out[i.pod].replace(
                " would exceed its GPU quota with non-preemptible pods", " over its GPU quota"
            )
        else:
            out[i.pod] = i.reason.value.replace("-", " ")
    out.update((u.pod, short(u.reason)) for u in plan.launch.unplaced)
    return out


def never_served(plan: Plan | None, pods: Iterable[SimPod]) -> dict[str, str]:
    """The last plan's verdict, in full, on every pod that never started."""
    verdicts: dict[str, str] = {}
    if plan is not None:
        verdicts.update((i.pod, i.detail) for i in plan.demand.ignored)
        verdicts.update((u.pod, u.reason) for u in plan.launch.unplaced)
        verdicts.update((i.pod, f"waiting for room on {i.node}") for i in plan.launch.absorbed)
    return {sp.pod.key: verdicts.get(sp.pod.key, "never planned for") for sp in pods if sp.started is None}
