"""Value types of the decision core: what the cluster looks like (what the cloud offers is in
``autoscaler.core.offering``).

Everything here is an immutable value converted from the wire format at the edge (``kube/convert.py``,
``providers/*``); the core never sees Kubernetes or cloud SDK objects.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core.dra import DraObjects, PodClaim
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.resources import EMPTY, Resources

# Labels and annotations tidal owns or honours.
LABEL_MANAGED = "tidal.dev/managed"
LABEL_CLUSTER = "tidal.dev/cluster"
LABEL_CAPACITY_TYPE = "tidal.dev/capacity-type"
LABEL_GPU_MODEL = "tidal.dev/gpu-model"
LABEL_GPU_COUNT = "tidal.dev/gpu-count"
LABEL_LAUNCH_TOKEN = "tidal.dev/launch-token"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_RESERVATION_ID = "tidal.dev/reservation-id"
# The labels that name a pod's KAI queue (KAI's own, then Run:ai's), when no PodGroup does.
QUEUE_LABELS = ("kai.scheduler/queue", "runai/queue")
LABEL_RESERVATION_TYPE = "tidal.dev/reservation-type"
# When the Capacity Block a node runs in ends, in epoch seconds (a label value cannot hold an RFC 3339 time).
LABEL_RESERVATION_END = "tidal.dev/reservation-end"
TAINT_DISRUPTED = "tidal.dev/disrupted"
# Taints Kubernetes itself puts on every joining node and lifts once the node is up: the node lifecycle
# controller removes not-ready a few seconds after the kubelet reports Ready, the cloud controller manager
# removes uninitialized once it has set the node's addresses. Pods are not expected to tolerate them, so
# a node still carrying one is room that is coming, not room that refuses the pod.
STARTUP_TAINTS = frozenset(
    {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"),
    }
)


class CapacityType(enum.StrEnum):
    """How a node's capacity is bought; the value is what labels, reports and configuration say."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    # Capacity bought ahead (a capacity reservation, a Capacity Block): already paid for, so free to use.
    RESERVED = "reserved"


# Short names for the members. Where one is written into a Node label, a tag, JSON or YAML it is converted to
# its ``.value`` first: Kubernetes objects and YAML writers accept nothing but ``str`` itself.
SPOT = CapacityType.SPOT
ON_DEMAND = CapacityType.ON_DEMAND
RESERVED = CapacityType.RESERVED
CAPACITY_TYPES: tuple[str, ...] = tuple(c.value for c in CapacityType)


