"""The world of a chaos run: a simulated cloud and an emulated cluster that inject faults and record what is
done to them, and check tidal's promises from those records alone, never from tidal's plans.

Promises checked (each breach is a :class:`Violation` of one kind):

- ``limit``: the live instances never hold more GPUs than ``clusterGPULimit``, nor number more than
  ``maxNodes`` (checked by the cloud at every launch it accepts).
- ``duplicate_launch``: a pod never gets a second node while the first one launched for it is still coming up
  unused (a launch is tied to a pod through its idempotency token, derived from the pod's name).
- ``protected_evicted``: the Eviction API is never called for a pod annotated do-not-evict (tidal's, Luna's or
  Karpenter's spelling), ``safe-to-evict: "false"``, nor for a pod tidal cannot fully read.
- ``killed_without_eviction``: a Node is never deleted, nor its instance terminated by tidal, while pods that
  nobody evicted are bound to it.
- ``partial_gang``: when tidal evicts a member of a running gang, it tries every running member in the same
  reconcile (a spot reclaim excepted: the cloud does not wait).
- ``quota_retry``: after the cloud refused a launch for quota, the same replica sends no offering of that quota
  for ``offeringUnavailableDuration``; ``throttle_retry``: after a throttle, no launch before retry_after.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.cloud import Attempt, LaunchFailed, Refusal, Throttled
from autoscaler.config.values import Config
from autoscaler.core import annotations as ann
from autoscaler.core.disruption.method import REPLACEMENTS
from autoscaler.core.model import TAINT_DISRUPTED, Pod, Snapshot
from autoscaler.core.offering import Instance, LaunchRequest
from autoscaler.runtime.kube.actions import EvictionResult
from autoscaler.runtime.kube.client import KubeApiError
from autoscaler.runtime.launching import launch_token
from autoscaler.sim.cluster import EmulatedCluster, SimPod
from providers.simulated import SimulatedProvider

__all__ = [
    "KINDS",
    "ChaosCloud",
    "ChaosCluster",
    "FlakyActions",
    "Ledger",
    "StaleView",
    "Violation",
]

LIMIT = "limit"
DUPLICATE = "duplicate_launch"
PROTECTED = "protected_evicted"
KILLED = "killed_without_eviction"
PARTIAL_GANG = "partial_gang"
QUOTA_RETRY = "quota_retry"
THROTTLE_RETRY = "throttle_retry"
KINDS = (LIMIT, DUPLICATE, PROTECTED, KILLED, PARTIAL_GANG, QUOTA_RETRY, THROTTLE_RETRY)
UNREADABLE = "spec.tolerations[0].operator: 'Lt' is not one of Exists, Equal"


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    t: float
    detail: str


class Ledger:
    """Violations found, and how often each fault was injected."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.violations: list[Violation] = []
        self.faults: Counter[str] = Counter()

    def breach(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind, self.clock(), detail))


def protected(pod: Pod) -> bool:
    """A pod its owner said must not be evicted, or one tidal cannot fully read (read here from the pod itself,
    not through tidal's own rules)."""
    a = pod.annotations
    return bool(
        pod.unreadable
        or any(a.get(k, "").lower() == "true" for k in (ann.DO_NOT_EVICT, "pod.elotl.co/do-not-evict"))
        or a.get(ann.KARPENTER_DO_NOT_DISRUPT, "").lower() == "true"
        or a.get(ann.SAFE_TO_EVICT, "").lower() == "false"
    )


def _lost_with_node(sp: SimPod) -> bool:
    return not sp.pod.daemonset and not sp.pod.mirror


