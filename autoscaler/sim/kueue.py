"""Kueue's side of a ProvisioningRequest admission check, and the autoscaling.x-k8s.io objects of the emulated
cluster.

:class:`Kueue` admits workloads the way Kueue does with a ProvisioningRequest admission check: a workload is
admitted in order while its ClusterQueue's GPU quota has room; Kueue then creates a PodTemplate and a
ProvisioningRequest (``<workload>-prov-<attempt>``) for it, and creates the workload's pods, annotated to
consume the request, only once the request is ``Provisioned``. A request answered ``Failed``,
``CapacityRevoked`` or ``BookingExpired`` before the pods were created is retried with a new request after
``retryAfter`` (Kueue's back-off). The quota is given back when the workload's pods have all finished.

:class:`RequestStore` holds the ProvisioningRequests, CapacityBuffers and PodTemplates, and takes the
controller's status writes as the API server's status subresource would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.core.model import (
    CapacityBuffer,
    PodSet,
    PodTemplate,
    ProvisioningRequest,
    StatusCondition,
)
from autoscaler.core.timestamps import epoch
from autoscaler.sim.scenario import BufferSpec, JobSpec, KueueSpec
from autoscaler.sim.workload import job_pods

__all__ = ["Kueue", "RequestStore"]

CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS = "autoscaling.x-k8s.io/provisioning-class-name"
GIVE_UP = ("Failed", "CapacityRevoked", "BookingExpired")


def _conditions(status: Mapping[str, Any], now: float) -> tuple[StatusCondition, ...]:
    """The conditions as written, with the transition times the writer gave them."""
    return tuple(
        StatusCondition(
            c["type"],
            c["status"],
            c.get("reason", ""),
            c.get("message", ""),
            epoch(c.get("lastTransitionTime", "")) or now,
            c.get("observedGeneration", 0),
        )
        for c in status.get("conditions", ())
    )


class RequestStore:
    """The cluster's ProvisioningRequests, CapacityBuffers and PodTemplates, and their status writes."""

    def __init__(self, changed: Callable[[], None], clock: Callable[[], float]) -> None:
        self.changed = changed
        self.clock = clock
        self.requests: dict[str, ProvisioningRequest] = {}
        self.buffers: dict[str, CapacityBuffer] = {}
        self.templates: dict[str, PodTemplate] = {}
        self.events: list[tuple[str, str, str]] = []
        self.writes = 0
        # Every answer written: when, to which request, each condition's (status, reason).
        self.history: list[tuple[float, str, dict[str, tuple[str, str]]]] = []

    def put_template(self, template: PodTemplate) -> None:
        self.templates[template.name] = template
        self.changed()

    def put_request(self, request: ProvisioningRequest) -> None:
        self.requests[request.name] = request
        self.changed()

    def delete_request(self, name: str) -> None:
        if self.requests.pop(name, None) is not None:
            self.changed()

    def put_buffer(self, buffer: CapacityBuffer) -> None:
        self.buffers[buffer.name] = buffer
        self.changed()

    # -- what the controller writes (RequestWrites) ------------------------------------------------------

    def request_status(self, request: ProvisioningRequest, status: Mapping[str, Any]) -> None:
        found = self.requests.get(request.name)
        if found is None:
            return  # deleted meanwhile: the API server would answer 404
        conditions = _conditions(status, self.clock())
        self.requests[request.name] = replace(found, conditions=conditions)
        self.history.append((self.clock(), request.name, {c.type: (c.status, c.reason) for c in conditions}))
        self.writes += 1
        self.changed()

    def buffer_status(self, buffer: CapacityBuffer, status: Mapping[str, Any]) -> None:
        found = self.buffers.get(buffer.name)
        if found is None:
            return
        template = (status.get("podTemplateRef") or {}).get("name", "")
        self.buffers[buffer.name] = replace(
            found,
            conditions=_conditions(status, self.clock()),
            status_replicas=status.get("replicas"),
            status_template=template,
        )
        self.writes += 1
        self.changed()

    def event(
        self,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
    ) -> None:
        self.events.append((f"{kind}/{name}", reason, message))


@dataclass(slots=True)
class _Workload:
    job: JobSpec
    queued: float
    attempt: int = 0
    request: str = ""
    retry_at: float | None = None
    admitted: float | None = None
    pods: list[str] = field(default_factory=list)
    provisioned: float | None = None


