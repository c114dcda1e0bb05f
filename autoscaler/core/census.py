"""What a reconcile reads of every pod of the snapshot, gathered in one pass.

Grouping pods by node, finding the nodes pods are bound to, whether any pod names a ResourceClaim, which pods
wait and which a KAI queue could count each took a pass over every pod, at every reconcile: at 100,000 pods,
tens of milliseconds each for the same answers while the pods stay the same. A :class:`PodCensus` holds those
answers for one sequence of pods; the caller that keeps the pods from one reconcile to the next (the
controller, through :class:`~autoscaler.runtime.derived.OfPods`) keeps the census with them and hands it to
the functions that read it, which use it only for the very pods it was taken of.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core import annotations as ann
from autoscaler.core.model import QUEUE_LABELS, Pod

__all__ = ["PodCensus", "census"]


@dataclass(frozen=True, slots=True, eq=False)
class PodCensus:
    """Facts about one sequence of pods (``of``, held so that a census is never used for other pods)."""

    of: Sequence[Pod]
    # The names of the nodes pods are bound to (finished pods included).
    bound_to: frozenset[str]
    # The bound, unfinished pods by node name, as :func:`~autoscaler.core.planning.cluster.pods_by_node`
    # groups them. Shared: whoever reads it must not change it.
    by_node: Mapping[str, list[Pod]]
    # Whether some pod names ResourceClaims.
    claims: bool
    # Pods bound to no node, in the order given.
    unbound: tuple[Pod, ...]
    # Pods in the Pending phase (bound ones included: their containers have not started), in the order given.
    pending_phase: tuple[Pod, ...]
    # Pods a KAI queue may count (a queue label or a PodGroup names one), in the order given.
    queue_candidates: tuple[Pod, ...]
    # The names of the nodes that run a workload pod (bound, unfinished, neither a DaemonSet's nor a mirror).
    busy: frozenset[str] = frozenset()
    # Every pod by its key (the last of a key, were two given), and the bound pods tidal cannot fully read.
    by_key: Mapping[str, Pod] = field(default_factory=dict)
    bound_unreadable: tuple[Pod, ...] = ()

    def describes(self, pods: Sequence[Pod]) -> bool:
        """Whether this is the census of ``pods`` (the very sequence, not an equal one)."""
        return self.of is pods


def census(pods: Sequence[Pod]) -> PodCensus:
    """The census of ``pods``."""
    bound_to: set[str] = set()
    busy: set[str] = set()
    by_key: dict[str, Pod] = {}
    unreadable: list[Pod] = []
    by_node: dict[str, list[Pod]] = defaultdict(list)
    claims = False
    unbound: list[Pod] = []
    pending: list[Pod] = []
    queued: list[Pod] = []
    group_key = ann.POD_GROUP_ANNOTATION
    kai, runai = QUEUE_LABELS  # read inline: this runs for every pod
    for p in pods:
        by_key[p.key] = p
        if p.node_name:
            bound_to.add(p.node_name)
            if p.unreadable:
                unreadable.append(p)
            if not p.finished:
                by_node[p.node_name].append(p)
                if not p.daemonset and not p.mirror:
                    busy.add(p.node_name)
        else:
            unbound.append(p)
        if p.phase == "Pending":
            pending.append(p)
        if p.claims:
            claims = True
        labels = p.labels
        if group_key in p.annotations or labels.get(kai) or labels.get(runai):
            queued.append(p)
    return PodCensus(
        pods,
        frozenset(bound_to),
        by_node,
        claims,
        tuple(unbound),
        tuple(pending),
        tuple(queued),
        frozenset(busy),
        by_key,
        tuple(unreadable),
    )