class InstanceState(enum.StrEnum):
    """Where a cloud instance is in its life, as every provider reports it."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"


class Arch(enum.StrEnum):
    """CPU architecture as Kubernetes labels it."""

    AMD64 = "amd64"
    ARM64 = "arm64"

    @classmethod
    def parse(cls, text: str) -> Arch:
        """Accept catalog spellings (``x86_64``, ``arm64``, ``aarch64``) and Kubernetes ones."""
        lowered = text.strip().lower()
        if lowered in ("x86_64", "amd64", "x86-64", "i386"):
            return cls.AMD64
        if lowered in ("arm64", "aarch64"):
            return cls.ARM64
        raise ValueError(f"unknown architecture {text!r}")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node-selector requirement: ``key operator values`` (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of required node affinity: every expression on the Node's labels and every field requirement
    (``metadata.name``, the only field Kubernetes allows) must hold. A term with neither matches no node."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


# A label selector as requirements; ``None`` is an absent selector, which selects nothing.
Selector = tuple[Requirement, ...] | None


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required inter-pod (anti-)affinity term, with ``matchLabelKeys``/``mismatchLabelKeys`` already merged
    into ``selector`` (as the API server stores it).

    The pods it is about live in ``namespaces`` and in the namespaces ``namespace_selector`` selects; with
    neither, in the namespace of the pod that carries the term (kept in ``owner_namespace``)."""

    topology_key: str
    selector: Selector
    namespaces: tuple[str, ...] = ()
    namespace_selector: Selector = None
    owner_namespace: str = ""


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint with ``whenUnsatisfiable: DoNotSchedule`` (``ScheduleAnyway`` never
    filters), with ``matchLabelKeys`` merged into ``selector``."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    # nodeAffinityPolicy Honor (the default): only nodes the pod's node affinity/selector allow are domains.
    honor_node_affinity: bool = True
    # nodeTaintsPolicy Honor: only nodes whose taints the pod tolerates are domains (Ignore is the default).
    honor_node_taints: bool = False


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the node (``hostPort``), which two pods on one node cannot share."""

    port: int
    protocol: str = "TCP"
    host_ip: str = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """The Kubernetes toleration rule (empty key with Exists tolerates everything)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Condition:
    """A pod's ``PodScheduled`` condition as the scheduler wrote it."""

    status: str
    reason: str = ""
    message: str = ""
    last_transition: float | None = None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the decision core sees it."""

    namespace: str
    name: str
    uid: str = ""
    created: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"
    scheduling_gates: tuple[str, ...] = ()
    scheduled: Condition | None = None
    requests: Resources = EMPTY
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node affinity: any one term (OR) whose requirements all hold (AND).
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # Required inter-pod affinity and anti-affinity, and DoNotSchedule topology spread.
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    owner: OwnerRef | None = None
    priority: int = 0
    local_storage: bool = False
    mirror: bool = False
    terminating: bool = False
    grace_period_s: int = 30
    # Why tidal could not read the whole pod (a field it does not understand): it is then kept, but never
    # counted as demand, never moved, and its node never taken for empty.
    unreadable: str = ""
    # Part of a GPU asked of KAI through annotations (KAI's GPU sharing), or why those annotations are wrong.
    gpu_share: GpuShare | None = None
    gpu_share_error: str = ""
    # DRA: the claims of spec.resourceClaims; once resolved for a plan, the GPU device types that can satisfy
    # them, or why none can (then the pod is never launched for).
    claims: tuple[PodClaim, ...] = ()
    dra_types: frozenset[tuple[str, int, int]] = frozenset()
    dra_error: str = ""
    # Derived from the fields above once, when the pod is made: every plan reads them for each of a
    # cluster's 100,000 pods several times over, where a property would rebuild them at every read.
    key: str = field(init=False, repr=False, compare=False)  # ``namespace/name``, as plans name pods
    daemonset: bool = field(init=False, repr=False, compare=False)
    pending: bool = field(init=False, repr=False, compare=False)  # Pending and bound to no node
    finished: bool = field(init=False, repr=False, compare=False)  # Succeeded or Failed
    # Where it may go depends on other pods: inter-pod (anti-)affinity, topology spread or host ports.
    topological: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner, phase = self.owner, self.phase
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        object.__setattr__(self, "daemonset", owner is not None and owner.kind == "DaemonSet")
        object.__setattr__(self, "pending", phase == "Pending" and not self.node_name)
        object.__setattr__(self, "finished", phase in ("Succeeded", "Failed"))
        topological = bool(self.pod_affinity or self.pod_anti_affinity or self.spread or self.host_ports)
        object.__setattr__(self, "topological", topological)


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One of a Node's ``status.conditions`` (Ready, or what a health checker such as node-problem-detector
    sets), with when its status last changed."""

    type: str
    status: str
    last_transition: float | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A Kubernetes Node."""

    name: str
    uid: str = ""
    created: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    capacity: Resources = EMPTY
    allocatable: Resources = EMPTY
    provider_id: str = ""
    unschedulable: bool = False
    ready: bool = False
    ready_since: float | None = None
    deleting: bool = False
    # Why tidal could not read the whole Node: it is then kept, but no pod is planned onto it and it is
    # never removed.
    unreadable: str = ""
    conditions: tuple[NodeCondition, ...] = ()
    # Launched by tidal (it labels every node it launches). Derived once, when the Node is made: every
    # reconcile reads it for each node of the cluster several times over.
    managed: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "managed", self.labels.get(LABEL_MANAGED) == "true")

    @property
    def gpus(self) -> int:
        return self.allocatable.gpus


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget reduced to what scale-down needs."""

    namespace: str
    name: str
    selector: tuple[Requirement, ...] | None  # None selects nothing; () selects every pod in the namespace
    disruptions_allowed: int
    # Why tidal could not read all of it: it then protects every pod of its namespace (selector (), 0 allowed).
    unreadable: str = ""


