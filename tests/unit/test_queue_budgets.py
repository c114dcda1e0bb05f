"""Per KAI queue: the GPUs it holds, waits for and has launching, what the nodes serving it cost, and a $/h
budget (queueBudgets) enforced on new nodes like the GPU limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.placement.reasons import Filter
from autoscaler.core.planning.decisions import Launching
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.observability.metrics import Metrics
from autoscaler.runtime.status import status_summary
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, offering, pod, podgroup, queue, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan
    from autoscaler.core.planning.queues import QueueView

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z
KAI = "kai-scheduler"


def job(name: str, queue_name: str, gpus: int = 1, cpu: str = "2", **kw: Any) -> dict[str, Any]:
    """A pending pod of a KAI queue (the label KAI reads), as KAI reports it when no node has room."""
    labels = {"app": name.rsplit("-", 1)[0], "kai.scheduler/queue": queue_name}
    return pod(
        name, cpu=cpu, memory="8Gi", gpu=gpus, scheduler=KAI, message=INSUFFICIENT_GPU, labels=labels, **kw
    )


def running(name: str, queue_name: str, node_name: str, gpus: int = 1, cpu: str = "2") -> dict[str, Any]:
    labels = {"app": name.rsplit("-", 1)[0], "kai.scheduler/queue": queue_name}
    return pod(
        name,
        cpu=cpu,
        memory="8Gi",
        gpu=gpus,
        scheduler=KAI,
        node_name=node_name,
        phase="Running",
        labels=labels,
    )


def shared_gpu_node(name: str = "gpu-a") -> dict[str, Any]:
    """A g5.12xlarge ($5.672/h, 4 A10G) tidal launched."""
    return node(name, instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True)


def views(result: Plan) -> dict[str, QueueView]:
    return {q.queue: q for q in result.queues}


def test_a_node_serving_two_queues_costs_each_its_share_of_the_gpus_requested_there(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        queue("research", quota=4, limit=8),
        queue("production", quota=8, limit=16),
        shared_gpu_node(),
        running("sweep-0", "research", "gpu-a", gpus=1),
        running("serve-0", "production", "gpu-a", gpus=3),
    ]
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW))
    research, production = views(result)["research"], views(result)["production"]
    assert research.cost_per_hour == pytest.approx(5.672 / 4)
    assert production.cost_per_hour == pytest.approx(5.672 * 3 / 4)
    assert (research.gpus_allocated, production.gpus_allocated) == (1, 3)


def test_on_a_node_without_gpu_pods_queues_share_its_price_by_cpu_requests(
    make_config: Callable[..., Config],
) -> None:
    def cpu_pod(name: str, q: str, cpu: str) -> dict[str, Any]:
        return pod(name, cpu=cpu, node_name="cpu-a", phase="Running", labels={"kai.scheduler/queue": q})

    objs = [
        node("cpu-a", managed=True),
        cpu_pod("prep-0", "research", "3"),
        cpu_pod("web-0", "production", "1"),
    ]
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW))
    # m6i.2xlarge on-demand, $0.384/h: research asked for 3 of the 4 cpus requested there.
    assert views(result)["research"].cost_per_hour == pytest.approx(0.288)


def test_pending_and_launching_gpus_are_counted_per_queue(make_config: Callable[..., Config]) -> None:
    objs = [queue("research", quota=4, limit=8), *[job(f"sweep-{i}", "research") for i in range(3)]]
    launching = [Launching("launching-1", offering("g4dn.xlarge", 4, 16, 0.526, gpus=1, gpu_model="T4"))]
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW, launching=launching))
    research = views(result)["research"]
    # One pod takes the node still launching; the other two get new nodes: all three have a node coming, and
    # the queue pays for all three.
    assert (research.gpus_pending, research.gpus_launching, research.gpus_requested) == (3, 3, 3)
    assert research.cost_per_hour == pytest.approx(3 * 0.526)


def test_a_pod_whose_queue_would_exceed_its_budget_is_unplaced_naming_the_queue_and_the_budget(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        queue("research", quota=4, limit=8),
        shared_gpu_node(),
        running("sweep-0", "research", "gpu-a", gpus=2),
        running("serve-0", "production", "gpu-a", gpus=2),
        job("sweep-1", "research"),
    ]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 3.0}), NOW)
    )
    assert result.launch.launches == ()
    (unplaced,) = result.launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.QUEUE_BUDGET
    assert unplaced.reason == (
        "queue research would exceed its budget: $2.84/h serving it + $0.5260/h for a g4dn.xlarge > "
        "queueBudgets.research $3.00/h"
    )
    assert not unplaced.limited
    assert unplaced.shortfall == "queueBudget"


def test_a_budget_counts_the_nodes_this_plan_opens_for_the_queue(make_config: Callable[..., Config]) -> None:
    objs = [queue("research", quota=8, limit=8), *[job(f"sweep-{i}", "research") for i in range(3)]]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 1.2}), NOW)
    )
    # Two g4dn.xlarge ($1.052/h) fit the $1.20/h budget; a third would not.
    assert [la.offering.instance_type for la in result.launch.launches] == ["g4dn.xlarge"] * 2
    assert [u.pod for u in result.launch.unplaced] == ["default/sweep-2"]
    assert "$1.05/h planned" in result.launch.unplaced[0].reason


def test_a_budget_never_holds_back_another_queues_pods(make_config: Callable[..., Config]) -> None:
    objs = [job("sweep-0", "research"), job("serve-0", "production")]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 0.1}), NOW)
    )
    assert [la.pods for la in result.launch.launches] == [("default/serve-0",)]
    assert [u.pod for u in result.launch.unplaced] == ["default/sweep-0"]


def test_a_budget_takes_a_cheaper_node_when_the_cheapest_per_pod_is_beyond_it(
    make_config: Callable[..., Config],
) -> None:
    # Four 1-GPU pods: a g5.12xlarge ($5.672/h) or g6.12xlarge ($4.60/h) would hold them all, but the cheapest
    # per pod is four g4dn.xlarge; with $1.10/h left only two of those fit, and no 4-GPU node does.
    objs = [*[job(f"sweep-{i}", "research") for i in range(4)]]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 1.1}), NOW)
    )
    assert sorted(la.offering.instance_type for la in result.launch.launches) == ["g4dn.xlarge"] * 2
    assert len(result.launch.unplaced) == 2


def test_a_gang_whose_queue_budget_cannot_hold_all_of_it_gets_nothing(
    make_config: Callable[..., Config],
) -> None:
    group = {"pod-group-name": "pg-train"}
    objs = [
        podgroup("pg-train", min_member=3, queue="research"),
        *[job(f"train-{i}", "research", annotations=group) for i in range(3)],
    ]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 1.2}), NOW)
    )
    assert result.launch.launches == ()
    assert {u.pod for u in result.launch.unplaced} == {f"default/train-{i}" for i in range(3)}
    assert all("queue research would exceed its budget" in u.reason for u in result.launch.unplaced)


def test_queues_without_budgets_are_planned_as_before(make_config: Callable[..., Config]) -> None:
    objs = [job(f"sweep-{i}", "research") for i in range(3)]
    with_budget_elsewhere = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"other": 1.0}), NOW)
    )
    without = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW))
    assert [la.offering for la in with_budget_elsewhere.launch.launches] == [
        la.offering for la in without.launch.launches
    ]


def test_the_metrics_carry_each_queue_and_drop_the_queues_that_went(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        queue("research", quota=4, limit=8),
        shared_gpu_node(),
        running("sweep-0", "research", "gpu-a", gpus=2),
    ]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 20.0}), NOW)
    )
    metrics = Metrics()
    metrics.set_queues(result.queues)
    text = metrics.render().decode()
    assert 'tidal_queue_gpus{queue="research",state="allocated"} 2.0' in text
    assert 'tidal_queue_cost_per_hour{queue="research"} 5.672' in text
    assert 'tidal_queue_budget_per_hour{queue="research"} 20.0' in text
    metrics.set_queues(())
    text = metrics.render().decode()
    assert 'queue="research"' not in text


def test_the_status_configmap_carries_each_queue_with_its_budget(make_config: Callable[..., Config]) -> None:
    objs = [
        queue("research", quota=4, limit=8),
        shared_gpu_node(),
        running("sweep-0", "research", "gpu-a", gpus=2),
    ]
    config = make_config(queueBudgets={"research": 20.0})
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), config, NOW))
    summary = status_summary(result, {}, config, NOW, [])
    assert summary["queues"] == {
        "research": {
            "gpus": {"requested": 2.0, "allocated": 2.0, "pending": 0.0, "launching": 0.0},
            "costPerHour": 5.672,
            "budgetPerHour": 20.0,
        }
    }


def test_a_node_for_a_queue_with_a_budget_never_falls_back_past_it(
    make_config: Callable[..., Config],
) -> None:
    result = plan(
        PlanInput(
            snapshot(job("sweep-0", "research")),
            aws_offerings(),
            make_config(queueBudgets={"research": 1.0}),
            NOW,
        )
    )
    (launch,) = result.launch.launches
    assert launch.offering.instance_type == "g4dn.xlarge"
    # maxFallbackPriceRatio alone would allow g5.xlarge ($1.006/h, under 2 x $0.526/h): the budget does not.
    assert [o.instance_type for o in launch.alternatives] == ["g6.xlarge"]
    assert launch.why is not None
    assert launch.why.fallback_cap == pytest.approx(1.0)
    assert launch.why.capped_by == "queueBudgets.research"


def test_a_node_waiting_for_its_gpus_counts_against_the_queue_whose_pod_waits_for_it(
    make_config: Callable[..., Config],
) -> None:
    # tidal launched a g4dn.xlarge ($0.526/h) for sweep-0: it registered, its GPU is not allocatable yet, so
    # nothing is bound to it. It is already bought: the second pod may not have another node on a $0.60 budget.
    waiting_for_gpus = node(
        "gpu-new", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", managed=True, gpu_label=1
    )
    objs = [waiting_for_gpus, job("sweep-0", "research"), job("sweep-1", "research")]
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(), make_config(queueBudgets={"research": 0.6}), NOW)
    )
    assert [(a.pod, a.node) for a in result.launch.absorbed] == [("default/sweep-0", "gpu-new")]
    assert result.launch.launches == ()
    assert [u.pod for u in result.launch.unplaced] == ["default/sweep-1"]
    assert views(result)["research"].cost_per_hour == pytest.approx(0.526)
