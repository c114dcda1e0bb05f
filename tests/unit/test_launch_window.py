"""Which launches go while the batch window is open: those whose pods leave no GPU a later pod could share;
everything else waits for the window, and a gang goes whole or waits whole."""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.config.options import Config
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.planning.decisions import BIN_PACKING, BIN_SELECTION, Launch
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.window import (
    NODE_SETTLES,
    SCHEDULER_FIRST_RETRY,
    fills_its_node,
    launch_now,
    next_due,
    patience_for,
)
from tests.builders import INSUFFICIENT_GPU, offering, pod, snapshot

NOW = 1_795_168_800.0
G4DN_XLARGE = offering("g4dn.xlarge", 4, 16, 0.526, gpus=1, gpu_model="T4", gpu_memory_gib=16)
G4DN_12XLARGE = offering("g4dn.12xlarge", 48, 192, 3.912, gpus=4, gpu_model="T4", gpu_memory_gib=16)
M6I_2XLARGE = offering("m6i.2xlarge", 8, 32, 0.384)
KAI_NO_GPU = "No node in the default node-pool has GPU resources"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_job(name: str, gpus: int = 1) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, owner_kind="Job")


def half_gpu(name: str) -> dict[str, object]:
    return pod(
        name,
        cpu="500m",
        memory="2Gi",
        scheduler="kai-scheduler",
        message=KAI_NO_GPU,
        annotations={"gpu-fraction": "0.5"},
        tolerations=[GPU_TOLERATION],
    )


def pods_of(*objects: dict[str, object]) -> dict[str, Pod]:
    return {p.key: p for p in snapshot(*objects).pods}


def test_a_one_gpu_pod_on_a_one_gpu_node_goes_at_once() -> None:
    pods = pods_of(gpu_job("train-0"))
    launch = Launch(G4DN_XLARGE, ("default/train-0",), BIN_SELECTION)

    assert launch_now([launch], pods) == (launch,)


def test_four_one_gpu_pods_filling_a_four_gpu_node_go_at_once() -> None:
    pods = pods_of(*(gpu_job(f"train-{i}") for i in range(4)))
    launch = Launch(G4DN_12XLARGE, tuple(sorted(pods)), BIN_SELECTION)

    assert fills_its_node(launch, pods)


def test_a_gpu_node_with_devices_left_waits_for_the_window() -> None:
    pods = pods_of(gpu_job("train-0", gpus=2))
    launch = Launch(G4DN_12XLARGE, ("default/train-0",), BIN_SELECTION)

    assert launch_now([launch], pods) == ()


def test_small_cpu_pods_on_a_bin_packing_node_wait_for_the_window() -> None:
    pods = pods_of(*(pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(3)))
    launch = Launch(M6I_2XLARGE, tuple(sorted(pods)), BIN_PACKING)

    assert launch_now([launch], pods) == ()


def test_gpu_shares_wait_for_the_window_even_when_they_add_up_to_the_whole_gpu() -> None:
    pods = pods_of(half_gpu("notebook-0"), half_gpu("notebook-1"))
    launch = Launch(G4DN_XLARGE, tuple(sorted(pods)), BIN_SELECTION)

    assert launch_now([launch], pods) == ()


def test_a_pod_missing_from_the_snapshot_makes_its_launch_wait() -> None:
    launch = Launch(G4DN_XLARGE, ("default/gone",), BIN_SELECTION)

    assert launch_now([launch], {}) == ()


def test_a_gang_goes_whole_when_every_node_of_it_is_filled() -> None:
    pods = pods_of(gpu_job("ddp-0"), gpu_job("ddp-1"))
    gang = [Launch(G4DN_XLARGE, (key,), BIN_SELECTION, gang="default/ddp") for key in sorted(pods)]

    assert launch_now(gang, pods) == tuple(gang)


def test_a_gang_waits_whole_when_one_of_its_nodes_has_room_left() -> None:
    pods = pods_of(gpu_job("ddp-0"), gpu_job("ddp-1", gpus=2))
    gang = [
        Launch(G4DN_XLARGE, ("default/ddp-0",), BIN_SELECTION, gang="default/ddp"),
        Launch(G4DN_12XLARGE, ("default/ddp-1",), BIN_SELECTION, gang="default/ddp"),
    ]
    alone = Launch(G4DN_XLARGE, ("default/ddp-0",), BIN_SELECTION)

    assert launch_now([*gang, alone], pods) == (alone,)


def test_in_a_plan_the_gpu_job_goes_now_and_the_web_pods_wait(make_config: Callable[..., Config]) -> None:
    objects = [gpu_job("train-0"), *(pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(3))]
    request = PlanInput(snapshot(*objects), [G4DN_XLARGE, G4DN_12XLARGE, M6I_2XLARGE], make_config(), NOW)
    launches = plan(request).launch.launches

    ready = launch_now(launches, pods_of(*objects))

    assert [(la.offering.instance_type, la.pods) for la in ready] == [("g4dn.xlarge", ("default/train-0",))]
    assert {p for la in launches if la not in ready for p in la.pods} == {
        f"default/web-{i}" for i in range(3)
    }


