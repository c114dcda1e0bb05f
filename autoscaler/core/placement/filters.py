"""kube-scheduler's per-node filters, each the one implementation tidal has of that rule.

The order is the default profile's (v1.36): NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
NodePorts, NodeResourcesFit; PodTopologySpread and InterPodAffinity need the whole cluster and live in
:mod:`autoscaler.core.placement.topology`. Each returns ``None`` when the node passes, else the Rejection the
scheduler would report for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.model import HostPort, NodeSelectorTerm, Taint, Toleration
from autoscaler.core.placement.labels import node_affinity_matches
from autoscaler.core.placement.reasons import (
    AFFINITY_MISMATCH,
    NODE_NAME_MISMATCH,
    PORTS_TAKEN,
    UNSCHEDULABLE,
    UNTOLERATED_TAINT,
    Filter,
    Rejection,
    insufficient,
)
from autoscaler.core.resources import PODS, Resources

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
ALL_IPS = "0.0.0.0"


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    """Some toleration tolerates ``taint``."""
    return any(t.tolerates(taint) for t in tolerations)


def untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates (PreferNoSchedule never filters)."""
    for taint in taints:
        if taint.effect != "PreferNoSchedule" and not tolerates(tolerations, taint):
            return taint
    return None


def node_unschedulable(unschedulable: bool, tolerations: Sequence[Toleration]) -> Rejection | None:
    """NodeUnschedulable: a cordoned node takes only pods that tolerate its unschedulable taint."""
    if unschedulable and not tolerates(tolerations, UNSCHEDULABLE_TAINT):
        return Rejection(Filter.NODE_UNSCHEDULABLE, UNSCHEDULABLE)
    return None


def node_name(wanted: str, name: str | None) -> Rejection | None:
    """NodeName: a pod that names its node goes there only (a node not launched yet has no name)."""
    if wanted and wanted != name:
        return Rejection(Filter.NODE_NAME, NODE_NAME_MISMATCH)
    return None


def taint_toleration(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Rejection | None:
    """TaintToleration: every NoSchedule and NoExecute taint is tolerated."""
    taint = untolerated(tolerations, taints)
    if taint is not None:
        return Rejection(Filter.TAINT_TOLERATION, UNTOLERATED_TAINT, taint.key)
    return None


def node_affinity(
    node_selector: Mapping[str, str],
    terms: Sequence[NodeSelectorTerm],
    labels: Mapping[str, str],
    name: str | None,
) -> Rejection | None:
    """NodeAffinity: ``nodeSelector`` and required node affinity."""
    if not node_affinity_matches(node_selector, terms, labels, name):
        return Rejection(Filter.NODE_AFFINITY, AFFINITY_MISMATCH)
    return None


def static(
    *,
    node_selector: Mapping[str, str],
    terms: Sequence[NodeSelectorTerm],
    tolerations: Sequence[Toleration],
    wanted_name: str = "",
    labels: Mapping[str, str],
    taints: Iterable[Taint],
    unschedulable: bool = False,
    name: str | None = None,
) -> Rejection | None:
    """The filters that read only the pod and the node's own labels, taints and name, in scheduler order."""
    return (
        node_unschedulable(unschedulable, tolerations)
        or node_name(wanted_name, name)
        or taint_toleration(tolerations, taints)
        or node_affinity(node_selector, terms, labels, name)
    )


def ports_conflict(wanted: Sequence[HostPort], used: Iterable[HostPort]) -> bool:
    """Two bindings clash on one protocol and port when either binds every address or both bind the same."""
    taken = list(used)
    for w in wanted:
        for u in taken:
            if (
                w.port == u.port
                and w.protocol == u.protocol
                and (w.host_ip == ALL_IPS or u.host_ip == ALL_IPS or w.host_ip == u.host_ip)
            ):
                return True
    return False


def node_ports(wanted: Sequence[HostPort], used: Iterable[HostPort]) -> Rejection | None:
    """NodePorts: the host ports the pod binds are free on the node."""
    if wanted and ports_conflict(wanted, used):
        return Rejection(Filter.NODE_PORTS, PORTS_TAKEN)
    return None


ONE_POD = Resources({PODS: 1000})


def node_resources(request: Resources, free: Mapping[str, int]) -> Rejection | None:
    """NodeResourcesFit: one more pod slot, and every resource the pod requests, within what is free.

    ``free`` is allocatable minus what the node's pods request (pods counted in milli-units, like every
    resource). A resource the pod does not request is never checked, even on an over-committed node."""
    if free.get(PODS, 0) < 1000:
        return insufficient(PODS)
    for name, amount in request.items():
        if name != PODS and amount > free.get(name, 0):
            return insufficient(name)
    return None


def has_room(request: Resources, free: Mapping[str, int]) -> bool:
    """Whether :func:`node_resources` lets the pod in, without making the rejection it would give."""
    if free.get(PODS, 0) < 1000:
        return False
    return all(name == PODS or amount <= free.get(name, 0) for name, amount in request.items())


def insufficient_all(request: Resources, free: Mapping[str, int]) -> list[str]:
    """Every resource NodeResourcesFit finds short, as the scheduler lists them (for explanations)."""
    short = []
    if free.get(PODS, 0) < 1000:
        short.append("pods")
    short += sorted(n for n, v in request.items() if n != PODS and v > free.get(n, 0))
    return short
