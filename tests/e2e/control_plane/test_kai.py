"""KAI's queues and gangs on the real control plane: KAI's CRDs served by the API server, KAI played by the test.

KAI itself does not run: pods with ``schedulerName: kai-scheduler`` are never bound by kube-scheduler, so the
test writes what KAI writes (the ``PodScheduled=False`` condition with KAI's message, and Bindings) and asserts
on what tidal launches into the simulated cloud and reports on the API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import gpus, messages, pods_of, ready
from tests.e2e.control_plane.workloads import GPU_TOLERATION, job
from tests.k8s import kai
from tests.k8s.cluster import Objects
from tests.k8s.tidal import Tidal, wait_until


@pytest.fixture(scope="module")
def kai_crds(objects: Objects) -> None:
    kai.install_crds(objects)


@pytest.fixture
def scheduler(cluster: Cluster, kai_crds: None) -> Iterator[kai.KaiScheduler]:
    yield kai.KaiScheduler(cluster.api)


def kai_job(
    cluster: Cluster, name: str, *, queue: str, pods: int, gpus: int = 1, group: str = ""
) -> dict[str, Any]:
    """A Job whose pods KAI schedules: KAI's scheduler name, the queue label, the PodGroup annotation."""
    return job(
        name,
        pods=pods,
        cpu="1",
        memory="4Gi",
        gpus=gpus,
        scheduler=kai.SCHEDULER,
        labels={kai.QUEUE_LABEL: queue},
        annotations={kai.POD_GROUP_ANNOTATION: group} if group else None,
    )


def created(cluster: Cluster, app: str, count: int) -> list[Any]:
    """Until the Job controller has made ``count`` pods of ``app``."""
    return list(
        wait_until(
            lambda: (found := pods_of(cluster, app)) and len(found) >= count and found,
            timeout=30,
            what=f"{count} pods of {app}",
        )
    )


def full_gpu_node(cluster: Cluster, scheduler: kai.KaiScheduler, queue: str, gpus: int) -> str:
    """A GPU node tidal did not launch (one from before it), with every GPU taken by a pod of ``queue``
    that KAI bound there: the queue holds ``gpus`` GPUs and the cluster has no free one."""
    name = f"gpu-{cluster.namespace}"
    capacity = {"cpu": "48", "memory": "196608Mi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    cluster.core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "node.kubernetes.io/instance-type": "g4dn.12xlarge",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
    )
    wait_until(lambda: ready(cluster.core.read_node(name)), timeout=30, what=f"node {name} Ready")
    cluster.create(kai_job(cluster, "serve", queue=queue, pods=gpus))
    for pod in created(cluster, "serve", gpus):
        scheduler.bind(cluster.namespace, pod.metadata.name, name)
    cluster.wait_bound(gpus)
    return name


def held_one_gpu_pod(cluster: Cluster, scheduler: kai.KaiScheduler, t: Tidal, queue: str) -> str:
    """A one-GPU pod of ``queue`` that KAI reports as finding no node with a free GPU: the NotTriggerScaleUp
    tidal writes on it, once tidal has reconciled three more times without launching anything."""
    cluster.create(kai_job(cluster, "sweep", queue=queue, pods=1))
    [pod] = created(cluster, "sweep", 1)
    name = pod.metadata.name
    scheduler.unschedulable(cluster.namespace, name, kai.no_gpu_node(cluster.namespace, name, 1, 1, 4))
    reported = wait_until(
        lambda: messages(cluster, "NotTriggerScaleUp", name),
        timeout=60,
        what="NotTriggerScaleUp on the held pod",
    )
    t.wait_reconciles(3)
    assert cluster.cloud(cluster.config()).launched() == []
    return str(reported[0])


def ignored(t: Tidal, reason: str) -> float:
    return t.metric("tidal_pending_pods", state="ignored", reason=reason)