def planned(make_config: Callable[..., Config], offerings: list[Offering]) -> tuple[Launch, ...]:
    objects = [gpu_job("train-0")]
    config = make_config()
    index = OfferingIndex(offerings, config, ())
    decided = plan(PlanInput(snapshot(*objects), offerings, config, NOW, index=index))
    return launch_now(decided.launch.launches, pods_of(*objects), index, decided.demand.constraints)


def test_a_one_gpu_node_goes_at_once_when_no_bigger_node_is_cheaper_per_gpu(
    make_config: Callable[..., Config],
) -> None:
    ready = planned(make_config, [G4DN_XLARGE, G4DN_12XLARGE])

    assert [la.offering.instance_type for la in ready] == ["g4dn.xlarge"]


def test_a_one_gpu_node_waits_when_a_bigger_node_would_hold_more_such_pods_for_less_each(
    make_config: Callable[..., Config],
) -> None:
    cheap_per_gpu = offering("g4dn.12xlarge", 48, 192, 1.6, gpus=4, gpu_model="T4", gpu_memory_gib=16)

    assert planned(make_config, [G4DN_XLARGE, cheap_per_gpu]) == ()


def batch_job(name: str) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", owner_kind="Job")


def planned_cpu(
    make_config: Callable[..., Config], count: int
) -> tuple[tuple[Launch, ...], tuple[Launch, ...]]:
    objects = [batch_job(f"etl-{i}") for i in range(count)]
    offerings = [M6I_2XLARGE, offering("m6i.xlarge", 4, 16, 0.192)]
    config = make_config()
    index = OfferingIndex(offerings, config, ())
    decided = plan(PlanInput(snapshot(*objects), offerings, config, NOW, index=index))
    launches = decided.launch.launches
    return launches, launch_now(launches, pods_of(*objects), index, decided.demand.constraints)


def test_a_node_full_of_cpu_pods_goes_at_once_when_no_node_type_holds_them_for_less(
    make_config: Callable[..., Config],
) -> None:
    launches, ready = planned_cpu(make_config, 3)

    assert [(la.offering.instance_type, len(la.pods)) for la in launches] == [("m6i.2xlarge", 3)]
    assert ready == launches


def test_of_a_burst_the_full_nodes_go_at_once_and_the_one_with_room_waits(
    make_config: Callable[..., Config],
) -> None:
    launches, ready = planned_cpu(make_config, 7)

    assert sorted(len(la.pods) for la in ready) == [3, 3]
    assert sum(len(la.pods) for la in launches) == 7


def test_a_launch_held_for_company_goes_once_its_first_pod_waited_the_patience() -> None:
    pods = pods_of(*(pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(3)))
    launch = Launch(M6I_2XLARGE, tuple(sorted(pods)), BIN_PACKING)
    waited = {"default/web-0": 1.0, "default/web-1": 0.4, "default/web-2": 0.0}

    assert launch_now([launch], pods, waited=waited, patience=1.5) == ()
    assert launch_now([launch], pods, waited=waited, patience=1.0) == (launch,)
    assert next_due([launch], waited, 1.5) == 0.5


def test_the_patience_is_the_idle_duration_when_the_provider_does_not_say_how_soon_nodes_take_pods() -> None:
    assert patience_for(1.0, None) == 1.0


def test_the_patience_is_the_idle_duration_when_a_node_misses_the_schedulers_first_retry_anyway() -> None:
    # A node taking a minute to boot is found at a later retry however long the launch waited for company.
    assert patience_for(1.0, 60.0) == 1.0
    assert patience_for(1.0, SCHEDULER_FIRST_RETRY - NODE_SETTLES) == 1.0


def test_a_node_that_takes_pods_at_once_waits_only_until_it_can_still_meet_the_schedulers_first_retry() -> (
    None
):
    assert patience_for(1.0, 0.0) == SCHEDULER_FIRST_RETRY - NODE_SETTLES
    assert patience_for(1.0, 0.1) == SCHEDULER_FIRST_RETRY - NODE_SETTLES - 0.1
    assert patience_for(0.2, 0.0) == 0.2  # a shorter batchIdleDuration still wins


def test_pods_arriving_after_others_wait_the_whole_idle_duration_for_company_however_soon_nodes_take_pods() -> (
    None
):
    assert patience_for(1.0, 0.0, preceded=True) == 1.0


def test_each_held_launch_waits_its_own_patience() -> None:
    pods = pods_of(*(pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(2)))
    quick = Launch(M6I_2XLARGE, ("default/web-0",), BIN_PACKING)
    slow = Launch(M6I_2XLARGE, ("default/web-1",), BIN_PACKING)
    waited = {"default/web-0": 0.5, "default/web-1": 0.5}

    def patience(la: Launch) -> float:
        return 0.4 if la is quick else 1.0

    assert launch_now([quick, slow], pods, waited=waited, patience=patience) == (quick,)
    assert next_due([slow], waited, patience) == 0.5