@dataclass(frozen=True, slots=True)
class DaemonSet:
    namespace: str
    name: str
    requests: Resources = EMPTY
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A KAI (``scheduling.run.ai/v2alpha2``) PodGroup: a gang of ``min_member`` pods in a queue."""

    namespace: str
    name: str
    min_member: int = 1
    queue: str = ""
    # spec.preemptibility: "preemptible", "non-preemptible", "semi-preemptible", or "" (KAI then goes by priority)
    preemptibility: str = ""
    # Why tidal could not read all of it: its pods then get no node (how big the gang is, or its queue, is unknown).
    unreadable: str = ""


@dataclass(frozen=True, slots=True)
class QueueLimits:
    quota: float | None = None  # GPUs; KAI counts fractions (0.5 is half a GPU)
    limit: float | None = None
    over_quota_weight: float = 1  # a number in KAI's CRD, not a count: 0.5 is half a share


@dataclass(frozen=True, slots=True)
class Queue:
    """A KAI Queue, with GPU quota and limit in GPUs, fractions included (-1 in KAI means unlimited, kept as
    None)."""

    name: str
    parent: str = ""
    gpu: QueueLimits = QueueLimits()
    priority: int = 0
    # Why tidal could not read all of it: no GPU pod of it (or of a queue under it) then gets a node, since its
    # limit is unknown.
    unreadable: str = ""


@dataclass(frozen=True, slots=True)
class StatusCondition:
    """One ``status.conditions`` entry of an object tidal answers (``metav1.Condition``)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: float | None = None
    observed_generation: int = 0


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A core/v1 PodTemplate as the pod it describes (pending, unbound), or why it cannot be read."""

    namespace: str
    name: str
    pod: Pod | None = None
    error: str = ""
    generation: int = 0


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods of the PodTemplate named ``template`` (in the request's namespace)."""

    template: str
    count: int


@dataclass(frozen=True, slots=True)
class ProvisioningRequest:
    """An ``autoscaling.x-k8s.io`` ProvisioningRequest (v1 or v1beta1): capacity asked for a set of pods."""

    namespace: str
    name: str
    class_name: str
    pod_sets: tuple[PodSet, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[StatusCondition, ...] = ()
    uid: str = ""
    created: float = 0.0
    generation: int = 0
    version: str = "v1"  # the API version it was read at, and is answered at
    # Why tidal could not read the whole object: it is then answered Failed, never planned.
    unreadable: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, kind: str) -> StatusCondition | None:
        """The condition of type ``kind``, if set."""
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass(frozen=True, slots=True)
class ScalableRef:
    """The workload a CapacityBuffer sizes itself from: its kind, name, replicas and pod template."""

    kind: str
    name: str
    api_group: str = ""
    replicas: int | None = None  # None: tidal could not find the object
    pod: Pod | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment or StatefulSet as a CapacityBuffer's ``scalableRef`` sizes itself from it: its desired
    replicas and the pod of its template (None when the template cannot be read, with why)."""

    namespace: str
    kind: str
    name: str
    replicas: int
    pod: Pod | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class CapacityBuffer:
    """An ``autoscaling.x-k8s.io/v1beta1`` CapacityBuffer: standby capacity for ``replicas`` chunks, each
    shaped like the pod of its PodTemplate (``template``) or of its workload (``scalable``)."""

    namespace: str
    name: str
    template: str = ""
    scalable: ScalableRef | None = None
    replicas: int | None = None
    percentage: int | None = None
    limits: Mapping[str, str] = field(default_factory=dict)
    strategy: str = "buffer.x-k8s.io/active-capacity"
    conditions: tuple[StatusCondition, ...] = ()
    uid: str = ""
    created: float = 0.0
    generation: int = 0
    unreadable: str = ""
    # What its status says was resolved last: replicas and the PodTemplate.
    status_replicas: int | None = None
    status_template: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the decision core reads from the cluster at one instant."""

    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    pdbs: tuple[DisruptionBudget, ...] = ()
    daemonsets: tuple[DaemonSet, ...] = ()
    podgroups: tuple[PodGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    # Namespace labels by namespace name, for namespaceSelector in pod affinity terms.
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # DeviceClasses, ResourceClaims and ResourceClaimTemplates (``served`` False: no resource.k8s.io/v1).
    dra: DraObjects = field(default_factory=lambda: DraObjects(served=False))
    # Capacity asked for ahead of pods (autoscaling.x-k8s.io), and the PodTemplates they refer to.
    provisioning_requests: tuple[ProvisioningRequest, ...] = ()
    capacity_buffers: tuple[CapacityBuffer, ...] = ()
    pod_templates: tuple[PodTemplate, ...] = ()
    workloads: tuple[
        Workload, ...
    ] = ()  # Deployments and StatefulSets, read while CapacityBuffers are served