def test_pods_kai_holds_over_their_queue_limit_cause_no_launch(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    queue = f"research-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=4, gpu_limit=4))
    full_gpu_node(cluster, scheduler, queue, gpus=4)
    t = cluster.tidal(cluster.config())

    cluster.create(kai_job(cluster, "sweep", queue=queue, pods=2))
    held = created(cluster, "sweep", 2)
    for pod in held:
        scheduler.unschedulable(cluster.namespace, pod.metadata.name, kai.over_limit(queue, 4, 4, 1))

    # tidal has read both holds (so the silence below is a decision, not a slow informer)...
    wait_until(lambda: ignored(t, "reason-mismatch") >= 2, timeout=60, what="both held pods seen")
    t.wait_reconciles(3)
    # ...and launched nothing for them: a node would sit idle, KAI keeps them pending on purpose.
    assert cluster.cloud(cluster.config()).launched() == []
    assert all(not p.spec.node_name for p in pods_of(cluster, "sweep"))


def test_a_stale_capacity_message_of_a_queue_at_its_limit_is_held_and_reported(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    queue = f"research-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=4, gpu_limit=4))
    full_gpu_node(cluster, scheduler, queue, gpus=4)
    t = cluster.tidal(cluster.config())

    # KAI's message describes its last attempt, before the queue filled up: it still reads as a shortage.
    reported = held_one_gpu_pod(cluster, scheduler, t, queue)
    assert f"queue {queue} would exceed its GPU limit: 4 allocated + 1 requested" in reported


def test_a_queue_with_a_fractional_over_quota_weight_still_holds_its_pods_at_its_limit(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    # KAI's CRD types overQuotaWeight as a number: a weight of 0.5 is accepted and means half a share.
    queue = f"research-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=2, gpu_limit=4, over_quota_weight=0.5))
    stored = cluster.objects.get("scheduling.run.ai/v2", "Queue", queue)
    assert stored is not None and stored["spec"]["resources"]["gpu"]["overQuotaWeight"] == 0.5
    full_gpu_node(cluster, scheduler, queue, gpus=4)
    t = cluster.tidal(cluster.config())

    reported = held_one_gpu_pod(cluster, scheduler, t, queue)
    assert f"queue {queue} would exceed its GPU limit: 4 allocated + 1 requested" in reported
    assert "cannot decode" not in t.output()


def test_a_queue_limited_to_half_a_gpu_gets_a_node_for_the_half_gpu_pod_it_allows(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    # KAI counts queue resources in GPUs with fractions: a limit of 0.5 lets one half-GPU pod run.
    queue = f"chat-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=0.5, gpu_limit=0.5))
    cfg = cluster.config()
    cluster.tidal(cfg)
    workload = kai_job(cluster, "chat", queue=queue, pods=1, gpus=0)
    template = workload["spec"]["template"]
    template["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    # It asks for no nvidia.com/gpu, so no admission plugin could add the GPU taint's toleration: it carries it.
    template["spec"]["tolerations"] = [GPU_TOLERATION]
    cluster.create(workload)
    [pod] = created(cluster, "chat", 1)
    name = pod.metadata.name
    scheduler.unschedulable(cluster.namespace, name, kai.no_gpu_node(cluster.namespace, name, 0, 1, 4))

    launching = wait_until(
        lambda: messages(cluster, "TriggeredScaleUp", name), timeout=60, what="TriggeredScaleUp on the pod"
    )
    assert "launching g4dn" in launching[0], launching
    assert messages(cluster, "NotTriggerScaleUp", name) == []
    assert sum(i.gpu_count for i in cluster.cloud(cfg).launched()) == 1


def test_a_gang_the_gpu_limit_cannot_hold_whole_gets_no_node_and_every_member_is_told(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    queue = f"training-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=-1, gpu_limit=-1))
    cluster.create(kai.pod_group("pg-train", min_member=3, queue_name=queue))
    t = cluster.tidal(cluster.config(clusterGPULimit=2))

    cluster.create(kai_job(cluster, "train", queue=queue, pods=3, group="pg-train"))
    members = created(cluster, "train", 3)
    for pod in members:
        name = pod.metadata.name
        scheduler.unschedulable(cluster.namespace, name, kai.no_gpu_node(cluster.namespace, name, 1, 1, 4))

    for pod in members:
        told = wait_until(
            lambda pod=pod: messages(cluster, "NotTriggerScaleUp", pod.metadata.name),
            timeout=60,
            what=f"NotTriggerScaleUp on {pod.metadata.name}",
        )
        assert "clusterGPULimit 2" in told[0], told
    t.wait_reconciles(3)
    # Two of three members would fit under the limit; a gang runs whole or not at all, so none get a node.
    assert cluster.cloud(cluster.config()).launched() == []


def test_a_gang_waits_for_its_last_member_then_gets_all_its_nodes(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    queue = f"training-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=-1, gpu_limit=-1))
    cluster.create(kai.pod_group("pg-train", min_member=3, queue_name=queue))
    cfg = cluster.config()
    t = cluster.tidal(cfg)
    cloud = cluster.cloud(cfg)

    def shortage(pods: list[Any]) -> None:
        for pod in pods:
            name = pod.metadata.name
            scheduler.unschedulable(
                cluster.namespace, name, kai.no_gpu_node(cluster.namespace, name, 1, 1, 4)
            )

    # Two of the gang's three pods: the gang is incomplete, nothing is bought for part of it.
    cluster.create(kai_job(cluster, "train-a", queue=queue, pods=2, group="pg-train"))
    first = created(cluster, "train-a", 2)
    shortage(first)
    told = wait_until(
        lambda: messages(cluster, "NotTriggerScaleUp", first[0].metadata.name),
        timeout=60,
        what="gang-incomplete reported",
    )
    assert "gang" in told[0] and "2 of minMember 3" in told[0], told
    t.wait_reconciles(2)
    assert cloud.launched() == []

    # The last member arrives: the whole gang's GPUs are bought together.
    cluster.create(kai_job(cluster, "train-b", queue=queue, pods=1, group="pg-train"))
    shortage(created(cluster, "train-b", 1))
    wait_until(lambda: cloud.gpus_up() >= 3, timeout=60, what="the gang's 3 GPUs launched")
    wait_until(
        lambda: sum(gpus(n) for n in cluster.nodes() if ready(n)) >= 3,
        timeout=60,
        what="the gang's GPUs allocatable",
    )
    gpu_nodes = [n for n in cluster.nodes() if gpus(n)]
    # KAI binds the gang onto them, all members at once.
    free = [n.metadata.name for n in gpu_nodes for _ in range(gpus(n))]
    members = [*first, *pods_of(cluster, "train-b")]
    for pod, node in zip(members, free, strict=False):
        scheduler.bind(cluster.namespace, pod.metadata.name, node)
    cluster.wait_bound(3)
    t.wait_reconciles(2)
    assert cloud.gpus_up() == 3
    assert sum(i.gpu_count for i in cloud.launched()) == 3


def test_a_queue_tidal_cannot_read_gets_no_node_for_its_pods_and_says_which_field(
    cluster: Cluster, scheduler: kai.KaiScheduler
) -> None:
    # KAI's CRD types a limit as a number, so the API server keeps -2; KAI's one word for "none" is -1, and
    # tidal will not guess whether -2 is a typo for it or for 2.
    queue = f"research-{cluster.namespace}"
    cluster.create(kai.queue(queue, gpu_quota=-1, gpu_limit=-2))
    t = cluster.tidal(cluster.config())

    reported = held_one_gpu_pod(cluster, scheduler, t, queue)
    assert f"queue {queue} cannot be read" in reported and "spec.resources.gpu.limit" in reported
    assert "queue_unreadable" in t.output()
