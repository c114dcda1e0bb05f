"""The emulated cluster: Nodes, pods, and a scheduler that speaks kube-scheduler's and KAI's language.

It is what the controller sees (``snapshot()``), what it acts on (cordon, evict, delete Node, events), and
what the simulated cloud's kubelets register Nodes with. The scheduler binds pods with kube-scheduler's
filters (:class:`autoscaler.core.placement.scheduler.ClusterScheduler`, checked against decisions recorded from a
real kube-scheduler) and writes the ``PodScheduled=False`` messages the real schedulers write; KAI queues
admit work within their limit (and non-preemptible work within quota) and gangs all-or-nothing. Like most GPU
clusters it runs the ExtendedResourceToleration admission plugin: a GPU pod tolerates the GPU taint.

Pods asking KAI for part of a GPU (``gpu-fraction``, ``gpu-memory``) are placed on GPU devices as KAI's GPU
sharing places them (:mod:`autoscaler.sim.kai_sharing`, written apart from tidal's planner), and the devices
they open are held by KAI reservation pods while they run. Such a pod requests no ``nvidia.com/gpu``, so no
admission plugin gives it the GPU taint's toleration: its template carries one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from operator import attrgetter
from typing import Any

from autoscaler.core.model import (
    LABEL_INSTANCE_TYPE,
    Condition,
    DisruptionBudget,
    Node,
    NodeCondition,
    Pod,
    PodGroup,
    Queue,
    QueueLimits,
    Snapshot,
    Taint,
)
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.core.resources import NVIDIA_GPU, Resources
from autoscaler.runtime.kube.convert import node_from_dict
from autoscaler.sim.kai_queues import held_by_queue, lineage, queue_hold, queue_priority, queue_use
from autoscaler.sim.kai_sharing import (
    GPU_MEMORY_LABEL,
    KaiSharing,
    pod_groups,
)
from autoscaler.sim.kueue import RequestStore
from autoscaler.sim.pdbs import blocks, budgets
from autoscaler.sim.pods import SimPod, with_scheduled
from autoscaler.sim.scale_adjuster import run_scaling_pods
from autoscaler.sim.scenario import JobSpec, QueueSpec
from autoscaler.sim.scheduler_view import Room, SchedulerView
from autoscaler.sim.tables import NodeTable, PodTable
from autoscaler.sim.workload import job_pods, restarted

__all__ = ["EmulatedCluster", "SimPod", "held_by_queue"]

_POD = attrgetter("pod")  # a SimPod's Kubernetes pod

# Where a pod of a unit landed: the pod, its node, the GPU-group labels the binder adds, its part of a device.
Placed = tuple[SimPod, str, dict[str, str], float]


class EmulatedCluster:
    """In-memory Nodes and pods with the controller's ClusterView and actions, and a kubelet registrar."""

    def __init__(
        self,
        clock: Callable[[], float],
        queues: Iterable[QueueSpec] = (),
        *,
        kai: bool = False,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
    ):
        self.clock = clock
        self.kai = kai
        self.namespaces = dict(namespaces or {})
        self.queues = {q.name: q for q in queues}
        self.nodes = NodeTable()
        self.pods = PodTable()
        self.done: list[SimPod] = []
        self.cut: list[SimPod] = []  # runs ended early by an eviction or a lost node (each pod restarted)
        self.succeeded: dict[str, Pod] = {}  # finished gang members, kept as a Job keeps its pods
        self.podgroups: dict[str, PodGroup] = {}
        self.version = 0
        self._snapshot: tuple[int, Snapshot] | None = None
        self._restarts: dict[str, int] = defaultdict(int)
        self.events: list[tuple[float, str, str, str]] = []
        self.status: dict[str, str] = {}
        # KAI's reservation pods holding shared GPUs, and the scaling pods of KAI's node-scale-adjuster.
        self.sharing = KaiSharing()
        self.scaling: dict[str, Pod] = {}
        # One GPU's memory by instance type: what GPU feature discovery labels a node with once its GPUs work.
        self.gpu_memory: dict[str, int] = {}
        # PodDisruptionBudgets: name -> (the labels they select, minAvailable); the Eviction API honours them.
        self.budgets: dict[str, tuple[Mapping[str, str], int]] = {}
        # ProvisioningRequests, CapacityBuffers and PodTemplates (autoscaling.x-k8s.io), and their status.
        self.requests = RequestStore(self._changed, clock)
        # The scheduler's picture of the cluster, brought up to date before each pass; and the version at
        # which a pass last bound nothing (another pass over the same cluster would bind nothing either).
        self.scheduler_view = SchedulerView(self.namespaces)
        self._settled = -1
        # Within a pass: the nodes in its order, as the view gives them and (when asked) as Nodes; where each
        # pod shape resumes its search (see ``_place``).
        self._room: list[Room] = []
        self._ordered: list[Node] | None = None
        self._resume: dict[int, int] = {}
        self._unschedulable: dict[str, Condition] = {}  # by message, for the pods this pass leaves waiting
        # Each pod shape met so far, numbered (see _shape_of).
        self._shapes: dict[tuple[object, ...], int] = {}

    # -- the ClusterView -------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        if self._snapshot is None or self._snapshot[0] != self.version:
            queues = tuple(
                Queue(q.name, q.parent, QueueLimits(q.quota, q.limit, q.over_quota_weight), q.priority)
                for q in self.queues.values()
            )
            snap = Snapshot(
                pods=(
                    *map(_POD, self.pods.values()),
                    *self.succeeded.values(),
                    *self.sharing.reservations.values(),
                    *self.scaling.values(),
                ),
                nodes=tuple(self.nodes.values()),
                pdbs=self._pdbs(),
                podgroups=tuple(self.podgroups.values()),
                queues=queues,
                namespaces=self.namespaces,
                provisioning_requests=tuple(self.requests.requests.values()),
                capacity_buffers=tuple(self.requests.buffers.values()),
                pod_templates=tuple(self.requests.templates.values()),
            )
            self._snapshot = (self.version, snap)
        return self._snapshot[1]

    def _changed(self) -> None:
        self.version += 1

    def touch(self) -> None:
        """Something outside the schedulers (KAI's scale-adjuster) changed pods of the cluster."""
        self._changed()

    # -- PodDisruptionBudgets ----------------------------------------------------------------------------

    def add_pdb(self, name: str, match_labels: Mapping[str, str], min_available: int) -> None:
        """A PodDisruptionBudget in ``default`` selecting pods with these labels."""
        self.budgets[name] = (dict(match_labels), min_available)
        self._changed()

    def _pdbs(self) -> tuple[DisruptionBudget, ...]:
        if not self.budgets:
            return ()  # (no pass over every pod for none)
        return budgets(self.budgets, (sp.pod for sp in self.pods.values()))

    def set_condition(self, name: str, kind: str, status: str, now: float) -> bool:
        """Set one of a Node's conditions, as a health checker (node-problem-detector) would."""
        node = self.nodes.get(name)
        if node is None:
            return False
        others = tuple(c for c in node.conditions if c.type != kind)
        self.nodes[name] = replace(node, conditions=(*others, NodeCondition(kind, status, now)))
        self._changed()
        return True

    # -- workload --------------------------------------------------------------------------------------

    def submit(self, job: JobSpec, now: float) -> list[str]:
        """Create the job's pods (a PodGroup too for a gang), pending with no condition yet."""
        if job.gang:
            self.podgroups[job.name] = PodGroup("default", job.name, job.pods, job.queue)
        keys = []
        for pod in job_pods(job, now, kai=self.kai):
            self.pods[pod.key] = SimPod(
                pod, job.name, job.queue, job.name if job.gang else "", job.duration, job.preemptible, now
            )
            keys.append(pod.key)
        self._changed()
        return keys

    def finish_due(self, now: float) -> int:
        """Pods whose containers exited by ``now`` leave the cluster."""
        done = self.pods.due(now)
        for sp in done:
            sp.ended = sp.started + sp.duration if sp.started is not None else now
            self.done.append(sp)
            del self.pods[sp.pod.key]
            if sp.gang:
                self.succeeded[sp.pod.key] = replace(sp.pod, phase="Succeeded")
        if done:
            self._release_reservations()
            self._changed()
        return len(done)

    def next_finish(self) -> float | None:
        return self.pods.next_end()

    def _recreate(self, sp: SimPod, now: float) -> None:
        """What a Job controller does when its pod was evicted or its node vanished: a new pending pod."""
        del self.pods[sp.pod.key]
        if sp.started is not None:
            sp.ended = now
            self.cut.append(sp)
        self._restarts[sp.pod.uid] += 1
        replacement = restarted(sp, self._restarts[sp.pod.uid], now)
        self.pods[replacement.pod.key] = replacement

    # -- the scheduler ---------------------------------------------------------------------------------

    def schedule(self, now: float) -> int:
        """One pass: admit by queue, place what fits (gangs whole), explain the rest. Returns pods bound."""
        self._release_reservations()
        pending = list(self.pods.waiting.values())
        scaling = [p for p in self.scaling.values() if p.pending]
        if not pending and not scaling:
            return 0
        sched, changed = self.scheduler_view.sync(self.nodes, self.pods, self.sharing.reservations)
        if not changed and self.version == self._settled:
            return 0
        self.sharing.start((sp.pod for sp in self.pods.values() if sp.pod.node_name), self.nodes)
        # Bin-packing placement (KAI's default, and kube-scheduler with MostAllocated): the fullest node that
        # fits first, so a one-GPU pod takes a one-GPU node rather than a slot a 4-GPU gang member needs. Each
        # node with the free GPUs and CPU it starts the pass with: room only shrinks within a pass, so a pod
        # needs look at no node before the first with as much of both as it requests.
        self._room = self.scheduler_view.by_room()
        self._ordered = None
        self._resume = {}
        self._unschedulable = {}
        # Only KAI's queues weigh what their pods use (below); without them, no pass over every pod for it.
        used, non_preemptible = (
            queue_use(self.queues, self.pods.values())
            if self.kai
            else (defaultdict(float), defaultdict(float))
        )
        units: dict[str, list[SimPod]] = defaultdict(list)
        for sp in pending:
            units[sp.gang or sp.pod.key].append(sp)
        order = sorted(
            units.values(),
            key=lambda u: (
                -queue_priority(self.queues, u[0]),
                -u[0].pod.priority,
                u[0].submitted,
                u[0].pod.name,
            ),
        )
        bound = 0
        running_members = self._running_members() if any(u[0].gang for u in order) else {}
        for unit in order:
            # A gang starts only whole; a member restarted after the rest started joins them alone.
            if (
                unit[0].gang
                and len(unit) + running_members[unit[0].gang] < self.podgroups[unit[0].gang].min_member
            ):
                continue
            if self.kai:  # only KAI's queues weigh a unit's GPUs before placing it
                gpus = sum(sp.gpus for sp in unit)
                hold = queue_hold(self.queues, unit[0], gpus, used, non_preemptible)
                if hold:
                    self._pending(unit, hold, now)
                    continue
            placed = self._place(unit, sched, now)
            if placed is None:
                self._pending(unit, self._no_room(unit[0]), now)
                continue
            for sp, node, groups, device_share in placed:
                self._bind(sp, node, now, groups, device_share)
                bound += 1
                for q in lineage(self.queues, sp.queue):
                    used[q] += sp.gpus
                    if not sp.preemptible:
                        non_preemptible[q] += sp.gpus
        scaled = bool(scaling) and run_scaling_pods(
            self.scaling, self._in_order(), sched, now, self._no_room_default(True, len(self._room))
        )
        if scaled:
            self._changed()
        if bound:
            self._changed()
        self.scheduler_view.settle(self.nodes, self.pods, self.sharing.reservations)
        if not bound and not scaled:
            self._settled = self.version
        return bound

    def _running_members(self) -> dict[str, int]:
        """How many pods of each gang run or ran to completion."""
        running_members: dict[str, int] = defaultdict(int)
        for sp in self.pods.values():
            if sp.gang and sp.pod.node_name:
                running_members[sp.gang] += 1
        for pod in self.succeeded.values():
            running_members[pod.annotations["pod-group-name"]] += 1
        return running_members

    def _in_order(self) -> list[Node]:
        """The Nodes pods may be bound to, in the pass's order (worked out once a pass, when first asked)."""
        if self._ordered is None:
            self._ordered = [self.nodes[name] for _, _, name in self._room]
        return self._ordered

    def _place(self, unit: list[SimPod], sched: ClusterScheduler, now: float) -> list[Placed] | None:
        room = self._room
        first = unit[0].pod
        # A pod whose shape found no room earlier in this pass finds none now: no node is tried again.
        if (
            len(unit) == 1
            and first.gpu_share is None
            and not unit[0].gang
            and not first.topological
            and self._resume.get(self._shape_of(unit[0]), 0) >= len(room)
        ):
            return None
        mark, shares = sched.mark(), self.sharing.mark()
        placed: list[Placed] = []
        for sp in unit:
            if sp.pod.gpu_share is not None:
                found = self.sharing.place(sp.pod, self._in_order(), self.nodes, sched, now)
                if found is not None:
                    placed.append((sp, *found))
                    continue
                if sp.gang:
                    sched.rollback(mark)
                    self.sharing.rollback(shares)
                    return None
                continue
            # Within one pass room only shrinks: a node that could not take a pod of this shape and these
            # constraints will not take the next one either, so each shape resumes where the last stopped
            # (not for pods whose place depends on other pods: spread and affinity change as pods land).
            p = sp.pod
            shape = self._shape_of(sp)
            resumable = not sp.gang and not p.topological
            start = self._resume.get(shape, 0) if resumable else 0
            if p.requests.gpus > 0:  # (a pod asking no GPUs is not checked against them: no skipping)
                cpu = p.requests.cpu
                # (Each entry of ``room`` starts with its GPUs and CPU: the first not below these.)
                start = max(
                    start, bisect_left(room, (p.requests.gpus, cpu) if cpu > 0 else (p.requests.gpus,))
                )
            for i in range(start, len(room)):
                name = room[i][2]
                if sched.rejection(p, name) is None:
                    sched.bind(p, name)
                    placed.append((sp, name, {}, 0.0))
                    if resumable:
                        self._resume[shape] = i
                    break
            else:
                if resumable:
                    self._resume[shape] = len(room)
                if sp.gang:
                    sched.rollback(mark)
                    self.sharing.rollback(shares)
                    return None
        sched.commit(mark)
        self.sharing.commit(shares)
        # A non-gang unit is one pod; a gang lands only whole.
        return placed or None

    def _shape_of(self, sp: SimPod) -> int:
        """``sp``'s shape (see :func:`_shape`), by number: worked out once a pod, and cheap to look up."""
        if sp.shape < 0:
            sp.shape = self._shapes.setdefault(_shape(sp.pod), len(self._shapes))
        return sp.shape

    def _release_reservations(self) -> None:
        if not self.sharing.reservations:
            return  # the common case, a cluster without shared GPUs: no need to read every pod's groups
        live = {g for sp in self.pods.values() if sp.pod.node_name for g in pod_groups(sp.pod.labels)}
        if self.sharing.release(live, self.nodes):
            self._changed()

    def _no_room(self, sp: SimPod) -> str:
        n = len(self._room)
        if not n:
            return "no nodes available to schedule pods"
        if self.kai or sp.pod.gpu_share is not None:
            if sp.gpus or sp.pod.gpu_share is not None:
                return "No node in the default node-pool has GPU resources"
            return f"0/{n} nodes are available: {n} node(s) didn't have enough resources: CPU cores."
        return self._no_room_default(sp.gpus > 0, n)

    @staticmethod
    def _no_room_default(gpu: bool, n: int) -> str:
        """Why a pod fits none of ``n`` nodes, as kube-scheduler says it."""
        if not n:
            return "no nodes available to schedule pods"
        return f"0/{n} nodes are available: {n} Insufficient {'nvidia.com/gpu' if gpu else 'cpu'}."

    def _pending(self, unit: list[SimPod], message: str, now: float) -> None:
        for sp in unit:
            cond = sp.pod.scheduled
            if cond is None or cond.message != message:
                # One condition (a value) for every pod a pass gives the same message.
                new = self._unschedulable.get(message)
                if new is None:
                    new = self._unschedulable[message] = Condition("False", "Unschedulable", message, now)
                sp.pod = with_scheduled(sp.pod, new)
                self._changed()

    def _bind(
        self, sp: SimPod, node: str, now: float, groups: Mapping[str, str], device_share: float
    ) -> None:
        labels = {**sp.pod.labels, **groups} if groups else sp.pod.labels
        sp.pod = replace(
            sp.pod, node_name=node, phase="Running", scheduled=Condition("True", "", "", now), labels=labels
        )
        sp.started = now
        sp.device_share = device_share
        self.pods.bound(sp)

    # -- kubelets (the simulated provider's NodeRegistrar) ----------------------------------------------

    def create(self, manifest: Mapping[str, Any]) -> bool:
        node = node_from_dict(manifest)
        if node.name in self.nodes:
            return False
        self.nodes[node.name] = replace(node, created=self.clock(), ready_since=self.clock())
        self._changed()
        return True

    def patch_status(self, name: str, status: Mapping[str, Any]) -> bool:
        node = self.nodes.get(name)
        if node is None:
            return False
        merged = {"capacity": {**node.capacity.as_dict()}, "allocatable": {**node.allocatable.as_dict()}}
        for key in ("capacity", "allocatable"):
            for res, qty in (status.get(key) or {}).items():
                merged[key][res] = Resources.parse({res: qty})[res]
        labels = node.labels
        memory = self.gpu_memory.get(node.labels.get(LABEL_INSTANCE_TYPE, ""), 0)
        if merged["allocatable"].get(NVIDIA_GPU) and memory and GPU_MEMORY_LABEL not in labels:
            # GPU feature discovery labels the node with one GPU's memory once the GPUs work; KAI reads it.
            labels = {**labels, GPU_MEMORY_LABEL: str(memory)}
        self.nodes[name] = replace(
            node,
            capacity=Resources(merged["capacity"]),
            allocatable=Resources(merged["allocatable"]),
            labels=labels,
        )
        self._changed()
        return True

    def mark_unreachable(self, name: str, now: float) -> bool:
        node = self.nodes.get(name)
        if node is None:
            return False
        self.nodes[name] = replace(
            node, ready=False, taints=(*node.taints, Taint("node.kubernetes.io/unreachable", "", "NoExecute"))
        )
        for sp in self.pods.on(name):
            self._recreate(sp, now)  # NoExecute: the pods are gone with the machine
        self._release_reservations()
        self._changed()
        return True

    # -- the controller's actions -----------------------------------------------------------------------

    def cordon(self, node_name: str, *, taint_key: str = "tidal.dev/disrupted") -> None:
        node = self.nodes.get(node_name)
        if node is not None and not node.unschedulable:
            self.nodes[node_name] = replace(
                node, unschedulable=True, taints=(*node.taints, Taint(taint_key, "", "NoSchedule"))
            )
            self._changed()

    def uncordon(self, node_name: str, *, taint_key: str = "tidal.dev/disrupted") -> None:
        node = self.nodes.get(node_name)
        if node is not None:
            self.nodes[node_name] = replace(
                node, unschedulable=False, taints=tuple(t for t in node.taints if t.key != taint_key)
            )
            self._changed()

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Any:
        from autoscaler.runtime.kube.actions import EvictionResult

        sp = self.pods.get(f"{namespace}/{name}")
        if sp is None:
            return EvictionResult.GONE
        if self.budgets and blocks(self.budgets, [sp.pod for sp in self.pods.values()], sp.pod):
            return EvictionResult.BLOCKED  # HTTP 429: a budget allows no disruption now
        self._recreate(sp, self.clock())
        self._release_reservations()
        self._changed()
        return EvictionResult.EVICTED

    def workload_on(self, node_name: str) -> list[str]:
        """The pods bound to ``node_name`` that would be lost with it, as the API server would list them."""
        return sorted(
            sp.pod.key
            for sp in self.pods.on(node_name)
            if sp.pod.unreadable or not (sp.pod.daemonset or sp.pod.mirror)
        )

    def node_for(self, provider_id: str) -> str | None:
        """The Node of an instance, as the API server would list it."""
        return next((n.name for n in self.nodes.values() if n.provider_id == provider_id), None)

    def delete_node(self, name: str) -> bool:
        node = self.nodes.pop(name, None)
        if node is None:
            return False
        for sp in self.pods.on(name):
            self._recreate(sp, self.clock())
        self._release_reservations()
        self._changed()
        return True

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        node = self.nodes.get(name)
        if node is not None:
            merged = {**node.annotations, **annotations}
            self.nodes[name] = replace(node, annotations={k: v for k, v in merged.items() if v is not None})
            self._changed()

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Kept on the pod (Kueue's consume-provisioning-request annotation is read back by the planner)."""
        sp = self.pods.get(f"{namespace}/{name}")
        if sp is not None:
            merged = {**sp.pod.annotations, **annotations}
            sp.pod = replace(sp.pod, annotations={k: v for k, v in merged.items() if v is not None})
            self.pods.replaced(sp)
            self._changed()

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        node = self.nodes.get(name)
        if node is not None:
            merged = {**node.labels, **labels}
            self.nodes[name] = replace(node, labels={k: v for k, v in merged.items() if v is not None})
            self._changed()

    def pod_event(self, pod: Pod, *, reason: str, message: str, event_type: str = "Normal") -> None:
        self.events.append((self.clock(), pod.key, reason, message))

    def node_event(
        self, node_name: str, *, reason: str, message: str, event_type: str = "Normal", uid: str = ""
    ) -> None:
        self.events.append((self.clock(), node_name, reason, message))

    def write_status(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.status = dict(data)


def _shape(p: Pod) -> tuple[object, ...]:
    """What decides, within one pass, which nodes a pod without inter-pod constraints fits: its requests and
    node constraints."""
    return (p.requests, tuple(sorted(p.node_selector.items())), p.affinity, p.tolerations)
