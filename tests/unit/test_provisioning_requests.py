"""ProvisioningRequests as Kueue's admission check creates them: planned as one all-or-nothing unit, answered
through the conditions cluster-autoscaler defines, and their capacity booked for the pods that follow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autoscaler.config.options import Config
from autoscaler.core.model import StatusCondition
from autoscaler.core.planning.planner import Plan, PlanInput, plan
from autoscaler.core.provisioning import Answer
from tests.autoscaling_objects import (
    ATOMIC,
    CHECK,
    condition,
    pod_template,
    provisioning_request,
)
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, pod, queue, snapshot

NOW = 1_795_168_800.0 + 60  # a minute after T0 (2026-11-20T10:00:00Z), when the requests were created
T0_PLUS_2M = "2026-11-20T10:02:00Z"


def decide(config: Config, *objects: dict[str, Any], now: float = NOW) -> Plan:
    return plan(PlanInput(snapshot(*objects), aws_offerings(), config, now))


def answered(result: Plan, name: str) -> Answer:
    return next(a for a in result.provisioning if a.request.name == name)


def state(conditions: tuple[StatusCondition, ...]) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in conditions}


def gpu_node(name: str = "gpu-a", gpus: int = 4) -> dict[str, Any]:
    """A g5.12xlarge tidal launched: 4 A10G."""
    return node(name, instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=gpus, managed=True)


TRAINER = pod_template("trainer", gpu=1, cpu="8", memory="32Gi")


def test_an_atomic_request_launches_nodes_for_all_its_pods_as_one_gang(
    make_config: Callable[..., Config],
) -> None:
    result = decide(make_config(), TRAINER, provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 4)]))
    launches = result.launch.launches
    assert sum(len(la.pods) for la in launches) == 4
    assert {la.gang for la in launches} == {"provisioningrequest:team-a/job-a-prov-1"}
    a = answered(result, "job-a-prov-1")
    assert a.gang == "provisioningrequest:team-a/job-a-prov-1"
    assert state(a.conditions) == {
        "Accepted": ("True", "Accepted"),
        "Provisioned": ("True", "CapacityIsProvisioned"),
    }
    assert state(a.refused)["Provisioned"] == ("False", "CapacityIsNotFound")


def test_an_atomic_request_over_the_gpu_limit_launches_nothing_and_says_why(
    make_config: Callable[..., Config],
) -> None:
    result = decide(
        make_config(clusterGPULimit=2),
        TRAINER,
        provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 4)]),
    )
    assert result.launch.launches == ()
    a = answered(result, "job-a-prov-1")
    assert state(a.conditions)["Provisioned"] == ("False", "CapacityIsNotFound")
    provisioned = next(c for c in a.conditions if c.type == "Provisioned")
    assert "clusterGPULimit" in provisioned.message
    assert a.gang == ""


def test_an_atomic_request_that_fits_free_room_is_provisioned_without_a_launch(
    make_config: Callable[..., Config],
) -> None:
    result = decide(
        make_config(), gpu_node(), TRAINER, provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 4)])
    )
    assert result.launch.launches == ()
    assert state(answered(result, "job-a-prov-1").conditions)["Provisioned"] == ("True", "CapacityIsFound")


def test_a_capacity_check_with_free_room_is_answered_found_and_launches_nothing(
    make_config: Callable[..., Config],
) -> None:
    result = decide(
        make_config(), gpu_node(), TRAINER, provisioning_request("job-b-check-1", CHECK, [("trainer", 2)])
    )
    assert result.launch.launches == ()
    a = answered(result, "job-b-check-1")
    assert state(a.conditions)["Provisioned"] == ("True", "CapacityIsFound")
    assert "gpu-a" in next(c.message for c in a.conditions if c.type == "Provisioned")


def test_a_capacity_check_without_room_never_launches_and_will_be_tried_again(
    make_config: Callable[..., Config],
) -> None:
    result = decide(make_config(), TRAINER, provisioning_request("job-b-check-1", CHECK, [("trainer", 2)]))
    assert result.launch.launches == ()
    assert state(answered(result, "job-b-check-1").conditions) == {
        "Accepted": ("True", "Accepted"),
        "Provisioned": ("False", "CapacityIsNotFound"),
    }


def test_a_capacity_check_with_no_retry_fails_when_there_is_no_room(
    make_config: Callable[..., Config],
) -> None:
    request = provisioning_request("job-b-check-1", CHECK, [("trainer", 2)], parameters={"noRetry": "true"})
    result = decide(make_config(), TRAINER, request)
    assert state(answered(result, "job-b-check-1").conditions)["Failed"] == ("True", "CapacityIsNotFound")


def test_a_capacity_check_counts_only_room_the_pods_already_waiting_leave(
    make_config: Callable[..., Config],
) -> None:
    waiting = pod("finetune-0", namespace="team-b", gpu=4, cpu="8", memory="32Gi", message=INSUFFICIENT_GPU)
    result = decide(
        make_config(),
        gpu_node(),
        waiting,
        TRAINER,
        provisioning_request("job-b-check-1", CHECK, [("trainer", 1)]),
    )
    assert {i.pod for i in result.launch.absorbed} >= {"team-b/finetune-0"}
    assert result.launch.launches == ()
    assert state(answered(result, "job-b-check-1").conditions)["Provisioned"] == (
        "False",
        "CapacityIsNotFound",
    )


def booked(name: str, cls: str, count: int, at: str = T0_PLUS_2M) -> dict[str, Any]:
    return provisioning_request(
        name,
        cls,
        [("trainer", count)],
        conditions=[
            condition("Accepted", "True", "Accepted", at),
            condition("Provisioned", "True", "CapacityIsFound", at),
        ],
    )


BOOKED_AT = 1_795_168_800.0 + 120


def test_booked_room_is_held_from_other_pods_which_get_a_node_of_their_own(
    make_config: Callable[..., Config],
) -> None:
    stranger = pod("batch-0", namespace="team-b", gpu=2, cpu="8", memory="32Gi", message=INSUFFICIENT_GPU)
    result = decide(
        make_config(), gpu_node(), TRAINER, booked("job-a-prov-1", CHECK, 4), stranger, now=BOOKED_AT + 60
    )
    assert [la.pods for la in result.launch.launches] == [("team-b/batch-0",)]
    held = {i.node for i in result.launch.absorbed if i.pod.startswith("team-a/job-a-prov-1")}
    assert held == {"gpu-a"}
    assert answered_or_none(result, "job-a-prov-1") is None  # nothing to change while the booking holds


def answered_or_none(result: Plan, name: str) -> Answer | None:
    return next((a for a in result.provisioning if a.request.name == name), None)


def test_booked_room_keeps_its_node_from_scale_down(make_config: Callable[..., Config]) -> None:
    cfg = make_config(scaleDown={"nodeUnneededDuration": "1m"})
    result = plan(
        PlanInput(
            snapshot(gpu_node(), TRAINER, booked("job-a-prov-1", ATOMIC, 4)),
            aws_offerings(),
            cfg,
            BOOKED_AT + 300,
            unneeded_since={"gpu-a": BOOKED_AT - 3600},
        )
    )
    assert result.removal.removals == ()
    unbooked = plan(
        PlanInput(
            snapshot(gpu_node(), TRAINER),
            aws_offerings(),
            cfg,
            BOOKED_AT + 300,
            unneeded_since={"gpu-a": BOOKED_AT - 3600},
        )
    )
    assert [r.node for r in unbooked.removal.removals] == ["gpu-a"]


def test_pods_that_consume_the_request_take_the_place_of_its_booked_pods(
    make_config: Callable[..., Config],
) -> None:
    consumer = pod(
        "job-a-trainer-0",
        namespace="team-a",
        gpu=1,
        cpu="8",
        memory="32Gi",
        message=INSUFFICIENT_GPU,
        annotations={"autoscaling.x-k8s.io/consume-provisioning-request": "job-a-prov-1"},
    )
    result = decide(
        make_config(), gpu_node(), TRAINER, booked("job-a-prov-1", ATOMIC, 4), consumer, now=BOOKED_AT
    )
    absorbed = {i.pod: i.node for i in result.launch.absorbed}
    assert absorbed["team-a/job-a-trainer-0"] == "gpu-a"
    assert sum(1 for k in absorbed if "-provreq-" in k) == 3
    assert result.launch.launches == ()


def test_a_booking_expires_ten_minutes_after_provisioning(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), gpu_node(), TRAINER, booked("job-a-prov-1", CHECK, 4), now=BOOKED_AT + 600)
    a = answered(result, "job-a-prov-1")
    assert state(a.conditions)["BookingExpired"] == ("True", "CapacityReservationTimeExpired")
    assert not any("-provreq-" in i.pod for i in result.launch.absorbed)


def test_booked_room_that_is_gone_is_answered_capacity_revoked(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), TRAINER, booked("job-a-prov-1", ATOMIC, 4), now=BOOKED_AT + 60)
    assert result.launch.launches == ()  # booked room is never launched for again
    assert state(answered(result, "job-a-prov-1").conditions)["CapacityRevoked"] == (
        "True",
        "CapacityIsRevoked",
    )


def test_a_class_tidal_does_not_serve_is_reported_and_left_untouched(
    make_config: Callable[..., Config],
) -> None:
    request = provisioning_request("job-c-1", "queued-provisioning.gke.io", [("trainer", 2)])
    result = decide(make_config(), TRAINER, request)
    a = answered(result, "job-c-1")
    assert "queued-provisioning.gke.io" in a.unsupported
    assert not a.changed
    assert result.launch.launches == ()


def test_a_request_whose_pod_template_is_missing_waits_for_it(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 4)]))
    assert result.launch.launches == ()
    assert state(answered(result, "job-a-prov-1").conditions)["Provisioned"] == (
        "False",
        "PodTemplateNotFound",
    )


def test_the_request_counts_against_the_kai_queue_of_its_pods(make_config: Callable[..., Config]) -> None:
    template = pod_template("trainer", gpu=1, labels={"kai.scheduler/queue": "research"})
    result = decide(
        make_config(),
        queue("research", quota=1, limit=2),
        template,
        provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 4)]),
    )
    assert result.launch.launches == ()
    provisioned = next(c for c in answered(result, "job-a-prov-1").conditions if c.type == "Provisioned")
    assert provisioned.status == "False"
    assert "queue research would exceed its GPU limit" in provisioned.message


def test_a_v1beta1_request_is_planned_like_a_v1_one(make_config: Callable[..., Config]) -> None:
    request = provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 2)], version="v1beta1")
    result = decide(make_config(), TRAINER, request)
    a = answered(result, "job-a-prov-1")
    assert a.request.version == "v1beta1"
    assert sum(len(la.pods) for la in result.launch.launches) == 2


def test_an_atomic_request_past_valid_until_seconds_fails(make_config: Callable[..., Config]) -> None:
    request = provisioning_request(
        "job-a-prov-1", ATOMIC, [("trainer", 2)], parameters={"ValidUntilSeconds": "30"}
    )
    result = decide(make_config(), TRAINER, request)
    assert result.launch.launches == ()
    assert state(answered(result, "job-a-prov-1").conditions)["Failed"] == ("True", "Expired")


@pytest.mark.parametrize("kind", ["Failed", "BookingExpired", "CapacityRevoked"])
def test_a_finished_request_is_left_alone(make_config: Callable[..., Config], kind: str) -> None:
    request = provisioning_request(
        "job-a-prov-1", ATOMIC, [("trainer", 2)], conditions=[condition(kind, "True", "Done")]
    )
    result = decide(make_config(), TRAINER, request)
    assert result.provisioning == ()
    assert result.launch.launches == ()


def test_an_unchanged_answer_is_not_written_again(make_config: Callable[..., Config]) -> None:
    first = decide(make_config(), TRAINER, provisioning_request("job-b-check-1", CHECK, [("trainer", 2)]))
    conditions = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastTransitionTime": "2026-11-20T10:01:00Z",
        }
        for c in answered(first, "job-b-check-1").conditions
    ]
    again = provisioning_request("job-b-check-1", CHECK, [("trainer", 2)], conditions=conditions)
    assert answered_or_none(decide(make_config(), TRAINER, again, now=NOW + 30), "job-b-check-1") is None
