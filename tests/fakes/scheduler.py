"""Stand-ins for kube-scheduler and KAI's queue admission, driving the fake API server.

Each ``step()`` binds pending pods to nodes with room (gangs all-or-nothing) and writes the
``PodScheduled=False`` messages the real schedulers write when they cannot: kube-scheduler's
``0/N nodes are available: …`` and KAI's over-limit and no-capacity messages.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from autoscaler.core.model import Node, Pod, PodGroup
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.runtime.kube.convert import node_from_dict, pod_from_api, podgroup_from_dict, queue_from_dict
from tests.fakes.kube_apiserver import FakeApiServer

KAI = "kai-scheduler"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SchedulerStandIn:
    """Binds what fits; explains what does not, in each scheduler's own words."""

    def __init__(
        self, api: FakeApiServer, *, schedulers: tuple[str, ...] = ("default-scheduler", KAI)
    ) -> None:
        self.api = api
        self.schedulers = schedulers
        self.bound: list[tuple[str, str]] = []

    def _state(self) -> tuple[list[Node], ClusterScheduler, list[Pod], dict[tuple[str, str], PodGroup]]:
        nodes = [node_from_dict(n) for n in self.api.list("nodes")]
        usable = [n for n in nodes if n.ready and not n.unschedulable and not n.deleting]
        bound: list[Pod] = []
        pending: list[Pod] = []
        for raw in self.api.list("pods"):
            pod = pod_from_api(raw)  # the real scheduler knows fields tidal may not (Lt/Gt tolerations)
            if pod.node_name and not pod.finished:
                bound.append(pod)
            elif (
                not pod.node_name
                and pod.phase == "Pending"
                and pod.scheduler_name in self.schedulers
                and not pod.scheduling_gates  # a gated pod is not the scheduler's until its gates are gone
            ):
                pending.append(pod)
        pending.sort(key=lambda p: (p.created, p.name))
        groups: dict[tuple[str, str], PodGroup] = {}
        try:
            groups = {(g.namespace, g.name): g for g in map(podgroup_from_dict, self.api.list("podgroups"))}
        except Exception:  # PodGroup CRD not registered in this test
            groups = {}
        sched = ClusterScheduler(nodes, bound, eligible=[n.name for n in usable])
        return usable, sched, pending, groups

    def _place(self, pods: list[Pod], nodes: list[Node], sched: ClusterScheduler) -> dict[str, str] | None:
        mark = sched.mark()
        where: dict[str, str] = {}
        for pod in pods:
            for node in nodes:
                if sched.rejection(pod, node.name) is None:
                    sched.bind(pod, node.name)
                    where[pod.key] = node.name
                    break
            else:
                sched.rollback(mark)
                return None
        sched.commit(mark)
        return where

    def _queue_usage(self) -> tuple[dict[str, Any], dict[str, int]]:
        try:
            queues = {q.name: q for q in map(queue_from_dict, self.api.list("queues"))}
        except Exception:
            return {}, {}
        used: dict[str, int] = defaultdict(int)
        for raw in self.api.list("pods"):
            pod = pod_from_api(raw)  # the real scheduler knows fields tidal may not (Lt/Gt tolerations)
            queue = pod.labels.get("kai.scheduler/queue", "")
            if pod.node_name and not pod.finished and queue:
                used[queue] += pod.requests.gpus
        return queues, used

    def step(self) -> int:
        """One scheduling pass; returns how many pods were bound."""
        nodes, sched, pending, groups = self._state()
        queues, used = self._queue_usage()
        units: dict[str, list[Pod]] = {}
        for pod in pending:
            group = pod.annotations.get("pod-group-name")
            key = f"{pod.namespace}/{group}" if group and (pod.namespace, group) in groups else pod.key
            units.setdefault(key, []).append(pod)
        bound = 0
        for key, pods in units.items():
            podgroup = groups.get(tuple(key.split("/", 1)))  # type: ignore[arg-type]
            if podgroup is not None and len(pods) < podgroup.min_member:
                continue
            kai = pods[0].scheduler_name == KAI
            gpus = sum(p.requests.gpus for p in pods)
            queue = pods[0].labels.get("kai.scheduler/queue", "")
            if kai and queue in queues:
                limit = queues[queue].gpu.limit
                if limit is not None and used[queue] + gpus > limit:
                    msg = (
                        f"OverLimit: {queue} quota has reached the allowable limit of GPUs. Limit is {limit} GPUs, "
                        f"currently {used[queue]} GPUs allocated and workload requested {gpus} GPUs."
                    )
                    self._unschedulable(pods, msg)
                    continue
            where = self._place(pods, nodes, sched)
            if where is None:
                self._unschedulable(pods, self._why(pods[0], nodes, sched, kai))
                continue
            for pod in pods:
                self._bind(pod, where[pod.key])
                bound += 1
            if kai and queue:
                used[queue] += gpus
        return bound

    def _why(self, pod: Pod, nodes: list[Node], sched: ClusterScheduler, kai: bool) -> str:
        if not nodes:
            return "no nodes available to schedule pods"
        if kai:
            return (
                "No node in the default node-pool has GPU resources"
                if pod.requests.gpus
                else (
                    f"0/{len(nodes)} nodes are available: {len(nodes)} node(s) didn't have enough resources: CPU cores."
                )
            )
        # kube-scheduler's summary: how many nodes each filter's message turned away, most common first.
        counts: dict[str, int] = defaultdict(int)
        for n in nodes:
            rejection = sched.rejection(pod, n.name)
            counts[str(rejection) if rejection else "node(s) were unschedulable"] += 1
        parts = ", ".join(f"{k} {msg}" for msg, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"0/{len(nodes)} nodes are available: {parts}. preemption: 0/{len(nodes)} nodes are available."

    def _bind(self, pod: Pod, node: str) -> None:
        self.api.patch("pods", pod.namespace, pod.name, {"spec": {"nodeName": node}})
        self.api.patch_status(
            "pods",
            pod.namespace,
            pod.name,
            {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}],
            },
        )
        self.bound.append((pod.key, node))

    def _unschedulable(self, pods: list[Pod], message: str) -> None:
        for pod in pods:
            cond = pod.scheduled
            if cond is not None and cond.status == "False" and cond.message == message:
                continue
            self.api.patch_status(
                "pods",
                pod.namespace,
                pod.name,
                {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                            "lastTransitionTime": _now(),
                        }
                    ],
                },
            )

    def finish(self, namespace: str, name: str) -> None:
        """The pod's containers exited successfully (a Job completed)."""
        self.api.patch_status("pods", namespace, name, {"phase": "Succeeded"})
