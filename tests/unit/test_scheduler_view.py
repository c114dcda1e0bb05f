"""The emulated scheduler keeps its picture of the cluster between passes: what changed in between (a Node
registered, cordoned or deleted, a pod that finished or was evicted) is seen at the next pass, and the picture
it keeps is the one it would build from scratch."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.scenario import JobSpec
from autoscaler.sim.scheduler_view import eligible
from tests.builders import node

GIB = 1024**3 * 1000


def job(name: str, pods: int, *, cpu_milli: int = 3000, duration: float = 3600.0, at: float = 0.0) -> JobSpec:
    return JobSpec(
        at=at, name=name, pods=pods, gpus=0, cpu_milli=cpu_milli, memory_milli=GIB, duration=duration
    )


def where(cluster: EmulatedCluster, name: str) -> list[str]:
    return sorted(sp.pod.node_name for sp in cluster.pods.values() if sp.job == name)


def test_a_node_registered_between_passes_takes_the_pod_that_waited() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="4"))
    cluster.submit(job("web", 2), 0.0)
    cluster.schedule(0.0)
    assert where(cluster, "web") == ["", "a"]
    cluster.create(node("b", cpu="4"))
    cluster.schedule(10.0)
    assert where(cluster, "web") == ["a", "b"]


def test_the_room_a_finished_pod_leaves_is_taken_at_the_next_pass() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="4"))
    cluster.submit(job("batch", 1, duration=60.0), 0.0)
    cluster.submit(job("next", 1), 0.0)
    cluster.schedule(0.0)
    assert where(cluster, "next") == [""]
    cluster.finish_due(60.0)
    cluster.schedule(60.0)
    assert where(cluster, "next") == ["a"]


def test_the_room_an_evicted_pod_leaves_goes_to_its_replacement_submitted_first() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="4"))
    [first] = cluster.submit(job("first", 1), 0.0)
    cluster.submit(job("second", 1, at=5.0), 5.0)
    cluster.schedule(5.0)
    namespace, name = first.split("/")
    cluster.evict(namespace, name)
    cluster.schedule(6.0)
    # The Job's replacement keeps the first pod's place in the queue: it takes the room back.
    assert where(cluster, "first") == ["a"]
    assert where(cluster, "second") == [""]


def test_a_node_cordoned_between_passes_takes_no_more_pods() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="8"))
    cluster.submit(job("one", 1), 0.0)
    cluster.schedule(0.0)
    cluster.cordon("a")
    cluster.submit(job("two", 1), 1.0)
    cluster.schedule(1.0)
    assert where(cluster, "two") == [""]


def test_a_node_replaced_without_the_clusters_methods_is_seen_as_it_now_is() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="4"))
    cluster.submit(job("web", 2), 0.0)
    cluster.schedule(0.0)
    grown = cluster.nodes["a"]
    cluster.nodes["a"] = replace(grown, allocatable=grown.allocatable + {"cpu": 4000})
    cluster.schedule(1.0)
    assert where(cluster, "web") == ["a", "a"]


def test_the_kept_picture_is_the_one_built_from_scratch() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("a", "b", "c"):
        cluster.create(node(name, cpu="8"))
    cluster.submit(job("short", 4, duration=30.0), 0.0)
    cluster.submit(job("long", 3), 0.0)
    cluster.schedule(0.0)
    cluster.finish_due(30.0)
    cluster.cordon("b")
    cluster.delete_node("c")
    cluster.create(node("d", cpu="8"))
    cluster.submit(job("late", 2, cpu_milli=2000), 40.0)
    cluster.schedule(40.0)
    kept, _ = cluster.scheduler_view.sync(cluster.nodes, cluster.pods, cluster.sharing.reservations)
    fresh = ClusterScheduler(
        cluster.nodes.values(),
        [sp.pod for sp in cluster.pods.values() if sp.pod.node_name],
        eligible=[n.name for n in cluster.nodes.values() if eligible(n)],
    )
    assert {n: b.free for n, b in kept.bins.items()} == {n: b.free for n, b in fresh.bins.items()}
    assert {n: sorted(b.pods) for n, b in kept.bins.items()} == {
        n: sorted(b.pods) for n, b in fresh.bins.items()
    }


def fresh_order(sched: ClusterScheduler) -> list[tuple[int, int, str]]:
    return sorted((b.free.gpus, b.free.cpu, name) for name, b in sched.bins.items())


def test_the_kept_order_of_nodes_is_the_one_sorted_from_scratch_after_binds_finishes_and_deletions() -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for i in range(40):  # enough nodes that a few changed ones are moved, not all sorted anew
        cluster.create(node(f"n{i:02d}", cpu=("4", "8", "16")[i % 3]))
    view = cluster.scheduler_view
    for step in range(12):
        t = 10.0 * step
        cluster.finish_due(t)
        cluster.submit(job(f"j{step}", 1 + step % 3, cpu_milli=1000 * (1 + step % 4), duration=25.0), t)
        if step == 4:
            cluster.cordon("n07")
        if step == 6:
            cluster.delete_node("n11")
        if step == 8:
            cluster.create(node("late", cpu="2"))
        cluster.schedule(t)
        kept, _ = view.sync(cluster.nodes, cluster.pods, cluster.sharing.reservations)
        assert view.by_room() == fresh_order(kept)
