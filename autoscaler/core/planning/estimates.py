"""Cost estimates: what tidal would buy for pods gated ``tidal.dev/cost-estimate`` (Luna's ``nodecostestimate``).

Such a pod is never launched for and never counts against a limit: each one (a KAI PodGroup's pods together)
is planned alone, on an empty cluster, with the cluster limits whole, so the estimate is the node(s) the pod
itself needs, whatever else runs or waits. Pure, like the plan.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.core.demand import Demand, Gang
from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning.decisions import NO_USAGE
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaleup import scale_up
from autoscaler.core.words import count

__all__ = ["Estimate", "estimate"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """The node(s) a gated pod, or a KAI PodGroup's gated pods, would get; or why none would hold them."""

    pod: str  # where the estimate is written: the pod, or the PodGroup's first pod
    pods: tuple[str, ...]
    group: str  # namespace/name of the PodGroup, or "" for a pod alone
    launches: tuple[Offering, ...] = ()
    reason: str = ""

    @property
    def cost_per_hour(self) -> float:
        return round(sum(o.price for o in self.launches), 6)

    def nodes(self) -> list[tuple[Offering, int]]:
        """Each kind of node (instance type, capacity type) and how many, cheapest kind first."""
        kinds: Counter[tuple[str, str]] = Counter((o.instance_type, o.capacity_type) for o in self.launches)
        first: dict[tuple[str, str], Offering] = {}
        for o in self.launches:
            first.setdefault((o.instance_type, o.capacity_type), o)
        return [(first[k], n) for k, n in sorted(kinds.items(), key=lambda kn: (first[kn[0]].price, kn[0]))]

    def describe(self) -> str:
        """One line for the event on the pod."""
        who = f"PodGroup {self.group} ({count(len(self.pods), 'pod')})" if self.group else "this pod"
        return f"cost estimate for {who}: {self.summary()}"

    def summary(self) -> str:
        """What would be bought, and for how much (or why nothing would hold the pods)."""
        if not self.launches:
            return f"no node would hold {'them' if self.group else 'it'}: {self.reason}"
        nodes = ", ".join(
            f"{n} x {o.instance_type} ({o.capacity_type}, ${o.price:.4f}/h)"
            if n > 1
            else f"{o.instance_type} ({o.capacity_type}, ${o.price:.4f}/h)"
            for o, n in self.nodes()
        )
        return f"{nodes}, ${self.cost_per_hour:.4f}/h in all; never launched while gated"

    def annotation(self) -> str:
        """The value of the ``tidal.dev/cost-estimate`` annotation: JSON a program can read."""
        doc: dict[str, object] = {
            "pricePerHour": self.cost_per_hour,
            "nodes": [
                {
                    "instanceType": o.instance_type,
                    "capacityType": o.capacity_type,
                    "pricePerHour": o.price,
                    "count": n,
                }
                for o, n in self.nodes()
            ],
        }
        if self.group:
            doc["podGroup"] = self.group
            doc["pods"] = len(self.pods)
        if self.reason:
            doc["reason"] = self.reason
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _signature(pods: Sequence[Pod], constraints: dict[str, Constraints]) -> tuple[object, ...]:
    """Pods that would get the same estimate: same constraints and requests, and, for pods whose place
    depends on other pods, the same labels and terms."""
    return tuple(
        (
            constraints[p.key],
            p.requests,
            p.gpu_share,
            (
                p.namespace,
                tuple(sorted(p.labels.items())),
                p.spread,
                p.pod_affinity,
                p.pod_anti_affinity,
                p.host_ports,
            )
            if p.topological
            else None,
        )
        for p in pods
    )


def estimate(demand: Demand, index: OfferingIndex) -> tuple[Estimate, ...]:
    """The estimate of every pod (and PodGroup) in ``demand.estimates``."""
    memo: dict[tuple[object, ...], tuple[tuple[Offering, ...], str]] = {}
    out = []
    for unit in demand.estimates:
        key = _signature(unit.pods, demand.constraints)
        found = memo.get(key)
        if found is None:
            found = memo[key] = _plan_alone(unit, demand.constraints, index)
        group = unit.key if unit.key != unit.pods[0].key else ""
        out.append(Estimate(unit.pods[0].key, tuple(p.key for p in unit.pods), group, *found))
    return tuple(out)


def _plan_alone(
    unit: Gang, constraints: dict[str, Constraints], index: OfferingIndex
) -> tuple[tuple[Offering, ...], str]:
    alone = Demand(constraints={p.key: constraints[p.key] for p in unit.pods})
    if len(unit.pods) > 1:
        alone.gangs = [Gang(unit.key, len(unit.pods), unit.pods)]
    else:
        alone.singles = list(unit.pods)
    launch = scale_up(alone, index, Engine(index), usage=NO_USAGE)
    if launch.unplaced:
        return (), launch.unplaced[0].reason
    return tuple(la.offering for la in launch.launches), ""
