"""Why a pod cannot go somewhere: the filter that said no, in kube-scheduler's words, and which key."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Filter(enum.StrEnum):
    """The kube-scheduler filter plugins tidal models (default profile, v1.36), then tidal's own."""

    NODE_UNSCHEDULABLE = "NodeUnschedulable"
    NODE_NAME = "NodeName"
    TAINT_TOLERATION = "TaintToleration"
    NODE_AFFINITY = "NodeAffinity"
    NODE_PORTS = "NodePorts"
    NODE_RESOURCES_FIT = "NodeResourcesFit"
    POD_TOPOLOGY_SPREAD = "PodTopologySpread"
    INTER_POD_AFFINITY = "InterPodAffinity"
    # What only a node tidal would launch is subject to: the pod's instance annotations and the
    # configuration (capacity type, GPU model, family, type, price, zones, architectures, availability).
    OFFERING = "Offering"
    CONFIGURATION = "Configuration"
    # A cluster limit (clusterGPULimit, clusterCPULimit, maxNodes) leaves no room for another node.
    CLUSTER_LIMIT = "ClusterLimit"
    # A KAI queue's $/h budget (queueBudgets) leaves no room for another node for its pods.
    QUEUE_BUDGET = "QueueBudget"
    # The reservations that would hold the pod take no new node now (full, a Capacity Block not started).
    RESERVATION = "Reservation"


# kube-scheduler's own messages for each rejection, as they appear in "0/N nodes are available: ...".
UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"
UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
PORTS_TAKEN = "node(s) didn't have free ports for the requested pod ports"
TOO_MANY_PODS = "Too many pods"
SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL_MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
POD_AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY_MISMATCH = "node(s) didn't match pod anti-affinity rules"

# Filters whose "no" for one pod of a class holds for the next one too while pods are only added to nodes:
# the node's labels, taints, room and ports, and anti-affinity. Spread and affinity can change their mind.
LASTING = {
    Filter.NODE_UNSCHEDULABLE,
    Filter.NODE_NAME,
    Filter.TAINT_TOLERATION,
    Filter.NODE_AFFINITY,
    Filter.NODE_PORTS,
    Filter.NODE_RESOURCES_FIT,
}
LASTING_MESSAGES = {POD_ANTI_AFFINITY_MISMATCH, EXISTING_ANTI_AFFINITY}


@dataclass(frozen=True, slots=True)
class Rejection:
    """One "no": the filter, its message, and the key it is about (resource, taint, label or topology key)."""

    filter: Filter
    message: str
    key: str = ""

    def __str__(self) -> str:
        return self.message


def insufficient(resource: str) -> Rejection:
    """NodeResourcesFit's verdict for one resource."""
    if resource == "pods":
        return Rejection(Filter.NODE_RESOURCES_FIT, TOO_MANY_PODS, "pods")
    return Rejection(Filter.NODE_RESOURCES_FIT, f"Insufficient {resource}", resource)