class ChaosCluster(EmulatedCluster):
    """The emulated cluster, recording every eviction and every Node deletion."""

    def __init__(self, clock: Callable[[], float], ledger: Ledger, **kwargs: Any) -> None:
        super().__init__(clock, **kwargs)
        self.ledger = ledger
        self.ever_bound: set[str] = set()  # nodes a pod was ever bound to
        self.attempts: set[str] = set()  # pods tidal asked to evict since the last check, answered or not
        self.touched: set[str] = set()  # nodes tidal asked to cordon since the last check, answered or not
        self.evicted: list[tuple[str, str, str]] = []  # (pod key, gang, node) of accepted evictions
        self.reclaimed_nodes: set[str] = set()  # nodes whose instance had an interruption notice
        self.replacing: dict[str, list[tuple[str, ...]]] = defaultdict(
            list
        )  # node -> tokens written, in turn

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        tokens = annotations.get(REPLACEMENTS)
        if tokens:
            self.replacing[name].append(tuple(tokens.split(",")))
        super().annotate_node(name, annotations)

    def _bind(
        self, sp: SimPod, node: str, now: float, groups: Mapping[str, str], device_share: float
    ) -> None:
        super()._bind(sp, node, now, groups, device_share)
        self.ever_bound.add(node)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Any:
        sp = self.pods.get(f"{namespace}/{name}")
        if sp is not None and protected(sp.pod):
            self.ledger.breach(PROTECTED, f"eviction of protected pod {sp.pod.key} on {sp.pod.node_name}")
        node = sp.pod.node_name if sp is not None else ""
        result = super().evict(namespace, name, grace_period_seconds=grace_period_seconds)
        if sp is not None and result == EvictionResult.EVICTED:
            self.evicted.append((sp.pod.key, sp.gang, node))
        return result

    def delete_node(self, name: str) -> bool:
        victims = [sp.pod.key for sp in self.pods.on(name) if _lost_with_node(sp)]
        if victims:
            self.ledger.breach(KILLED, f"Node {name} deleted with {', '.join(victims[:3])} bound to it")
        return super().delete_node(name)

    def check_gangs(self) -> None:
        """After a reconcile: when tidal evicted members of a running gang, every running member was on a
        node it set out to drain, or was itself asked to leave (an API that then refused is not tidal's
        choice). A node the cloud is reclaiming is not waited for."""
        for gang in sorted({g for _, g, node in self.evicted if g and node not in self.reclaimed_nodes}):
            left = [
                sp.pod.key
                for sp in self.pods.values()
                if sp.gang == gang
                and sp.pod.node_name
                and sp.pod.key not in self.attempts
                and sp.pod.node_name not in self.touched
            ]
            if left:
                self.ledger.breach(
                    PARTIAL_GANG, f"gang {gang} partly evicted; {', '.join(left[:3])} still run"
                )
        self.attempts.clear()
        self.touched.clear()
        self.evicted.clear()


