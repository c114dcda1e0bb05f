"""What tidal tells people about a reconcile: the ``tidal-status`` ConfigMap and short reason labels."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from autoscaler.config.values import Config
from autoscaler.core.planning.decisions import Blocked, Hold
from autoscaler.core.planning.planner import Plan
from autoscaler.core.planning.queues import QueueView

STATUS_CONFIGMAP = "tidal-status"


@dataclass(frozen=True, slots=True)
class Leadership:
    """Whether this replica leads, on which Lease, and if not, why (as the Lease or the API server said)."""

    leading: bool
    lease: str  # namespace/name
    identity: str
    reason: str = ""  # why not leading: "namespace ... does not exist", "forbidden: ...", "held by ..."
    holder: str = ""  # the identity holding the Lease, when another replica does

    @property
    def held_by_other(self) -> bool:
        """Another replica holds the Lease: this one is a standby, as it should be."""
        return bool(self.holder) and self.holder != self.identity

    def describe(self) -> str:
        """One line: ``leading (lease ns/name)`` or ``not leading (lease ns/name): why``."""
        if self.leading:
            return f"leading (lease {self.lease})"
        return f"not leading (lease {self.lease}): {self.reason or 'not acquired yet'}"

    def as_status(self) -> dict[str, Any]:
        """The ``leader`` entry of the status ConfigMap."""
        out: dict[str, Any] = {"identity": self.identity, "leading": self.leading, "lease": self.lease}
        if not self.leading:
            out["reason"] = self.reason or "not acquired yet"
        if self.holder and self.holder != self.identity:
            out["holder"] = self.holder
        return out


def queue_status(q: QueueView) -> dict[str, Any]:
    """One KAI queue in the status ConfigMap (and ``tidal plan --output json``)."""
    out: dict[str, Any] = {
        "gpus": {
            "requested": q.gpus_requested,
            "allocated": q.gpus_allocated,
            "pending": q.gpus_pending,
            "launching": q.gpus_launching,
        },
        "costPerHour": q.cost_per_hour,
    }
    if q.budget is not None:
        out["budgetPerHour"] = q.budget
    return out


def rfc3339(ts: float) -> str:
    """``ts`` (epoch seconds) as an RFC 3339 UTC time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _busy(blocked: Blocked) -> bool:
    """The node stays only because it is used enough: nothing anyone would ask about."""
    blocks = blocked.blocks
    if len(blocks) == 1:  # most nodes kept, thousands of them: no generator for each
        return blocks[0].kind == Hold.UTILISED
    return all(b.kind == Hold.UTILISED for b in blocks)


def status_summary(
    decided: Plan,
    fleet: Mapping[str, int],
    cfg: Config,
    now: float,
    benched: Sequence[str],
    leadership: Leadership | None = None,
) -> dict[str, Any]:
    """The ``tidal-status`` ConfigMap content, like cluster-autoscaler's status ConfigMap."""
    ignored = Counter(i.reason.value for i in decided.ignored)
    summary: dict[str, Any] = {
        "time": rfc3339(now),
        "cluster": cfg.cluster_name,
        "pendingPods": {
            "counted": len(decided.demand.counted),
            "launchingFor": sum(len(la.pods) for la in decided.launch.launches),
            "unplaced": len(decided.launch.unplaced),
            "ignoredByReason": dict(sorted(ignored.items())),
        },
        "nodes": dict(fleet),
        "gpus": {
            "afterPlan": decided.gpus_after,
            "limit": "none" if cfg.cluster_gpu_limit is None else cfg.cluster_gpu_limit,
        },
        "launches": [
            f"{la.offering.instance_type}/{la.offering.zone}/{la.offering.capacity_type}"
            for la in decided.launch.launches
        ][:50],
        "removals": [r.node for r in decided.removal.removals][:50],
        # Why each managed node that is not busy stays: a PDB, do-not-disrupt, a gang, its timer... Only the
        # first 50 are looked for: a large cluster keeps thousands of nodes for being used.
        "nodesKept": dict(islice(((b.node, b.reason) for b in decided.removal.blocked if not _busy(b)), 50)),
        "unavailableOfferings": list(benched)[:50],
    }
    if decided.queues:
        summary["queues"] = {q.queue: queue_status(q) for q in decided.queues}
    if leadership is not None:
        summary["leader"] = leadership.as_status()
    return summary
