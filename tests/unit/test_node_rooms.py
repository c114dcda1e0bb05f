"""The baselines keep each node's room for pending pods from one plan to the next: the engine they start a plan
from is the one built from scratch, whatever happened to the cluster in between, and only the nodes that
changed have their room worked out again."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import MISSING, fields, replace
from typing import Any

from autoscaler.config.options import Config
from autoscaler.core.demand_memo import DemandMemo
from autoscaler.core.fit import pod_constraints
from autoscaler.core.model import Snapshot
from autoscaler.core.placement.bins import Bin, Kind, Option
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.planning.cluster import build_engine, pods_by_node, usage
from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.rooms import NodeRooms, _fresh
from autoscaler.core.resources import Resources
from autoscaler.runtime.kube.convert import daemonset_from_dict, pod_from_dict
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.scenario import JobSpec
from tests.builders import anti_affinity, aws_offerings, daemonset, node, pod, snapshot, zone_spread

GIB = 1024**3 * 1000


def job(name: str, pods: int, *, cpu_milli: int, gpus: int = 0, duration: float, at: float) -> JobSpec:
    return JobSpec(
        at=at, name=name, pods=pods, gpus=gpus, cpu_milli=cpu_milli, memory_milli=2 * GIB, duration=duration
    )


def picture(engine: Engine) -> list[tuple[Any, ...]]:
    """Everything a plan reads of the bins it starts from."""
    return [
        (
            b.name,
            b.kind,
            b.free,
            b.labels,
            b.taints,
            b.unschedulable,
            b.devices,
            sorted(b.pods),
            b.ports,
        )
        for b in engine.bins
    ]


def index(make_config: Callable[..., Config]) -> OfferingIndex:
    return OfferingIndex(aws_offerings(), make_config())


def test_a_cluster_that_did_not_change_has_no_room_worked_out_again(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("a", "b", "c"):
        cluster.create(node(name, cpu="8"))
    cluster.submit(job("web", 5, cpu_milli=3000, duration=600.0, at=0.0), 0.0)
    cluster.schedule(0.0)
    rooms, offerings = NodeRooms(), index(make_config)
    first = rooms.engine(cluster.snapshot(), offerings)
    assert rooms.worked_out == 3
    again = rooms.engine(cluster.snapshot(), offerings)
    assert rooms.worked_out == 3
    assert picture(again) == picture(first) == picture(build_engine(cluster.snapshot(), offerings))


def test_only_the_node_whose_pods_changed_is_worked_out_again(make_config: Callable[..., Config]) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="8"))
    cluster.create(node("b", cpu="8"))
    cluster.submit(job("batch", 1, cpu_milli=3000, duration=60.0, at=0.0), 0.0)
    cluster.schedule(0.0)
    rooms, offerings = NodeRooms(), index(make_config)
    rooms.engine(cluster.snapshot(), offerings)
    cluster.finish_due(60.0)
    engine = rooms.engine(cluster.snapshot(), offerings)
    assert rooms.worked_out == 3
    assert picture(engine) == picture(build_engine(cluster.snapshot(), offerings))


def test_new_daemonsets_have_every_room_worked_out_again(make_config: Callable[..., Config]) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="8"))
    rooms, offerings = NodeRooms(), index(make_config)
    rooms.engine(cluster.snapshot(), offerings)
    with_agent = replace(cluster.snapshot(), daemonsets=(daemonset_from_dict(daemonset("agent", cpu="1")),))
    engine = rooms.engine(with_agent, offerings)
    assert rooms.worked_out == 2
    assert picture(engine) == picture(build_engine(with_agent, offerings))
    assert engine.bins[0].free.cpu == 7000  # the agent's pod will take a core


def _step(cluster: EmulatedCluster, rng: random.Random, now: float, made: list[str]) -> None:
    """One thing that happens to a cluster: a node registers or goes, is cordoned or labelled, pods arrive,
    finish, are evicted or bound."""
    action = rng.choice(["create", "create_gpu", "submit", "schedule", "finish", "cordon", "delete", "evict"])
    if action in ("create", "create_gpu"):
        name = f"n{len(made)}"
        made.append(name)
        gpu = action == "create_gpu"
        cluster.create(
            node(
                name,
                instance_type="g4dn.xlarge" if gpu else "m6i.2xlarge",
                cpu="4" if gpu else "8",
                gpu=1 if gpu else 0,
                managed=rng.random() < 0.5,
                ready=rng.random() < 0.8,
            )
        )
    elif action == "submit":
        gpus = rng.choice([0, 0, 1])
        cluster.submit(
            job(
                f"j{now:g}",
                rng.randint(1, 4),
                cpu_milli=rng.choice([500, 1000, 3000]),
                gpus=gpus,
                duration=rng.choice([30.0, 120.0, 600.0]),
                at=now,
            ),
            now,
        )
    elif action == "schedule":
        cluster.schedule(now)
    elif action == "finish":
        cluster.finish_due(now)
    elif action == "cordon" and cluster.nodes:
        cluster.cordon(rng.choice(sorted(cluster.nodes)))
    elif action == "delete" and cluster.nodes:
        cluster.delete_node(rng.choice(sorted(cluster.nodes)))
    elif action == "evict":
        bound = sorted(k for k, sp in cluster.pods.items() if sp.pod.node_name)
        if bound:
            namespace, name = rng.choice(bound).split("/", 1)
            cluster.evict(namespace, name)


def test_after_any_sequence_of_changes_the_kept_rooms_are_the_ones_built_from_scratch(
    make_config: Callable[..., Config],
) -> None:
    offerings = index(make_config)
    for seed in range(5):
        rng = random.Random(seed)
        cluster = EmulatedCluster(lambda: 0.0)
        rooms, made = NodeRooms(), list[str]()
        for step in range(60):
            now = step * 20.0
            _step(cluster, rng, now, made)
            snap: Snapshot = cluster.snapshot()
            assert picture(rooms.engine(snap, offerings)) == picture(build_engine(snap, offerings)), (
                seed,
                step,
            )
            assert rooms.usage == usage(snap), (seed, step)


def test_a_plan_made_with_kept_rooms_is_the_plan_made_without(make_config: Callable[..., Config]) -> None:
    config, offerings = make_config(), aws_offerings()
    screened = DemandMemo()  # what demand read of the pods, kept as the controller keeps it
    rng = random.Random(5)  # pods wait, some for new nodes, some for room on nodes that have it
    cluster = EmulatedCluster(lambda: 0.0)
    rooms, made = NodeRooms(), list[str]()
    launched = absorbed = 0
    for step in range(40):
        now = step * 20.0
        _step(cluster, rng, now, made)
        cluster.schedule(now)  # what does not fit is marked unschedulable
        snap = cluster.snapshot()
        kept = plan(PlanInput(snap, offerings, config, now, rooms=rooms, screened=screened))
        fresh = plan(PlanInput(snap, offerings, config, now))
        assert repr(kept.launch) == repr(fresh.launch), step
        assert repr(kept.removal) == repr(fresh.removal), step
        assert repr(kept.demand) == repr(fresh.demand), step
        assert repr(kept.queues) == repr(fresh.queues), step
        launched += len(kept.launch.launches)
        absorbed += len(kept.launch.absorbed)
    assert launched and absorbed
    assert rooms.worked_out < 40 * len(made)  # rooms were kept, not all worked out again


def test_what_a_plan_did_in_its_engine_is_taken_back_before_the_next_plan(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("a", "b"):
        cluster.create(node(name, cpu="8"))
    cluster.submit(job("web", 3, cpu_milli=1000, duration=600.0, at=0.0), 0.0)
    cluster.schedule(0.0)
    rooms, offerings = NodeRooms(), index(make_config)
    engine = rooms.engine(cluster.snapshot(), offerings)
    waiting = pod_from_dict(pod("proxy-0", cpu="1", host_ports=[8080]))
    c = pod_constraints(waiting, make_config())
    for b in list(engine.bins):  # what a plan does: pods onto the nodes, and a node opened for more
        fit = engine.can_add(waiting, c, b)
        assert not isinstance(fit, Rejection)
        engine.add(waiting, c, b, fit, [waiting.key])
    offering = offerings.offerings[0]
    engine.open([Option(offerings.allocatable(offering), (offering,))], mode="bin-packing")
    again = rooms.engine(cluster.snapshot(), offerings)
    assert again is engine  # the same engine, serving again
    assert rooms.worked_out == 2
    assert picture(again) == picture(build_engine(cluster.snapshot(), offerings))
    assert all(not b.settled and not b._values for b in again.bins)


def test_a_kept_room_still_keeps_pods_away_that_its_pods_anti_affinity_refuses(
    make_config: Callable[..., Config],
) -> None:
    cache = {"app": "cache"}
    apart = [anti_affinity("kubernetes.io/hostname", cache)]
    snap = snapshot(
        node("a", cpu="8"),
        pod("cache-0", labels=cache, pod_anti_affinity=apart, node_name="a", phase="Running", message=None),
        pod("cache-1", labels=cache),  # kept off node a by cache-0's term alone
    )
    config, offerings = make_config(), aws_offerings()
    # One grouping and one offerings' memo, kept from plan to plan as the controller keeps them.
    rooms, grouped, memo = NodeRooms(), pods_by_node(snap.pods), OfferingsMemo(OfferingIndex)
    plans = [
        plan(PlanInput(snap, offerings, config, 0.0, rooms=rooms, by_node=grouped, memo=memo))
        for _ in range(2)
    ]

    assert rooms.worked_out == 1
    fresh = plan(PlanInput(snap, offerings, config, 0.0))
    assert [la.pods for la in fresh.launch.launches] == [("default/cache-1",)]
    assert [repr(p.launch) for p in plans] == [repr(fresh.launch)] * 2


def test_a_kept_room_is_handed_out_as_a_copy_of_every_field_sharing_nothing_mutable() -> None:
    room = Bin(
        "n1",
        Kind.NEW,
        {"zone": "a"},
        unschedulable=True,
        free=Resources({"cpu": 4000}),
        used=Resources({"cpu": 1000}),
        pods=["ns/p"],
        mode="bin-packing",
        gang="g",
        gpus=1,
        vcpu=4,
        settled={"zone": "a"},
        _values={"zone": frozenset({"a"})},
    )
    copy = _fresh(room)
    for f in fields(Bin):
        mine, theirs = getattr(room, f.name), getattr(copy, f.name)
        assert theirs == mine, f.name
        if f.default is not MISSING:
            assert mine != f.default or f.name in ("taints", "classes", "devices", "lent"), (
                f"set {f.name} here"
            )
        if isinstance(mine, (list, dict)):
            assert theirs is not mine, f"{f.name} is shared"


def _built_afresh_next(engine: Engine) -> None:
    """Leave a count behind that a cluster built afresh would not have (a spread group, made as a plan
    checks a spread pod): the next engine is then built afresh, lending it the kept rooms."""
    spread = pod_from_dict(pod("spread-0", labels={"app": "s"}, spread=[zone_spread(labels={"app": "s"})]))
    engine.topology.prepare(spread)


def test_a_room_lent_to_an_engine_built_afresh_is_made_its_own_before_the_engine_places_a_pod_there(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="8"))
    cluster.submit(job("web", 1, cpu_milli=1000, duration=600.0, at=0.0), 0.0)
    cluster.schedule(0.0)
    rooms, offerings = NodeRooms(), index(make_config)
    _built_afresh_next(rooms.engine(cluster.snapshot(), offerings))
    engine = rooms.engine(cluster.snapshot(), offerings)
    [lent] = engine.bins
    assert lent.lent
    waiting = pod_from_dict(pod("api-1", cpu="1"))
    c = pod_constraints(waiting, make_config())
    fit = engine.can_add(waiting, c, lent)
    assert not isinstance(fit, Rejection)
    engine.add(waiting, c, lent, fit, [waiting.key])
    assert not lent.lent and "default/api-1" in lent.pods
    _built_afresh_next(engine)
    again = rooms.engine(cluster.snapshot(), offerings)
    assert again is not engine
    assert rooms.worked_out == 1
    assert picture(again) == picture(build_engine(cluster.snapshot(), offerings))


def test_a_lent_room_no_plan_changed_is_lent_again_and_one_a_plan_changed_is_made_anew(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("a", "b"):
        cluster.create(node(name, cpu="8"))
    rooms, offerings = NodeRooms(), index(make_config)
    _built_afresh_next(rooms.engine(cluster.snapshot(), offerings))
    first = rooms.engine(cluster.snapshot(), offerings)
    a, b = first.bins
    waiting = pod_from_dict(pod("api-1", cpu="1"))
    c = pod_constraints(waiting, make_config())
    _built_afresh_next(first)
    engine = rooms.engine(cluster.snapshot(), offerings)
    assert engine.bins == [a, b] and engine.bins[0] is a and engine.bins[1] is b
    fit = engine.can_add(waiting, c, a)
    assert not isinstance(fit, Rejection)
    engine.add(waiting, c, a, fit, [waiting.key])
    _built_afresh_next(engine)
    again = rooms.engine(cluster.snapshot(), offerings)
    assert again.bins[0] is not a and again.bins[1] is b
    assert picture(again) == picture(build_engine(cluster.snapshot(), offerings))


def test_an_engine_serves_again_with_only_the_nodes_that_changed_put_in_anew(
    make_config: Callable[..., Config],
) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    for name in ("c", "a", "b"):
        cluster.create(node(name, cpu="8"))
    rooms, offerings = NodeRooms(), index(make_config)
    engine = rooms.engine(cluster.snapshot(), offerings)
    a, b, c = engine.bins
    cluster.submit(job("web", 1, cpu_milli=1000, duration=600.0, at=0.0), 0.0)
    cluster.schedule(0.0)  # one pod lands on a node: that node's room is worked out again
    cluster.create(node("aa", cpu="4"))
    again = rooms.engine(cluster.snapshot(), offerings)
    assert again is engine
    assert [x.name for x in again.bins] == ["a", "aa", "b", "c"]
    assert sum(x is y for x, y in zip(again.bins, [a, None, b, c], strict=True)) == 2
    assert picture(again) == picture(build_engine(cluster.snapshot(), offerings))


def test_an_engine_whose_plan_left_a_spread_group_is_built_afresh(make_config: Callable[..., Config]) -> None:
    cluster = EmulatedCluster(lambda: 0.0)
    cluster.create(node("a", cpu="8"))
    rooms, offerings = NodeRooms(), index(make_config)
    engine = rooms.engine(cluster.snapshot(), offerings)
    _built_afresh_next(engine)
    again = rooms.engine(cluster.snapshot(), offerings)
    assert again is not engine
    assert again.topology.idle
    assert picture(again) == picture(build_engine(cluster.snapshot(), offerings))


def test_an_engine_serving_again_names_the_anti_affinity_term_a_fresh_one_names(
    make_config: Callable[..., Config],
) -> None:
    web = {"app": "web"}
    zone_apart = [anti_affinity("topology.kubernetes.io/zone", web)]
    host_apart = [anti_affinity("kubernetes.io/hostname", web)]
    node_b = node("b", cpu="8")
    guard_b = pod("guard-b", pod_anti_affinity=zone_apart, node_name="b", phase="Running", message=None)
    before = snapshot(node_b, guard_b)
    # Node a comes later, in the same zone, with a pod whose term keeps web pods off its host: both terms now
    # refuse a web pod on a, and a cluster built afresh meets a's first (nodes are added by name).
    guard_a = pod("guard-a", pod_anti_affinity=host_apart, node_name="a", phase="Running", message=None)
    after = snapshot(node("a", cpu="8"), node_b, guard_a, guard_b)
    after = replace(after, nodes=tuple(n if n.name == "a" else before.nodes[0] for n in after.nodes))
    after = replace(after, pods=tuple(p if p.name == "guard-a" else before.pods[0] for p in after.pods))
    rooms, offerings = NodeRooms(), index(make_config)
    rooms.engine(before, offerings)
    again = rooms.engine(after, offerings)
    fresh = build_engine(after, offerings)
    waiting = pod_from_dict(pod("web-0", labels=web, cpu="1"))
    c = pod_constraints(waiting, make_config())
    [a_again] = [b for b in again.bins if b.name == "a"]
    [a_fresh] = [b for b in fresh.bins if b.name == "a"]
    refused = again.can_add(waiting, c, a_again)
    assert isinstance(refused, Rejection)
    assert refused == fresh.can_add(waiting, c, a_fresh)
    assert refused.key == "kubernetes.io/hostname"
    assert rooms.worked_out == 2  # node b was kept: only a was worked out


def test_plans_of_spread_pods_with_a_kept_engine_are_the_plans_made_without(
    make_config: Callable[..., Config],
) -> None:
    web = {"app": "web"}
    nodes = [node(f"n{i}", cpu="4", zone=z) for i, z in enumerate(("us-east-1a", "us-east-1b", "us-east-1c"))]
    spread = [zone_spread(web)]
    config, offerings = make_config(), aws_offerings()
    rooms = NodeRooms()
    for running in range(4):  # more replicas running each time, on the nodes in turn
        placed = [
            pod(
                f"web-{i}",
                labels=web,
                spread=spread,
                cpu="1",
                node_name=f"n{i % 3}",
                phase="Running",
                message=None,
            )
            for i in range(running)
        ]
        waiting = [pod(f"web-{i}", labels=web, spread=spread, cpu="3") for i in range(running, running + 5)]
        snap = snapshot(*nodes, *placed, *waiting)
        kept = plan(PlanInput(snap, offerings, config, 0.0, rooms=rooms))
        fresh = plan(PlanInput(snap, offerings, config, 0.0))
        assert repr(kept.launch) == repr(fresh.launch), running
        assert repr(kept.removal) == repr(fresh.removal), running
        # Some fit the nodes there are; the spread keeps others off them.
        assert kept.launch.absorbed and kept.launch.unplaced


def test_a_plan_that_placed_an_anti_affine_pod_leaves_an_engine_built_afresh_next(
    make_config: Callable[..., Config],
) -> None:
    cache = {"app": "cache"}
    apart = [anti_affinity("kubernetes.io/hostname", cache)]
    snap = snapshot(node("a", cpu="8"), pod("cache-0", labels=cache, pod_anti_affinity=apart))
    rooms, offerings = NodeRooms(), index(make_config)
    engine = rooms.engine(snap, offerings)
    waiting = snap.pods[0]
    c = pod_constraints(waiting, make_config())
    [a] = engine.bins
    fit = engine.can_add(waiting, c, a)  # checking its term counts the pods it selects: a group
    assert not isinstance(fit, Rejection)
    engine.add(waiting, c, a, fit, [waiting.key])
    assert engine.topology.tracked_keys()
    again = rooms.engine(snap, offerings)
    assert again is not engine
    assert again.topology.idle and again.topology.tracked_keys() == frozenset()
    assert picture(again) == picture(build_engine(snap, offerings))