class ChaosCloud(SimulatedProvider):
    """The simulated cloud, checking every launch and termination tidal asks for against what it recorded."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float],
        kube: ChaosCluster,
        seed: int,
        ledger: Ledger,
    ) -> None:
        super().__init__(config, clock=clock, kube=kube, seed=seed)  # type: ignore[arg-type]
        self.cluster = kube
        self.ledger = ledger
        self.caller = ""  # the replica (one run of one process) now acting
        self.quota_refused: dict[str, float] = {}
        self.throttled: dict[str, float] = {}
        self.throttle_next = 0
        self.for_pod: dict[str, list[str]] = defaultdict(list)  # pod key -> instance ids launched for it
        self.tokens: set[str] = set()
        self.by_token: dict[str, str] = {}
        self.let_go: set[str] = (
            set()
        )  # instances tidal asked to terminate (whether or not the call went through)
        self.launched = 0

    def live(self) -> list[Instance]:
        """The instances not terminated, as the cloud's own books say (no fault injected, no call counted)."""
        with self._store.transaction() as state:
            return [r.instance() for r in state.instances.values() if r.state != "terminated"]

    def launch(self, request: LaunchRequest) -> Instance:
        now = self.clock()
        self._check_backoffs(request, now)
        if self.throttle_next > 0:
            self.throttle_next -= 1
            self.throttled[self.caller] = now + 30.0
            attempt = Attempt(
                request.offerings[0], Refusal.THROTTLED, "RequestLimitExceeded", retry_after=30.0
            )
            raise Throttled(30.0, attempts=(attempt,))
        late_before = len(self._late)
        try:
            instance = super().launch(request)
        except LaunchFailed as err:
            if any(a.refusal == Refusal.QUOTA for a in err.attempts):
                self.quota_refused[self.caller] = now
            raise
        if any(f.attempt.refusal == Refusal.QUOTA for f in self._late[late_before:]):
            self.quota_refused[self.caller] = now  # passed over for quota before another candidate took
        if request.token not in self.tokens:
            self.tokens.add(request.token)
            self.launched += 1
        self.by_token[request.token] = instance.id
        self._check_replacement(request.token)
        self._check_limits(instance)
        self._check_duplicate(request.token, instance)
        return instance

    def _check_backoffs(self, request: LaunchRequest, now: float) -> None:
        until = self.throttled.get(self.caller)
        if until is not None and now < until:
            self.ledger.breach(
                THROTTLE_RETRY, f"{self.caller} launched {until - now:.0f}s before retry_after"
            )
        refused = self.quota_refused.get(self.caller)
        wait = self.config.offering_unavailable_duration
        if refused is not None and now < refused + wait:
            gpu = [o.key for o in request.offerings if o.gpu_count]
            if gpu:
                self.ledger.breach(
                    QUOTA_RETRY, f"{self.caller} sent {gpu[0]} {now - refused:.0f}s after a GPU quota refusal"
                )

    def _check_limits(self, instance: Instance) -> None:
        live = self.live()
        gpus = sum(i.gpu_count for i in live)
        cfg = self.config
        if cfg.cluster_gpu_limit is not None and gpus > cfg.cluster_gpu_limit:
            self.ledger.breach(LIMIT, f"{gpus} GPUs live over clusterGPULimit {cfg.cluster_gpu_limit}")
        if cfg.max_nodes is not None and len(live) > cfg.max_nodes:
            self.ledger.breach(LIMIT, f"{len(live)} instances live over maxNodes {cfg.max_nodes}")

    def _check_duplicate(self, token: str, instance: Instance) -> None:
        """Pods still waiting never have more nodes launched for them, and still unused, than there are of
        them: per pod, or per gang (whose members are interchangeable). A node launched for a pod that then
        ran elsewhere is not counted (the scheduler used other room first: no second launch for it)."""
        pending = [sp for sp in self.cluster.pods.values() if not sp.pod.node_name]
        name = self.config.cluster_name
        sp = next(
            (p for p in pending for attempt in range(4) if launch_token(name, [p.pod.key], attempt) == token),
            None,
        )
        if sp is None:
            return
        if instance.id not in self.for_pod[sp.pod.key]:
            self.for_pod[sp.pod.key].append(instance.id)
        group = [p.pod.key for p in pending if (p.gang or p.pod.key) == (sp.gang or sp.pod.key)]
        live = {i.id for i in self.live()} - self.let_go
        unused = {i for k in group for i in self.for_pod[k] if i in live and i not in self.cluster.ever_bound}
        if len(unused) > len(group):
            self.ledger.breach(
                DUPLICATE,
                f"{len(unused)} nodes launched and unused for {sp.gang or sp.pod.key}, "
                f"which has {len(group)} pods waiting",
            )

    def _check_replacement(self, token: str) -> None:
        """A node being replaced never gets a second set of replacements while the first is alive and unused
        (the sets are read from what tidal wrote on the node)."""
        for node, sets in self.cluster.replacing.items():
            if len(sets) < 2 or token not in sets[-1]:
                continue
            live = {i.id for i in self.live()} - self.let_go
            for earlier in sets[:-1]:
                unused = [
                    self.by_token[t]
                    for t in earlier
                    if t in self.by_token
                    and self.by_token[t] in live
                    and self.by_token[t] not in self.cluster.ever_bound
                ]
                if unused:
                    self.ledger.breach(
                        DUPLICATE, f"node {node} replaced again while {unused[0]} still comes up"
                    )
                    return

    def terminate(self, instance: Instance) -> None:
        self.let_go.add(instance.id)
        node = next((n for n in self.cluster.nodes.values() if n.provider_id == instance.provider_id), None)
        if node is not None and instance.state != "terminated":
            victims = [
                sp.pod.key
                for sp in self.cluster.pods.values()
                if sp.pod.node_name == node.name and _lost_with_node(sp)
            ]
            if victims:
                self.ledger.breach(
                    KILLED, f"instance {instance.id} terminated with {', '.join(victims[:3])} on it"
                )
        super().terminate(instance)

    def warn_interruption(self, instance_id: str) -> None:
        self.cluster.reclaimed_nodes.add(instance_id)  # the simulated kubelet names its Node after it
        super().warn_interruption(instance_id)


