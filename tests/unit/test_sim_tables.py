"""The emulated cluster's tables keep their indexes as a walk over every pod or Node would find them: the pods
waiting, the pods on each node and the pods due to finish, each in the order the cluster lists its pods; and
they note which nodes the scheduler has to look at again."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.scenario import JobSpec
from tests.builders import node

GIB = 1024**3 * 1000


def job(name: str, pods: int, *, cpu_milli: int = 2000, duration: float = 3600.0, at: float = 0.0) -> JobSpec:
    return JobSpec(
        at=at, name=name, pods=pods, gpus=0, cpu_milli=cpu_milli, memory_milli=GIB, duration=duration
    )


def cluster_of(*names: str, cpu: str = "4") -> EmulatedCluster:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in names:
        cluster.create(node(name, cpu=cpu))
    return cluster


def walked_waiting(cluster: EmulatedCluster) -> list[str]:
    return [key for key, sp in cluster.pods.items() if not sp.pod.node_name]


def walked_on(cluster: EmulatedCluster, name: str) -> list[str]:
    return [key for key, sp in cluster.pods.items() if sp.pod.node_name == name]


def test_the_waiting_pods_are_those_a_walk_finds_in_the_same_order() -> None:
    cluster = cluster_of("a")
    cluster.submit(job("first", 3), 0.0)
    cluster.submit(job("second", 2, at=1.0), 1.0)
    cluster.schedule(1.0)  # two of the first job's pods fit on the one node
    assert [sp.pod.key for sp in cluster.pods.waiting.values()] == walked_waiting(cluster)
    assert len(cluster.pods.waiting) == 3


def test_a_replacement_waits_at_the_end_as_the_job_controller_creates_it_last() -> None:
    cluster = cluster_of("a")
    [first, _] = cluster.submit(job("web", 2), 0.0)
    cluster.submit(job("late", 1, at=1.0), 1.0)
    cluster.schedule(1.0)
    namespace, name = first.split("/")
    cluster.evict(namespace, name)
    waiting = [sp.pod.key for sp in cluster.pods.waiting.values()]
    assert waiting == walked_waiting(cluster)
    assert waiting == ["default/late-0", "default/web-0~1"]


def test_the_pods_on_a_node_come_in_the_clusters_order_whatever_order_they_were_bound_in() -> None:
    cluster = cluster_of("a", cpu="16")
    [low] = cluster.submit(job("low", 1), 0.0)
    [high] = cluster.submit(replace(job("high", 1), priority=10), 0.0)
    cluster.schedule(0.0)  # the higher priority pod is bound first
    assert [sp.pod.key for sp in cluster.pods.on("a")] == walked_on(cluster, "a") == [low, high]


def test_a_deleted_node_takes_exactly_its_own_pods_with_it() -> None:
    cluster = cluster_of("a", "b")
    cluster.submit(job("web", 4), 0.0)
    cluster.schedule(0.0)
    lost = walked_on(cluster, "a")
    assert cluster.workload_on("a") == sorted(lost)
    cluster.delete_node("a")
    assert cluster.pods.on("a") == []
    assert all(key not in cluster.pods for key in lost)
    assert [sp.pod.key for sp in cluster.pods.waiting.values()] == walked_waiting(cluster)
    assert [sp.pod.key for sp in cluster.pods.on("b")] == walked_on(cluster, "b")


def test_pods_finish_in_the_clusters_order_and_the_next_finish_is_the_earliest() -> None:
    cluster = cluster_of("a", cpu="16")
    cluster.submit(job("long", 2, duration=600.0), 0.0)
    cluster.submit(job("short", 2, duration=60.0), 0.0)
    cluster.schedule(0.0)
    assert cluster.next_finish() == 60.0
    assert cluster.finish_due(59.0) == 0
    assert cluster.finish_due(600.0) == 4
    assert [sp.pod.key for sp in cluster.done] == [
        "default/long-0",
        "default/long-1",
        "default/short-0",
        "default/short-1",
    ]
    assert cluster.next_finish() is None


def test_an_evicted_pod_is_not_due_to_finish() -> None:
    cluster = cluster_of("a")
    [key] = cluster.submit(job("web", 1, duration=60.0), 0.0)
    cluster.schedule(0.0)
    namespace, name = key.split("/")
    cluster.evict(namespace, name)
    assert cluster.next_finish() is None
    assert cluster.finish_due(60.0) == 0
    assert [sp.pod.key for sp in cluster.cut] == [key]


def test_a_finished_pod_notes_its_node_for_the_scheduler_but_a_pod_the_pass_bound_does_not() -> None:
    cluster = cluster_of("a", "b")
    cluster.submit(job("web", 2, duration=60.0), 0.0)
    cluster.schedule(0.0)
    assert cluster.pods.moved == set()
    cluster.finish_due(60.0)
    assert cluster.pods.moved == {"a"}  # both ran there, the fullest node first
    cluster.submit(job("next", 1), 60.0)
    cluster.schedule(60.0)
    assert cluster.pods.moved == set()


def test_a_node_written_without_the_clusters_methods_is_noted_for_the_scheduler() -> None:
    cluster = cluster_of("a", "b")
    cluster.submit(job("web", 1), 0.0)
    cluster.schedule(0.0)
    assert cluster.nodes.changed == set()
    cluster.nodes["b"] = replace(cluster.nodes["b"], unschedulable=True)
    del cluster.nodes["a"]
    assert cluster.nodes.changed == {"a", "b"}
    cluster.create(node("c"))
    assert cluster.nodes.in_order({"a", "b", "c"}) == ["b", "c"]
