"""The fleet keeps a member whose instance, Node and launch are the very objects it saw last time: what it
keeps must be what rebuilding it would give, and time-based timeouts must still fire."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autoscaler.runtime.fleet import Action, Fleet, State
from tests.builders import pod, snapshot
from tests.unit.test_fleet import G4DN, KEY, NOW, OFFERINGS, gpu_node, instance

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config


def test_a_member_whose_facts_are_the_same_objects_keeps_its_state_and_history(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    inst, snap = instance(), snapshot(gpu_node())
    fleet.observe([inst], snap, OFFERINGS, NOW)
    first = fleet.members[KEY]
    assert fleet.observe([inst], snap, OFFERINGS, NOW + 30) == []
    kept = fleet.members[KEY]
    assert kept.state == State.IDLE
    assert kept.history == first.history
    assert (kept.instance, kept.node) == (inst, snap.nodes[0])


def test_a_member_whose_node_changed_is_rebuilt_and_moves_state(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node(gpu=0)), OFFERINGS, NOW)
    assert fleet.members[KEY].state == State.REGISTERED
    with_gpus = snapshot(gpu_node())
    fleet.observe([inst], with_gpus, OFFERINGS, NOW + 30)
    member = fleet.members[KEY]
    assert member.node is with_gpus.nodes[0]
    assert [s for s, _ in member.history] == [State.LAUNCHING, State.REGISTERED, State.IDLE]


def test_a_pod_landing_on_an_unchanged_node_makes_it_ready(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst, empty = instance(), snapshot(gpu_node())
    fleet.observe([inst], empty, OFFERINGS, NOW)
    assert fleet.members[KEY].state == State.IDLE
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-5", phase="Running", message=None)
    with_pod = replace(empty, pods=snapshot(busy).pods)  # the very same Node object
    fleet.observe([inst], with_pod, OFFERINGS, NOW + 30)
    assert fleet.members[KEY].state == State.READY
    assert fleet.members[KEY].history[-1] == (State.READY, NOW + 30)


def test_a_cordon_on_an_otherwise_unchanged_node_is_seen_as_draining(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW)
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW + 10)  # an equal Node, a new object
    cordoned = gpu_node(unschedulable=True, taints=[{"key": "tidal.dev/disrupted", "effect": "NoSchedule"}])
    fleet.observe([inst], snapshot(cordoned), OFFERINGS, NOW + 20)
    assert fleet.members[KEY].state == State.DRAINING


def test_the_registration_timeout_fires_when_nothing_changed(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config(registrationTimeout="15m"))
    inst, nothing = instance(created=NOW), snapshot()
    assert fleet.observe([inst], nothing, OFFERINGS, NOW) == []
    assert fleet.observe([inst], nothing, OFFERINGS, NOW + 900) == []
    overdue = fleet.observe([inst], nothing, OFFERINGS, NOW + 901)
    assert [o.action for o in overdue] == [Action.REPLACE_UNREGISTERED]
    assert overdue[0].member is fleet.members[KEY]


def test_the_gpu_readiness_timeout_fires_when_the_same_node_never_shows_its_gpus(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config(gpuReadinessTimeout="10m"))
    inst, without = instance(created=NOW), snapshot(gpu_node(gpu=0))
    fleet.observe([inst], without, OFFERINGS, NOW)
    entered = fleet.members[KEY].entered
    assert fleet.observe([inst], without, OFFERINGS, entered + 600) == []
    overdue = fleet.observe([inst], without, OFFERINGS, entered + 601)
    assert [o.action for o in overdue] == [Action.REPLACE_WITHOUT_GPUS]


def test_a_refusal_on_unchanged_facts_still_ends_in_termination(make_config: Callable[..., Config]) -> None:
    refused: list[tuple[State, State]] = []
    fleet = Fleet(make_config(registrationTimeout="15m"), on_refused=lambda a, b: refused.append((a, b)))
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW)
    nodeless = snapshot()
    assert fleet.observe([inst], nodeless, OFFERINGS, NOW + 60) == []
    assert fleet.observe([inst], nodeless, OFFERINGS, NOW + 960) == []
    overdue = fleet.observe([inst], nodeless, OFFERINGS, NOW + 961)
    assert [o.action for o in overdue] == [Action.TERMINATE_NODELESS]
    assert refused == [(State.IDLE, State.LAUNCHING)]
    assert fleet.members[KEY].state == State.IDLE


def test_an_unchanged_registered_member_keeps_the_pods_it_was_launched_for(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    g4dn = next(o for o in OFFERINGS if o.instance_type == "g4dn.xlarge" and o.capacity_type == "on-demand")
    fleet.record_launch("tok-1", g4dn, ["default/infer-0"], None, NOW - 60)
    inst, without = instance(), snapshot(gpu_node(gpu=0))
    for t in (NOW, NOW + 30, NOW + 60):
        fleet.observe([inst], without, OFFERINGS, t)
        assert fleet.launched_for() == {"default/infer-0": "ip-10-0-1-5"}
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW + 90)
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW + 120)
    assert fleet.launched_for() == {}
    assert fleet.members[KEY].pods == ()


def test_the_last_pod_leaving_an_unchanged_node_makes_it_idle(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-5", phase="Running", message=None)
    with_pod = snapshot(gpu_node(), busy)
    fleet.observe([inst], with_pod, OFFERINGS, NOW)
    fleet.observe([inst], with_pod, OFFERINGS, NOW + 30)
    assert fleet.members[KEY].state == State.READY
    fleet.observe([inst], replace(with_pod, pods=()), OFFERINGS, NOW + 60)  # the very same Node object
    assert fleet.members[KEY].state == State.IDLE
    assert fleet.members[KEY].history[-1] == (State.IDLE, NOW + 60)


def test_an_unchanged_member_takes_the_offering_of_the_listing_once_its_launch_is_forgotten(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    planned = replace(G4DN)  # equal to the listing's offering, another object (as a plan's own copy)
    fleet.record_launch("tok-1", planned, [], None, NOW - 60)
    inst, snap = instance(token="tok-1"), snapshot(gpu_node())
    fleet.observe([inst], snap, OFFERINGS, NOW)
    assert fleet.members[KEY].offering is planned
    fleet.observe([inst], snap, OFFERINGS, NOW + 30)
    assert fleet.members[KEY].offering is G4DN
    fleet.observe([inst], snap, OFFERINGS, NOW + 60)
    assert fleet.members[KEY].offering is G4DN


def test_a_launch_recorded_again_for_a_listed_member_is_taken_in(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst, snap = instance(token="tok-1"), snapshot(gpu_node())
    fleet.observe([inst], snap, OFFERINGS, NOW)
    fleet.observe([inst], snap, OFFERINGS, NOW + 30)
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], inst, NOW + 40)  # the cloud gave the same one
    fleet.observe([inst], snap, OFFERINGS, NOW + 60)
    assert fleet.members[KEY].pods == ("default/infer-0",)
