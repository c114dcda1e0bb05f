"""The pods of a scenario job, as a Job controller would create them from the job's template and replace them when
they are lost."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.core import annotations as ann
from autoscaler.core.demand import PREEMPTIBILITY_LABEL
from autoscaler.core.fit import GPU_TAINT, gpu_model_name
from autoscaler.core.gpu.share import COMPUTE_MODE, GPU_FRACTION, GPU_MEMORY, ComputeMode, gpu_share
from autoscaler.core.model import LABEL_GPU_MODEL, NodeSelectorTerm, OwnerRef, Pod, Requirement, Toleration
from autoscaler.core.resources import NVIDIA_GPU, Resources
from autoscaler.sim.kai_sharing import without_groups
from autoscaler.sim.pods import SimPod
from autoscaler.sim.scenario import JobSpec

KAI = "kai-scheduler"
DEFAULT = "default-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
CONTAINERS = ("main",)  # the container of every emulated pod (the one a GPU share is for)


def share_annotations(job: JobSpec) -> dict[str, str]:
    """The KAI annotations asking for the job's share of a GPU (none for whole GPUs or CPU only)."""
    found: dict[str, str] = {}
    if job.gpu_fraction:
        found[GPU_FRACTION] = f"{job.gpu_fraction:g}"
    if job.gpu_memory_mib:
        found[GPU_MEMORY] = str(job.gpu_memory_mib)
    if job.shares_gpu and job.compute_mode and job.compute_mode != ComputeMode.TIME_SLICING:
        found[COMPUTE_MODE] = job.compute_mode
    return found


def job_pods(job: JobSpec, now: float, *, kai: bool) -> list[Pod]:
    """The job's pods, pending with no condition yet; ``kai`` when KAI schedules the cluster's pods."""
    annotations: dict[str, str] = {}
    if job.offerings:
        annotations[ann.INSTANCE_OFFERINGS] = job.offerings
    if job.gpu_skus:
        annotations[ann.INSTANCE_GPU_SKUS] = job.gpu_skus
    if job.partial_gpu:
        annotations[ann.INSTANCE_PARTIAL_GPU] = "true"
    if job.interruption_cost:
        annotations[ann.INTERRUPTION_COST] = job.interruption_cost
    if job.gang:
        annotations["pod-group-name"] = job.name
    requests = {"cpu": job.cpu_milli, "memory": job.memory_milli}
    if job.gpus:
        requests[NVIDIA_GPU] = job.gpus * 1000
    annotations.update(share_annotations(job))
    share = gpu_share(annotations, CONTAINERS) if job.shares_gpu else None
    labels = {"app": job.name, **({QUEUE_LABEL: job.queue} if job.queue else {})}
    if kai:
        # What the emulated KAI goes by must be on the pod, where tidal (and the real KAI) can read it.
        labels[PREEMPTIBILITY_LABEL] = "preemptible" if job.preemptible else "non-preemptible"
    # The scheduler must honour the GPU model too, or a pod asking for L4s runs on whatever GPU is free:
    # the required node affinity a user writes next to tidal's annotation.
    models = tuple(sorted({gpu_model_name(s.strip()) for s in job.gpu_skus.split(",") if s.strip()}))
    affinity = (NodeSelectorTerm((Requirement(LABEL_GPU_MODEL, "In", models),)),) if models else ()
    # What ExtendedResourceToleration gives every pod that requests a GPU; a share pod's template has it.
    gpu_toleration = Toleration(GPU_TAINT.key, "Exists", "", "NoSchedule")
    tolerations = (gpu_toleration,) if job.gpus or share is not None else ()
    return [
        Pod(
            namespace="default",
            name=f"{job.name}-{i}",
            uid=f"{job.name}-{i}",
            created=now,
            labels=labels,
            annotations=annotations,
            # Only KAI places shares of a GPU: a share pod names it even in a cluster without queues.
            scheduler_name=KAI if kai or share is not None else DEFAULT,
            requests=Resources(requests),
            gpu_share=share,
            affinity=affinity,
            tolerations=tolerations,
            owner=OwnerRef("Job", job.name, True),
            priority=job.priority,
        )
        for i in range(job.pods)
    ]


def restarted(sp: SimPod, restarts: int, now: float) -> SimPod:
    """The pod a Job controller creates when ``sp`` was evicted or its node vanished (its ``restarts``-th
    replacement): pending, and waiting for a node from ``now``."""
    base = sp.pod.name.split("~", 1)[0]
    pod = replace(
        sp.pod,
        name=f"{base}~{restarts}",
        uid=f"{sp.pod.uid}",
        node_name="",
        phase="Pending",
        scheduled=None,
        created=now,
        # The binder's GPU-group labels were put on the pod that ran, not on its replacement.
        labels=without_groups(sp.pod.labels),
    )
    return SimPod(
        pod,
        sp.job,
        sp.queue,
        sp.gang,
        sp.duration,
        sp.preemptible,
        now,  # its wait for a node starts over
        held_seconds=sp.held_seconds,
    )
