"""The fleet: states rebuilt from instances and Nodes; timeouts and orphans reported for action."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.model import ON_DEMAND, SPOT, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.runtime.fleet import TRANSITIONS, Action, Fleet, State
from tests.builders import aws_offerings, node, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.runtime.fleet import Overdue

NOW = 1_795_168_800.0
OFFERINGS = aws_offerings()
KEY = "aws:///us-east-1a/i-0a1"  # the provider ID of instance() and gpu_node()
G4DN = next(o for o in OFFERINGS if o.instance_type == "g4dn.xlarge" and o.capacity_type == "on-demand")


def instance(
    i: str = "i-0a1",
    *,
    created: float = NOW - 60,
    state: str = "running",
    token: str = "tok-1",
    itype: str = "g4dn.xlarge",
    gpus: int = 1,
) -> Instance:
    return Instance(
        id=i,
        provider_id=f"aws:///us-east-1a/{i}",
        instance_type=itype,
        zone="us-east-1a",
        capacity_type=ON_DEMAND,
        state=InstanceState(state),
        launch_token=token,
        created=created,
        price=0.526,
        gpu_count=gpus,
    )


def gpu_node(
    name: str = "ip-10-0-1-5",
    *,
    provider_id: str = "aws:///us-east-1a/i-0a1",
    gpu: int = 1,
    ready: bool = True,
    **kw: Any,
) -> dict[str, Any]:
    obj = node(
        name,
        instance_type="g4dn.xlarge",
        cpu="4",
        memory="16Gi",
        gpu=gpu,
        managed=True,
        ready=ready,
        gpu_label=1,
        **kw,
    )
    obj["spec"]["providerID"] = provider_id
    return obj


def observe(
    fleet: Fleet, instances: Iterable[Instance], *objs: dict[str, Any], now: float = NOW
) -> list[Overdue]:
    return fleet.observe(instances, snapshot(*objs), OFFERINGS, now)


def test_an_instance_without_a_node_is_launching_and_absorbs_demand(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    assert observe(fleet, [instance()]) == []
    assert fleet.counts()["launching"] == 1
    assert [c.name for c in fleet.launching_capacity()] == ["aws:///us-east-1a/i-0a1"]
    assert fleet.launching_usage().gpus == 1


def test_a_recorded_launch_not_yet_listed_by_the_cloud_still_counts(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    fleet.record_launch("tok-9", G4DN, ["default/infer-0"], None, NOW)
    observe(fleet, [])
    assert fleet.launching_usage().gpus == 1
    assert [la.offering for la in fleet.launching_capacity()] == [G4DN]


def test_a_recorded_launch_is_forgotten_once_the_cloud_lists_it(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], None, NOW)
    observe(fleet, [instance(token="tok-1")])
    assert fleet.counts()["launching"] == 1


def test_a_ready_gpu_node_with_work_is_ready_and_without_is_idle(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    observe(fleet, [instance()], gpu_node())
    assert fleet.counts()["idle"] == 1
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-5", phase="Running", message=None)
    observe(fleet, [instance()], gpu_node(), busy)
    assert fleet.counts()["ready"] == 1


def test_a_gpu_node_whose_gpus_have_not_appeared_is_only_registered(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    observe(fleet, [instance()], gpu_node(gpu=0))
    assert fleet.counts()["registered"] == 1


def test_an_instance_that_never_registers_is_terminated_and_its_offering_benched(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config(registrationTimeout="15m"))
    overdue = observe(fleet, [instance(created=NOW - 16 * 60)])
    assert [(o.reason, o.action) for o in overdue] == [
        ("no Node registered within 15m", Action.REPLACE_UNREGISTERED)
    ]
    assert (Action.REPLACE_UNREGISTERED.terminate, Action.REPLACE_UNREGISTERED.bench_offering) == (True, True)


def test_gpus_that_never_appear_get_the_node_replaced(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config(gpuReadinessTimeout="10m"))
    late = gpu_node(gpu=0)
    late["metadata"]["creationTimestamp"] = "2026-11-20T09:45:00Z"
    overdue = observe(fleet, [instance(created=NOW - 17 * 60)], late)
    assert [(o.reason, o.action) for o in overdue] == [
        ("GPUs did not appear within 10m", Action.REPLACE_WITHOUT_GPUS)
    ]


def test_a_managed_node_whose_instance_is_gone_is_deleted(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    overdue = observe(fleet, [], gpu_node(ready=False))
    assert [(o.reason, o.action) for o in overdue] == [
        ("its instance no longer exists", Action.DELETE_ORPHAN_NODE)
    ]


def test_a_reclaimed_spot_instance_has_its_node_deleted(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    overdue = observe(fleet, [instance(state="terminated")], gpu_node())
    assert [(o.reason, o.action) for o in overdue] == [
        ("its instance was terminated (e.g. spot reclaim)", Action.DELETE_NODE_OF_ENDED)
    ]


def test_a_reclaimed_spot_instance_names_its_spot_offering_so_it_can_be_benched(
    make_config: Callable[..., Config],
) -> None:
    from dataclasses import replace

    fleet = Fleet(make_config())
    reclaimed = replace(instance(state="terminated"), capacity_type=SPOT, price=0.2104)
    overdue = observe(fleet, [reclaimed], gpu_node())
    assert [(o.action, o.member.offering) for o in overdue] == [
        (
            Action.DELETE_NODE_OF_RECLAIMED_SPOT,
            next(o for o in OFFERINGS if o.instance_type == "g4dn.xlarge" and o.capacity_type == "spot"),
        )
    ]


def test_nodes_tidal_did_not_launch_are_not_members(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    observe(fleet, [], node("static-a"))
    assert fleet.members == {}


def test_states_move_along_allowed_edges_and_keep_their_history(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    observe(fleet, [instance()], now=NOW)
    observe(fleet, [instance()], gpu_node(gpu=0), now=NOW + 30)
    observe(fleet, [instance()], gpu_node(), now=NOW + 60)
    member = fleet.members["aws:///us-east-1a/i-0a1"]
    assert [s for s, _ in member.history] == [State.LAUNCHING, State.REGISTERED, State.IDLE]
    assert all(
        (a, b) in TRANSITIONS for (a, _), (b, _) in zip(member.history, member.history[1:], strict=False)
    )


def test_a_cordoned_and_tainted_node_is_draining(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    draining = gpu_node(unschedulable=True, taints=[{"key": "tidal.dev/disrupted", "effect": "NoSchedule"}])
    observe(fleet, [instance()], draining)
    assert fleet.counts()["draining"] == 1


def test_the_registration_timeout_counts_from_the_launch_not_from_when_the_cloud_listed_it(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config(registrationTimeout="15m"))
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], None, NOW)
    observe(fleet, [], now=NOW + 60)  # not listed yet (EC2 lists new instances a little late)
    listed_late = instance(created=NOW + 120)  # the cloud's own creation time is later still
    assert observe(fleet, [listed_late], now=NOW + 14 * 60) == []
    overdue = observe(fleet, [listed_late], now=NOW + 15 * 60 + 1)
    assert [o.action for o in overdue] == [Action.REPLACE_UNREGISTERED]


def test_a_gpu_node_that_loses_its_gpus_after_days_gets_the_whole_readiness_timeout_again(
    make_config: Callable[..., Config],
) -> None:
    """Timed from entering REGISTERED, not from the Node's creation: a long-lived node whose GPUs vanish
    (device plugin restart) is not replaced on the spot."""
    fleet = Fleet(make_config(gpuReadinessTimeout="10m"))
    old = gpu_node()
    old["metadata"]["creationTimestamp"] = "2026-11-17T10:00:00Z"  # three days before NOW
    observe(fleet, [instance(created=NOW - 3 * 86400)], old, now=NOW)
    lost = gpu_node(gpu=0)
    lost["metadata"]["creationTimestamp"] = "2026-11-17T10:00:00Z"
    assert observe(fleet, [instance(created=NOW - 3 * 86400)], lost, now=NOW + 60) == []
    assert fleet.members["aws:///us-east-1a/i-0a1"].state == State.REGISTERED
    assert observe(fleet, [instance(created=NOW - 3 * 86400)], lost, now=NOW + 60 + 599) == []
    overdue = observe(fleet, [instance(created=NOW - 3 * 86400)], lost, now=NOW + 60 + 601)
    assert [o.action for o in overdue] == [Action.REPLACE_WITHOUT_GPUS]


def test_an_illegal_transition_is_refused_counted_once_and_the_member_keeps_its_state(
    make_config: Callable[..., Config],
) -> None:
    refused = []
    fleet = Fleet(make_config(), on_refused=lambda old, new: refused.append((old, new)))
    observe(fleet, [instance()], gpu_node(), now=NOW)
    assert fleet.members["aws:///us-east-1a/i-0a1"].state == State.IDLE
    # The Node object vanished while the instance runs: IDLE -> LAUNCHING is not an edge.
    observe(fleet, [instance()], now=NOW + 30)
    observe(fleet, [instance()], now=NOW + 60)
    member = fleet.members["aws:///us-east-1a/i-0a1"]
    assert member.state == State.IDLE
    assert refused == [(State.IDLE, State.LAUNCHING)]
    assert fleet.refusals[(State.IDLE, State.LAUNCHING)] == 1
    # Still a registered node to the planner, never launching capacity counted twice.
    assert fleet.launching_capacity() == []


def test_an_instance_whose_node_was_deleted_is_terminated_after_the_registration_timeout(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config(registrationTimeout="15m"))
    observe(fleet, [instance()], gpu_node(), now=NOW)
    assert observe(fleet, [instance()], now=NOW + 60) == []
    assert observe(fleet, [instance()], now=NOW + 60 + 900) == []
    overdue = observe(fleet, [instance()], now=NOW + 60 + 901)
    assert [o.action for o in overdue] == [Action.TERMINATE_NODELESS]
    assert Action.TERMINATE_NODELESS.bench_offering is False


def test_a_node_that_comes_back_ends_the_refusal(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config(registrationTimeout="15m"))
    observe(fleet, [instance()], gpu_node(), now=NOW)
    observe(fleet, [instance()], now=NOW + 60)
    observe(fleet, [instance()], gpu_node(), now=NOW + 120)
    assert fleet.members["aws:///us-east-1a/i-0a1"].refused is None
    assert observe(fleet, [instance()], gpu_node(), now=NOW + 2000) == []


def test_an_instance_whose_node_was_deleted_still_counts_against_the_limits(
    make_config: Callable[..., Config],
) -> None:
    # A removal deleted the Node, then the cloud refused the termination: the machine runs on, and its GPU
    # must not be planned a second time until the orphan cleanup terminates it.
    fleet = Fleet(make_config())
    observe(fleet, [instance()], gpu_node())
    assert fleet.launching_usage().gpus == 0  # the Node counts through the snapshot
    observe(fleet, [instance()], now=NOW + 30)
    assert fleet.launching_usage().gpus == 1
    assert fleet.launching_capacity() == []  # no room for pods on a machine without a Node
