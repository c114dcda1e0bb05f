"""The fleet answers questions about one member (by Node name, by launch token) and says which members its
last observe changed: each answer must be what a look over every member would give, after Nodes change,
go away, and launches are recorded and forgotten between observations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.census import census
from autoscaler.runtime.fleet import Fleet, Member, State
from tests.builders import pod, snapshot
from tests.unit.test_fleet import G4DN, KEY, NOW, OFFERINGS, gpu_node, instance

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config

OTHER = "aws:///us-east-1a/i-0b2"


def test_the_instance_of_a_node_is_found_by_the_nodes_name(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    first, second = instance(), instance("i-0b2", token="tok-2")
    fleet.observe(
        [first, second],
        snapshot(gpu_node(), gpu_node("ip-10-0-1-6", provider_id=OTHER)),
        OFFERINGS,
        NOW,
    )
    assert fleet.instance_for_node("ip-10-0-1-5") is first
    assert fleet.instance_for_node("ip-10-0-1-6") is second
    assert fleet.instance_for_node("ip-10-0-9-9") is None


def test_a_node_that_came_back_under_another_name_is_found_by_its_new_name(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW)
    assert fleet.instance_for_node("ip-10-0-1-5") is inst
    fleet.observe([inst], snapshot(gpu_node("ip-10-0-1-7")), OFFERINGS, NOW + 30)
    assert fleet.instance_for_node("ip-10-0-1-7") is inst
    assert fleet.instance_for_node("ip-10-0-1-5") is None


def test_a_node_that_went_away_has_no_instance_any_more(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW)
    assert fleet.instance_for_node("ip-10-0-1-5") is inst
    fleet.observe([inst], snapshot(), OFFERINGS, NOW + 30)
    assert fleet.instance_for_node("ip-10-0-1-5") is None


def test_members_set_directly_are_the_ones_asked_about(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    inst = instance()
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW)
    assert fleet.instance_for_node("ip-10-0-1-5") is inst
    fleet.members = {}
    assert fleet.instance_for_node("ip-10-0-1-5") is None


def test_a_launch_is_found_by_its_token_before_and_after_the_cloud_lists_it(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    fleet.observe([], snapshot(), OFFERINGS, NOW)
    assert fleet.member_for_token("tok-1") is None
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], None, NOW)
    recorded = fleet.member_for_token("tok-1")
    assert recorded is not None and recorded.key == "token:tok-1"
    inst = instance(token="tok-1")
    fleet.observe([inst], snapshot(gpu_node()), OFFERINGS, NOW + 30)
    listed = fleet.member_for_token("tok-1")
    assert listed is not None and listed.key == KEY and listed.instance is inst


def test_a_forgotten_launch_is_not_found_by_its_token(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], None, NOW)
    assert fleet.member_for_token("tok-1") is not None
    fleet.forget_launch("tok-1")
    assert fleet.member_for_token("tok-1") is None


def test_a_recorded_launch_counts_at_once_though_the_fleet_was_asked_before(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    fleet.observe([], snapshot(), OFFERINGS, NOW)
    assert fleet.launching_usage().gpus == 0 and fleet.launching_capacity() == []
    fleet.record_launch("tok-1", G4DN, ["default/infer-0"], None, NOW)
    assert fleet.launching_usage().gpus == 1
    assert [la.name for la in fleet.launching_capacity()] == ["token:tok-1"]
    assert fleet.launched_for() == {"default/infer-0": "token:tok-1"}
    fleet.forget_launch("tok-1")
    assert fleet.launching_usage().gpus == 0 and fleet.launched_for() == {}


def test_an_observe_reports_the_members_it_made_anew_and_those_gone(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    first, second = instance(), instance("i-0b2", token="tok-2")
    nodes = snapshot(gpu_node(), gpu_node("ip-10-0-1-6", provider_id=OTHER))
    fleet.observe([first, second], nodes, OFFERINGS, NOW)
    before = fleet.members
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-6", phase="Running", message=None)
    fleet.observe([first, second], snapshot(gpu_node(), busy), OFFERINGS, NOW + 30)
    # The first member's Node changed (a new object); the second's Node went away.
    changes = fleet.changes_since(before)
    assert changes is not None
    rebuilt, gone = changes
    assert set(rebuilt) == {KEY, OTHER}
    assert gone == []
    after = fleet.members
    fleet.observe([first], snapshot(), OFFERINGS, NOW + 60)
    changes = fleet.changes_since(after)
    assert changes is not None
    assert set(changes[0]) == {KEY} and changes[1] == [OTHER]


def test_a_member_with_the_very_same_facts_is_not_reported_changed(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    inst, snap = instance(), snapshot(gpu_node())
    fleet.observe([inst], snap, OFFERINGS, NOW)
    before = fleet.members
    fleet.observe([inst], snap, OFFERINGS, NOW + 30)
    assert fleet.changes_since(before) == ([], [])
    assert fleet.members[KEY] is before[KEY]


def test_a_launch_forgotten_between_observations_is_reported_gone(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    fleet.record_launch("tok-9", G4DN, ["default/infer-9"], None, NOW)
    fleet.observe([], snapshot(), OFFERINGS, NOW)
    before = fleet.members
    fleet.forget_launch("tok-9")
    fleet.observe([], snapshot(), OFFERINGS, NOW + 30)
    assert fleet.changes_since(before) == ([], ["token:tok-9"])


def test_changes_are_unknown_for_members_older_than_the_last_observe(
    make_config: Callable[..., Config],
) -> None:
    fleet = Fleet(make_config())
    inst, snap = instance(), snapshot(gpu_node())
    assert fleet.changes_since(fleet.members) is None  # nothing observed yet
    fleet.observe([inst], snap, OFFERINGS, NOW)
    oldest = fleet.members
    fleet.observe([inst], snap, OFFERINGS, NOW + 30)
    fleet.observe([inst], snap, OFFERINGS, NOW + 60)
    assert fleet.changes_since(oldest) is None
    fleet.members = {KEY: Member(KEY, State.IDLE)}
    assert fleet.changes_since(oldest) is None


def test_the_census_of_the_snapshots_pods_tells_a_busy_node_as_the_pods_do(
    make_config: Callable[..., Config],
) -> None:
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-5", phase="Running", message=None)
    with_pod = snapshot(gpu_node(), busy)
    told, read = Fleet(make_config()), Fleet(make_config())
    told.observe([instance()], with_pod, OFFERINGS, NOW, census=census(with_pod.pods))
    read.observe([instance()], with_pod, OFFERINGS, NOW)
    assert told.members[KEY].state == read.members[KEY].state == State.READY


def test_a_census_of_other_pods_is_not_used_to_tell_a_busy_node(make_config: Callable[..., Config]) -> None:
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-5", phase="Running", message=None)
    empty, with_pod = snapshot(gpu_node()), snapshot(gpu_node(), busy)
    fleet = Fleet(make_config())
    fleet.observe([instance()], empty, OFFERINGS, NOW, census=census(with_pod.pods))
    assert fleet.members[KEY].state == State.IDLE


def test_the_counts_by_state_follow_every_change_of_the_members(make_config: Callable[..., Config]) -> None:
    fleet = Fleet(make_config())

    def recounted() -> dict[str, int]:
        return {
            s.value: sum(1 for m in fleet.members.values() if m.state == s) for s in State if s != State.GONE
        }

    first, second = instance(), instance("i-0b2", token="tok-2")
    busy = pod("train-0", gpu=1, node_name="ip-10-0-1-6", phase="Running", message=None)
    steps = [
        ([first, second], snapshot(gpu_node())),
        ([first, second], snapshot(gpu_node(), gpu_node("ip-10-0-1-6", provider_id=OTHER), busy)),
        ([first], snapshot(gpu_node(gpu=0))),
        ([], snapshot()),
    ]
    fleet.observe([], snapshot(), OFFERINGS, NOW)
    assert fleet.counts() == recounted()
    for i, (instances, snap) in enumerate(steps):
        fleet.record_launch(f"tok-new-{i}", G4DN, [f"default/infer-{i}"], None, NOW + 30 * i)
        assert fleet.counts() == recounted()
        if i % 2:
            fleet.forget_launch(f"tok-new-{i}")
            assert fleet.counts() == recounted()
        fleet.observe(instances, snap, OFFERINGS, NOW + 30 * i + 10)
        assert fleet.counts() == recounted()
    assert fleet.counts()["launching"] == 2  # the two launches never forgotten, still unlisted