class FlakyActions:
    """The cluster's actions as the API server answers them: while ``rate`` is above 0, that share of the
    writes and of the fresh reads fail (an eviction as FAILED, the rest with an error). Annotating pods and
    writing the status ConfigMap never fail here."""

    def __init__(self, cluster: ChaosCluster, rng: random.Random, ledger: Ledger) -> None:
        self.cluster = cluster
        self.rng = rng
        self.ledger = ledger
        self.rate = 0.0

    def _fails(self, action: str, target: str) -> None:
        """Raise the injected API error for this share of the calls."""
        if self._faulted():
            raise KubeApiError(f"{action} {target}", 500, "injected fault")

    def _faulted(self) -> bool:
        if self.rate and self.rng.random() < self.rate:
            self.ledger.faults["api_error"] += 1
            return True
        return False

    def cordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        self.cluster.touched.add(node_name)
        self._fails("cordon", node_name)
        self.cluster.cordon(node_name, taint_key=taint_key)

    def uncordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        self._fails("uncordon", node_name)
        self.cluster.uncordon(node_name, taint_key=taint_key)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Any:
        self.cluster.attempts.add(f"{namespace}/{name}")
        if self._faulted():
            return EvictionResult.FAILED
        return self.cluster.evict(namespace, name, grace_period_seconds=grace_period_seconds)

    def delete_node(self, name: str) -> bool:
        self._fails("delete_node", name)
        return self.cluster.delete_node(name)

    def workload_on(self, node_name: str) -> list[str]:
        self._fails("workload_on", node_name)
        return self.cluster.workload_on(node_name)

    def node_for(self, provider_id: str) -> str | None:
        self._fails("node_for", provider_id)
        return self.cluster.node_for(provider_id)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._fails("label_node", name)
        self.cluster.label_node(name, labels)

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self._fails("annotate_node", name)
        self.cluster.annotate_node(name, annotations)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self.cluster.annotate_pod(namespace, name, annotations)

    def write_status(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.cluster.write_status(namespace, name, data)


class StaleView:
    """The informer cache: the cluster as it is, except while a watch is broken, when it is what it was."""

    def __init__(self, cluster: ChaosCluster) -> None:
        self.cluster = cluster
        self.frozen: Snapshot | None = None

    def freeze(self) -> None:
        self.frozen = self.cluster.snapshot()

    def thaw(self) -> None:
        self.frozen = None

    def snapshot(self) -> Snapshot:
        return self.frozen if self.frozen is not None else self.cluster.snapshot()


def mark_pods(
    cluster: ChaosCluster, keys: list[str], annotations: Mapping[str, str], unreadable: bool
) -> None:
    """Give a job's pods the annotations (and unreadable fields) a chaos scenario asks for."""
    from dataclasses import replace

    for key in keys:
        sp = cluster.pods[key]
        sp.pod = replace(
            sp.pod,
            annotations={**sp.pod.annotations, **annotations},
            unreadable=UNREADABLE if unreadable else "",
        )
        cluster.pods.replaced(sp)
    cluster._changed()
