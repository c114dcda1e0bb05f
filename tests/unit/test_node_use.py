"""Scale-down's measure of each node (its workload, what keeps it in use, its utilization), kept from one plan
to the next by :class:`NodeUse`: a node whose Node and pods are the same objects is not measured again, and a
scale-down made with kept measures decides exactly what one made without them decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autoscaler.config.options import Config
from autoscaler.core.disruption.node_use import NodeUse, measure
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.decisions import Hold
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaledown import scale_down
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.scenario import JobSpec
from tests.builders import aws_offerings, node, pod, snapshot

NOW = 1_800_000_000.0
GIB = 1024**3 * 1000  # in milli-units
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}


def managed(name: str) -> dict[str, object]:
    return node(name, cpu="4", memory="16Gi", managed=True, annotations=LONG_AGO)


def running(name: str, node_name: str, cpu: str) -> dict[str, object]:
    return pod(name, node_name=node_name, phase="Running", message=None, cpu=cpu, memory="1Gi")


def test_a_node_whose_node_and_pods_are_the_same_objects_is_measured_once(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(managed("a"), running("web-1", "a", "3"))
    config, use = make_config(), NodeUse()
    (a,) = snap.nodes
    pods = pods_by_node(snap.pods)["a"]
    first = use.of(a, pods, config, move_shares=False)
    use.done()
    again = use.of(a, list(pods), config, move_shares=False)  # the same pods, grouped anew
    assert again is first
    assert first.utilization == 0.75
    assert first.utilised is not None and first.utilised.blocks[0].kind == Hold.UTILISED


def test_a_node_whose_pods_changed_is_measured_again(make_config: Callable[..., Config]) -> None:
    snap = snapshot(managed("a"), running("web-1", "a", "3"), running("web-2", "a", "500m"))
    config, use = make_config(), NodeUse()
    (a,) = snap.nodes
    pods = pods_by_node(snap.pods)["a"]
    use.of(a, pods, config, move_shares=False)
    use.done()
    fewer = use.of(a, pods[1:], config, move_shares=False)
    assert fewer == measure(a, pods[1:], config, move_shares=False)
    assert fewer.utilization == 0.125
    assert fewer.utilised is None  # under the threshold: a candidate


def test_a_node_replaced_by_another_object_is_measured_again(make_config: Callable[..., Config]) -> None:
    snap = snapshot(managed("a"), running("web-1", "a", "1"))
    config, use = make_config(), NodeUse()
    (a,) = snap.nodes
    pods = pods_by_node(snap.pods)["a"]
    first = use.of(a, pods, config, move_shares=False)
    use.done()
    cordoned = replace(a, unschedulable=True)
    again = use.of(cordoned, pods, config, move_shares=False)
    assert again is not first and again.node is cordoned


def test_a_node_no_plan_measured_is_forgotten(make_config: Callable[..., Config]) -> None:
    snap = snapshot(managed("a"), running("web-1", "a", "3"))
    config, use = make_config(), NodeUse()
    (a,) = snap.nodes
    pods = pods_by_node(snap.pods)["a"]
    first = use.of(a, pods, config, move_shares=False)
    use.done()
    use.done()  # a plan that did not measure it
    assert use.of(a, pods, config, move_shares=False) is not first


def test_scale_down_with_kept_measures_decides_what_it_decides_without(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("a", "b", "c"):
        cluster.create(managed(name))
    cluster.submit(
        JobSpec(at=0.0, name="web", pods=2, gpus=0, cpu_milli=3000, memory_milli=GIB, duration=600.0), 0.0
    )
    cluster.submit(
        JobSpec(at=0.0, name="batch", pods=1, gpus=0, cpu_milli=500, memory_milli=GIB, duration=60.0), 0.0
    )
    cluster.schedule(0.0)
    config = make_config()
    index, use = OfferingIndex(aws_offerings(), config), NodeUse()
    removed, measured = [], []
    for finished_by in (0.0, 0.0, 60.0, 600.0):
        cluster.finish_due(finished_by)
        snap = cluster.snapshot()
        kept = scale_down(snap, index, NOW, use=use)
        assert kept == scale_down(snap, index, NOW)
        removed.append([r.node for r in kept.removals])
        measured.append(use.measured)
    assert measured[:3] == [3, 3, 4]  # the same cluster again: nothing; batch finished: its node only
    assert removed[0] != removed[-1]
    assert len(removed[-1]) == 3  # all empty at the end