class Kueue:
    """One ClusterQueue with a GPU quota and a ProvisioningRequest admission check."""

    def __init__(self, spec: KueueSpec, store: RequestStore, submit: Callable[[JobSpec, float], list[str]]):
        self.spec = spec
        self.store = store
        self.submit_pods = submit
        self.waiting: list[_Workload] = []
        self.admitted: list[_Workload] = []
        self.finished: list[_Workload] = []
        self.attempts = 0

    def submit(self, job: JobSpec, now: float) -> None:
        """A workload enters the queue."""
        self.waiting.append(_Workload(job, now))

    def _used(self) -> int:
        return sum(w.job.gpus * w.job.pods for w in self.admitted)

    def step(
        self, now: float, running: Callable[[str], bool], annotate: Callable[[str, dict[str, str]], None]
    ) -> bool:
        """Admit, create requests and pods, retry, release quota; True when anything changed. ``running``
        says whether a job still has pods; ``annotate`` adds annotations to a pod."""
        changed = False
        for w in list(self.admitted):
            if w.pods and not running(w.job.name):
                self.admitted.remove(w)
                self.finished.append(w)
                changed = True
        # In order, each workload whose GPUs the quota still holds (a BestEffortFIFO ClusterQueue).
        for w in list(self.waiting):
            need = w.job.gpus * w.job.pods
            if self.spec.gpu_quota is not None and self._used() + need > self.spec.gpu_quota:
                continue
            self.waiting.remove(w)
            w.admitted = now
            self.admitted.append(w)
            self._request(w, now)
            changed = True
        for w in self.admitted:
            if w.pods:
                continue
            if w.retry_at is not None:
                if now >= w.retry_at:
                    self._request(w, now)
                    changed = True
                continue
            pr = self.store.requests.get(w.request)
            if pr is None:
                continue
            state = {c.type: c.status for c in pr.conditions}
            if state.get("Provisioned") == "True" and not any(state.get(k) == "True" for k in GIVE_UP):
                w.provisioned = now
                w.pods = self.submit_pods(w.job, now)
                for key in w.pods:
                    annotate(key, {CONSUME: w.request, CLASS: self.spec.provisioning_class})
                changed = True
            elif any(state.get(k) == "True" for k in GIVE_UP):
                self.store.delete_request(w.request)
                w.retry_at = now + self.spec.retry_after
                changed = True
        return changed

    def _request(self, w: _Workload, now: float) -> None:
        w.attempt += 1
        w.retry_at = None
        self.attempts += 1
        name = f"{w.job.name}-prov-{w.attempt}"
        template = job_pods(replace(w.job, pods=1), now, kai=False)[0]
        tname = f"ppt-{w.job.name}-{w.attempt}"
        self.store.put_template(PodTemplate("default", tname, replace(template, name=tname)))
        self.store.put_request(
            ProvisioningRequest(
                namespace="default",
                name=name,
                class_name=self.spec.provisioning_class,
                pod_sets=(PodSet(tname, w.job.pods),),
                uid=f"pr-{name}",
                created=now,
                generation=1,
            )
        )
        w.request = name

    def next_time(self, now: float) -> float | None:
        """When a retry is due."""
        times = [w.retry_at for w in self.admitted if w.retry_at is not None and w.retry_at > now]
        return min(times) if times else None

    def admission_waits(self) -> list[float]:
        """Seconds from entering the queue to pods created, per workload whose pods were created."""
        return [
            w.provisioned - w.queued for w in [*self.admitted, *self.finished] if w.provisioned is not None
        ]


def buffer_object(spec: BufferSpec) -> CapacityBuffer:
    """The CapacityBuffer a scenario's ``buffers`` entry stands for (its PodTemplate is made beside it)."""
    return CapacityBuffer(
        namespace="default",
        name=spec.name,
        template=f"buffer-{spec.name}",
        replicas=spec.replicas,
        uid=f"cb-{spec.name}",
        generation=1,
    )


def buffer_template(spec: BufferSpec, now: float) -> PodTemplate:
    job = JobSpec(
        at=now,
        name=f"buffer-{spec.name}",
        pods=1,
        gpus=spec.gpus,
        cpu_milli=spec.cpu_milli,
        memory_milli=spec.memory_milli,
        duration=0.0,
    )
    pod = job_pods(job, now, kai=False)[0]
    return PodTemplate("default", job.name, replace(pod, name=job.name))
